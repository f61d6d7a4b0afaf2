"""Training layout search speed: how long `perfmodel train --search` takes on thousands of chips.

Run:  python benchmarks/training_search.py [--json benchmarks/results/training_search.json]
Prints one row per case (layouts tried, layouts that fit, wall time, the best layout) and the cost of
one direct prediction, and writes JSON. A benchmark, not a test: wall times on a shared machine are
noisy; compare the search against single predictions measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm.catalog import load_architecture
from perfmodel.training import TrainingSetup, train_predict
from perfmodel.training.search import search

CASES = [  # (model, spec, chips, global batch in sequences, sequence length)
    ("llama-3.1-405b", "tpu-v5p", 4096, 2048, 8192),
    ("llama-3.1-405b", "h100-sxm", 8192, 2048, 8192),
    ("llama-3.1-70b", "tpu-v6e", 256, 256, 8192),
    ("llama-2-7b", "h100-sxm", 64, 512, 4096),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/training_search.json"))
    args = parser.parse_args(argv)
    rows = []
    for model, spec, chips, batch, seq in CASES:
        architecture, hardware = load_architecture(model), load_for_prediction(spec)
        setup = TrainingSetup(global_batch=batch, seq_len=seq)
        start = time.perf_counter()
        found = search(architecture, hardware, setup, chips)
        search_s = time.perf_counter() - start
        best = found.best
        single_s = float("nan")
        if best is not None:
            start = time.perf_counter()
            train_predict(architecture, hardware, best.setup, best.layout)
            single_s = time.perf_counter() - start
        rows.append({"model": model, "hardware": hardware.name, "chips": chips, "global_batch": batch, "seq_len": seq,
                     "layouts_tried": found.tried, "layouts_fit": found.tried - found.rejected, "search_s": search_s,
                     "one_prediction_s": single_s, "search_over_one_prediction": search_s / single_s,
                     "best_layout": best.layout.label() if best else None,
                     "best_recompute": best.setup.recompute if best else None,
                     "best_mfu": best.mfu if best else None, "best_step_s": best.step_s if best else None})
    header = (f"{'model':<16} {'hardware':<22} {'chips':>6} {'tried':>6} {'fit':>5} {'search':>8} {'one':>8} "
              f"{'ratio':>6}  best")
    print(header)
    for row in rows:
        print(f"{row['model']:<16} {row['hardware']:<22} {row['chips']:>6} {row['layouts_tried']:>6} "
              f"{row['layouts_fit']:>5} {row['search_s']:>7.2f}s {1e3 * row['one_prediction_s']:>6.1f}ms "
              f"{row['search_over_one_prediction']:>6.0f}  {row['best_layout']} ({row['best_recompute']}, "
              f"MFU {100 * (row['best_mfu'] or 0):.1f}%)")
    payload = {"rows": rows, "python": platform.python_version(), "machine": platform.machine()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=args.json.parent, prefix=f".{args.json.stem}.", suffix=".json")
    with os.fdopen(handle, "w") as stream:
        json.dump(payload, stream, indent=2)
    os.replace(temporary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
