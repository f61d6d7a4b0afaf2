"""How much NVIDIA's serving-engine tables change between two engine versions, shape by shape (issue 29).

The held-out benchmark's ``next_version`` protocol fits the previous version's tables and predicts the newest's
(``benchmarks/engine_overlay_heldout.py``). Where the engine changed its kernels between the two versions, no fit
of the older one can predict the newer within the kernels' change. This benchmark measures that change without a
model: for every GPU, engine and table kind measured in two versions, the rows the cost rules price
(``calibration.aiconfigurator.priced_rows``) in both, matched on every column but the latency and the version
labels, and the median of |previous / newest - 1| (the error of predicting the newest by the previous version's
own measurement of the same shape, the best a table lookup fitted on it can do) and the median signed ratio.

Needs the ``calibration`` extra (``aiconfigurator-core``); reads the tables only (no fit), under a minute.

    python benchmarks/version_change.py [--gpu GPU ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration import aiconfigurator as tables  # noqa: E402
from calibration.engine_overlays import measured_engines  # noqa: E402
from perfmodel.jsonable import json_text  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402

#: Columns that label a row's collection rather than its shape.
LABELS = ("framework", "version", "device", "kernel_source", "latency")


def matched_ratios(gpu: str, engine: str, kind: str, previous: str, newest: str) -> list[float]:
    """previous / newest latency of every priced shape measured in both versions."""
    frames = []
    for version in (previous, newest):
        source = tables.table(gpu, engine, kind, version)
        frames.append(tables.priced_rows(kind, tables.read_rows(source), source=source))
    older, newer = frames
    keys = [column for column in newer.columns if column in older.columns and column not in LABELS]
    joined = older.merge(newer, on=keys, suffixes=("_previous", "_newest"))
    return [float(before / after) for before, after in zip(joined["latency_previous"], joined["latency_newest"],
                                                            strict=True) if after > 0]


def run(gpus) -> list[dict]:
    rows = []
    for gpu in gpus:
        for engine in measured_engines(gpu):
            for kind in tables.TABLES:
                measured = tables.versions(gpu, engine, kind)
                if len(measured) < 2:
                    continue
                ratios = matched_ratios(gpu, engine, kind, measured[-2], measured[-1])
                if not ratios:
                    continue
                rows.append({"gpu": gpu, "engine": engine, "kind": kind, "previous": measured[-2],
                             "newest": measured[-1], "shapes": len(ratios),
                             "median_abs_change": statistics.median(abs(ratio - 1) for ratio in ratios),
                             "median_ratio": statistics.median(ratios)})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", nargs="*", default=list(tables.GPU_FOLDERS))
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "version_change.json")
    args = parser.parse_args(argv)
    rows = run(args.gpu)
    print(format_table(["gpu", "engine", "kind", "previous", "newest", "shapes", "median |prev/new - 1|",
                        "median prev/new"],
                       [[row["gpu"], row["engine"], row["kind"], row["previous"], row["newest"], str(row["shapes"]),
                         f"{100 * row['median_abs_change']:.1f}%", f"{row['median_ratio']:.3f}"] for row in rows]))
    print(f"\nshapes priced in both versions; aiconfigurator-core {tables.package_version()}")
    write_text_atomically(args.json, json_text({"package": tables.package_version(), "rows": rows}) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
