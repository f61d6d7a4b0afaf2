"""Serving simulator speed: 10,000 requests of a 70B model on 8 GPUs, on one core.

Run:  python benchmarks/serving_speed.py [--requests 10000] [--json benchmarks/results/serving_speed.json]

Prints one row per load (the step-cost grid's build time, the event loop's time, scheduler steps,
microseconds per step, simulated output tokens/s) and writes JSON. numpy runs single-threaded (the
thread variables are set before it loads), so the figures are one core's. The issue's target: the
10,000-request run (grid + loop) under 2 s. A benchmark, not a test: wall times on a shared machine
are noisy; the microseconds per step compare the loads within one run.
"""

from __future__ import annotations

import os

for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import argparse  # noqa: E402 (after the thread variables, before numpy loads)
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from perfmodel import __version__  # noqa: E402
from perfmodel.hardware.detect import read_cpu_facts  # noqa: E402
from perfmodel.hardware.loader import load_for_prediction  # noqa: E402
from perfmodel.llm import Parallelism  # noqa: E402
from perfmodel.llm.catalog import load_architecture  # noqa: E402
from perfmodel.serving import ArrivalProcess, ClosedLoop, Server, ServingConfig, max_context, parse_length  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402

MODEL, SPEC, TP = "llama-3.1-70b", "h100-sxm", 8
PROMPT, OUTPUT = "fixed:512", "fixed:128"
LOADS = [  # (label, arrivals): below the knee, near it, past it, all at once, closed-loop users
    ("poisson 10/s", ArrivalProcess(kind="poisson", rate_per_s=10.0)),
    ("poisson 20/s", ArrivalProcess(kind="poisson", rate_per_s=20.0)),
    ("poisson 1000/s", ArrivalProcess(kind="poisson", rate_per_s=1000.0)),
    ("burst", ArrivalProcess(kind="burst")),
    ("256 users, think 5 s", ClosedLoop(users=256, think_s=5.0)),
]


def run(requests: int) -> list[dict]:
    architecture, hardware = load_architecture(MODEL), load_for_prediction(SPEC)
    prompt, output = parse_length(PROMPT), parse_length(OUTPUT)
    rows = []
    for label, arrivals in LOADS:
        start = time.perf_counter()
        server = Server(architecture, hardware, Parallelism(tp=TP), config=ServingConfig(),
                        max_context=max_context(prompt, output))
        grid_s = time.perf_counter() - start
        start = time.perf_counter()
        result = server.simulate(arrivals, requests, prompt, output, seed=0)
        loop_s = time.perf_counter() - start
        rows.append({"load": label, "requests": requests, "grid_s": grid_s, "loop_s": loop_s,
                     "total_s": grid_s + loop_s, "steps": result.steps, "us_per_step": 1e6 * loop_s / result.steps,
                     "tokens_per_s": result.tokens_per_s, "ttft_p99_s": result.ttft.p99,
                     "under_2_s": grid_s + loop_s < 2.0})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/serving_speed.json"))
    args = parser.parse_args(argv)
    rows = run(args.requests)
    print(f"{MODEL} on {TP} x {SPEC}, prompt {PROMPT}, output {OUTPUT}, {args.requests} requests, one core")
    print(f"{'load':<22} {'grid':>7} {'loop':>7} {'total':>7} {'steps':>6} {'us/step':>8} {'tok/s':>8} "
          f"{'TTFT p99':>9}  <2 s")
    for row in rows:
        print(f"{row['load']:<22} {row['grid_s']:>6.2f}s {row['loop_s']:>6.2f}s {row['total_s']:>6.2f}s "
              f"{row['steps']:>6} {row['us_per_step']:>8.0f} {row['tokens_per_s']:>8.0f} "
              f"{row['ttft_p99_s']:>8.3g}s  {'yes' if row['under_2_s'] else 'NO'}")
    facts = read_cpu_facts()
    meta = {"perfmodel": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "cpu": facts.model_name, "cpus": os.cpu_count(), "threads": 1}
    write_text_atomically(args.json, json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
