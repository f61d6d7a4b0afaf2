"""A decode step as the serving engines' own measured kernels add up, beside perfmodel's prediction.

Issue 29 asks for the 70B TP8 batch-64 4k decode step within 1.6x of its HBM floor. This benchmark
asks what the engines' kernels allow: for each op of the condensed decode graph that the
``aiconfigurator-core`` tables measure at exactly that shape (GEMMs by m, n, k; decode attention by
batch, heads, KV heads, KV length and head dim on a bf16 cache; the engine's all-reduce by message size
and GPU count), it takes the measured latency, and compares per op with perfmodel's price of the same
op alone (the engine overlay, kernels timed alone as the tables time them). Ops the tables do not
measure (norms, residual adds, the embedding) are taken from perfmodel and listed as such.

The sum is a microbenchmark sum, not an application measurement: it fits nothing, and nothing is fitted
to it. It bounds from below what a model that agrees with the kernel tables can predict for the step
(engines that fuse ops - QKV into one GEMM, the all-reduce with the residual add and norm - save the
launches and the re-read of small activations, not the weight or KV traffic that dominates here).

Needs the ``calibration`` extra (``aiconfigurator-core``). Table on stdout, JSON to ``--json`` (default
``benchmarks/results/decode_step_kernels.json``).

    python benchmarks/decode_step_kernels.py [--model llama-3.1-70b --tp 8 --batch 64 --context 4096]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration import aiconfigurator as tables  # noqa: E402
from calibration.achievable import device_time_hardware  # noqa: E402
from perfmodel.hardware.loader import load_for_prediction  # noqa: E402
from perfmodel.jsonable import json_text  # noqa: E402
from perfmodel.llm import Scenario  # noqa: E402
from perfmodel.llm.catalog import load_architecture  # noqa: E402
from perfmodel.llm.graphs import Parallelism, stage_graph  # noqa: E402
from perfmodel.llm.metrics import placement  # noqa: E402
from perfmodel.roofline.arrays import evaluate_arrays  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402

GPUS = ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200")
# perfmodel dtype -> the tables' gemm_dtype (the inverse of the reader's own mapping)
GEMM_DTYPE = {ours: theirs for theirs, ours in tables.GEMM_DTYPES.items()}


def _lookups(gpu: str, engine: str) -> dict[str, dict]:
    """Measured latency (s) by exact shape, per kind of table, for the newest version of each."""
    found: dict[str, dict] = {}
    for kind in ("gemm", "decode_attention", "all_reduce"):
        source = tables.table(gpu, engine, kind)
        if source is None:
            continue
        frame = tables.read_rows(source)
        if kind == "gemm":
            found[kind] = {(row.gemm_dtype, int(row.m), int(row.n), int(row.k)): row.latency * 1e-3
                           for row in frame.itertuples()}
        elif kind == "decode_attention":
            # the backend the engine serves with, where a shape is timed by several (SGLang on Blackwell)
            frame = tables.served_attention_rows(source, frame)
            plain = frame[(frame.window_size == 0) & (frame.kv_cache_dtype == "bfloat16")]
            found[kind] = {(int(row.batch_size), int(row.num_heads), int(row.num_key_value_heads),
                            int(row.isl) + int(row.step), int(row.head_dim)): row.latency * 1e-3
                           for row in plain.itertuples()}
        else:
            served = frame[~frame.kernel_source.astype(str).str.lower().str.contains("eager")]
            found[kind] = {(int(row.num_gpus), int(row.message_size)): row.latency * 1e-3
                           for row in served.itertuples()}
    return found


def _measured(op, lookups: dict[str, dict]) -> float | None:
    """The table's latency of one instance of ``op``, or None where no table holds its exact shape."""
    attrs = op.attrs
    if op.kind == "matmul" and attrs.get("batch", 1) == 1:
        return lookups.get("gemm", {}).get((GEMM_DTYPE.get(op.dtype, op.dtype), attrs["m"], attrs["n"], attrs["k"]))
    if op.kind == "attention" and attrs.get("seq_q") == 1:
        # the tables' KV length counts the cached tokens the new one attends to (isl + step)
        key = (attrs["batch"], attrs["heads"], attrs["kv_heads"], attrs["seq_kv"] - 1, attrs["head_dim"])
        return lookups.get("decode_attention", {}).get(key)
    if op.kind == "collective" and attrs.get("collective") == "all_reduce":
        elements = int(attrs["bytes"] // 2) if op.dtype in ("bf16", "fp16") else None
        return None if elements is None else lookups.get("all_reduce", {}).get((attrs["group_size"], elements))
    return None


def step(model: str, gpu: str, engine: str, tp: int, batch: int, context: int) -> dict | None:
    lookups = _lookups(gpu, engine)
    if not lookups:
        return None
    architecture = load_architecture(model)
    hardware = device_time_hardware(load_for_prediction(gpu, engine=engine))
    scenario = Scenario(batch=batch, prompt_tokens=context, generated_tokens=2)
    parallelism = Parallelism(tp=tp)
    graph = stage_graph(architecture, scenario, parallelism, phase="decode", context=context + 1)
    evaluation = evaluate_arrays(graph, hardware, mode="graph", fuse=False,
                                 resident_bytes=placement(architecture, hardware, scenario, parallelism).other_bytes,
                                 stream_items=batch)
    hbm = hardware.memory[-1]
    ops, measured_sum, predicted_sum, unmeasured = [], 0.0, 0.0, 0.0
    for index, op in enumerate(graph.ops):
        count = float(evaluation.counts[index])
        predicted = float(evaluation.total_s[index])  # already times the count
        one = _measured(op, lookups)
        measured = predicted if one is None else one * count
        measured_sum += measured
        predicted_sum += predicted
        unmeasured += predicted if one is None else 0.0
        ops.append({"op": op.name, "count": count, "measured_s": None if one is None else measured,
                    "predicted_s": predicted})
    floor = float(evaluation.bytes_by_level[-1].sum()) / float(hbm.bandwidth_bytes_per_s)
    return {"model": model, "gpu": gpu, "engine": engine, "tp": tp, "batch": batch, "context": context,
            "hbm_floor_s": floor, "kernel_sum_s": measured_sum, "predicted_s": predicted_sum,
            "from_perfmodel_s": unmeasured, "ops": ops}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama-3.1-70b")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "decode_step_kernels.json")
    args = parser.parse_args(argv)
    results = [found for gpu in GPUS for engine in tables.ENGINES
               if (found := step(args.model, gpu, engine, args.tp, args.batch, args.context)) is not None]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.2f}"

    rows = [[r["gpu"], r["engine"], ms(r["hbm_floor_s"]), ms(r["kernel_sum_s"]),
             f"{r['kernel_sum_s'] / r['hbm_floor_s']:.2f}x", ms(r["predicted_s"]),
             f"{r['predicted_s'] / r['hbm_floor_s']:.2f}x", f"{r['predicted_s'] / r['kernel_sum_s'] - 1:+.1%}",
             ms(r["from_perfmodel_s"])] for r in results]
    print(f"{args.model} decode step, tp {args.tp}, batch {args.batch}, context {args.context} (kernels timed alone)")
    print(format_table(["gpu", "engine", "HBM floor ms", "kernel sum ms", "x floor", "perfmodel ms", "x floor",
                        "perfmodel vs sum", "ms not in tables"], rows))
    for r in results:
        print(f"\n{r['gpu']} {r['engine']}: per op (ms, all layers)")
        print(format_table(["op", "count", "measured", "perfmodel", "error"],
                           [[o["op"], f"{o['count']:.0f}", ms(o["measured_s"]), ms(o["predicted_s"]),
                             "-" if o["measured_s"] is None else f"{o['predicted_s'] / o['measured_s'] - 1:+.0%}"]
                            for o in r["ops"]]))
    write_text_atomically(args.json, json_text({"arguments": {k: str(v) for k, v in vars(args).items()},
                                                "package_version": tables.package_version(), "results": results},
                                               indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
