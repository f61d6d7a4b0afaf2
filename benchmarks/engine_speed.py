"""Speed of the evaluation engine (a benchmark, not a test).

Run:  python benchmarks/engine_speed.py [--json benchmarks/results/engine_speed.json]

Measures, on one core, the median of several repetitions of:
1. a 1,000-op graph evaluated from scratch (cost rules + evaluation): op-evaluations per second;
2. the same graph re-evaluated over 1,000 spec variants at once (vectorized): op-evaluations per second;
3. one 80-layer transformer decode step (Llama-2-70B shapes; layers as op counts, and unrolled);
4. a sweep of 10^6 scenario points (batch x context) of a transformer layer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from perfmodel import __version__
from perfmodel.hardware.loader import load_hardware
from perfmodel.roofline import evaluate, evaluate_arrays
from perfmodel.roofline.sweep import hardware_with, sweep
from perfmodel.workload.builders import linear, transformer_block
from perfmodel.workload.ir import Graph, Op, TensorSpec

LLAMA70B = {"hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672}


def _median_s(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def thousand_op_graph() -> Graph:
    ops = []
    for index in range(500):
        ops.append(linear(f"blocks.{index}.proj", 64 + index, 1024, 1024, "bf16"))
        tensor = TensorSpec(shape=(64 + index, 1024), dtype="bf16")
        ops.append(Op(name=f"blocks.{index}.act", kind="elementwise", inputs=(tensor,), outputs=(tensor,)))
    return Graph(name="thousand_ops", ops=ops)


def unrolled_decode(layers: int = 80) -> Graph:
    block = transformer_block(batch=1, seq=1, kv_len=4096, **LLAMA70B)
    ops = [Op(name=f"layers.{layer}.{op.name.removeprefix('layers.')}", kind=op.kind, inputs=op.inputs,
              outputs=op.outputs, attrs=op.attrs) for layer in range(layers) for op in block.ops]
    return Graph(name="decode_unrolled", ops=ops)


def run() -> list[dict]:
    h100 = load_hardware("h100-sxm")
    rows = []
    graph = thousand_op_graph()
    seconds = _median_s(lambda: evaluate(graph, h100), 5)
    rows.append({"benchmark": "1,000-op graph, from scratch", "seconds": seconds,
                 "op_evaluations_per_s": len(graph.ops) / seconds})
    variants = hardware_with(h100, {"memory.hbm.bandwidth": np.linspace(1e12, 8e12, 1000)})
    seconds = _median_s(lambda: evaluate_arrays(graph, variants), 5)
    rows.append({"benchmark": "1,000-op graph x 1,000 spec variants (vectorized)", "seconds": seconds,
                 "op_evaluations_per_s": len(graph.ops) * 1000 / seconds})
    decode = transformer_block(batch=1, seq=1, kv_len=4096, layers=80, **LLAMA70B)
    seconds = _median_s(lambda: evaluate(decode, h100), 20)
    rows.append({"benchmark": "80-layer decode step (layers as counts)", "seconds": seconds,
                 "op_evaluations_per_s": len(decode.ops) * 80 / seconds})
    unrolled = unrolled_decode()
    seconds = _median_s(lambda: evaluate(unrolled, h100), 5)
    rows.append({"benchmark": "80-layer decode step (1,120 ops unrolled)", "seconds": seconds,
                 "op_evaluations_per_s": len(unrolled.ops) / seconds})
    batches, contexts = np.arange(1, 1001), np.arange(128, 128 * 1001, 128)

    def layer_sweep():
        return sweep(lambda batch, kv_len: transformer_block(batch=batch, seq=1, kv_len=kv_len, **LLAMA70B), h100,
                     scenario={"batch": batches, "kv_len": contexts})

    seconds = _median_s(layer_sweep, 3)
    rows.append({"benchmark": "10^6-point sweep of a transformer layer", "seconds": seconds,
                 "op_evaluations_per_s": 14 * 1e6 / seconds, "points_per_s": 1e6 / seconds})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/engine_speed.json"))
    args = parser.parse_args(argv)
    rows = run()
    print(f"{'benchmark':<52} {'time':>12} {'op-evals/s':>14}")
    for row in rows:
        print(f"{row['benchmark']:<52} {row['seconds'] * 1e3:>9.2f} ms {row['op_evaluations_per_s']:>14.3g}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    meta = {"perfmodel": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count()}
    args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
