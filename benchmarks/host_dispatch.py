"""Host cost of eager PyTorch ops that launch no kernel (a measurement, not a test).

Run:  python benchmarks/host_dispatch.py [--json calibration/data/host_dispatch.json]

Eager PyTorch pays Python and the ATen dispatcher for every op, including views, reshapes and
transposes that launch no kernel. This times the view-like ops a Hugging Face Llama layer issues
in a decode step (shapes of Llama-2-7B, batch 1) with ``torch.utils.benchmark`` (median and IQR over
``blocked_autorange``), on this machine's CPU: the same code path a GPU host runs before it launches
anything. The median over ops is the ``host_op`` overhead of the specs' ``dynamic`` modes.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

import torch
import torch.utils.benchmark as benchmark

from perfmodel.hardware.detect import read_cpu_facts

# (statement, what a decode step of a Llama layer uses it for)
VIEW_OPS = (
    ("x.view(1, 1, 32, 128)", "split heads after a projection"),
    ("q.transpose(1, 2)", "heads before sequence for attention"),
    ("o.reshape(1, 1, 4096)", "merge heads after attention"),
    ("cos.unsqueeze(1)", "broadcast the rotary tables over heads"),
    ("q[..., :64]", "rotate_half: first half of the head"),
    ("w.t()", "a linear layer's weight transpose"),
)


def cpu_name() -> str:
    return read_cpu_facts().model_name


def measure(min_run_time: float = 0.5) -> list[dict]:
    torch.set_num_threads(1)
    tensors = {"x": torch.empty(1, 1, 4096), "q": torch.empty(1, 1, 32, 128), "o": torch.empty(1, 32, 1, 128),
               "cos": torch.empty(1, 1, 128), "w": torch.empty(4096, 4096)}
    rows = []
    for statement, purpose in VIEW_OPS:
        timing = benchmark.Timer(statement, globals=tensors).blocked_autorange(min_run_time=min_run_time)
        rows.append({"op": statement, "purpose": purpose, "median_s": timing.median, "iqr_s": timing.iqr})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    rows = measure()
    median = statistics.median(row["median_s"] for row in rows)
    print(f"{'op':26s} {'median':>10s} {'IQR':>10s}  purpose")
    for row in rows:
        print(f"{row['op']:26s} {row['median_s'] * 1e6:8.2f} us {row['iqr_s'] * 1e6:8.2f} us  {row['purpose']}")
    print(f"median over ops: {median * 1e6:.2f} us on {cpu_name()} (torch {torch.__version__})")
    if args.json:
        result = {"cpu": cpu_name(), "torch": torch.__version__, "python": platform.python_version(),
                  "threads": 1, "median_over_ops_s": median, "ops": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        temporary = args.json.with_suffix(".tmp")
        temporary.write_text(json.dumps(result, indent=1) + "\n")
        temporary.replace(args.json)


if __name__ == "__main__":
    main()
