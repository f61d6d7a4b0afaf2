"""Held-out coverage of perfmodel's prediction intervals (issue 32), per family and parameter set.

Every reproduced published measurement (``perfmodel validate``'s predicted rows, as stored in
``workloads/validation/interval_residuals.json``) is checked against the band built without its source:
all rows of the same source (a GitHub repository at one commit, or one URL: ``perfmodel.intervals.source_group``)
are held out together, the band is the cross-conformal band over
sources (CV+ with each remaining source a fold, ``perfmodel.uncertainty.cross_conformal_band``) of the
remaining residuals of its family and kind (or of its family when the kind has too few or one source,
``perfmodel.intervals.band_of``), and the row counts as covered when its residual falls inside.
Reports, per family, the rows, how many got a band, the share covered and the median width (the ratio
of an interval's ends, high / low). Done-when target of issue 32: 75-85% at 80% confidence in each
family with at least 10 rows.

    python benchmarks/intervals_coverage.py [--confidence 0.8 ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfmodel.intervals import PARAMETER_SETS, heldout_coverage, load_table  # noqa: E402
from perfmodel.jsonable import json_text  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402

TARGET = (0.75, 0.85)  # at 80%, for families with at least TARGET_ROWS rows
TARGET_ROWS = 10


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--confidence", type=float, action="append", help="confidence level(s) (default 0.8 and 0.9)")
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "intervals_coverage.json")
    args = parser.parse_args(argv)
    levels = args.confidence or [0.8, 0.9]
    table = load_table()
    rows, results = [], []
    for parameter_set in PARAMETER_SETS:
        for level in levels:
            for item in heldout_coverage(table[parameter_set], level):
                share = item.share
                target = ""
                if level == 0.8 and item.rows >= TARGET_ROWS:
                    target = "met" if share is not None and TARGET[0] <= share <= TARGET[1] else "MISSED"
                rows.append([parameter_set, f"{100 * level:g}%", item.family, item.rows, item.banded,
                             "-" if share is None else f"{100 * share:.1f}%",
                             "-" if item.median_width is None else f"{item.median_width:.2f}x", target])
                results.append({"parameters": parameter_set, "confidence": level, "family": item.family,
                                "rows": item.rows, "banded": item.banded, "covered": item.covered,
                                "coverage": share, "median_width_ratio": item.median_width,
                                "target": target or None})
    print(format_table(["parameters", "confidence", "family", "rows", "banded", "covered", "median width (high/low)",
                        "75-85% target"], rows))
    print("held out: every row of a source (a repository at a commit, or a URL) together; band: cross-conformal "
          "over the other sources (CV+, "
          "each source a fold) on their residuals of the row's family and kind (its family's when the kind has "
          "too few or one source)")
    write_text_atomically(args.json, json_text({"protocol": "leave-one-source-out", "results": results}, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
