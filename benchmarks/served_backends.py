"""How NVIDIA's attention tables time one shape with several backends, against the one the engine serves with
(issue 29).

Where an engine's prefill or decode attention table times a shape with several backends (``kernel_source``), the
fits keep the row of the backend the engine serves with by default (``calibration.aiconfigurator
.served_attention_rows``, ``SERVED_ATTENTION_BACKENDS``). This benchmark reads the tables (no model, no fit) and, per
GPU, engine and kind, counts the rows that rule leaves out and gives each other backend's latency over the served
backend's at the same shape (``ATTENTION_SHAPE_COLUMNS``): the median and the 10th and 90th percentiles.

Needs the ``calibration`` extra (``aiconfigurator-core``); seconds.

    python benchmarks/served_backends.py [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration import aiconfigurator as tables  # noqa: E402
from perfmodel.jsonable import json_text  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402


def backend_ratios(source: tables.Table) -> list[dict]:
    """For each backend other than the served one, at the shapes both timed: rows, and the quantiles of its latency
    over the served backend's; with the rows ``served_attention_rows`` leaves out of the table."""
    frame = tables.read_rows(source)
    served = tables.SERVED_ATTENTION_BACKENDS[(source.engine, tables.GPU_ARCHITECTURES[source.gpu])][0]
    left_out = len(frame) - len(tables.served_attention_rows(source, frame))
    shape = [column for column in tables.ATTENTION_SHAPE_COLUMNS if column in frame.columns]
    latency = frame.pivot_table(index=shape, columns="kernel_source", values="latency", aggfunc="first")
    found = []
    for backend in sorted(set(latency.columns) - {served}):
        ratios = (latency[backend] / latency[served]).dropna() if served in latency.columns else []
        if len(ratios):
            found.append({"gpu": source.gpu, "engine": source.engine, "kind": source.kind, "served": served,
                          "backend": backend, "shapes": len(ratios), "rows_left_out": left_out,
                          "median_ratio": float(ratios.median()), "p10_ratio": float(ratios.quantile(0.1)),
                          "p90_ratio": float(ratios.quantile(0.9))})
    return found


def run() -> list[dict]:
    rows = []
    for gpu, architecture in tables.GPU_ARCHITECTURES.items():
        for engine in tables.ENGINES:
            if (engine, architecture) not in tables.SERVED_ATTENTION_BACKENDS:
                continue
            for kind in tables.SERVED_ATTENTION_KINDS:
                source = tables.table(gpu, engine, kind)
                if source is not None:
                    rows.extend(backend_ratios(source))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "served_backends.json")
    args = parser.parse_args(argv)
    rows = run()
    print(format_table(["gpu", "engine", "kind", "served", "other backend", "shapes", "rows left out",
                        "median other/served", "p10-p90"],
                       [[row["gpu"], row["engine"], row["kind"], row["served"], row["backend"], str(row["shapes"]),
                         str(row["rows_left_out"]), f"{row['median_ratio']:.2f}",
                         f"{row['p10_ratio']:.2f}-{row['p90_ratio']:.2f}"] for row in rows]))
    print(f"\nlatency of another backend over the served one at the same shape; aiconfigurator-core "
          f"{tables.package_version()}")
    write_text_atomically(args.json, json_text({"package": tables.package_version(), "rows": rows}) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
