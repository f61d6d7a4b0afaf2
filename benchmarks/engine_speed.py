"""Speed of the evaluation engine (a benchmark, not a test).

Run:  python benchmarks/engine_speed.py [--json benchmarks/results/engine_speed.json] [--baseline REF]

Measures, on one core, the median of several repetitions of:
1. a 1,000-op graph evaluated from scratch (cost rules + evaluation; a newly built graph each time,
   building not timed): op-evaluations per second, both as the per-op arrays (``evaluate_arrays``) and
   with the per-op report (``evaluate``);
2. the same graph re-evaluated over 1,000 spec variants at once (vectorized): op-evaluations per second;
3. one 80-layer transformer decode step (Llama-2-70B shapes; layers as op counts, and unrolled);
4. a sweep of 10^6 scenario points (batch x context) of a transformer layer;
5. one LLM scenario through ``llm_predict`` (Llama-2-70B on 8 H100s, condensed graphs), over distinct
   scenarios so that no result is reused from one call to the next, after ``WARM_CALLS`` calls of that
   model/device/layout (so the call replays a compiled trace, ``perfmodel.tracing``); the same with
   replays turned off (the evaluation),
   and what compiling one replay costs; 1,000 distinct scenarios at once (``llm_predict`` over arrays
   of batch, prompt and generated tokens), and as 1,000 calls of one scenario each (replays, their
   compilation and the calls no replay holds for included);
6. the cold start of ``perfmodel llm --condensed`` (CPU seconds of a fresh process), beside the CPU
   seconds of ``python -c "import numpy"``, the floor any numpy program pays on this machine.

``--baseline REF`` also runs every measurement on the project as it was at git commit ``REF`` (exported
to a temporary directory and imported from there, in a subprocess, in the same run) and prints the
speed-up of each row: on a shared machine only ratios measured together mean anything.
"""

from __future__ import annotations

import argparse
import functools
import gc
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from perfmodel import __version__
from perfmodel.hardware.loader import load_hardware
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import Parallelism, Scenario
from perfmodel.llm.metrics import llm_predict
from perfmodel.roofline import evaluate, evaluate_arrays
from perfmodel.roofline.sweep import hardware_with, sweep
from perfmodel.workload.builders import linear, transformer_block
from perfmodel.workload.ir import Graph, Op, TensorSpec
from perfmodel.yaml_source import write_text_atomically

LLAMA70B = {"hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672}
WARM_CALLS = 40  # calls before timing one scenario: more than ``tracing.Replays``' trace_after


def _median_s(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _median_fresh_s(build, evaluate, repeats: int) -> float:
    """Median seconds of ``evaluate(graph)``, each time on a newly built ``graph`` (not timed): nothing
    an evaluation keeps on the graph's objects (a tensor's size) helps the next one."""
    times = []
    for _ in range(repeats):
        graph = build()
        start = time.perf_counter()
        evaluate(graph)
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
    seconds = _median_fresh_s(thousand_op_graph, lambda fresh: evaluate_arrays(fresh, h100), 7)
    rows.append({"benchmark": "1,000-op graph, from scratch (arrays)", "seconds": seconds,
                 "op_evaluations_per_s": len(graph.ops) / seconds, "operations": len(graph.ops)})
    seconds = _median_fresh_s(thousand_op_graph, lambda fresh: evaluate(fresh, h100), 7)
    rows.append({"benchmark": "1,000-op graph, from scratch", "seconds": seconds,
                 "op_evaluations_per_s": len(graph.ops) / seconds, "operations": len(graph.ops)})
    variants = hardware_with(h100, {"memory.hbm.bandwidth": np.linspace(1e12, 8e12, 1000)})
    seconds = _median_s(lambda: evaluate_arrays(graph, variants), 5)
    rows.append({"benchmark": "1,000-op graph x 1,000 spec variants (vectorized)", "seconds": seconds,
                 "op_evaluations_per_s": len(graph.ops) * 1000 / seconds,
                 "operations": len(graph.ops) * 1000})
    decode = transformer_block(batch=1, seq=1, kv_len=4096, layers=80, **LLAMA70B)
    seconds = _median_s(lambda: evaluate(decode, h100), 20)
    rows.append({"benchmark": "80-layer decode step (layers as counts)", "seconds": seconds,
                 "op_evaluations_per_s": len(decode.ops) * 80 / seconds,
                 "operations": len(decode.ops) * 80})
    unrolled = unrolled_decode()
    seconds = _median_fresh_s(unrolled_decode, lambda fresh: evaluate(fresh, h100), 7)
    rows.append({"benchmark": "80-layer decode step (1,120 ops unrolled)", "seconds": seconds,
                 "op_evaluations_per_s": len(unrolled.ops) / seconds,
                 "operations": len(unrolled.ops)})
    batches, contexts = np.arange(1, 1001), np.arange(128, 128 * 1001, 128)

    def layer_sweep():
        return sweep(lambda batch, kv_len: transformer_block(batch=batch, seq=1, kv_len=kv_len, **LLAMA70B), h100,
                     scenario={"batch": batches, "kv_len": contexts})

    seconds = _median_s(layer_sweep, 3)
    rows.append({"benchmark": "10^6-point sweep of a transformer layer", "seconds": seconds,
                 "op_evaluations_per_s": 14 * 1e6 / seconds, "points_per_s": 1e6 / seconds,
                 "operations": 14 * 1e6})
    rows.append(_llm_scenario_row())
    rows += _llm_replay_rows()
    rows.append(_llm_scenarios_row())
    rows.append(_llm_one_by_one_row())
    rows += _cold_start_rows()
    return rows


def _llm_scenario_row() -> dict:
    architecture, h100 = load_architecture("llama-2-70b"), load_hardware("h100-sxm")
    prompts = iter(range(1000, 100000))  # a new scenario every call: nothing can be reused

    def one() -> None:
        llm_predict(architecture, h100, Scenario(batch=8, prompt_tokens=next(prompts), generated_tokens=128),
                    Parallelism(tp=8))

    for _ in range(WARM_CALLS):  # the model, device and layout in use (versions that compile one do it here)
        one()
    seconds = _median_s(one, 40)
    graph_ops = 2 * 17  # a prefill and a decode stage graph (~17 ops each) per scenario
    return {"benchmark": "one llm_predict scenario (70B, 8xH100)", "seconds": seconds,
            "op_evaluations_per_s": graph_ops / seconds, "operations": graph_ops}


def _llm_replay_rows() -> list[dict]:
    """What the replay of row 5 costs and saves (versions with ``perfmodel.tracing`` only): one scenario
    with replays turned off (the evaluation itself), and compiling one replay (a call that traces
    ``_point_numbers`` and compiles it, which ``llm_predict`` does after ``trace_after`` evaluated calls
    of one model/device/layout), with the replay's size: operations on its tape, decisions it checks,
    and the memory it keeps (tracemalloc)."""
    try:
        from perfmodel.llm import metrics
        from perfmodel.tracing import Replays, trace
    except ImportError:
        return []
    architecture, h100 = load_architecture("llama-2-70b"), load_hardware("h100-sxm")
    prompts = iter(range(1000, 100000))

    def one() -> None:
        llm_predict(architecture, h100, Scenario(batch=8, prompt_tokens=next(prompts), generated_tokens=128),
                    Parallelism(tp=8))

    kept = metrics._REPLAYS
    try:
        metrics._REPLAYS = Replays(variants=0)
        evaluated = _median_s(one, 40)
        compiles = []
        for _ in range(5):
            metrics._REPLAYS = Replays(trace_after=1)  # the first call traces
            compiles.append(_median_s(one, 1))
    finally:
        metrics._REPLAYS = kept
    scenario = Scenario(batch=8, prompt_tokens=1000, generated_tokens=128)
    numbers = metrics.prediction_numbers(architecture, h100, scenario, Parallelism(tp=8), "dynamic")
    gc.collect()
    tracemalloc.start()
    replay = trace(numbers, (8, 1000, 128))
    gc.collect()
    kept_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    graph_ops = 2 * 17
    return [{"benchmark": "one llm_predict scenario, replays off (evaluated)", "seconds": evaluated,
             "op_evaluations_per_s": graph_ops / evaluated, "operations": graph_ops},
            {"benchmark": "compiling one replay (trace + compile, once)", "seconds": statistics.median(compiles),
             "op_evaluations_per_s": float("nan"), "replay_operations": replay.nodes,
             "replay_decisions": replay.decisions, "replay_kept_bytes": kept_bytes}]


def _llm_one_by_one_row(count: int = 1000) -> dict:
    """``count`` distinct scenarios as ``count`` calls of one scenario each (what a loop over scenarios
    pays, replays, their compilation and the calls no replay holds for included)."""
    architecture, h100 = load_architecture("llama-2-70b"), load_hardware("h100-sxm")
    rng = np.random.default_rng(1)
    batch, prompt, gen = rng.integers(1, 129, count), rng.integers(64, 2049, count), rng.integers(16, 1025, count)

    def one_by_one() -> None:
        for values in zip(batch.tolist(), prompt.tolist(), gen.tolist(), strict=True):
            llm_predict(architecture, h100, Scenario(batch=values[0], prompt_tokens=values[1],
                                                     generated_tokens=values[2]), Parallelism(tp=8))

    seconds = _median_s(one_by_one, 1)
    graph_ops = 2 * 17 * count
    return {"benchmark": f"{count:,} scenarios, one llm_predict call each", "seconds": seconds,
            "op_evaluations_per_s": graph_ops / seconds, "operations": graph_ops, "scenarios_per_s": count / seconds}


def _llm_scenarios_row(count: int = 1000) -> dict:
    """``count`` distinct scenarios (batch x prompt x generated tokens) of one model: one ``llm_predict``
    call over arrays where the version accepts them, else one call per scenario (the only way older
    versions can answer; the baseline column then shows what the arrays save)."""
    architecture, h100 = load_architecture("llama-2-70b"), load_hardware("h100-sxm")
    rng = np.random.default_rng(0)
    batch, prompt, gen = rng.integers(1, 129, count), rng.integers(64, 2049, count), rng.integers(16, 1025, count)

    def arrays() -> None:
        llm_predict(architecture, h100, Scenario(batch=batch, prompt_tokens=prompt, generated_tokens=gen),
                    Parallelism(tp=8))

    def one_by_one() -> None:
        for values in zip(batch.tolist(), prompt.tolist(), gen.tolist(), strict=True):
            llm_predict(architecture, h100, Scenario(batch=values[0], prompt_tokens=values[1],
                                                     generated_tokens=values[2]), Parallelism(tp=8))

    try:
        arrays()
        function = arrays
    except Exception:  # noqa: BLE001 - a version without array scenarios (TypeError, ValueError, ...)
        function = one_by_one
    seconds = _median_s(function, 3)
    graph_ops = 2 * 17 * count
    return {"benchmark": f"{count:,} llm_predict scenarios (70B, 8xH100)", "seconds": seconds,
            "op_evaluations_per_s": graph_ops / seconds, "operations": graph_ops,
            "scenarios_per_s": count / seconds, "how": function.__name__}


def _child_cpu_s(command: list[str], repeats: int = 5) -> float:
    """Median CPU seconds (user + system) of a fresh process running ``command``, with its byte code
    cached as an installed package has it (a first run compiles it into a temporary cache, even where
    PYTHONDONTWRITEBYTECODE is set: without a cache every run would time Python's compiler)."""
    times = []
    with tempfile.TemporaryDirectory() as cache:
        environment = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        environment["PYTHONPYCACHEPREFIX"] = cache
        # Run outside the project directory: ``python -m`` puts the working directory first on the path,
        # which would shadow the version under test (a baseline's export on PYTHONPATH).
        run = functools.partial(subprocess.run, command, check=True, capture_output=True, cwd=tempfile.gettempdir(),
                                env=environment)
        run()  # compile the byte code first
        for _ in range(repeats):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            run()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times)


def _cold_start_rows() -> list[dict]:
    llm = [sys.executable, "-m", "perfmodel", "llm", "--model", "llama-2-7b", "--on", "h100-sxm", "--batch", "1",
           "--prompt", "128", "--gen", "128", "--condensed"]
    return [{"benchmark": "cold start: perfmodel llm --condensed (CPU)", "seconds": _child_cpu_s(llm),
             "op_evaluations_per_s": float("nan")},
            {"benchmark": "cold start floor: python -c 'import numpy' (CPU)",
             "seconds": _child_cpu_s([sys.executable, "-c", "import numpy"]), "op_evaluations_per_s": float("nan")}]


def _baseline_rows(reference: str) -> list[dict]:
    """This benchmark's rows on the project at commit ``reference`` (imported from an exported copy)."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as directory:
        archive = subprocess.run(["git", "-C", str(root), "archive", reference], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(directory, filter="data")
        output = Path(directory) / "rows.json"
        environment = {**os.environ, "PYTHONPATH": directory}
        subprocess.run([sys.executable, __file__, "--rows-only", str(output)], check=True, env=environment)
        return json.loads(output.read_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/engine_speed.json"))
    parser.add_argument("--baseline", metavar="REF", help="also measure the project at this git commit and print "
                                                         "the speed-up of each row (same run)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the two versions, alternated (with --baseline)")
    parser.add_argument("--rows-only", type=Path, help=argparse.SUPPRESS)  # the baseline's subprocess
    args = parser.parse_args(argv)
    if args.rows_only:
        args.rows_only.write_text(json.dumps(run()))
        return 0
    rows = run()
    baseline: dict[str, dict] = {}
    if args.baseline:  # alternate the two versions, keeping each row's fastest round: load drifts on a shared machine
        for round_number in range(args.rounds):
            for row in _baseline_rows(args.baseline):
                kept = baseline.setdefault(row["benchmark"], row)
                kept["seconds"] = min(kept["seconds"], row["seconds"])
            if round_number < args.rounds - 1:
                for row, again in zip(rows, run(), strict=True):
                    row["seconds"] = min(row["seconds"], again["seconds"])
        for row in rows:  # rates from the kept times
            if row.get("operations"):
                row["op_evaluations_per_s"] = row["operations"] / row["seconds"]
    print(f"{'benchmark':<52} {'time':>12} {'op-evals/s':>14}" + (f" {'baseline':>12} {'speed-up':>9}" if baseline else ""))
    for row in rows:
        line = f"{row['benchmark']:<52} {row['seconds'] * 1e3:>9.2f} ms {row['op_evaluations_per_s']:>14.3g}"
        if row["benchmark"] in baseline:
            old = baseline[row["benchmark"]]["seconds"]
            row["baseline_seconds"], row["speedup"] = old, old / row["seconds"]
            line += f" {old * 1e3:>9.2f} ms {row['speedup']:>8.1f}x"
        print(line)
        if "replay_operations" in row:
            print(f"{'':<4}the replay: {row['replay_operations']:,} operations, {row['replay_decisions']} decisions, "
                  f"{row['replay_kept_bytes'] / 1e6:.2f} MB kept")
    meta = {"perfmodel": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count(), "baseline": args.baseline}
    write_text_atomically(args.json, json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
