"""Measure the local CPU's figures that the epyc-zen4-2vcpu spec cites: DRAM bandwidth, eager
dispatch cost per op, and the call overhead of a torch.compile'd function.

Run:  python benchmarks/cpu_probe.py [--json out/cpu_probe.json]
Prints a table and writes JSON. Needs torch (pip install torch==2.13.0).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch
import torch.utils.benchmark as benchmark

from perfmodel.yaml_source import write_text_atomically

BYTES_PER_FP32 = 4
ARRAY_BYTES = 256 * 1024 * 1024
MIN_RUN_TIME_S = 1.0


def _median_s(statement: str, threads: int = 1, **variables) -> tuple[float, float]:
    # torch.utils.benchmark.Timer runs on ONE thread unless told otherwise (num_threads=1 by default):
    # the DRAM figures are taken at one thread and at all of them, and say which.
    measurement = benchmark.Timer(statement, globals=variables, num_threads=threads).blocked_autorange(
        min_run_time=MIN_RUN_TIME_S)
    return measurement.median, measurement.iqr


def probe() -> dict:
    elements = ARRAY_BYTES // BYTES_PER_FP32
    source, destination = torch.ones(elements), torch.empty(elements)
    every = torch.get_num_threads()  # torch's default: all the CPUs this process may run on
    streams = {}
    for label, threads in (("1_thread", 1), ("all_threads", every)):
        copy_s, copy_iqr = _median_s("destination.copy_(source)", threads, destination=destination, source=source)
        sum_s, sum_iqr = _median_s("source.sum()", threads, source=source)
        streams.update({f"copy_read_write_bytes_per_s_{label}": 2 * ARRAY_BYTES / copy_s, f"copy_iqr_s_{label}": copy_iqr,
                        f"sum_read_bytes_per_s_{label}": ARRAY_BYTES / sum_s, f"sum_iqr_s_{label}": sum_iqr})
    small_a, small_b = torch.ones(1024), torch.ones(1024)
    add_s, add_iqr = _median_s("torch.add(a, b)", torch=torch, a=small_a, b=small_b)
    # Exact gelu on a dense fp32 CPU tensor goes through oneDNN (aten gelu_out_cpu -> ideep eltwise): the
    # extra cost of that library call is gelu's time minus a plain add's, at 1,000 elements (1 thread).
    gelu_s, gelu_iqr = _median_s("torch.nn.functional.gelu(a)", torch=torch, a=small_a[:1000].clone())
    add_1000_s, _ = _median_s("torch.add(a, a)", torch=torch, a=small_a[:1000].clone())

    def chain(x):
        return torch.relu(x + 1) * 2

    compiled = torch.compile(chain)
    tiny = torch.ones(4)
    compiled(tiny)
    compiled_s, compiled_iqr = _median_s("compiled(tiny)", compiled=compiled, tiny=tiny)
    return {
        "torch": torch.__version__, "python": platform.python_version(), "all_threads": every,
        **streams, "eager_add_1024_s": add_s, "eager_add_iqr_s": add_iqr,  # dispatch cost: one thread
        "gelu_1000_s": gelu_s, "gelu_1000_iqr_s": gelu_iqr, "gelu_library_call_s": gelu_s - add_1000_s,
        "compiled_call_s": compiled_s, "compiled_call_iqr_s": compiled_iqr,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("out/cpu_probe.json"))
    args = parser.parse_args(argv)
    result = probe()
    print(f"{'quantity':<36} {'value':>14}")
    for label, threads in (("1_thread", "1 thread"), ("all_threads", f"{result['all_threads']} threads")):
        print(f"{'copy (read+write), ' + threads:<36} {result[f'copy_read_write_bytes_per_s_{label}'] / 1e9:>10.1f} GB/s")
        print(f"{'sum (read), ' + threads:<36} {result[f'sum_read_bytes_per_s_{label}'] / 1e9:>10.1f} GB/s")
    print(f"{'eager torch.add, 1024 elements':<36} {result['eager_add_1024_s'] * 1e6:>10.2f} us")
    print(f"{'gelu minus add, 1000 elements':<36} {result['gelu_library_call_s'] * 1e6:>10.2f} us")
    print(f"{'torch.compile call, 3 ops':<36} {result['compiled_call_s'] * 1e6:>10.2f} us")
    write_text_atomically(args.json, json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
