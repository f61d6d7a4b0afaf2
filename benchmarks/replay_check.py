"""Replays against the evaluation, differentially (a check run as a benchmark: thousands of cases).

Run:  python benchmarks/replay_check.py [--seconds 120] [--seed 0] [--per-trace 25] [--json PATH]

A compiled replay (``perfmodel.tracing``) must give what ``llm_predict``'s evaluation gives for one
scenario (every field, 1e-12 relative), or decline. Drawn at random: a model, a shipped spec (swept ones
left out), one of its execution modes, tp/pp/ep, weight/KV/activation dtypes and a scenario; the
scenario's numbers are traced, and the replay is asked for ``--per-trace`` other scenarios (near the
traced one, anywhere, and extremes: batch up to 100,000, prompt and output up to the model's positions),
each compared with the evaluation (``llm.metrics._predict_one``; ``llm_predict`` checks a scenario
before it asks a replay, so every drawn scenario is a valid one). Counted: combinations that could not
run (refused as the CLI would refuse them), traces, replayed scenarios that matched, declined (a
decision came out differently: the evaluation runs instead) and the failures: a mismatch, a replay that
raised, a replay that answered where the evaluation refuses. Prints a table, writes JSON and exits 1 on
any failure. ``tests/test_tracing.py`` runs a small fixed part of this in the suite.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import catalog_index, load_hardware
from perfmodel.llm import metrics
from perfmodel.llm.catalog import load_architecture, model_names
from perfmodel.llm.graphs import Parallelism, Scenario, check, stage_graph
from perfmodel.tracing import trace
from perfmodel.yaml_source import write_text_atomically

REFUSED = (PerfmodelError, FloatingPointError)
MAX_BATCH = 100_000


def differences(got: Any, expected: Any, path: str = "result") -> list[str]:
    """Where ``got`` differs from ``expected``: floats beyond 1e-12 relative, anything else unequal."""
    if isinstance(expected, dict):
        found = [f"{path}: keys {list(got)} != {list(expected)}"] if list(got) != list(expected) else []
        return found + [line for key in expected if key in got for line in differences(got[key], expected[key],
                                                                                        f"{path}.{key}")]
    if hasattr(expected, "__dataclass_fields__"):
        return [line for field in fields(expected)
                for line in differences(getattr(got, field.name), getattr(expected, field.name),
                                        f"{path}.{field.name}")]
    if isinstance(expected, (float, np.floating)):
        close = got == expected or (math.isfinite(expected) and abs(got - expected) <= 1e-12 * abs(expected))
        return [] if close else [f"{path}: {got!r} != {expected!r}"]
    return [] if got == expected else [f"{path}: {got!r} != {expected!r}"]


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    if high <= low:
        return low
    return int(min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high)))))))


def _scenario_numbers(rng: random.Random, positions: int, near: tuple[int, int, int] | None = None
                      ) -> tuple[int, int, int]:
    if near is not None and rng.random() < 0.6:
        batch, prompt, gen = near
        batch = max(1, min(MAX_BATCH, int(batch * rng.choice([0.5, 0.9, 1, 1.1, 2, 3])) + rng.randint(-2, 2)))
        prompt = max(1, min(positions - 1, int(prompt * rng.choice([0.5, 0.9, 1, 1.1, 2])) + rng.randint(-3, 3)))
        return batch, prompt, max(1, min(positions - prompt, int(gen * rng.choice([0.5, 1, 2])) + rng.randint(-3, 3)))
    if rng.random() < 0.15:  # extremes
        prompt = rng.choice([1, 2, positions // 2, positions - 1])
        return rng.choice([1, 2, 4096, MAX_BATCH]), prompt, max(1, min(rng.choice([1, 2, positions]), positions - prompt))
    prompt = _log_uniform(rng, 1, positions - 1)
    return _log_uniform(rng, 1, MAX_BATCH), prompt, _log_uniform(rng, 1, positions - prompt)


def _evaluated(architecture, hardware, scenario, parallelism, execution):
    """The evaluation's answer, or the refusal's text (as ``llm_predict`` would refuse)."""
    try:
        check(architecture, scenario, parallelism)
        return metrics._predict_one(architecture, hardware, scenario, parallelism, execution, stage_graph), None
    except REFUSED as error:
        return None, str(error)


def run(seconds: float, seed: int, per_trace: int) -> tuple[dict, list[dict]]:
    rng = random.Random(seed)
    models, dtypes = model_names(), sorted(DTYPES)
    specs = [name for name in sorted(catalog_index()) if not load_hardware(name).is_swept]
    counts = dict.fromkeys(("refused", "traces", "scenarios", "matched", "declined", "mismatched", "replay_raised",
                            "replay_answered_a_refusal"), 0)
    failures: list[dict] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        architecture, hardware = load_architecture(rng.choice(models)), load_hardware(rng.choice(specs))
        execution = rng.choice(list(hardware.scheduling.modes))
        parallelism = Parallelism(tp=rng.choice([1, 1, 2, 4, 8, 16]), pp=rng.choice([1, 1, 2, 4, 8]),
                                  ep=rng.choice([1, 2, 4, 8]) if architecture.experts > 1 else 1)
        kinds = {role: rng.choice(dtypes) for role in ("weight_dtype", "kv_dtype", "activation_dtype")}
        traced_at = _scenario_numbers(rng, architecture.max_positions)
        traced = Scenario(batch=traced_at[0], prompt_tokens=traced_at[1], generated_tokens=traced_at[2], **kinds)
        links = any(link.kind in ("chip_to_chip", "network") for link in hardware.links.values())
        if (parallelism.chips > 1 and not links) or _evaluated(architecture, hardware, traced, parallelism,
                                                                execution)[0] is None:
            counts["refused"] += 1
            continue
        case = {"model": architecture.name, "spec": hardware.name, "mode": execution, "tp": parallelism.tp,
                "pp": parallelism.pp, "ep": parallelism.ep, **kinds, "traced_at": traced_at}
        replay = trace(metrics.prediction_numbers(architecture, hardware, traced, parallelism, execution), traced_at)
        counts["traces"] += 1
        for _ in range(per_trace):
            numbers = _scenario_numbers(rng, architecture.max_positions, near=traced_at)
            scenario = Scenario(batch=numbers[0], prompt_tokens=numbers[1], generated_tokens=numbers[2], **kinds)
            counts["scenarios"] += 1
            expected, refusal = _evaluated(architecture, hardware, scenario, parallelism, execution)
            try:
                got = replay(*numbers)
            except Exception as error:  # noqa: BLE001 - any exception out of a replay is a failure to report
                counts["replay_raised"] += 1
                failures.append({**case, "at": numbers, "failure": f"replay raised {error!r}"})
                continue
            if got is None:
                counts["declined"] += 1
            elif expected is None:
                counts["replay_answered_a_refusal"] += 1
                failures.append({**case, "at": numbers, "failure": f"the evaluation refuses: {refusal}"})
            elif found := differences(metrics.replace(metrics._named_bounds(got), scenario=scenario), expected):
                counts["mismatched"] += 1
                failures.append({**case, "at": numbers, "failure": found[:8]})
            else:
                counts["matched"] += 1
    counts["seconds"] = round(time.perf_counter() - start, 1)
    return counts, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to draw cases (default 120)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-trace", type=int, default=25, help="scenarios asked of each trace (default 25)")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/replay_check.json"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow/invalid warnings of refused cases
    counts, failures = run(args.seconds, args.seed, args.per_trace)
    for name, value in counts.items():
        print(f"{name:<28} {value:>10,}" if isinstance(value, int) else f"{name:<28} {value:>10}")
    for failure in failures[:20]:
        print("FAILURE", json.dumps(failure))
    write_text_atomically(args.json, json.dumps({"seed": args.seed, "per_trace": args.per_trace, "counts": counts,
                                                 "failures": failures}, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
