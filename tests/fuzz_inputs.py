"""The input kinds of the fuzzer (tests/fuzzing.py): for each, a case builder that mutates a shipped
seed file (or a valid command line) with a seeded ``random.Random`` and says what to run on it."""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from perfmodel.errors import PerfmodelError
from tests.fuzzing import (
    FIXTURES,
    JSON_VALUES,
    ROOT,
    TEXT_TOKENS,
    TOO_BIG_COUNT,
    UNIT_VALUES,
    Case,
    csv_rows,
    csv_text,
    dump_yaml,
    hardware_problems,
    json_problems,
    judge,
    load_yaml,
    mutate_bytes,
    mutate_csv,
    mutate_lines,
    mutate_trace,
    mutate_tree,
    run_cli,
)

SPEC_SEEDS = ["gpu/h100-sxm", "gpu/h100-sxm-achievable", "tpu/tpu-v5e", "lpu/groq-lpu-v1", "wafer/cerebras-wse-3",
              "spyre/ibm-spyre", "cpu/epyc-zen4-2vcpu", "gpu/l4", "gpu/a100-sxm-80gb-achievable",
              "cpu/epyc-zen4-2vcpu-fitted"]
WORKLOAD_SEEDS = ["elementwise_chain", "transformer_block", "small_cnn", "attention_naive", "attention_flash",
                  "gemm_sweep"]
LLM_SEEDS = ["llama-3.1-8b", "mixtral-8x7b", "gpt-j-6b", "gemma-7b", "mistral-7b", "maxtext-32b"]


def _read(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _mutations(rng: random.Random) -> int:
    return rng.choice((1, 1, 1, 2, 2, 3))


def _spec_case(rng: random.Random, directory: Path) -> Case:
    seed = rng.choice(SPEC_SEEDS)
    text = (ROOT / "hardware_specs" / f"{seed}.yaml").read_text(encoding="utf-8")
    for _ in range(_mutations(rng)):
        choice = rng.random()
        if choice < 0.45:
            try:
                data = load_yaml(text) if text.strip() else {}
                text = dump_yaml(mutate_tree(data, rng, UNIT_VALUES + JSON_VALUES))
            except yaml.YAMLError:
                text = mutate_lines(text, rng, UNIT_VALUES)
        elif choice < 0.95:
            text = mutate_lines(text, rng, UNIT_VALUES)
        else:
            return Case(argv=["specs", "validate", "spec.yaml"],
                        files={"spec.yaml": mutate_bytes(text.encode(), rng)}, check=_spec_check)
        with contextlib.suppress(yaml.YAMLError):
            load_yaml(text)
            continue
        break  # not YAML any more: further structural mutations cannot parse it
    return Case(argv=["specs", "validate", "spec.yaml"], files={"spec.yaml": text.encode()}, check=_spec_check)


def _spec_check(directory: Path, out: str) -> list[str]:
    """An accepted spec loads with physical numbers, and a workload predicts on it (exit 0 or 2)."""
    from perfmodel.hardware.loader import load_hardware

    try:
        hardware = load_hardware(directory / "spec.yaml")
    except PerfmodelError as error:
        return [f"'specs validate' accepted a spec that load_hardware refuses: {str(error)[:200]}"]
    problems = hardware_problems(hardware)
    code, out, err = run_cli(["predict", "transformer_block", "--on", str(directory / "spec.yaml"), "--json"])
    problems += [f"predict on the accepted spec: {problem}" for problem in judge(code, out, err)]
    if code == 0:
        problems += json_problems(out)
    return problems


def _workload_case(rng: random.Random, directory: Path) -> Case:
    name = rng.choice(WORKLOAD_SEEDS)
    text = (ROOT / "workloads" / f"{name}.yaml").read_text(encoding="utf-8")
    for _ in range(_mutations(rng)):
        if rng.random() < 0.5:
            try:
                text = dump_yaml(mutate_tree(load_yaml(text), rng, TEXT_TOKENS + JSON_VALUES))
            except (yaml.YAMLError, AttributeError):
                text = mutate_lines(text, rng, TEXT_TOKENS)
        else:
            text = mutate_lines(text, rng, TEXT_TOKENS)
    suffix = rng.choice([".yaml", ".yaml", ".json"])
    raw = text.encode()
    if suffix == ".json":
        with contextlib.suppress(yaml.YAMLError, TypeError, ValueError):
            raw = json.dumps(load_yaml(text)).encode()
    if rng.random() < 0.05:
        raw = mutate_bytes(raw, rng)
    mode = rng.choice([[], [], ["--mode", "graph"], ["--compiled"], ["--mode", "spatial"]])
    spec = rng.choice(["h100-sxm", "h100-sxm", "tpu-v5e", "cerebras-wse-3", "groq-lpu-v1"])
    return Case(argv=["predict", f"workload{suffix}", "--on", spec, "--json", *mode],
                files={f"workload{suffix}": raw})


def _llm_case(rng: random.Random, directory: Path) -> Case:
    name = rng.choice(LLM_SEEDS)
    data = json.loads((ROOT / "workloads" / "llm" / f"{name}.json").read_text(encoding="utf-8"))
    for _ in range(_mutations(rng)):
        if isinstance(data, dict) and rng.random() < 0.6:
            data = copy.deepcopy(data)
            key = rng.choice([key for key in data if not key.startswith("_")] or ["hidden_size"])
            data[key] = copy.deepcopy(rng.choice(JSON_VALUES + [2**31, 3, 7, 1, 2.5, "32", "silu", "gelu", "bogus"]))
        else:
            data = mutate_tree(data, rng, JSON_VALUES)
    raw = json.dumps(data, indent=1).encode()
    if rng.random() < 0.1:
        raw = mutate_bytes(raw, rng)
    extra = rng.choice([[], [], [], ["--mode", "graph"], ["--batch", "4", "--prompt", "256", "--gen", "32"],
                        ["--tp", "2"]])
    return Case(argv=["llm", "--model", "config.json", "--on", "h100-sxm", "--condensed", "--json", *extra],
                files={"config.json": raw})


def _llm_eager_case(rng: random.Random, directory: Path) -> Case:
    """A mutated config through the eager capture (transformers on the meta device, ~0.5 s a case: the
    benchmark's, not the suite's)."""
    case = _llm_case(rng, directory)
    case.argv = [item for item in case.argv if item not in ("--condensed",)]
    if "--mode" in case.argv:
        del case.argv[case.argv.index("--mode"): case.argv.index("--mode") + 2]
    return case


MEASUREMENT_SEEDS = {  # kind -> [(fixture, spec, events kept (traces) or rows kept (CSVs); None: all)]
    "ncu": [("ncu_counters.csv", "h100-sxm", None), ("ncu_details_2023.csv", "h100-sxm", None),
            ("ncu_details_recent.csv", "h100-sxm", None), ("ncu_raw.csv", "h100-sxm", None)],
    "torch-trace": [("torch_cpu_ops_trace.json", "epyc-zen4-2vcpu", 40), ("torch_cpu_trace.json", "epyc-zen4-2vcpu",
                                                                            None),
                    ("torch_gpu_trace.json.gz", "h100-sxm", None), ("torch_cuda_ops_trace.json.gz", "h100-sxm", 40)],
    "spyre": [("spyre_ops_trace.json", "ibm-spyre", None), ("spyre_torch_trace.json", "ibm-spyre", None),
              ("spyre_flex_trace.json", "ibm-spyre", None)],
    "generic": [("generic_ops.csv", "tpu-v5e", None), ("generic_counters.csv", "tpu-v5e", None)],
    "bench": [("../../calibration/data/cpu_measurements.csv", "epyc-zen4-2vcpu", 6)],
}


def _trace_seed(path: Path, keep: int | None):
    data = json.loads(_read(path))
    if keep is not None and isinstance(data, dict):
        data["traceEvents"] = data["traceEvents"][:keep]
    return data


def _measurement_case(kind: str) -> Callable[[random.Random, Path], Case]:
    def make(rng: random.Random, directory: Path) -> Case:
        fixture, spec, keep = rng.choice(MEASUREMENT_SEEDS[kind])
        path = FIXTURES / fixture
        if kind in ("torch-trace", "spyre"):
            data = _trace_seed(path, keep)
            for _ in range(_mutations(rng)):
                data = mutate_trace(data, rng) if rng.random() < 0.6 else mutate_tree(data, rng, JSON_VALUES)
            raw = json.dumps(data).encode()
            name = "trace.json"
            if rng.random() < 0.2:
                raw, name = gzip.compress(raw), "trace.json.gz"
        else:
            text = path.read_text(encoding="utf-8")
            if keep is not None:
                rows = csv_rows(text)
                text = csv_text(rows[: keep + 1], False)
            header_row = next((number for number, row in enumerate(csv_rows(text)) if row[:1] == ["ID"]), 0)
            for _ in range(_mutations(rng)):
                text = mutate_csv(text, rng, header_row=header_row, quote_all=kind == "ncu")
            raw = text.encode()
            name = "measurements.csv"
        if rng.random() < 0.08:
            raw = mutate_bytes(raw, rng)
        argv = ["calibrate", "--spec", spec, "--measurements", name, "-o", "fitted.yaml", "--json", "--force"]
        if rng.random() < 0.15:
            argv += ["--format", rng.choice(["ncu", "torch-trace", "spyre", "generic", "bench"])]
        return Case(argv=argv, files={name: raw}, stub="fit")

    return make


SERVE_BASE = ["serve", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--mode", "graph", "--json"]


def _serve_trace_case(rng: random.Random, directory: Path) -> Case:
    text = (ROOT / "workloads" / "serving" / "example_trace.csv").read_text(encoding="utf-8")
    rows = csv_rows(text)
    text = csv_text(rows[:12], False)  # the comment line, the header and ten requests
    for _ in range(_mutations(rng)):
        text = mutate_csv(text, rng, header_row=1)
    raw = text.encode()
    if rng.random() < 0.08:
        raw = mutate_bytes(raw, rng)
    extra = rng.choice([[], [], ["--requests", "4"], ["--requests", "40"]])
    return Case(argv=[*SERVE_BASE, "--trace", "trace.csv", *extra], files={"trace.csv": raw}, stub="simulator")


def _length_case(rng: random.Random, directory: Path) -> Case:
    name = rng.choice(["prompt_lengths.csv", "output_lengths.csv"])
    text = (ROOT / "workloads" / "serving" / name).read_text(encoding="utf-8")
    header_row = 1
    for _ in range(_mutations(rng)):
        text = mutate_csv(text, rng, header_row=header_row)
    raw = text.encode()
    if rng.random() < 0.08:
        raw = mutate_bytes(raw, rng)
    flag = rng.choice(["--prompt-dist", "--output-dist"])
    value = rng.choice(["lengths.csv", "empirical:lengths.csv"])
    command = rng.choice([SERVE_BASE + ["--rate", "2/s", "--requests", "8"]] * 3 + [
                          ["size", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--mode", "graph", "--rate", "2/s",
                           "--ttft-p99", "1s", "--requests", "8", "--json"]])
    return Case(argv=[*command, flag, value], files={"lengths.csv": raw}, stub="simulator")


# Command lines: a valid base, optional flags with valid values, and bad values to put in their place.
COUNT_BAD = ["0", "-1", "1.5", "abc", "", "1e400", "nan", "inf", " 1", "1,,2", "2**3", "0x10"]
RATE_BAD = ["1.2.3/s", "-2/s", "0/s", "inf/s", "nan/s", "2/fortnight", "/s", "2", "abc", "", "1e400/s", "2/s/s"]
TIME_BAD = ["-5s", "0s", "nan s", "1e400 s", "5", "abc", "", "inf s", "5 GB", "-0 s"]
LIST_BAD = ["0", "-1", "1.5", "abc", "", "1,,2", "1,-8", "0,1", "1,x", ",", "1e400", TOO_BIG_COUNT]
DIST_BAD = ["fixed:0", "uniform:5-1", "lognormal:0,0", "lognormal:1e400,1", "lognormal:600,nan", "fixed:-3",
            "empirical:missing.csv", "missing.csv", "", "fixed:", "zipf:3", "fixed:1e3", "fixed:" + TOO_BIG_COUNT]
SET_VALUES = ["memory.hbm.bandwidth=4TB/s", "memory.hbm.bandwidth=-1TB/s", "memory.hbm.bandwidth=0TB/s",
              "memory.hbm.bandwidth=nan TB/s", "memory.hbm.bandwidth=inf TB/s", "compute.tensor_cores.units=108",
              "compute.tensor_cores.units=0", "compute.tensor_cores.units=1.5",
              "compute.tensor_cores.peak.bf16=500TFLOP/s", "compute.tensor_cores.peak.bf16=-5TFLOP/s",
              "nonexistent.field=1", "=", "memory.hbm.bandwidth", "scheduling.default_mode=bogus",
              "scheduling.default_mode=graph", "memory.hbm.capacity=1e400 GB", "power.tdp=0 W"]
OUTPUT_BAD = ["", ".", "out", "out.txt", "out.PNG", "sub/dir/out.png", "/", "out.yaml", "out.csv", "out.parquet",
              "out.json", "out.svg", "measured.csv/out.png", "measured.csv/out.csv", "x" * 300 + ".png"]
DTYPE_VALUES = ["bf16", "fp16", "fp8", "int8", "int4", "fp32", "bf17", "", "BF16", "tf32", "fp64"]
MODE_VALUES = ["graph", "eager", "compiled", "static", "spatial", "dynamic", "bogus", ""]
SPEC_VALUES = ["h100-sxm", "tpu-v5e", "groq-lpu-v1", "ibm-spyre", "cerebras-wse-3", "nope", "", "h100-sxm,tpu-v5e",
               "H100-SXM", "missing.yaml"]


@dataclass(frozen=True)
class Command:
    base: list[str]
    options: dict[str, tuple[list[str] | None, list[str]]]  # flag -> (valid values or None: a switch, bad values)
    outputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stub: str = ""


def _counts(valid: list[str], *, work: bool = False) -> tuple[list[str], list[str]]:
    return valid, COUNT_BAD + ([] if work else [TOO_BIG_COUNT, "99999999"])


COMMANDS = {
    "llm": Command(["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--condensed", "--json"], {
        "--batch": (["1", "8", "1,8"], LIST_BAD), "--prompt": (["128", "128,512"], LIST_BAD),
        "--gen": (["16", "1"], LIST_BAD), "--chips": _counts(["1", "2"]), "--tp": _counts(["1", "2"]),
        "--pp": _counts(["1", "2"]), "--ep": _counts(["1"]), "--weights": (DTYPE_VALUES[:5], DTYPE_VALUES),
        "--kv": (["bf16", "fp8"], DTYPE_VALUES), "--activations": (["bf16"], DTYPE_VALUES),
        "--mode": (MODE_VALUES[:3], MODE_VALUES), "--concurrency": _counts(["4"], work=True),
        "--max-tokens-per-step": _counts(["256"], work=True), "--graph-out": (["graph.yaml", "graph.json"], OUTPUT_BAD),
        "--phase": (["decode", "prefill"], ["", "train", "DECODE"]), "--set": (SET_VALUES[:1], SET_VALUES),
        "--ideal": (None, []), "--on": (["h100-sxm", "tpu-v5e"], SPEC_VALUES), "--model": (["mistral-7b"],
                                                                                      ["nope", "", "LLAMA-3.1-8B"])},
        outputs={"--graph-out": (".yaml", ".yml", ".json")}),
    "serve": Command(SERVE_BASE + ["--requests", "6"], {
        "--rate": (["2/s", "120/min"], RATE_BAD), "--rates": (["1,2"], RATE_BAD + ["1,,2", "1,-2", "0,1"]),
        "--arrival": (["poisson", "fixed", "burst"], ["", "bogus"]), "--scenario": (["offline"], ["", "bogus"]),
        "--users": _counts(["2"], work=True), "--think": (["1s", "0s"], TIME_BAD), "--tp": _counts(["1", "2"]),
        "--pp": _counts(["1"]), "--requests": _counts(["6"], work=True), "--prompt-dist": (["fixed:256",
                                                                                            "uniform:16-64"], DIST_BAD),
        "--output-dist": (["fixed:16", "lognormal:32,0.5"], DIST_BAD),
        "--prefix-share": (["0.5", "0"], ["1", "-0.1", "nan", "inf", "abc", "", "1.5"]),
        "--max-batch": _counts(["8"], work=True), "--max-tokens-per-step": _counts(["512"], work=True),
        "--block-size": _counts(["16"], work=True), "--memory-utilization": (["0.9"], ["0", "-1", "1.5", "nan", "abc"]),
        "--kv-admission": (["reserve", "on-demand"], ["", "bogus"]), "--seed": (["1"], ["-1", "1.5", "abc", ""]),
        "--max-kv-blocks": _counts(["4000"], work=True), "--first-token": (["decode", "prefill"], ["", "bogus"]),
        "--ttft-slo": (["1s"], TIME_BAD), "--tpot-slo": (["50ms"], TIME_BAD), "--weights": (["bf16", "int4"],
                                                                                           DTYPE_VALUES),
        "--set": (SET_VALUES[:1], SET_VALUES), "--chart": (["chart.png", "chart.svg"], OUTPUT_BAD),
        "--on": (["h100-sxm"], SPEC_VALUES)},
        outputs={"--chart": (".png", ".svg", ".pdf")}, stub="simulator"),
    "size": Command(["size", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--mode", "graph", "--rate", "2/s",
                     "--ttft-p99", "1s", "--requests", "6", "--json"], {
        "--rate": (["4/s"], RATE_BAD), "--users": _counts(["4"], work=True), "--think": (["2s"], TIME_BAD),
        "--ttft": (["500ms"], TIME_BAD), "--tpot-p99": (["50ms"], TIME_BAD), "--tpot": (["60ms"], TIME_BAD),
        "--prompt": _counts(["256"], work=True), "--gen": _counts(["16"], work=True),
        "--prompt-dist": (["fixed:256"], DIST_BAD), "--output-dist": (["fixed:16"], DIST_BAD),
        "--requests": _counts(["6"], work=True), "--seed": (["2"], ["-1", "1.5", "abc"]),
        "--price": (["2.5", "h100-sxm=2.5"], ["-2.5", "abc", "", "h100-sxm=x", "nan", "inf", "h100-sxm=", "=2"]),
        "--rank": (["cost", "watts"], ["", "bogus"]), "--weights": (["bf16"], DTYPE_VALUES),
        "--set": (SET_VALUES[:1], SET_VALUES), "--chart": (["chart.png", "chart.svg"], OUTPUT_BAD),
        "--on": (["h100-sxm"], SPEC_VALUES)},
        outputs={"--chart": (".png", ".svg", ".pdf")}, stub="simulator"),
    "train": Command(["train", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "8", "--global-batch", "16",
                      "--seq", "1024", "--json"], {
        "--chips": _counts(["8", "16"]), "--global-batch": _counts(["16", "32"]), "--seq": _counts(["1024"]),
        "--dp": _counts(["2"]), "--fsdp": _counts(["4"]), "--tp": _counts(["2"]), "--pp": _counts(["2"]),
        "--cp": _counts(["1"]), "--ep": _counts(["1"]), "--zero": (["1", "2"], ["3", "-1", "abc"]),
        "--micro-batch": _counts(["1", "2"]), "--virtual-stages": _counts(["2"]),
        "--recompute": (["full", "selective"], ["", "bogus"]), "--compute-dtype": (["bf16", "fp8"], DTYPE_VALUES),
        "--master-dtype": (["fp32", "bf16"], DTYPE_VALUES), "--domain-chips": _counts(["8"]),
        "--no-overlap": (None, []), "--chart": (["chart.png"], OUTPUT_BAD), "--set": (SET_VALUES[:1], SET_VALUES),
        "--on": (["h100-sxm", "tpu-v5e"], SPEC_VALUES)},
        outputs={"--chart": (".png", ".svg", ".pdf")}),
    "sweep": Command(["sweep", "--on", "h100-sxm", "--grid", "batch=1,8", "--json"], {
        "--grid": (["seq=128,512", "memory.hbm.bandwidth=2TB/s,4TB/s",
                    "compute.tensor_cores.peak.bf16=500TFLOP/s,1000TFLOP/s"],
                   ["batch=0", "batch=1,x", "batch=", "memory.hbm.bandwidth=2TB/s,-4TB/s", "heads=1.5", "=1",
                    "memory.hbm.bandwidth=nan TB/s", "bogus=1,2", "batch", "layers=-1", "compute.tensor_cores.units=0,8",
                    "batch=" + TOO_BIG_COUNT, "seq=1e400"]),
        "--mode": (MODE_VALUES[:3], MODE_VALUES), "-o": (["table.csv", "table.parquet"], OUTPUT_BAD),
        "--on": (["tpu-v5e"], SPEC_VALUES)},
        outputs={"-o": (".csv", ".parquet")}),
    "roofline": Command(["roofline", "attention_naive", "--on", "h100-sxm", "-o", "chart.svg"], {
        "--kind": (["classic", "breakdown"], ["", "bogus"]), "--dtype": (["bf16", "fp32"], DTYPE_VALUES),
        "--mode": (["graph"], MODE_VALUES), "-o": (["chart.png"], OUTPUT_BAD),
        "--measured": (["measured.csv"], ["missing.csv", "", "measured.txt", "bad.csv"]),
        "--on": (["tpu-v5e"], SPEC_VALUES)},
        outputs={"-o": (".png", ".svg", ".pdf")}),
}
COMMAND_WEIGHTS = {"llm": 4, "serve": 4, "size": 2, "train": 4, "sweep": 3, "roofline": 0.5}  # a chart: ~0.4 s
MEASURED_CSV = b"name,flops,bytes,duration_s\nmm,2e9,1e6,1e-4\nadd,1e6,3e6,2e-5\n"
BAD_MEASURED_CSV = b"name,flops,bytes,duration_s\nmm,nan,-1e6,0\nadd,x,inf,-2e-5\n"


def _set_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """``argv`` with ``flag`` given ``value`` (replacing its value in the base, if there)."""
    if flag in argv and value is not None:
        position = argv.index(flag)
        if position + 1 < len(argv):
            return [*argv[: position + 1], value, *argv[position + 2:]]
    return [*argv, flag] + ([] if value is None else [value])


def _args_case(rng: random.Random, directory: Path) -> Case:
    name = rng.choices(list(COMMAND_WEIGHTS), weights=list(COMMAND_WEIGHTS.values()))[0]
    command = COMMANDS[name]
    argv = list(command.base)
    flags = list(command.options)
    for flag in rng.sample(flags, rng.randrange(0, 3)):
        valid, _ = command.options[flag]
        argv = _set_flag(argv, flag, None if valid is None else rng.choice(valid))
    for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
        operation = rng.randrange(10)
        flag = rng.choice(flags)
        valid, bad = command.options[flag]
        if operation < 6 and bad:
            argv = _set_flag(argv, flag, rng.choice(bad))
        elif operation == 6:
            required = [item for item in argv if item.startswith("--") and item not in ("--json", "--condensed")]
            if required:
                position = argv.index(rng.choice(required))
                del argv[position: position + 2]
        elif operation == 7:
            argv.append(rng.choice(["--bogus", "--bogus=1", "-x", "--", "extra"]))
        elif operation == 8:
            argv.append(flag)  # a flag without its value (or a repeated switch)
        elif valid is not None:
            argv = [*argv, flag, rng.choice(valid + bad)]  # a repeated option: the last one wins
    files = {"measured.csv": MEASURED_CSV, "bad.csv": BAD_MEASURED_CSV}  # inputs, and files in the way of outputs
    return Case(argv=argv, files=files, stub=command.stub, outputs=command.outputs)




# Extreme values: workloads built from scratch out of sizes at and past the IR's limits (2**62, int64's
# 2**63, the float64 range), counts, FLOPs per element and attributes at their edges, ops given by
# attributes alone, and ops that take no time (the reproducers of issue 38's items 1-5, 7 and 8 are
# single points of this space).
EXTREME_DIMENSIONS = [1, 1, 2, 3, 7, 64, 128, 4096, 65536, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**61, 2**62,
                      2**62 + 1, 2**63 - 1, 2**63, 2**64, 10**20, 10**200, 0, -1, -(2**63), 1.5, 1e20, 1.0e308,
                      float("inf"), float("nan"), "64", True, None, [4]]
EXTREME_NUMBERS = [0, 0.0, 1e-320, 1e-30, 0.5, 1, 12, 1e6, 1e6 + 1, 1e30, 1e300, 1.0e308, -1, -0.0,
                   float("inf"), float("nan"), 2**63, "1", None]
EXTREME_KINDS = ["matmul", "matmul", "conv", "attention", "attention", "elementwise", "elementwise", "reduction",
                 "norm", "softmax", "embedding", "collective", "copy", "copy", "view", "other"]
EXTREME_DTYPES = ["bf16", "bf16", "fp32", "fp8", "fp4", "int4", "bool", "complex128", "fp64", "bf17"]
EXTREME_SPECS = ["h100-sxm", "h100-sxm-achievable", "tpu-v5e", "groq-lpu-v1", "cerebras-wse-3", "ibm-spyre",
                 "epyc-zen4-2vcpu", "b200-achievable"]


def _extreme_dimension(rng: random.Random):
    """Mostly ordinary sizes, so that the extreme one is the size that decides the case."""
    return rng.choice(EXTREME_DIMENSIONS) if rng.random() < 0.2 else rng.choice([1, 2, 8, 64, 256, 1024, 8192])


def _extreme_tensor(rng: random.Random) -> dict:
    rank = rng.choice([0, 1, 2, 2, 3, 4, 4, 6])
    tensor: dict = {"shape": [_extreme_dimension(rng) for _ in range(rank)], "dtype": rng.choice(EXTREME_DTYPES)}
    if rng.random() < 0.2:
        tensor["role"] = rng.choice(["weight", "kv_cache", "activation", "bogus"])
    return tensor


def _extreme_attrs(rng: random.Random, kind: str) -> dict:
    attrs: dict = {}
    if kind in ("matmul", "conv"):
        for name in ("m", "n", "k") + (("batch",) if kind == "matmul" else ()):
            if rng.random() < 0.85:
                attrs[name] = _extreme_dimension(rng)
    elif kind == "attention":
        for name in ("batch", "heads", "seq_q", "seq_kv", "head_dim"):
            if rng.random() < 0.95:
                attrs[name] = _extreme_dimension(rng)
        for name, values in (("kv_heads", [1, 2, 8, 3]), ("window", [1, 64, 4096]), ("causal", [True, False, 1]),
                             ("backward", [True, False]), ("implementation", ["flash", "naive", "bogus"])):
            if rng.random() < 0.3:
                attrs[name] = rng.choice(values + [_extreme_dimension(rng)])
    elif kind == "collective":
        attrs["group_size"] = _extreme_dimension(rng)
        attrs["collective"] = rng.choice(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "x"])
        if rng.random() < 0.8:
            attrs["bytes"] = rng.choice(EXTREME_NUMBERS + [1024, 2**30])
    if kind in ("elementwise", "norm", "softmax") and rng.random() < 0.5:
        attrs["flops_per_element"] = rng.choice(EXTREME_NUMBERS)
    if rng.random() < 0.1:
        attrs["elements"] = _extreme_dimension(rng)
    return attrs


def _extreme_op(rng: random.Random, index: int) -> dict:
    kind = rng.choice(EXTREME_KINDS)
    op: dict = {"name": f"op{index}", "kind": kind}
    if rng.random() < 0.2:
        op["count"] = rng.choice(EXTREME_DIMENSIONS)
    attrs = _extreme_attrs(rng, kind)
    if attrs:
        op["attrs"] = attrs
    if rng.random() < (0.4 if attrs else 0.85):  # by attributes alone, by tensors alone, or both
        op["inputs"] = [_extreme_tensor(rng) for _ in range(rng.choice([1, 2, 2, 3]))]
        if rng.random() < 0.8:
            op["outputs"] = [_extreme_tensor(rng)]
    return op


def _extremes_case(rng: random.Random, directory: Path) -> Case:
    ops = [_extreme_op(rng, index) for index in range(rng.choice([1, 1, 2, 3]))]
    data: dict = {"schema_version": 1, "name": "extremes", "ops": ops}
    if len(ops) > 1 and rng.random() < 0.5:
        data["edges"] = [[ops[index]["name"], ops[index + 1]["name"]] for index in range(len(ops) - 1)]
    name = rng.choice(["workload.yaml", "workload.json"])
    # JSON cannot say inf or NaN (json.dumps writes them, the reader refuses them); YAML writes .inf/.nan.
    raw = (json.dumps(data) if name.endswith(".json") else dump_yaml(data)).encode()
    mode = rng.choice([[], [], ["--mode", "graph"], ["--compiled"], ["--mode", "spatial"], ["--mode", "eager"]])
    extra = rng.choice([[]] * 6 + [["--set", "memory.hbm.bandwidth=1e-3 TB/s"], ["--ideal"]])
    return Case(argv=["predict", name, "--on", rng.choice(EXTREME_SPECS), "--json", *mode, *extra],
                files={name: raw})


KINDS: dict[str, Callable[[random.Random, Path], Case]] = {
    "spec": _spec_case,
    "workload": _workload_case,
    "llm-config": _llm_case,
    "ncu": _measurement_case("ncu"),
    "torch-trace": _measurement_case("torch-trace"),
    "spyre": _measurement_case("spyre"),
    "generic": _measurement_case("generic"),
    "bench": _measurement_case("bench"),
    "serve-trace": _serve_trace_case,
    "length-csv": _length_case,
    "args": _args_case,
    "extremes": _extremes_case,
}
# Kinds too slow for the suite's time budget, run by benchmarks/fuzz.py only.
BENCHMARK_KINDS: dict[str, Callable[[random.Random, Path], Case]] = {**KINDS, "llm-eager": _llm_eager_case}
