"""Scale (issue 34): ``llm_predict`` scenarios/s on one core, what bounds it, and a sweep on 1 vs 2 Dask workers.

Rows:

1. ``llm_predict`` over arrays of 10^3 and 10^6 distinct scenarios (Llama-2-7B on one A100-SXM-80GB,
   batch x prompt x generated tokens drawn at random), and one scenario at a time (the compiled replay,
   ``tracing``; distinct prompts so that nothing is reused), median of ``--repeats`` runs.
2. What bounds each path: the machine's numpy throughput for element-wise float64 arithmetic on
   arrays of 10^6 (``x * y + z`` and ``maximum``: element operations/s), and each row's time per
   scenario in those units (``element_op_equivalents``: how many element-wise operations numpy could
   do in the time one scenario takes; 10^6 scenarios/s needs rate / 10^6 or fewer). This is derived
   from times; beside it, counted: the operations one scenario's numbers take (the compiled replay's
   tape: each operation that depends on the scenario's counts), the replay's time per operation
   against straight-line Python float arithmetic timed here (the single scenario's floor), and
   numpy's element rate over that count (the array path's ceiling). A cProfile of a 10^5 call
   lists where the time goes (numpy operators run inside the Python frames that use them, so their
   time shows as those frames' own time).
3. ``perfmodel sweep``'s engine (``roofline.sweep``) over ``--sweep-points`` points of the transformer
   block: in this process, on a LocalCluster of 1 worker process and of 2 (cluster start-up excluded;
   wall time, as the work runs in other processes, so the machine's load shows in these rows).

Rows 1 and 2 are CPU seconds of the process that runs them (``time.process_time``). Row 1 also times
one scenario as an array of one (``llm_predict`` over arrays of length 1) and as the scalar path
evaluates it before a replay is compiled (``_predict_one``): what a single scenario would cost if it
went through the array path, against the two single-scenario paths kept.

``--baseline REV``: rows 1 and 2 also for perfmodel as of git revision ``REV`` (its ``perfmodel``
package and data extracted with ``git archive`` into a temporary folder), each tree's rows in its own
process, the baseline first, in the same run; the table adds before/after ratios (baseline time /
this tree's time), which the shared machine's load moves far less than it moves either time.

``--bound``: only how far the array path is from numpy's throughput for the same arithmetic: one
scenario's traced operations (the replay's tape before folding) run as one element-wise numpy call
each over arrays of a block (8,192) and of 10^6 scenarios, nothing else (``tape_as_numpy``), against
``llm_predict`` over 10^6 array scenarios (10^5 with ``--quick``) and numpy's plain element rate;
writes ``benchmarks/results/scale_bound.json``. Run: ``python benchmarks/scale.py --bound``.

Prints a table; writes ``benchmarks/results/scale.json`` (``--json``).
Run: ``python benchmarks/scale.py`` (``--quick``: 10^5 instead of 10^6 and a smaller sweep;
``--baseline 5bce5b3``: before/after the array path's speed-ups of issue 34).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from perfmodel import __version__
from perfmodel.fanout import mapper
from perfmodel.hardware.execution_models import resolve_mode
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import Parallelism, Scenario, stage_graph
from perfmodel.llm.metrics import _predict_one, llm_predict
from perfmodel.roofline.sweep import concatenate, sweep_chunks, sweep_plan
from perfmodel.workload.builders import transformer_block
from perfmodel.yaml_source import write_text_atomically

MODEL, SPEC = "llama-2-7b", "a100-sxm-80gb"
DATA = ("workloads", "hardware_specs", "calibration")  # what a baseline tree reads beside its package


def _scenarios(count: int, seed: int = 0) -> Scenario:
    rng = np.random.default_rng(seed)
    return Scenario(batch=rng.integers(1, 129, count), prompt_tokens=rng.integers(64, 2049, count),
                    generated_tokens=rng.integers(16, 1025, count))


def _median_s(function, repeats: int) -> float:
    """Median CPU seconds of this process (not wall time: the machine is shared, and a wall clock
    counts the time other processes held the core)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return statistics.median(times)


def numpy_rate(size: int = 1_000_000, repeats: int = 7) -> float:
    """Element operations per second of float64 element-wise numpy arithmetic on arrays of ``size``
    (small arrays: many calls timed together, so numpy's cost per call counts as it does in use)."""
    rng = np.random.default_rng(1)
    x, y, z = rng.random(size), rng.random(size), rng.random(size)
    calls = max(1, 1_000_000 // size)
    seconds = _median_s(lambda: [np.maximum(x * y + z, y) for _ in range(calls)], repeats) / calls
    return 3 * size / seconds  # a multiply, an add and a maximum per element


def python_operation_s(operations: int, repeats: int = 7, variables: int = 16) -> float:
    """CPU seconds of one straight-line Python float operation (a multiply, an add, a divide and a
    clamp in turn, each into one of ``variables`` locals in turn, as a compiled replay reuses its
    variables), in a function of ``operations`` lines."""
    lines = ["def run(x):", "    v0 = x"]
    forms = ["{p} * 1.0000001", "{p} + 0.5", "{p} / 1.0000003", "({p} if {p} >= 1.0 else 1.0)"]
    lines += [f"    v{index % variables} = {forms[index % 4].format(p=f'v{(index - 1) % variables}')}"
              for index in range(1, operations)]
    lines.append(f"    return v{(operations - 1) % variables}")
    namespace: dict = {}
    exec(compile("\n".join(lines), "<straight-line>", "exec"), namespace)  # noqa: S102 - our own text
    run = namespace["run"]
    calls = 2000
    return _median_s(lambda: [run(1.5) for _ in range(calls)], repeats) / calls / operations


_NUMPY_FORMS = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "truediv": "{0} / {1}",
                "floordiv": "{0} // {1}", "mod": "{0} % {1}", "pow": "np.power({0}, {1})", "neg": "-{0}",
                "abs": "np.abs({0})", "ceil": "np.ceil({0})", "floor": "np.floor({0})", "trunc": "np.trunc({0})",
                "sqrt": "np.sqrt({0})", "max": "np.maximum({0}, {1})", "min": "np.minimum({0}, {1})",
                "equal": "{0} == {1}", "at_least": "{0} >= {1}", "greater": "{0} > {1}",
                "select": "np.where({0}, {1}, {2})"}


def tape_as_numpy(tape, outputs) -> tuple:
    """The operations a traced scenario's numbers take (``tape``: those ``outputs`` and the decisions
    need, before folding), each as one element-wise numpy call over arrays of scenarios: the same
    arithmetic, vectorized with nothing else (no graphs, no kernel tables, no Python per op but the
    call). Returns (function of the three input arrays, numpy calls it makes). A conversion to float
    costs nothing on float64 arrays and is not a call; argmax/argmin stack their operands and reduce
    along the short axis; a pick is ``np.choose``. Each array is dropped after its last read."""
    needed = sorted(tape.needed(outputs))
    last_read: dict[int, int] = {}
    for index in needed:
        for kind, value in tape.nodes[index][1]:
            if kind == "node":
                last_read[value] = index
    kept = {item.index for item in outputs if hasattr(item, "index")}
    dropped: dict[int, list[int]] = {}
    for node, at in last_read.items():
        if node not in kept:
            dropped.setdefault(at, []).append(node)
    lines, calls = ["def run(x0, x1, x2):"], 0
    for index in needed:
        operation, operands = tape.nodes[index]
        texts = [f"x{value}" if kind == "input" else f"v{value}" if kind == "node" else repr(value)
                 for kind, value in operands]
        if operation in ("input", "float"):
            expression = texts[0]
        elif operation in ("argmax", "argmin"):
            expression = f"np.{operation}(np.stack(np.broadcast_arrays({', '.join(texts)})), axis=0)"
            calls += 1
        elif operation == "pick":
            expression = f"np.choose({texts[0]}, [{', '.join(texts[1:])}])"
            calls += 1
        else:
            expression = _NUMPY_FORMS[operation].format(*texts)
            calls += 1
        lines.append(f"    v{index} = {expression}")
        lines += [f"    del v{node}" for node in dropped.get(index, ())]
    lines.append("    return None")
    namespace: dict = {"np": np, "inf": np.inf, "nan": np.nan}  # (the repr of infinite constants)
    exec(compile("\n".join(lines), "<tape-as-numpy>", "exec"), namespace)  # noqa: S102 - our own text
    return namespace["run"], calls


def same_arithmetic(architecture, hardware, size: int, repeats: int) -> dict:
    """CPU seconds of one scenario's traced operations run by numpy over arrays of ``size`` scenarios
    (``tape_as_numpy``, random batch, prompt and output lengths as ``_scenarios``): the machine's numpy
    throughput for the same arithmetic, and the scenarios/s it allows."""
    from perfmodel.llm.metrics import prediction_numbers
    from perfmodel.tracing import Tape, _rebuilder

    execution = resolve_mode(hardware, None)
    numbers = prediction_numbers(architecture, hardware, Scenario(batch=8, prompt_tokens=1000, generated_tokens=128),
                                 Parallelism(), execution)
    tape = Tape()
    leaves: list = []
    _rebuilder(numbers(*(tape.input(value) for value in (8, 1000, 128))), leaves)
    run, calls = tape_as_numpy(tape, leaves)
    drawn = _scenarios(size, seed=5)
    inputs = (drawn.batch, drawn.prompt_tokens, drawn.generated_tokens)
    with np.errstate(all="ignore"):  # a draw some branch does not apply to may divide by zero: timed all the same
        run(*inputs)
        seconds = _median_s(lambda: run(*inputs), repeats)
    return {"size": size, "numpy_calls_per_scenario": calls, "seconds": seconds,
            "element_ops_per_s": calls * size / seconds, "scenarios_per_s": size / seconds}


def bound_account(architecture, hardware, rate: float, rows: list[dict], repeats: int) -> dict:
    """What bounds the two paths, counted rather than inferred from times: the operations one scenario's
    numbers take (the compiled replay's tape: every operation that depends on the scenario's batch,
    prompt or output length, all else folded to constants), the replay's time per operation against
    straight-line Python float arithmetic, and the array path's ceiling at numpy's element rate (each of
    those operations is at least one element-wise numpy operation a scenario on the array path)."""
    from perfmodel.llm.metrics import prediction_numbers
    from perfmodel.tracing import trace

    execution = resolve_mode(hardware, None)
    values = (8, 1000, 128)
    traced = Scenario(batch=values[0], prompt_tokens=values[1], generated_tokens=values[2])
    replay = trace(prediction_numbers(architecture, hardware, traced, Parallelism(), execution), values)
    operations = replay.traced_operations  # what the array path computes (the replay folds some: computed)
    prompts = range(1000, 1500)
    assert all(replay.function(8, prompt, 128) is not None for prompt in prompts)  # no decision differs: full runs
    for prompt in range(64, 128):  # llm_predict's own replay compiled
        llm_predict(architecture, hardware, Scenario(batch=8, prompt_tokens=prompt, generated_tokens=128))
    # The replay alone and the whole llm_predict call over the same scenarios, timed in turn (the
    # machine's load moves both alike), so the split below is of times taken side by side.
    replay_times, one_times = [], []
    for _ in range(max(repeats, 5)):
        replay_times.append(_median_s(lambda: [replay.function(8, prompt, 128) for prompt in prompts], 1))
        one_times.append(_median_s(lambda: [llm_predict(architecture, hardware, Scenario(
            batch=8, prompt_tokens=prompt, generated_tokens=128)) for prompt in prompts], 1))
    replay_s, one_s = statistics.median(replay_times) / len(prompts), statistics.median(one_times) / len(prompts)
    per_operation = python_operation_s(replay.computed, repeats)
    big = max((row for row in rows if row["benchmark"].startswith("llm_predict over arrays")),
              key=lambda row: row["scenarios"])
    return {"operations_per_scenario": operations, "replay_operations": replay.computed,
            "replay_decisions": replay.decisions,
            "replay_function_s": replay_s, "replay_ns_per_operation": replay_s / replay.computed * 1e9,
            "python_float_operation_ns": per_operation * 1e9,
            "straight_line_floor_s": replay.computed * per_operation,
            "one_scenario_s": one_s, "one_scenario_outside_replay_s": one_s - replay_s,
            "numpy_element_ops_per_s": rate, "array_ceiling_scenarios_per_s": rate / operations,
            "array_scenarios_per_s": big["scenarios_per_s"],
            "array_share_of_ceiling": big["scenarios_per_s"] * operations / rate}


def llm_rows(counts: tuple[int, ...], repeats: int) -> tuple[list[dict], dict]:
    architecture, hardware = load_architecture(MODEL), load_for_prediction(SPEC)
    rows = []
    for count in counts:
        scenario = _scenarios(count)
        seconds = _median_s(lambda s=scenario: llm_predict(architecture, hardware, s, Parallelism()),
                            repeats if count <= 100_000 else 1)
        rows.append({"benchmark": f"llm_predict over arrays, {count:,} scenarios", "scenarios": count,
                     "seconds": seconds, "scenarios_per_s": count / seconds})
    # Prompts of 64 to 3,967 tokens in turn (with 128 generated, within Llama-2's 4,096 positions): no two
    # calls in a row alike (replays are compiled per model and device, never per scenario: nothing is cached).
    prompts = itertools.cycle(range(64, 3968))
    for _ in range(50):  # warm up: the replay is compiled after a few evaluated calls
        llm_predict(architecture, hardware, Scenario(batch=8, prompt_tokens=next(prompts), generated_tokens=128))
    calls = 2000
    seconds = _median_s(lambda: [llm_predict(architecture, hardware, Scenario(
        batch=8, prompt_tokens=next(prompts), generated_tokens=128)) for _ in range(calls)], repeats) / calls
    rows.append({"benchmark": "llm_predict, one scenario (compiled replay)", "scenarios": 1, "seconds": seconds,
                 "scenarios_per_s": 1 / seconds})
    execution = resolve_mode(hardware, None)
    calls = 50
    seconds = _median_s(lambda: [llm_predict(architecture, hardware, Scenario(
        batch=np.asarray([8]), prompt_tokens=np.asarray([next(prompts)]), generated_tokens=np.asarray([128])))
        for _ in range(calls)], repeats) / calls
    rows.append({"benchmark": "llm_predict, one scenario as an array of one", "scenarios": 1, "seconds": seconds,
                 "scenarios_per_s": 1 / seconds})
    seconds = _median_s(lambda: [_predict_one(architecture, hardware, Scenario(
        batch=8, prompt_tokens=next(prompts), generated_tokens=128), Parallelism(), execution, stage_graph)
        for _ in range(calls)], repeats) / calls
    rows.append({"benchmark": "one scenario, evaluated (_predict_one)", "scenarios": 1, "seconds": seconds,
                 "scenarios_per_s": 1 / seconds})
    profile = cProfile.Profile()
    scenario = _scenarios(100_000, seed=2)
    profile.enable()
    llm_predict(architecture, hardware, scenario, Parallelism())
    profile.disable()
    stats = pstats.Stats(profile)
    total = sum(entry[2] for entry in stats.stats.values())  # type: ignore[attr-defined]
    top = sorted(((entry[2], f"{Path(key[0]).name}:{key[1]}({key[2]})") for key, entry in
                  stats.stats.items()), reverse=True)[:12]  # type: ignore[attr-defined]
    numpy_share = sum(entry[2] for key, entry in stats.stats.items()  # type: ignore[attr-defined]
                      if key[0] == "~" or "numpy" in key[0]) / total
    profile_summary = {"scenarios": 100_000, "profiled_s": total, "share_in_numpy_and_builtins": numpy_share,
                       "top_tottime": [{"function": name, "seconds": seconds} for seconds, name in top]}
    return rows, profile_summary


def sweep_rows(points: int, chunk_points: int) -> list[dict]:
    side = round(points ** (1 / 3))
    axes = {"batch": np.arange(1, side + 1), "seq": np.arange(1, side + 1), "kv_len": np.arange(1, side + 1) * 16}
    plan = sweep_plan(transformer_block, load_for_prediction("h100-sxm"), scenario=axes, chunk_points=chunk_points)
    rows, reference = [], None
    for label, workers in (("in this process", None), ("LocalCluster, 1 worker", 1), ("LocalCluster, 2 workers", 2)):
        with mapper(workers=workers) as where:
            start = time.perf_counter()
            result = concatenate(list(sweep_chunks(plan, where)))
            seconds = time.perf_counter() - start
        if reference is None:
            reference = result
        identical = all(np.array_equal(result.to_columns()[name], values)
                        for name, values in reference.to_columns().items())
        rows.append({"benchmark": f"sweep of {plan.size:,} points, {label}", "scenarios": plan.size, "seconds": seconds,
                     "scenarios_per_s": plan.size / seconds, "identical_to_local": identical})
    return rows


def _tree_rows(tree: Path, counts: tuple[int, ...], repeats: int) -> dict:
    """Rows 1 and 2 for the perfmodel package under ``tree``, in a process of its own."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "rows.json"
        subprocess.run([sys.executable, __file__, "--llm-rows-only", str(out), "--repeats", str(repeats),
                        "--counts", ",".join(map(str, counts))],
                       env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
        return json.loads(out.read_text())


def _llm_part(counts: tuple[int, ...], repeats: int) -> dict:
    rate = numpy_rate()
    rows, profile = llm_rows(counts, repeats)
    for row in rows:
        row["element_op_equivalents"] = row["seconds"] / row["scenarios"] * rate
    import perfmodel  # which tree's package ran (PYTHONPATH of ``_tree_rows``)

    return {"rows": rows, "profile": profile, "numpy_rate": rate, "perfmodel_path": str(Path(perfmodel.__file__).parent)}


def bound_only(args, count: int) -> int:
    """``--bound``: how far the array path is from numpy's throughput for the same arithmetic, alone
    (a minute or two): numpy's element rate on arrays of a block and of 10^6, one scenario's traced
    operations as numpy calls over arrays of a block and of 10^6 scenarios (``same_arithmetic``), and
    ``llm_predict`` over ``count`` array scenarios, the same draws; CPU seconds, medians of ``--repeats``."""
    from perfmodel.llm.metrics import CHUNK_POINTS

    architecture, hardware = load_architecture(MODEL), load_for_prediction(SPEC)
    load_before = os.getloadavg()
    rates = {size: numpy_rate(size) for size in (CHUNK_POINTS, 1_000_000)}
    same = [same_arithmetic(architecture, hardware, size, args.repeats) for size in (CHUNK_POINTS, 1_000_000)]
    scenario = _scenarios(count)
    llm_predict(architecture, hardware, _scenarios(1_000, seed=9), Parallelism())  # first-call work, untimed
    seconds = _median_s(lambda: llm_predict(architecture, hardware, scenario, Parallelism()),
                        args.repeats if count <= 100_000 else 1)
    array_rate = count / seconds
    best = max(same, key=lambda row: row["scenarios_per_s"])
    calls = best["numpy_calls_per_scenario"]
    print(f"llm_predict over {count:,} array scenarios ({MODEL} on {SPEC}): {array_rate:,.0f} scenarios/s "
          f"({seconds:.2f} s CPU); load average {load_before[0]:.1f} ({os.cpu_count()} CPUs)")
    for size, rate in rates.items():
        print(f"  numpy x * y + z, maximum on arrays of {size:,}: {rate:.3g} element ops/s: the array path's time is "
              f"{rate / array_rate:,.0f} element ops a scenario; 10^6 scenarios/s leaves {rate / 1e6:,.0f}")
    print(f"  the same arithmetic: one scenario's {calls:,} traced operations (the replay's tape before folding), "
          "each one numpy call over arrays of scenarios, nothing else:")
    for row in same:
        print(f"    arrays of {row['size']:,}: {row['seconds'] * 1e3:,.1f} ms, {row['element_ops_per_s']:.3g} element "
              f"ops/s: {row['scenarios_per_s']:,.0f} scenarios/s; the array path reaches "
              f"{100 * array_rate / row['scenarios_per_s']:.0f}% of it")
    print(f"  10^6 scenarios/s at the best of those rates ({best['element_ops_per_s']:.3g} element ops/s) needs at most "
          f"{best['element_ops_per_s'] / 1e6:,.0f} numpy element operations a scenario; the arithmetic is {calls:,}")
    data = {"meta": {"perfmodel": __version__, "python": platform.python_version(), "numpy": np.__version__,
                     "machine": platform.machine(), "cpus": os.cpu_count(), "load_average_before": load_before,
                     "load_average_after": os.getloadavg(), "model": MODEL, "spec": SPEC, "repeats": args.repeats},
            "array_path": {"scenarios": count, "seconds": seconds, "scenarios_per_s": array_rate},
            "numpy_element_ops_per_s": {str(size): rate for size, rate in rates.items()}, "same_arithmetic": same}
    write_text_atomically(args.json, json.dumps(data, indent=2) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/scale.json"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweep-points", type=int, help="points of the sweep rows (default 10^6; 10^5 with --quick)")
    parser.add_argument("--baseline", metavar="REV", help="also rows 1-2 for perfmodel at git revision REV (ratios)")
    parser.add_argument("--llm-rows-only", type=Path, help=argparse.SUPPRESS)  # a tree's rows 1-2, as JSON
    parser.add_argument("--counts", help=argparse.SUPPRESS)
    parser.add_argument("--bound", action="store_true", help="only how far the array path is from numpy's "
                        "throughput for the same arithmetic (writes --json, default benchmarks/results/scale_bound.json)")
    args = parser.parse_args(argv)
    big = 100_000 if args.quick else 1_000_000
    if args.bound:
        if args.json == parser.get_default("json"):
            args.json = Path("benchmarks/results/scale_bound.json")
        return bound_only(args, big)
    counts = tuple(int(count) for count in args.counts.split(",")) if args.counts else (1_000, big)
    if args.llm_rows_only:
        write_text_atomically(args.llm_rows_only, json.dumps(_llm_part(counts, args.repeats)))
        return 0
    sweep_points = args.sweep_points or (100_000 if args.quick else 1_000_000)
    baseline = None
    if args.baseline:
        with tempfile.TemporaryDirectory() as tree:
            archive = subprocess.run(["git", "archive", args.baseline, "perfmodel", *DATA], check=True,
                                     capture_output=True, cwd=Path(__file__).resolve().parents[1]).stdout
            subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
            baseline = _tree_rows(Path(tree), counts, args.repeats)
        current = _tree_rows(Path(__file__).resolve().parents[1], counts, args.repeats)
    else:
        current = _llm_part(counts, args.repeats)
    rows, profile, rate = current["rows"], current["profile"], current["numpy_rate"]
    if baseline is not None:
        for row, before in zip(rows, baseline["rows"], strict=False):
            if row["benchmark"] == before["benchmark"]:
                row["baseline_seconds"] = before["seconds"]
                row["speedup"] = before["seconds"] / row["seconds"]
    from perfmodel.llm.metrics import CHUNK_POINTS

    bound = {"numpy_element_ops_per_s": rate, "element_ops_per_scenario_for_1e6_per_s": rate / 1e6,
             **bound_account(load_architecture(MODEL), load_for_prediction(SPEC), rate, rows, args.repeats),
             "block_points": CHUNK_POINTS, "numpy_element_ops_per_s_at_block": numpy_rate(CHUNK_POINTS)}
    bound["array_ceiling_at_block_scenarios_per_s"] = (bound["numpy_element_ops_per_s_at_block"]
                                                       / bound["operations_per_scenario"])
    bound["array_share_of_block_ceiling"] = (bound["array_scenarios_per_s"]
                                             / bound["array_ceiling_at_block_scenarios_per_s"])
    rows += sweep_rows(sweep_points, max(sweep_points // 10, 1))
    print(f"{'benchmark':<58} {'time':>12} {'scenarios/s':>14} {'numpy element ops/scenario':>27} {'speed-up':>9}")
    for row in rows:
        ops = f"{row['element_op_equivalents']:,.0f}" if "element_op_equivalents" in row else "-"
        ratio = f"{row['speedup']:.2f}x" if "speedup" in row else "-"
        print(f"{row['benchmark']:<58} {row['seconds'] * 1e3:>9.3f} ms {row['scenarios_per_s']:>14,.0f} {ops:>27} "
              f"{ratio:>9}")
    if baseline is not None:
        print(f"speed-up: perfmodel at {args.baseline}'s time / this tree's, each measured in its own process in "
              "this run")
    print(f"\nnumpy float64 element-wise on 10^6 arrays: {rate:.3g} element ops/s here: 10^6 scenarios/s leaves "
          f"{rate / 1e6:,.0f} element ops a scenario")
    print(f"What bounds them, counted: one scenario's numbers are {bound['operations_per_scenario']:,} operations on "
          f"its batch, prompt and output length (the compiled replay's tape, {bound['replay_decisions']} decisions "
          "checked).\n"
          f"  one scenario: the replay runs them ({bound['replay_operations']:,} once products by constants are "
          f"folded) in {bound['replay_function_s'] * 1e6:.1f} us "
          f"({bound['replay_ns_per_operation']:.1f} ns each; straight-line Python float arithmetic on reused "
          "variables here: "
          f"{bound['python_float_operation_ns']:.1f} ns, a floor of {bound['straight_line_floor_s'] * 1e6:.1f} us); "
          f"the rest of llm_predict (checks, the replay cache, the result record) "
          f"{bound['one_scenario_outside_replay_s'] * 1e6:.1f} us, {bound['one_scenario_s'] * 1e6:.1f} us in all\n"
          f"  arrays: at numpy's {rate:.3g} element ops/s, {bound['operations_per_scenario']:,} operations a "
          f"scenario cap the array path at {bound['array_ceiling_scenarios_per_s']:,.0f} scenarios/s; it reached "
          f"{bound['array_scenarios_per_s']:,.0f} ({100 * bound['array_share_of_ceiling']:.0f}% of that; above 100%: "
          "work shared between scenarios, such as one kernel choice per distinct decode batch); on arrays of "
          f"{bound['block_points']:,} (the blocks it evaluates) numpy does {bound['numpy_element_ops_per_s_at_block']:.3g} "
          f"element ops/s: a ceiling of {bound['array_ceiling_at_block_scenarios_per_s']:,.0f} scenarios/s, "
          f"{100 * bound['array_share_of_block_ceiling']:.0f}% of it reached (the rest: Python's cost per numpy call "
          "on a block, and operations dearer than a multiply: ceil, where, argmax along an axis, conversions)")
    print(f"cProfile of 10^5 scenarios: {100 * profile['share_in_numpy_and_builtins']:.0f}% of the time in numpy and "
          "built-in functions; top by own time:")
    for entry in profile["top_tottime"][:8]:
        print(f"  {entry['seconds']:8.3f} s  {entry['function']}")
    meta = {"perfmodel": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
            "model": MODEL, "spec": SPEC}
    meta["perfmodel_path"] = current.get("perfmodel_path")
    if baseline is not None:
        meta.update(baseline=args.baseline, baseline_perfmodel_path=baseline["perfmodel_path"])
    write_text_atomically(args.json, json.dumps({"meta": meta, "rows": rows, "bound": bound, "profile": profile,
                                                 "baseline_profile": baseline and baseline["profile"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
