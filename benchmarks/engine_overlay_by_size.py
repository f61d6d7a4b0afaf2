"""Per-op error of the shipped engine overlays on rows their fit never saw, drawn uniformly, by decade of work.

The fit's own held-out half (``calibration.fit.heldout_half``) is half of the fit's sample, and that sample
spreads each table's rows over decades of work (``calibration.aiconfigurator.sample``), so it weighs the large
shapes more than the tables' grids do. This benchmark asks the other question: on rows of each table outside the
fit's sample, drawn uniformly (the grids as NVIDIA collected them, dense in small shapes), what is the median
|error|, the |error| weighted by measured time (the error of a workload made of those kernels, long ones
counting as they do in a step), and how does the signed error run from small work to large (``work_decades``:
a GEMM's m n k, a prefill kernel's batch x heads x prompt^2 x head dim, a decode kernel's cached elements)?

Needs the ``calibration`` extra (``aiconfigurator-core``). Table on stdout, JSON to ``--json`` (default
``benchmarks/results/engine_overlay_by_size.json``).

    python benchmarks/engine_overlay_by_size.py [--gpu h100-sxm ...] [--engine trtllm ...] [--rows 2000] [--specs DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from calibration import aiconfigurator as tables  # noqa: E402
from calibration.achievable import device_time_hardware  # noqa: E402
from perfmodel.hardware.loader import load_for_prediction, load_hardware  # noqa: E402
from perfmodel.jsonable import json_text  # noqa: E402
from perfmodel.roofline import evaluate  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402

GPUS = ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "b200")
KINDS = tables.SIZE_STRATIFIED
UNIFORM_SEED = 1  # not the fit's seed (0): another draw


def unseen_rows(gpu: str, engine: str, kind: str, rows: int):
    """(table, up to ``rows`` priced rows of the newest ``kind`` table outside the fit's sample, uniformly drawn)."""
    source = tables.table(gpu, engine, kind)
    if source is None:
        return None, None
    frame = tables.read_rows(source)
    priced = tables.priced_rows(kind, frame, source=source)
    fitted = tables.fit_sample(kind, priced, 0)
    outside = priced.drop(index=fitted.index)
    return source, outside if len(outside) <= rows else outside.sample(n=rows, random_state=UNIFORM_SEED)


def errors(gpu: str, engine: str, rows: int, specs: Path | None = None) -> dict | None:
    """The shipped ``<gpu>-<engine>`` overlay's errors, or the one in ``specs`` (a refit not yet shipped)."""
    if specs is not None and not (specs / f"{gpu}-{engine}.yaml").is_file():
        return None
    hardware = device_time_hardware(load_hardware(specs / f"{gpu}-{engine}.yaml") if specs is not None
                                    else load_for_prediction(gpu, engine=engine))
    found: dict[str, dict] = {}
    for kind in KINDS:
        source, frame = unseen_rows(gpu, engine, kind, rows)
        if source is None or frame is None or frame.empty:
            continue
        decades = tables.work_decades(kind, frame)
        by_class: dict[str, list[tuple[int, float]]] = {}
        times: dict[str, list[tuple[float, float]]] = {}
        for record in tables.records(source, frame, {}):
            predicted = evaluate(record.graph(), hardware, mode="graph").total_s
            by_class.setdefault(record.op_class, []).append((int(decades[record.source_row]),
                                                             predicted / record.duration_s - 1))
            times.setdefault(record.op_class, []).append((predicted, record.duration_s))
        for op_class, pairs in by_class.items():
            signed = np.asarray([error for _, error in pairs])
            predicted_s, measured_s = np.asarray(times[op_class]).T
            per_decade = {}
            for decade in sorted({d for d, _ in pairs}):
                chosen = [error for d, error in pairs if d == decade]
                per_decade[decade] = {"rows": len(chosen), "median_signed": statistics.median(chosen)}
            # |error| weighted by the measured time: the error of a workload made of these kernels, where the
            # long ones count as they do in a step (the median counts every grid point alike)
            found[op_class] = {"rows": len(pairs), "median_abs": float(np.median(np.abs(signed))),
                               "time_weighted_abs": float(np.sum(np.abs(predicted_s - measured_s)) / np.sum(measured_s)),
                               "by_decade": per_decade}
    return {"gpu": gpu, "engine": engine, "overlay": hardware.name, "classes": found} if found else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", nargs="+", default=list(GPUS))
    parser.add_argument("--engine", nargs="+", default=list(tables.ENGINES))
    parser.add_argument("--rows", type=int, default=2000, help="rows per table outside the fit's sample")
    parser.add_argument("--specs", type=Path, help="a folder of <gpu>-<engine>.yaml overlays to judge instead of the "
                        "shipped ones (a refit's --write folder)")
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "engine_overlay_by_size.json")
    args = parser.parse_args(argv)
    results = [found for gpu in args.gpu for engine in args.engine
               if (found := errors(gpu, engine, args.rows, args.specs)) is not None]
    rows = []
    for result in results:
        for op_class, summary in sorted(result["classes"].items()):
            decades = summary["by_decade"]
            rows.append([result["gpu"], result["engine"], op_class, summary["rows"], f"{summary['median_abs']:.1%}",
                         f"{summary['time_weighted_abs']:.1%}",
                         " ".join(f"1e{d}:{v['median_signed']:+.0%}" for d, v in decades.items() if v["rows"] >= 5)])
    print("median |error| on rows outside each overlay's fit sample (uniform draw), and the median signed error "
          "by decade of work (decades of 5 rows or more)")
    print(format_table(["gpu", "engine", "class", "rows", "median |error|", "time-weighted |error|",
                        "signed error by decade"], rows))
    write_text_atomically(args.json, json_text({"arguments": {k: str(v) for k, v in vars(args).items()},
                                                "package_version": tables.package_version(), "results": results},
                                               indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
