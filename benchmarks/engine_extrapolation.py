"""Kernels no engine overlay was fitted on, predicted with the shipped overlays (issue 29: the model must
extrapolate, not interpolate a table).

The overlays are fitted on GEMMs (bf16, fp8, block-scaled fp8, NVFP4), attention and all-reduces only. Here
each engine's own table of another kind of kernel is predicted, nothing refitted: **fused MoE**
(``moe_perf.parquet``): tokens routed ``top-k`` of ``E`` experts, priced by the LLM graphs' own MoE layer
(``llm.graphs.routed_expert_ops``: the touched experts' batched gate/up GEMM, the gated activation, the
batched down GEMM), bf16, the ``balanced`` routing rows, one GPU (no tensor or expert parallelism).
(Block-scaled fp8 GEMMs were predicted here too until they became a fitted kernel class,
``costs.rules.BLOCK_FP8_MATMUL``: their held-out error is the fit's, ``gemm:fp8_block`` in the overlays'
reports; ``benchmarks/fp8_block_gap.py`` compares them with the fp8 GEMMs.)

A fixed random sample (seed 0) of each table; median |error| and median signed error (predicted over
measured, minus 1). Needs the ``calibration`` extra. Table on stdout, JSON to ``--json`` (default
``benchmarks/results/engine_extrapolation.json``).

    python benchmarks/engine_extrapolation.py [--rows 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration import aiconfigurator as tables  # noqa: E402
from calibration.achievable import device_time_hardware  # noqa: E402
from perfmodel.hardware.loader import load_for_prediction  # noqa: E402
from perfmodel.jsonable import json_text  # noqa: E402
from perfmodel.llm.graphs import Scenario, routed_expert_ops  # noqa: E402
from perfmodel.roofline.arrays import evaluate_arrays  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.workload.ir import Graph  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402

GPUS = ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200")


def moe_graph(tokens: int, hidden: int, inter: int, experts: int, top_k: int) -> Graph:
    """One MoE layer's expert work as ``llm.graphs`` builds it (one chip, bf16, SiLU-gated)."""
    scenario = Scenario(batch=tokens, prompt_tokens=1, generated_tokens=1, weight_dtype="bf16",
                        activation_dtype="bf16")
    return Graph(name="moe", ops=routed_expert_ops(tokens * top_k, experts, hidden, inter, scenario, 1,
                                                   activation="silu", activation_rows=tokens * top_k))


def _moe_frame(gpu: str, engine: str):
    """The newest fused-MoE table's bf16, balanced-routing, one-GPU rows, or None."""
    source = tables.table(gpu, engine, "moe")
    if source is None:
        return None
    frame = tables.read_rows(source)
    keep = ((frame.moe_dtype == "bfloat16") & (frame.distribution == "balanced") & (frame.moe_tp_size == 1)
            & (frame.moe_ep_size == 1))
    return frame[keep], source.version


def _errors(hardware, graphs_and_latencies) -> list[float]:
    errors = []
    for graph, latency_s in graphs_and_latencies:
        predicted = float(evaluate_arrays(graph, hardware, mode="graph").total_s.sum())
        errors.append(predicted / latency_s - 1)
    return errors


def extrapolate(gpu: str, engine: str, rows: int) -> dict:
    hardware = device_time_hardware(load_for_prediction(gpu, engine=engine))
    found: dict = {"gpu": gpu, "engine": engine}
    moe = _moe_frame(gpu, engine)
    if moe is not None and len(moe[0]):
        frame, version = moe
        sample = frame.sample(min(rows, len(frame)), random_state=0)
        errors = _errors(hardware, [(moe_graph(int(r.num_tokens), int(r.hidden_size), int(r.inter_size),
                                               int(r.num_experts), int(r.topk)), r.latency * 1e-3)
                                    for r in sample.itertuples()])
        found["moe"] = {"version": version, "rows": len(errors), "median_abs": statistics.median(np.abs(errors)),
                        "median": statistics.median(errors)}
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300, help="rows sampled from each table (seed 0)")
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "engine_extrapolation.json")
    args = parser.parse_args(argv)
    results = [extrapolate(gpu, engine, args.rows) for gpu in GPUS for engine in tables.ENGINES
               if tables.table(gpu, engine, "gemm") is not None]

    def cell(entry: dict | None) -> str:
        return "-" if entry is None else f"{100 * entry['median_abs']:.1f}% ({100 * entry['median']:+.0f}%)"

    print(format_table(["gpu", "engine", "fused MoE bf16"], [[r["gpu"], r["engine"], cell(r.get("moe"))] for r in results]))
    print(f"\nmedian |error| (median signed error) of {args.rows} sampled rows a table; nothing fitted to them; "
          f"{tables.PACKAGE} {tables.package_version()}")
    write_text_atomically(args.json, json_text({"rows_per_table": args.rows, "package_version": tables.package_version(),
                                                "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
