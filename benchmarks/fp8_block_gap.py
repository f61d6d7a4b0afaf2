"""Block-scaled fp8 GEMMs against per-tensor fp8 ones, in the serving engines' own tables (issue 29).

For every GPU and engine whose newest GEMM table (``aiconfigurator-core``, ``gemm_perf.parquet``) holds
``fp8_block`` rows (DeepSeek-V3's 1 x 128 activation and 128 x 128 weight scales), the rows are joined with
the same table's ``fp8`` (per-tensor scaled) rows of the same ``m, n, k`` and compared:

* the median latency ratio ``fp8_block / fp8`` by decade of ``m`` (1-9, 10-99, ... 10k+);
* the **fixed cost**: median latency of the smallest shapes (``m <= SMALL_M`` and weights of at most
  ``SMALL_WEIGHTS`` elements: under 4 MiB of fp8, a microsecond of HBM on a Hopper), where no rate shows;
* the **rate**: median TFLOP/s (2 m n k / latency) of the shapes of at least ``LARGE_FLOPS``;
* how the collector timed the fp8_block rows (``calibration.aiconfigurator.EAGER_TIMED_GEMMS``): a CUDA
  graph replay (device time) or eager calls (the host's Python path and launches inside the time).

And, where one engine's fp8_block rows were timed eagerly and another's on the same GPU under a graph, the
median ratio of the two at the same shapes by FLOPs decade: where the device work is small the eager rows
hold a floor the graph-timed rows do not; at large shapes they agree.

Needs the ``calibration`` extra. Tables on stdout; JSON to ``--json`` (default
``calibration/data/aiconfigurator/reports/fp8_block_gap.json``).

    python benchmarks/fp8_block_gap.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration import aiconfigurator as tables  # noqa: E402
from perfmodel.jsonable import json_text  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.units import FLOPS_PER_FMA  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402

SMALL_M = 16
SMALL_WEIGHTS = 4 * 2 ** 20
LARGE_FLOPS = 1e12
DECADES = ((1, 10), (10, 100), (100, 1000), (1000, 10000), (10000, None))
FLOPS_DECADES = ((0, 1e9), (1e9, 1e10), (1e10, 1e11), (1e11, 1e12), (1e12, None))
DEFAULT_JSON = tables.SAMPLE_DIRECTORY / "reports" / "fp8_block_gap.json"


def _label(low, high) -> str:
    return f"{low:g}+" if high is None else f"{low:g}-{high - 1:g}" if isinstance(low, int) else f"{low:.0e}-{high:.0e}"


def joined(frame):
    """fp8_block and fp8 latencies (seconds) of the same (m, n, k), one row per shape."""
    by_shape = {dtype: frame[frame.gemm_dtype == dtype].groupby(["m", "n", "k"]).latency.median() * 1e-3
                for dtype in ("fp8_block", "fp8")}
    both = by_shape["fp8_block"].to_frame("block").join(by_shape["fp8"].to_frame("fp8"), how="inner").reset_index()
    return both.assign(flops=FLOPS_PER_FMA * both.m.astype(float) * both.n * both.k)


def gap(frame) -> dict:
    """The comparison of one table (see the module docstring)."""
    both = joined(frame)
    ratio = both.block / both.fp8
    by_decade = {}
    for low, high in DECADES:
        inside = (both.m >= low) & ((both.m < high) if high is not None else True)
        if inside.any():
            by_decade[_label(low, high)] = float(ratio[inside].median())
    small = both[(both.m <= SMALL_M) & (both.n * both.k <= SMALL_WEIGHTS)]
    large = both[both.flops >= LARGE_FLOPS]
    return {
        "shapes": len(both), "median_ratio": float(ratio.median()), "ratio_by_m": by_decade,
        "small_shapes": len(small),
        "fixed_us": {"fp8_block": 1e6 * float(small.block.median()), "fp8": 1e6 * float(small.fp8.median())}
        if len(small) else None,
        "large_shapes": len(large),
        "tflops": {"fp8_block": float((large.flops / large.block).median()) / 1e12,
                   "fp8": float((large.flops / large.fp8).median()) / 1e12} if len(large) else None,
        "kernels": sorted(str(name) for name in frame[frame.gemm_dtype == "fp8_block"].kernel_source.unique())
        if "kernel_source" in frame.columns else [],
    }


def eager_over_graph(eager_frame, graph_frame) -> dict[str, float]:
    """Median ratio of eager-timed to graph-timed fp8_block latencies of the same shapes, by FLOPs decade."""
    eager, graph = (joined(frame).set_index(["m", "n", "k"]) for frame in (eager_frame, graph_frame))
    both = eager[["block", "flops"]].join(graph[["block"]].rename(columns={"block": "block_graph"}), how="inner")
    found = {}
    for low, high in FLOPS_DECADES:
        inside = (both.flops >= low) & ((both.flops < high) if high is not None else True)
        if inside.any():
            found[_label(low, high)] = float((both.block[inside] / both.block_graph[inside]).median())
    return found


def protocol(engine: str) -> str:
    return "eager" if (engine, "fp8_block") in tables.EAGER_TIMED_GEMMS else "graph"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    results, frames = [], {}
    for gpu in tables.GPU_FOLDERS:
        for engine in tables.ENGINES:
            source = tables.table(gpu, engine, "gemm")
            if source is None:
                continue
            frame = tables.read_rows(source)
            if not {"fp8_block", "fp8"} <= set(frame.gemm_dtype):
                continue
            frames[gpu, engine] = frame
            results.append({"gpu": gpu, "engine": engine, "version": source.version, "timed": protocol(engine),
                            **gap(frame)})

    def number(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    header = ["gpu", "engine", "timed", *[f"m {_label(*d)}" for d in DECADES], "fixed us blk/fp8", "TFLOP/s blk/fp8"]
    rows = []
    for r in results:
        fixed, rate = r["fixed_us"], r["tflops"]
        rows.append([r["gpu"], r["engine"], r["timed"], *[number(r["ratio_by_m"].get(_label(*d))) for d in DECADES],
                     "-" if fixed is None else f"{fixed['fp8_block']:.1f}/{fixed['fp8']:.1f}",
                     "-" if rate is None else f"{rate['fp8_block']:.0f}/{rate['fp8']:.0f}"])
    print("median latency ratio fp8_block / fp8 at the same (m, n, k), by decade of m; fixed cost = median latency of "
          f"m <= {SMALL_M} with <= {SMALL_WEIGHTS // 2 ** 20} Mi weight elements; rate = median TFLOP/s of shapes of "
          f">= {LARGE_FLOPS:.0e} FLOPs")
    print(format_table(header, rows))
    comparisons = []
    for (gpu, engine), frame in frames.items():
        if protocol(engine) != "eager":
            continue
        for other in tables.ENGINES:
            if other != engine and protocol(other) == "graph" and (gpu, other) in frames:
                comparisons.append({"gpu": gpu, "eager": engine, "graph": other,
                                    "ratio_by_flops": eager_over_graph(frame, frames[gpu, other])})
    if comparisons:
        print("\nfp8_block rows timed eagerly over rows timed under a CUDA graph, same GPU and shapes, by FLOPs decade")
        print(format_table(["gpu", "eager", "graph", *[_label(*d) for d in FLOPS_DECADES]],
                           [[c["gpu"], c["eager"], c["graph"],
                             *[number(c["ratio_by_flops"].get(_label(*d))) for d in FLOPS_DECADES]]
                            for c in comparisons]))
    print(f"\n{tables.PACKAGE} {tables.package_version()}; eager timing: "
          + "; ".join(f"{engine} {dtype}: {where}" for (engine, dtype), where in tables.EAGER_TIMED_GEMMS.items()))
    write_text_atomically(args.json, json_text({
        "package_version": tables.package_version(), "small_m": SMALL_M, "small_weight_elements": SMALL_WEIGHTS,
        "large_flops": LARGE_FLOPS, "eager_timed": {f"{engine}:{dtype}": where for (engine, dtype), where
                                                    in tables.EAGER_TIMED_GEMMS.items()},
        "tables": results, "eager_over_graph": comparisons}, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
