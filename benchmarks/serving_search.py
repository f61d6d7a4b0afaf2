"""Time of the deployment search (``perfmodel search``, issue 31): Llama-3.1-70B on 32 H200s.

Run:  python benchmarks/serving_search.py [--json benchmarks/results/serving_search.json]

Three engines' overlays x every layout (tp 1-8, pp 1-4) x batch limits 8-256 x aggregated and every
disaggregated split x speculation (none, EAGLE at its published default), prompt 1024 / output 256,
TTFT <= 1 s and TPOT <= 20 ms, six front points simulated. Prints the configurations searched, the
front's size, the time of each stage and in all, and writes JSON. A benchmark, not a test (times
depend on the machine and its load); issue 31 asks for at least 1,000 configurations in under 60 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from perfmodel.hardware.loader import SERVING_ENGINES, load_for_prediction
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving.search import search
from perfmodel.serving.speculation import DEFAULT_ACCEPTANCE, DEFAULT_TOKENS, Speculation
from perfmodel.tables import format_table
from perfmodel.yaml_source import write_text_atomically


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--simulate", type=int, default=6)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    architecture = load_architecture("llama-3.1-70b")
    hardware = {engine: load_for_prediction("h200-sxm", engine=engine) for engine in SERVING_ENGINES}
    speculations = (None, Speculation(method="eagle", tokens=DEFAULT_TOKENS["eagle"],
                                      acceptance=DEFAULT_ACCEPTANCE["eagle"]))
    loaded = time.perf_counter()
    search(architecture, hardware, 32, prompt_tokens=1024, output_tokens=256, speculations=speculations,
                       ttft_slo_s=1.0, tpot_slo_s=0.02, simulate=0)
    enumerated = time.perf_counter()
    full = search(architecture, hardware, 32, prompt_tokens=1024, output_tokens=256, speculations=speculations,
                  ttft_slo_s=1.0, tpot_slo_s=0.02, simulate=args.simulate)
    done = time.perf_counter()
    rows = [["configurations", len(full.configurations)], ["workers priced", full.workers_built],
            ["front points", len(full.front)], ["front points simulated", len(full.simulated)],
            ["load specs (s)", f"{loaded - start:.2f}"], ["enumerate + estimate + front (s)", f"{enumerated - loaded:.2f}"],
            ["search with simulation (s)", f"{done - enumerated:.2f}"]]
    print(format_table(["llama-3.1-70b on 32 x h200-sxm", "value"], rows))
    best = full.best
    if best is not None:
        print(f"chosen: {best.label}: {best.tokens_per_s_per_user:.1f} tokens/s per user, "
              f"{best.tokens_per_s_per_chip:.1f} per chip")
    if args.json is not None:
        data = {"machine": platform.platform(), "python": sys.version.split()[0],
                "configurations": len(full.configurations), "workers_priced": full.workers_built,
                "front_points": len(full.front), "simulated": len(full.simulated),
                "estimate_s": enumerated - loaded, "with_simulation_s": done - enumerated,
                "chosen": None if best is None else best.to_dict()}
        write_text_atomically(args.json, json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
