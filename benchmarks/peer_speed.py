"""Speed of one LLM scenario in perfmodel beside its peers, in the same run (a benchmark, not a test).

Run:  python benchmarks/peer_speed.py [--peer-python PYTHON] [--llm-viewer DIR] [--json PATH]

The scenario: Llama-2-7B on one H100 SXM, batch 8, a prompt of ``p`` tokens, 128 generated tokens, a
new ``p`` for every call so that no tool can reuse a result. Measured, as the median seconds per
scenario:

* perfmodel ``llm_predict`` called once per scenario (once the model and device are in use, when each call
  replays a compiled trace; and the mean of the first calls, which are evaluated and compile the
  trace), and over an array of 1,000 scenarios (one call);
* llm-analysis (``pip install llm-analysis``; Cheng Li, https://github.com/cli99/llm-analysis):
  ``llm_analysis.analysis.infer`` with its bundled Llama-2-7B config, in ``--peer-python`` (default:
  this interpreter) when it imports there;
* LLM-Viewer (https://github.com/hahnyuan/LLM-Viewer, not on PyPI: pass a checkout with
  ``--llm-viewer``; needs ``transformers``): ``ModelAnalyzer.analyze`` (one prefill and one decode
  step), with the project's shipped Llama-2-7B config written to a temporary directory so that
  nothing is downloaded.

Peers run in a subprocess of their interpreter; each reports its own per-call median, so process start
and imports are not counted for anyone. A peer that is not installed is listed as skipped. The tools
answer different questions (llm-analysis: prefill + all decode steps; LLM-Viewer: one prefill and one
decode step; perfmodel: both, the decode averaged over the generation), so their times per scenario,
not their predictions, are what is compared; the predicted TPOT is printed beside them for reference.
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
from typing import Any

import numpy as np

from perfmodel import __version__
from perfmodel.hardware.loader import load_hardware
from perfmodel.llm.catalog import load_architecture, load_config
from perfmodel.llm.graphs import Scenario
from perfmodel.llm.metrics import llm_predict
from perfmodel.yaml_source import write_text_atomically

BATCH, GEN, CALLS = 8, 128, 40
PROMPTS = list(range(600, 600 + CALLS))  # distinct prompts: nothing can be reused between calls

LLM_ANALYSIS = """
import json, statistics, sys, time
from llm_analysis.analysis import infer
prompts, batch, gen = json.loads(sys.argv[1])
def one(prompt):
    return infer(model_name="NousResearch_Llama-2-7b-hf", gpu_name="h100-sxm-80gb", dtype_name="w16a16e16",
                 log_level="ERROR", batch_size_per_gpu=batch, tp_size=1, seq_len=prompt, num_tokens_to_generate=gen)
one(prompts[0] - 1)
times, tpot = [], None
for prompt in prompts:
    start = time.perf_counter(); result = one(prompt); times.append(time.perf_counter() - start)
    tpot = result["decode_latency"]
print(json.dumps({"seconds": statistics.median(times), "tpot_s": tpot}))
"""

LLM_VIEWER = """
import contextlib, io, json, statistics, sys, time
sys.path.insert(0, ".")
from model_analyzer import ModelAnalyzer
config_dir, prompts, batch = json.loads(sys.argv[1])
with contextlib.redirect_stdout(io.StringIO()):
    analyzer = ModelAnalyzer(config_dir, "nvidia_H100_SXM", config_file="configs/Llama.py")
    analyzer.analyze(prompts[0] - 1, batch)
times, tpot = [], None
for prompt in prompts:
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter(); result = analyzer.analyze(prompt, batch); times.append(time.perf_counter() - start)
    tpot = result["total_results"]["decode"]["inference_time"]
print(json.dumps({"seconds": statistics.median(times), "tpot_s": tpot}))
"""


def _perfmodel_rows() -> list[dict]:
    """perfmodel one call at a time, twice: the first ``CALLS`` calls of the model and device (evaluated;
    after ``Replays.trace_after`` of them, one traces and compiles a replay: their mean includes it), and
    ``CALLS`` calls once it is in use (each replays the compiled trace); then over arrays."""
    architecture, h100 = load_architecture("llama-2-7b"), load_hardware("h100-sxm")

    def timed(prompts: list[int]) -> tuple[list[float], Any]:
        times, result = [], None
        for prompt in prompts:
            start = time.perf_counter()
            result = llm_predict(architecture, h100, Scenario(batch=BATCH, prompt_tokens=prompt, generated_tokens=GEN))
            times.append(time.perf_counter() - start)
        return times, result

    first, _ = timed([prompt - CALLS for prompt in PROMPTS])
    times, result = timed(PROMPTS)
    assert result is not None
    prompts = np.arange(600, 1600)
    array_times = []
    for _ in range(3):
        start = time.perf_counter()
        llm_predict(architecture, h100, Scenario(batch=BATCH, prompt_tokens=prompts, generated_tokens=GEN))
        array_times.append((time.perf_counter() - start) / len(prompts))
    tpot = float(result.tpot_s)
    return [{"tool": f"perfmodel {__version__}: llm_predict, one call per scenario (model and device in use)",
             "seconds": statistics.median(times), "tpot_s": tpot},
            {"tool": f"perfmodel {__version__}: llm_predict, the first {CALLS} calls (mean, the trace included)",
             "seconds": statistics.mean(first), "tpot_s": tpot},
            {"tool": f"perfmodel {__version__}: llm_predict over 1,000 scenarios (arrays), per scenario",
             "seconds": statistics.median(array_times), "tpot_s": tpot}]


def _peer(name: str, python: str, code: str, argument, cwd: str | None) -> dict:
    try:
        done = subprocess.run([python, "-c", code, json.dumps(argument)], capture_output=True, text=True, cwd=cwd,
                              timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"tool": name, "skipped": str(error)}
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return {"tool": name, "skipped": last}
    return {"tool": name, **json.loads(done.stdout.strip().splitlines()[-1])}


def _llm_viewer_config(directory: Path) -> str:
    """The shipped Llama-2-7B config as a local Hugging Face model directory (nothing downloaded)."""
    target = directory / "Llama-2-7b-hf"
    target.mkdir()
    config = {key: value for key, value in load_config("llama-2-7b").items() if not key.startswith("_")}
    (target / "config.json").write_text(json.dumps(config))
    return str(target)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", default=sys.executable, help="interpreter where llm-analysis is installed")
    parser.add_argument("--llm-viewer", type=Path, help="a checkout of github.com/hahnyuan/LLM-Viewer")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/peer_speed.json"))
    args = parser.parse_args(argv)
    rows = _perfmodel_rows()
    rows.append(_peer("llm-analysis: infer", args.peer_python, LLM_ANALYSIS, [PROMPTS, BATCH, GEN], None))
    if args.llm_viewer is not None:
        with tempfile.TemporaryDirectory() as directory:
            config = _llm_viewer_config(Path(directory))
            rows.append(_peer("LLM-Viewer: ModelAnalyzer.analyze", sys.executable, LLM_VIEWER,
                              [config, PROMPTS, BATCH], str(args.llm_viewer)))
    else:
        rows.append({"tool": "LLM-Viewer: ModelAnalyzer.analyze", "skipped": "no --llm-viewer checkout given"})
    reference = rows[0]["seconds"]
    print(f"{'tool':<74} {'per scenario':>13} {'vs perfmodel one call':>22} {'TPOT':>10}")
    for row in rows:
        if "skipped" in row:
            print(f"{row['tool']:<74} skipped: {row['skipped']}")
            continue
        row["relative_to_perfmodel_one_call"] = row["seconds"] / reference
        print(f"{row['tool']:<74} {row['seconds'] * 1e3:>10.3f} ms {row['relative_to_perfmodel_one_call']:>21.3f}x "
              f"{row['tpot_s'] * 1e3:>7.2f} ms")
    meta = {"scenario": f"llama-2-7b, 1 x H100 SXM, batch {BATCH}, prompt {PROMPTS[0]}..{PROMPTS[-1]}, gen {GEN}",
            "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    write_text_atomically(args.json, json.dumps({"meta": meta, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
