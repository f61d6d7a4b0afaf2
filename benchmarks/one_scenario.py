"""One scenario through ``llm_predict`` (issue 34: <= 0.1 ms), this tree against an earlier one, in turns.

Llama-2-7B on one A100-SXM-80GB, batch 8, 128 generated tokens, the prompt changing every call (64 to
3,967 tokens in turn: nothing repeats, replays are compiled per model and device, never per scenario),
after 200 warm-up calls (a replay is compiled after a few evaluated calls). Each turn is a fresh
process running one tree's ``perfmodel``: ``--rounds`` of ``--calls`` calls, the fastest round's CPU
seconds per call (``time.process_time``: the machine is shared; the fastest round is the one least
disturbed). ``--baseline REV`` extracts perfmodel as of git revision ``REV`` (``git archive``) and
alternates the two trees ``--turns`` times, so the machine's load falls on both alike; the ratio of
the two trees' fastest turns is the before/after figure, and the spread of the per-turn ratios shows
how far the load moved it. Also splits this tree's call: the replay's compiled function alone, the
rebuild of the result from its numbers, and the rest (checks, the replay cache, naming the bounds).

Run:  python benchmarks/one_scenario.py --baseline main [--json benchmarks/results/one_scenario.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ("workloads", "hardware_specs", "calibration")  # what a tree reads beside its package


def _time_one(rounds: int, calls: int) -> dict:
    """The fastest round's CPU seconds per ``llm_predict`` call, in this process (whichever perfmodel
    PYTHONPATH gives), and for this tree's code the split of one call."""
    import perfmodel
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.graphs import Scenario
    from perfmodel.llm.metrics import llm_predict

    architecture, hardware = load_architecture("llama-2-7b"), load_for_prediction("a100-sxm-80gb")
    prompts = [64 + index % 3904 for index in range(rounds * calls + 200)]
    for prompt in prompts[:200]:
        llm_predict(architecture, hardware, Scenario(batch=8, prompt_tokens=prompt, generated_tokens=128))

    def fastest(function, per_round) -> float:
        best = float("inf")
        for index in range(rounds):
            chunk = per_round[index * calls:(index + 1) * calls] if len(per_round) > calls else per_round
            start = time.process_time()
            function(chunk)
            best = min(best, (time.process_time() - start) / len(chunk))
        return best

    one = fastest(lambda chunk: [llm_predict(architecture, hardware, Scenario(
        batch=8, prompt_tokens=prompt, generated_tokens=128)) for prompt in chunk], prompts[200:])
    out = {"seconds": one, "perfmodel_path": str(Path(perfmodel.__file__).parent)}
    from perfmodel.llm import metrics

    entries = list(metrics._REPLAYS._entries.values())
    if entries and entries[-1].replays:
        replay = entries[-1].replays[0]
        numbers = replay.function(8, 1000, 128)
        out["replay_function_s"] = fastest(lambda chunk: [replay.function(8, prompt, 128) for prompt in chunk],
                                           prompts[200:])
        out["rebuild_s"] = fastest(lambda chunk: [replay.rebuild(numbers) for _ in chunk], prompts[200:])
        out["replay_operations"] = replay.computed
    return out


def _turn(tree: Path, rounds: int, calls: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "one.json"
        subprocess.run([sys.executable, __file__, "--turn-only", str(out), "--rounds", str(rounds),
                        "--calls", str(calls)], env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", help="git revision to compare with, in turns")
    parser.add_argument("--turns", type=int, default=4, help="processes per tree, alternating (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per process (default 5)")
    parser.add_argument("--calls", type=int, default=1000, help="calls per round (default 1000)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--turn-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.turn_only:
        args.turn_only.write_text(json.dumps(_time_one(args.rounds, args.calls)))
        return 0
    load_before = os.getloadavg()
    trees: dict[str, list[dict]] = {"this tree": []}
    with tempfile.TemporaryDirectory() as baseline_tree:
        places = [("this tree", ROOT)]
        if args.baseline:
            archive = subprocess.run(["git", "archive", args.baseline, "perfmodel", *DATA], check=True,
                                     capture_output=True, cwd=ROOT).stdout
            subprocess.run(["tar", "-x", "-C", baseline_tree], input=archive, check=True)
            places.insert(0, (args.baseline, Path(baseline_tree)))
            trees[args.baseline] = []
        for _ in range(args.turns):
            for label, tree in places:
                trees[label].append(_turn(tree, args.rounds, args.calls))
    load_after = os.getloadavg()
    current = min(trees["this tree"], key=lambda turn: turn["seconds"])
    print(f"llm_predict, one scenario (llama-2-7b on a100-sxm-80gb), fastest of {args.turns} processes x "
          f"{args.rounds} rounds of {args.calls:,} calls, CPU time; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after ({os.cpu_count()} CPUs)")
    for label, turns in trees.items():
        each = ", ".join(f"{turn['seconds'] * 1e6:.1f}" for turn in turns)
        print(f"  {label:<12} {min(turn['seconds'] for turn in turns) * 1e6:7.1f} us  (turns: {each})")
    data: dict = {"machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                  "load_average_before": load_before, "load_average_after": load_after, "turns": args.turns,
                  "rounds": args.rounds, "calls": args.calls, "trees": trees}
    if args.baseline:
        before = min(turn["seconds"] for turn in trees[args.baseline])
        ratios = [old["seconds"] / new["seconds"] for old, new in zip(trees[args.baseline], trees["this tree"],
                                                                        strict=True)]
        data.update(baseline=args.baseline, speedup=before / current["seconds"], speedup_per_turn=ratios)
        print(f"  speed-up {before / current['seconds']:.2f}x (fastest turns); per turn "
              f"{', '.join(f'{ratio:.2f}x' for ratio in ratios)}, median {statistics.median(ratios):.2f}x")
    if "replay_function_s" in current:
        rest = current["seconds"] - current["replay_function_s"] - current["rebuild_s"]
        print(f"  this tree's call: the replay's function {current['replay_function_s'] * 1e6:.1f} us "
              f"({current['replay_operations']:,} operations, "
              f"{current['replay_function_s'] / current['replay_operations'] * 1e9:.1f} ns each), the result's "
              f"rebuild {current['rebuild_s'] * 1e6:.1f} us, the rest {rest * 1e6:.1f} us")
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
