"""``perfmodel validate``: predict the published measurements the model can reproduce (edge module).

Every row of ``workloads/validation/published_measurements.csv`` is either predicted, with the
assumptions needed to reproduce it stated in ``how``, or skipped with a reason. The same specs serve
every row: each device's achievable overlay (fitted to published microbenchmarks, never to these
rows) where one ships, or the datasheet specs with ``ideal=True``; nothing is tuned to a row.

Conventions for reproducing rows:
* TensorRT-LLM and gpt-fast runs use CUDA graphs (the `compiled` mode: graph on GPUs, the static program on
  Groq and Cerebras); a row marked eager runs `eager`, priced with the captured eager op stream. (The Azure
  AI-benchmarking-guide rows ran TensorRT-LLM's Python session without CUDA graphs, an engine enqueued per
  step, which no mode prices; they are priced as graph, and their notes say so.)
* Static-batching throughput = batch x output tokens / (TTFT + (output - 1) x TPOT), per GPU when
  the row says so.
* In-flight-batching "max-load" rows (``trtllm-bench throughput``, TensorRT-LLM's perf-overview) go
  through the serving simulator with the benchmark's published settings: the perf-overview's number of
  requests for the row's ISL/OSL, all queued at once; ``max_batch_size`` and ``max_num_tokens`` from
  trtllm-bench's own heuristic (``trtllm_bench_settings``); TensorRT-LLM's KV-cache defaults (32-token
  blocks, whole sequences reserved at admission: GUARANTEED_NO_EVICT) and the perf-overview's KV share
  of 0.95 of the free memory. Throughput = all output tokens / the run's wall time, as trtllm-bench
  reports "Total Output Throughput".
* vLLM serving-benchmark rows (``vllm bench serve``, whose command lines the row's notes quote) go
  through the serving simulator with those settings: a closed loop of the row's max concurrency
  (``batch``) over ``--num-prompts`` requests of fixed lengths, the server's ``--max-num-seqs`` and
  ``--max-num-batched-tokens``, vLLM's on-demand paged KV cache (16-token blocks, 0.9 of the memory).
  Output token throughput = all output tokens / the run's wall time; TPOT and TTFT as the benchmark
  reports them (median TPOT excludes the first token; mean TTFT).
* Rows measured under a load that is neither of those go through the serving simulator too
  (``_load_row``): a request rate in the batch column ('rate 4/s', '4 req/s', 'QPS 4') or the notes
  (``--request-rate 4``) as Poisson arrivals at that rate; a number of clients ('concurrency 16',
  '16 concurrent') as a closed loop of that many users with no think time; the server's limits from
  the notes (``--max-num-seqs``, ``--max-num-batched-tokens``) or else the simulator's defaults, and
  ``--num-prompts`` requests or else ``LOAD_REQUESTS``. TTFT then includes the queueing and the steps
  shared with other requests' decode. Lengths are the row's ISL/OSL, or a shipped dataset's
  distribution when the length column names one (``workloads/lengths``).
* MLPerf Inference rows: Offline is every request at once (``MLPERF_OFFLINE_SAMPLES``, the tokens/s of
  the run); Server is Poisson arrivals at the row's rate when it states one (target QPS), else the
  highest rate whose p99 TTFT and p99 TPOT meet the benchmark's constraints (``MLPERF_LATENCY``,
  ``serving.server_scenario``); both with the dataset's length distribution, which must be shipped
  (OpenOrca's is not: such rows are skipped with the reason).
* FP8 rows use fp8 weights, activations and KV cache (each GEMM quantizes its bf16 input, the rest carried in
  bf16: ``llm.graphs.with_quantized_inputs``), the KV cache in the 16-bit type where the precision says so
  ("KV BF16": torchao's float8dq keeps it); "FP8 weight-only" fp8 weights under bf16 compute; rows of
  TensorRT-LLM's early builds (``LEGACY_TRTLLM_BUILD_SOURCES``) all-reduce with NCCL and compute attention in
  fp16, as those engines were built; "INT8 weight-only" int8 weights, bf16 compute;
  "INT4 weight-only (G=32)" int4 weights (the group scales' 0.5 bit a weight not counted), bf16
  compute; a bare "INT8" int8 weights and activations (SmoothQuant W8A8, TensorRT-LLM's INT8), KV in
  the 16-bit type. ITL rows are the time between tokens: TPOT for a lone request, the simulator's
  inter-token latency under a load.
* Latencies are predicted in milliseconds and compared in the row's unit (``_in_row_unit``: a row in seconds
  is compared in seconds).
* Single-user API speeds (Groq, Cerebras) are 1 / TPOT at batch 1 for a 512-token prompt and 256
  generated tokens, on the fewest chips that hold the weights (Groq: tp 8, pp as needed) or the
  stated system count (Cerebras: one wafer per pipeline stage).
* Kernel rows (GEMM TFLOP/s, HBM bandwidth) compare the op's device time (max of compute and memory
  time, plus the kernel's device-side fixed time), not host launch costs, as the benchmarks time
  back-to-back kernels. nccl-tests rows run under ``NCCL_ALGO=NVLS`` (the row says NVLS) are priced as
  NCCL's NVLS all-reduce, the reduction in the NVSwitch; nvbandwidth's peer-copy rows as a 1 GiB copy
  on the chip-to-chip link, both directions summed for its bidirectional tests (as nvbandwidth reports them).
"""

from __future__ import annotations

import csv
import functools
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from perfmodel.errors import PerfmodelError, UnitError
from perfmodel.fanout import Mapper, serial_map
from perfmodel.hardware.loader import NO_ENGINE, engine_overlays, load_for_prediction
from perfmodel.paths import data_directory
from perfmodel.units import parse_quantity

# trtllm-bench's max-load runs, TensorRT-LLM docs/source/performance/perf-overview.md at commit 00f37686
# (https://github.com/NVIDIA/TensorRT-LLM/blob/00f37686aa854010d68bcbd0f4ab000221541ca6/docs/source/performance/
# perf-overview.md): "$num_requests" per (input, output) length, "--kv_cache_free_gpu_mem_fraction 0.95".
TRTLLM_BENCH_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500,
                         (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000,
                         (500, 2000): 3000, (20000, 2000): 1000}
TRTLLM_KV_FREE_FRACTION = 0.95
# TensorRT-LLM defaults (tensorrt_llm/llmapi/llm_args.py, vendor code): KvCacheConfig.tokens_per_block = 32;
# SchedulerConfig.capacity_scheduler_policy = GUARANTEED_NO_EVICT (a request's whole sequence is reserved).
TRTLLM_TOKENS_PER_BLOCK = 32
# Sources measured on TensorRT-LLM engines built by the commands of TensorRT-LLM's performance.md at commit
# 138f96d4 (its 'Benchmarking per Model' section: one GPT-J, Llama2-7b and Llama2-70b engine each for its
# throughput and first-token rows; examples/llama/build.py at that commit): without --use_custom_all_reduce,
# which the script leaves off ("Activates latency-optimized algorithm for all-reduce instead of NCCL":
# set_nccl_plugin(dtype, use_custom_all_reduce)), so the tensor-parallel rows all-reduce with NCCL at every
# size, not with the algorithm today's engine picks (``links.<name>.all_reduce`` of the engine overlay); and
# with no fp8 attention (the script has no FP8 context FMHA option; --enable_fp8 --fp8_kv_cache give fp8
# GEMMs and an fp8 KV cache, the attention plugin runs in --dtype float16), so an FP8 row's attention
# computes in fp16.
LEGACY_TRTLLM_BUILD_SOURCES = ("https://github.com/NVIDIA/TensorRT-LLM/blob/138f96d45f90b9667426f7c47297d8c06bafac73/"
                               "docs/source/performance.md",)
# Sources whose quantizer replaces every linear layer, the LM head and the MoE gate included
# (``Scenario.quantized_head``): gpt-fast's quantize.py (``WeightOnlyInt8QuantHandler`` and
# ``WeightOnlyInt4QuantHandler`` quantize each ``nn.Linear`` of the model). The other rows' engines keep them in
# 16 bits (NVIDIA's AMMO/ModelOpt default configs disable ``*lm_head*`` and the routers).
# gpt-fast's quantize.py and torchao's quantize_ (its default filter: every nn.Linear, torchao/quantization/
# quant_api.py _is_linear; the Llama model's output head is an nn.Linear) quantize the LM head too.
EVERY_LINEAR_QUANTIZED_SOURCES = ("https://github.com/pytorch-labs/gpt-fast/", "https://github.com/pytorch/ao/")
API_PROMPT_TOKENS, API_GENERATED_TOKENS = 512, 256
SINGLE_STREAM_GENERATED_TOKENS = 128
# The settings of a `vllm bench serve` run, read from the command lines quoted in a row's notes.
VLLM_SETTINGS = re.compile(r"--(num-prompts|max-num-seqs|max-num-batched-tokens)[ =](\d+)")
# Rows measured under a load (``_load``): requests simulated when the row states no count.
LOAD_REQUESTS = 1000
# An LMDeploy TurboMind run's engine settings (the config.ini keys its benchmark scripts set) and
# profile_generation.py's rounds per client, read from a row's notes (``_turbomind_settings``).
TURBOMIND_REQUIRED = ("max_batch_size", "max_context_token_num", "session_len", "cache_max_entry_count",
                      "cache_block_seq_len", "test_round")
TURBOMIND_SETTINGS = re.compile(rf"\b({'|'.join(TURBOMIND_REQUIRED)})[ =](\d+(?:\.\d+)?)")
_RATE = re.compile(r"(?:\brate|\bqps)\s*[=:]?\s*(\d+(?:\.\d+)?)|(\d+(?:\.\d+)?)\s*(?:req(?:uests)?\s*/\s*s|qps)\b",
                   re.IGNORECASE)
_REQUEST_RATE_FLAG = re.compile(r"--request-rate[ =](\d+(?:\.\d+)?)")
_CONCURRENCY = re.compile(r"concurren\w*\s*[=:]?\s*(\d+)|(\d+)\s*concurrent", re.IGNORECASE)
# MLPerf Inference: the Offline scenario's sample count (MLPerf's minimum, mlcommons/inference mlperf.conf
# performance_sample_count_override for llama2-70b) and the Server scenario's p99 TTFT / TPOT limits in
# seconds (mlcommons/inference loadgen/mlperf.conf: llama2-70b ttft_latency 2000 ms, tpot_latency 200 ms;
# llama2-70b-interactive 450 / 40; mixtral-8x7b 2000 / 200; llama3_1-405b 6000 / 175), per shipped model.
MLPERF_OFFLINE_SAMPLES = 24576
MLPERF_LATENCY = {"llama-2-70b": (2.0, 0.2), "mixtral-8x7b": (2.0, 0.2), "llama-3.1-405b": (6.0, 0.175)}
MLPERF_INTERACTIVE_LATENCY = {"llama-2-70b": (0.45, 0.04)}
MLPERF_SERVER_REQUESTS = 2000  # each rate tried in the server search simulates this many requests
# A prompt stated only as "short": gpt-fast's generate.py default prompt, "Hello, my name is", is
# 6 Llama tokens with BOS; 8 rounds it up (decode time barely depends on it).
SHORT_PROMPT_TOKENS = 8


@dataclass(frozen=True, kw_only=True)
class ValidationRow:
    line: int
    group: str
    system: str
    workload: str
    metric: str
    measured: float | None
    unit: str
    predicted: float | None = None
    hardware: str = ""
    family: str = ""
    how: str = ""
    skipped: str = ""
    kind: str = ""    # what was predicted: one of PREDICTION_KINDS
    source: str = ""  # the row's source (its first word: a URL), the unit held out together by interval checks

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured."""
        if self.predicted is None or not self.measured:
            return None
        return (self.predicted - self.measured) / self.measured


#: The kinds of prediction a row checks (their errors differ, so intervals keep them apart): one kernel, one
#: scenario (``llm_predict``), a served load (the serving simulator) and a training step.
PREDICTION_KINDS = ("kernel", "scenario", "served", "training")


def _served(row: dict) -> bool:
    """Whether an LLM row is a served load (``_max_load_row``, ``_vllm_serving_row`` or ``_load_row``), as
    ``_llm_row`` routes it."""
    batch_text = row["batch"].lower()
    return "ifb" in batch_text or "max-load" in batch_text or "vllm bench serve" in row.get("notes", "") \
        or _load(row) is not None


@dataclass(frozen=True)
class _Load:
    kind: str  # rate, concurrency, mlperf-offline, mlperf-server or mlperf-interactive
    value: float | None = None  # requests a second (rate, a server row's target), or clients (concurrency)


def _load(row: dict) -> _Load | None:
    """The load a row was measured under, when it is neither a trtllm-bench max-load nor a vLLM benchmark
    row: an MLPerf scenario, a request rate or a number of concurrent clients (see the module docstring)."""
    batch, notes = row["batch"], row.get("notes", "")
    text = " ".join((row["system"], row["workload"], notes))
    if re.search(r"mlperf", text, re.IGNORECASE) and not re.search(r"mlperf\s+training", text, re.IGNORECASE) \
            and "training" not in row["workload"].lower():
        words = " ".join((batch, row["metric"], notes)).lower()
        for scenario in ("offline", "interactive", "server"):
            if scenario in words:
                rate = _RATE.search(batch) or re.search(r"target[_ ]qps\s*[=:]?\s*(\d+(?:\.\d+)?)", notes, re.I)
                value = None if scenario == "offline" or rate is None else float(next(g for g in rate.groups() if g))
                return _Load(kind=f"mlperf-{scenario}", value=value)
    if match := _RATE.search(batch) or _REQUEST_RATE_FLAG.search(notes):
        return _Load(kind="rate", value=float(next(group for group in match.groups() if group)))
    if match := _CONCURRENCY.search(batch):
        return _Load(kind="concurrency", value=float(next(group for group in match.groups() if group)))
    return None


SYSTEMS = [  # (pattern, spec); first match wins; PCIe cards and GH200 have no spec here
    (r"PCIe|GH200|variant unstated|H20\b", None),
    (r"H200", "h200-sxm"), (r"H100", "h100-sxm"), (r"A100", "a100-sxm-80gb"),
    (r"Groq LPU", "groq-lpu-v1"), (r"Cerebras CS-3", "cerebras-wse-3"),
    (r"TPU v5p", "tpu-v5p"), (r"TPU v5e", "tpu-v5e"), (r"TPU v6e", "tpu-v6e"), (r"TPU v4", "tpu-v4"),
]
MODELS = [
    (r"Llama-2-7B|LLaMA-7B", "llama-2-7b"), (r"Llama-2-70B|LLaMA-70B", "llama-2-70b"), (r"GPT-J", "gpt-j-6b"),
    (r"Llama-3(\.1)?-8B", "llama-3.1-8b"), (r"Llama-3(\.[13])?-70B", "llama-3.1-70b"),
    (r"Llama-3(\.1)?-405B", "llama-3.1-405b"), (r"Mixtral-8x7B", "mixtral-8x7b"),
]


ENGINES = [(r"TensorRT-LLM", "trtllm"), (r"vLLM", "vllm"), (r"SGLang", "sglang")]  # the engine a row names


def _serving_spec(spec: str, system: str, ideal: bool, engine: str | None) -> str:
    """The spec an LLM row is priced on: the overlay of the engine it was measured with (``engine`` None:
    the one its system names) where one ships for the device, else the device (its achievable overlay).
    ``engine`` ``none``: the device for every row; an engine name: that engine's overlay wherever it ships."""
    if ideal or engine == NO_ENGINE:
        return spec
    named, _ = _first(ENGINES, system) if engine is None else (engine, True)
    return f"{spec}-{named}" if named in engine_overlays(spec) else spec


def _first(patterns, text):
    for pattern, value in patterns:
        if re.search(pattern, text):
            return value, True
    return None, False


def _number(text: str) -> float | None:
    text = text.replace(",", "").strip()
    span = re.match(r"^[~>]?\s*([\d.]+)\s*-\s*([\d.]+)$", text)
    if span:
        return (float(span.group(1)) + float(span.group(2))) / 2
    match = re.match(r"^[~>]?\s*([\d.]+)", text)
    return float(match.group(1)) if match else None


def _int(text: str) -> int | None:
    match = re.match(r"^\s*(\d+)", text or "")
    return int(match.group(1)) if match else None


# Columns read as counts by ``_int`` (a leading whole number, then any note: '4 (TP4)', '2048 ctx'), or
# words that say how the count is set ('1 user', 'IFB max-load', 'unstated').
COUNT_COLUMNS = ("chips", "batch", "input_len", "output_len")
_LEADING_NUMBER = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))")


def _count_problem(row: dict) -> str | None:
    """A count column that starts with a number other than a positive whole one ('-8', '0', '2.5'),
    which ``_int`` would read as no count (or its integer part) and the row's fallback would replace."""
    for column in COUNT_COLUMNS:
        text = row.get(column) or ""
        match = _LEADING_NUMBER.match(text)
        if match and not (match.group(1).isdigit() and int(match.group(1)) > 0):
            return (f"column {column!r}: {text.strip()!r} is not a count; expected a positive whole number "
                    "(a note may follow, as in '4 (TP4)') or words ('1 user', 'IFB max-load', 'unstated')")
    return None


def _dtypes(precision: str, system: str) -> dict | None:
    """The weight, KV and activation dtypes a precision string names (see the module docstring)."""
    p = precision.upper()
    base = "fp16" if "FP16" in p else "bf16"  # the 16-bit type of a quantized row's compute
    if "INT4" in p and "WEIGHT" in p:
        return {"weight_dtype": "int4", "kv_dtype": base, "activation_dtype": base}
    if "INT8 WEIGHT" in p:
        return {"weight_dtype": "int8", "kv_dtype": base, "activation_dtype": base}
    if re.fullmatch(r"\s*INT8\s*(\(.*\))?\s*", p) or "W8A8" in p or "SMOOTHQUANT" in p:
        return {"weight_dtype": "int8", "kv_dtype": base, "activation_dtype": "int8"}
    if "FP8" in p and "WEIGHT-ONLY" in p.replace("WEIGHT ONLY", "WEIGHT-ONLY"):
        return {"weight_dtype": "fp8", "kv_dtype": base, "activation_dtype": base}
    if "FP8" in p:  # the KV cache in fp8 too unless the row says it stayed in the 16-bit type
        kv = base if re.search(r"KV(?: CACHE)? (?:BF16|FP16)", p) else "fp8"
        return {"weight_dtype": "fp8", "kv_dtype": kv, "activation_dtype": "fp8"}
    if "BF16" in p:
        return {"weight_dtype": "bf16", "kv_dtype": "bf16", "activation_dtype": "bf16"}
    if "FP16" in p or "16-BIT" in p:
        dtype = "fp16"
        return {"weight_dtype": dtype, "kv_dtype": dtype, "activation_dtype": dtype}
    if "UNSTATED" in p and "Groq" in system:
        return {"weight_dtype": "fp16", "kv_dtype": "fp16", "activation_dtype": "fp16"}
    return None


def _llm_row(row: dict, spec: str, model: str, ideal: bool = False) -> tuple[float, str]:
    from perfmodel.costs.all_reduce import NCCL_LIBRARY
    from perfmodel.dtypes import DTYPES
    from perfmodel.hardware.execution_models import resolve_mode
    from perfmodel.llm import Parallelism, Scenario, llm_predict
    from perfmodel.llm.catalog import load_architecture, load_config
    from perfmodel.llm.eager import stage_graphs_for
    from perfmodel.llm.graphs import stage_graph

    hardware, architecture = load_for_prediction(spec, ideal=ideal), load_architecture(model)
    dtypes = _dtypes(row["precision"], row["system"])
    if dtypes is None:
        raise _Skip(f"precision {row['precision']!r} cannot be mapped to dtypes")
    metric = row["metric"].lower()
    mode = "eager" if "eager" in row["workload"].lower() else "compiled"
    graphs, _ = stage_graphs_for(load_config(model), hardware, mode)
    legacy = graphs is stage_graph and row.get("source", "").startswith(LEGACY_TRTLLM_BUILD_SOURCES)
    nccl = legacy and (_int(row["chips"]) or 1) > 1
    if nccl:  # (the engine's build, not its kernels: see LEGACY_TRTLLM_BUILD_SOURCES)
        graphs = functools.partial(stage_graph, all_reduce_library=NCCL_LIBRARY)
    if legacy and dtypes["activation_dtype"] == "fp8":
        dtypes = {**dtypes, "attention_dtype": "fp16"}
    if row.get("source", "").startswith(EVERY_LINEAR_QUANTIZED_SOURCES) and DTYPES[dtypes["weight_dtype"]].bits < 16:
        dtypes = {**dtypes, "quantized_head": True}
    chips = _int(row["chips"])
    api = "user" in row["batch"].lower() or "per user" in metric
    short = row["input_len"].strip().lower() == "short"
    prompt = _int(row["input_len"]) or (API_PROMPT_TOKENS if api else SHORT_PROMPT_TOKENS if short else None)
    gen = _int(row["output_len"]) or (API_GENERATED_TOKENS if api else SINGLE_STREAM_GENERATED_TOKENS)
    load, lengths = _load(row), None
    if load is not None:  # the lengths may be a dataset's distribution; the scenario holds their means
        lengths = _load_lengths(row, load, model)
        prompt, gen = (max(1, round(length.mean)) for length in lengths)
    if prompt is None:
        raise _Skip("prompt length not stated")
    if spec == "cerebras-wse-3":
        parallelism = Parallelism(pp=chips or 1)
    elif spec == "groq-lpu-v1":
        parallelism = _groq_parallelism(architecture, hardware, Scenario(batch=1, prompt_tokens=prompt,
                                                                         generated_tokens=gen, **dtypes))
    else:
        parallelism = Parallelism(tp=chips or 1)
    batch_text = row["batch"].lower()
    base = Scenario(batch=1, prompt_tokens=prompt, generated_tokens=gen, **dtypes)
    how = f"{architecture.name}, {parallelism.tp}x tp, {parallelism.pp}x pp, {dtypes['weight_dtype']}, " \
          f"{resolve_mode(hardware, mode)}" + (" (captured eager op stream)" if graphs is not stage_graph else "") \
        + ("" if load is not None else f"; prompt {prompt}, gen {gen}") \
        + ("; NCCL all-reduce (built without --use_custom_all_reduce)" if nccl else "") \
        + ("; fp16 attention (no fp8 context FMHA in that build)" if dtypes.get("attention_dtype") else "") \
        + ("; LM head and router quantized too (gpt-fast's quantize.py, torchao's quantize_)"
           if dtypes.get("quantized_head") else "")
    if "INT4" in row["precision"].upper() and (group := re.search(r"G=(\d+)", row["precision"].upper())):
        how += f"; int4 group scales not counted (a 16-bit scale a group: +{16 / int(group.group(1)):g} bit a " \
               f"weight at G={group.group(1)})"
    if _served(row):
        if "ifb" in batch_text or "max-load" in batch_text:
            return _max_load_row(architecture, hardware, parallelism, base, mode, how)
        if load is None or "vllm bench serve" in row.get("notes", ""):
            return _vllm_serving_row(row, architecture, hardware, parallelism, base, mode, how)
        return _load_row(row, load, lengths, architecture, hardware, parallelism, base, mode, how, model)
    if "max" in batch_text or "sweep" in batch_text:
        raise _Skip("batch size of the sweep's maximum not stated")
    batch = _int(row["batch"]) or 1
    result = llm_predict(architecture, hardware, Scenario(batch=batch, prompt_tokens=prompt, generated_tokens=gen,
                                                         **dtypes), parallelism, mode=mode, graphs=graphs)
    if not result.fits:
        raise _Skip(f"the model does not fit on {parallelism.chips} x {spec} at batch {batch}")
    how += f"; batch {batch}"
    if "ttft" in metric or "first token" in metric or "time to first" in metric:
        return result.ttft_s * 1e3, how
    if "per user" in metric or (batch == 1 and "throughput" in metric and "-" == row["output_len"].strip()):
        return result.tokens_per_s_per_user, how
    if "throughput" in metric or "tokens per second" in metric:
        total = batch * gen / (result.ttft_s + (gen - 1) * result.tpot_s)
        per_gpu = "per gpu" in metric or "/gpu" in row["unit"].lower() or "per gpu" in row["unit"].lower()
        return (total / parallelism.chips if per_gpu else total), how + ("; per GPU" if per_gpu else "; total")
    if "decode tokens/s" in metric:
        return result.tokens_per_s_per_user, how
    if "per-token" in metric or "itl" in metric.split() or "inter-token" in metric or "tpot" in metric:
        return result.tpot_s * 1e3, how + ("; ITL = TPOT of a lone request" if "itl" in metric.split()
                                           or "inter-token" in metric else "")
    raise _Skip(f"metric {row['metric']!r} is not an LLM metric the model predicts")


def _load_lengths(row: dict, load: _Load, model: str):
    """The prompt and output length distributions of a row measured under a load: fixed at the row's
    ISL/OSL, or a shipped dataset's (``workloads/lengths``) where the column names one; an MLPerf row
    stating none uses its benchmark's dataset (Llama-2-70B: OpenOrca)."""
    from perfmodel.serving import parse_length
    from perfmodel.serving.workload import LENGTH_DATASETS, UNSHIPPED_DATASETS, dataset_lengths

    names = sorted((*LENGTH_DATASETS, *UNSHIPPED_DATASETS), key=len, reverse=True)  # sharegpt-8k before sharegpt
    lengths = []
    for column, side in (("input_len", "prompt"), ("output_len", "output")):
        text = row[column].strip()
        if count := _int(text):
            lengths.append(parse_length(f"fixed:{count}"))
            continue
        squeezed = re.sub(r"[\s_]", "-", text.lower())
        name = next((name for name in names if name in squeezed), None)
        if name is None and load.kind.startswith("mlperf") and model == "llama-2-70b":
            name = "openorca"  # MLPerf Inference's Llama-2-70B dataset
        if name is None and load.kind.startswith("mlperf"):
            raise _Skip(f"{column} {text!r}: the lengths of {model}'s MLPerf dataset are not stated in the row and "
                        f"no distribution of them is shipped (workloads/lengths: {', '.join(LENGTH_DATASETS)})")
        if name is None:
            raise _Skip(f"{column} {text!r} is neither a length nor a shipped dataset's name "
                        f"({', '.join(LENGTH_DATASETS)})")
        try:
            lengths.append(dataset_lengths(name, side, column))
        except PerfmodelError as error:
            raise _Skip(f"the length distribution is not shipped: {error}") from None
    return tuple(lengths)


def _served_metric(metric: str, unit: str, result, chips: int) -> tuple[float, str] | None:
    """A served run's value of a row's metric (milliseconds for latencies), and what was read."""
    words = metric.replace("(", " ").replace(")", " ").split()
    statistic = "p50" if ("median" in words or "p50" in words) else "p99" if "p99" in words else \
        "p90" if "p90" in words else "mean"
    if "ttft" in metric or "first token" in metric or "time to first" in metric:
        return getattr(result.ttft, statistic) * 1e3, f"{statistic} TTFT"
    if "itl" in words or "inter-token" in metric:
        return getattr(result.itl, statistic) * 1e3, f"{statistic} inter-token latency"
    if "tpot" in metric or "per output token" in metric or "per-token" in metric:
        return getattr(result.tpot, statistic) * 1e3, f"{statistic} TPOT"
    if "samples/s" in unit.lower() or "requests/s" in unit.lower() or "queries" in metric:
        return result.requests_per_s, "requests a second"
    if "throughput" in metric or "tokens/s" in metric or "tokens per second" in metric or "tok/s" in unit.lower():
        per_gpu = "per gpu" in metric or "/gpu" in unit.lower()
        return (result.tokens_per_s / chips if per_gpu else result.tokens_per_s), \
            "output tokens a second" + (" per GPU" if per_gpu else "")
    return None


def _load_row(row: dict, load: _Load, lengths, architecture, hardware, parallelism, scenario, mode, how,
              model: str) -> tuple[float, str]:
    """A row measured under a request rate, a number of clients or an MLPerf scenario, through the
    serving simulator (see the module docstring)."""
    from perfmodel.serving import ArrivalProcess, ClosedLoop, Server, ServingConfig, max_context, server_scenario

    prompt, output = lengths
    settings = {name: int(value) for name, value in VLLM_SETTINGS.findall(row.get("notes", ""))}
    defaults = ServingConfig()
    batch = settings.get("max-num-seqs", defaults.max_batch)
    tokens = max(settings.get("max-num-batched-tokens", defaults.max_tokens_per_step), batch)
    limits = "stated" if {"max-num-seqs", "max-num-batched-tokens"} <= set(settings) else "the simulator's defaults"
    search = load.kind != "mlperf-offline" and load.kind.startswith("mlperf") and load.value is None
    requests = settings.get("num-prompts", MLPERF_OFFLINE_SAMPLES if load.kind == "mlperf-offline"
                            else MLPERF_SERVER_REQUESTS if search else LOAD_REQUESTS)
    engine, _ = _first(ENGINES, row["system"])
    # TensorRT-LLM reserves a request's whole sequence at admission (GUARANTEED_NO_EVICT) in 32-token blocks;
    # vLLM and SGLang (and an unnamed engine) take blocks on demand.
    trtllm = engine == "trtllm"
    config = ServingConfig(max_batch=batch, max_tokens_per_step=tokens,
                           block_size=TRTLLM_TOKENS_PER_BLOCK if trtllm else defaults.block_size,
                           kv_admission="reserve" if trtllm else "on-demand")
    kv = f"{config.block_size}-token blocks, " + ("whole sequences reserved" if trtllm else "on-demand paged KV")
    turbomind = _turbomind_settings(row, load)
    if turbomind is not None:
        config, rounds = turbomind
        batch, tokens, requests = config.max_batch, config.max_tokens_per_step, int(load.value or 1) * rounds
        limits = "TurboMind's stated config.ini"
        kv = (f"{config.block_size}-token blocks on demand, capped at {config.max_kv_blocks} "
              f"(cache_max_entry_count); {rounds} requests a client (test_round); first token from the decode step "
              "after context decoding")
    scenario_name = load.kind[len("mlperf-"):].capitalize()
    try:
        server = Server(architecture, hardware, parallelism, config=config,
                        max_context=max_context(prompt, output), weight_dtype=scenario.weight_dtype,
                        kv_dtype=scenario.kv_dtype, activation_dtype=scenario.activation_dtype, mode=mode)
        if search:
            table = MLPERF_INTERACTIVE_LATENCY if load.kind == "mlperf-interactive" else MLPERF_LATENCY
            if model not in table:
                raise _Skip(f"no MLPerf {scenario_name} latency constraints recorded for {model}")
            ttft_slo, tpot_slo = table[model]
            found = server_scenario(server, requests, prompt, output, ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo)
            if found.result is None:
                raise _Skip(f"no arrival rate meets the MLPerf constraints (p99 TTFT {ttft_slo:g} s, TPOT "
                            f"{tpot_slo * 1e3:g} ms) in the simulator")
            result, arrivals = found.result, (f"MLPerf {scenario_name}: the highest Poisson rate meeting p99 TTFT "
                                              f"{ttft_slo:g} s and TPOT {tpot_slo * 1e3:g} ms, "
                                              f"{found.rate_per_s:.3g}/s")
        else:
            if load.kind == "concurrency":
                stream: ArrivalProcess | ClosedLoop = ClosedLoop(users=int(load.value or 1), think_s=0.0)
                arrivals = f"closed loop of {int(load.value or 1)} clients, no think time"
            elif load.kind == "mlperf-offline":
                stream, arrivals = ArrivalProcess(kind="burst"), "MLPerf Offline: every request at once"
            else:
                stream = ArrivalProcess(kind="poisson", rate_per_s=float(load.value or 0))
                arrivals = (f"MLPerf {scenario_name} at the row's rate: " if load.kind.startswith("mlperf") else "") + \
                    f"Poisson arrivals at {load.value:g}/s"
            result = server.simulate(stream, requests, prompt, output)
    except PerfmodelError as error:
        raise _Skip(f"the model does not fit in this configuration ({error})") from None
    value = _served_metric(row["metric"].lower(), row["unit"], result, parallelism.chips)
    if value is None:
        raise _Skip(f"metric {row['metric']!r} is not one the serving simulator reports")
    return value[0], how + (
        f"; served load simulated: {arrivals}; {requests} requests, prompt {prompt.text}, output {output.text}; "
        f"max batch {batch}, {tokens} tokens a step ({limits}), {kv}; {value[1]}"
        + (" (queueing included)" if "TTFT" in value[1] else ""))


def _turbomind_settings(row: dict, load: _Load):
    """(ServingConfig, rounds) of an LMDeploy TurboMind ``benchmark/profile_generation.py`` row, None for
    another engine. Vendor code, InternLM/lmdeploy at ebe90bc (the commit that published the A100 tables):
    ``concurrency`` threads each run ``test_round`` requests back to back (a closed loop; throughput = all
    generated tokens / the run's wall time; first-token latency from each request's start, so it holds
    the wait behind other requests); LlamaTritonModel.cc counts a ``max_context_token_num`` no larger
    than ``max_batch_size`` in session lengths, and ``num_tokens_per_iter`` defaults to it (the step's
    token budget); ``cache_max_entry_count`` >= 1 is a number of KV blocks of ``cache_block_seq_len``
    tokens, allocated as that count (not a share of the memory), taken by sequences as they grow; context
    decoding leaves a prompt's last token to the next decode step, which emits the first token
    (``ServingConfig.first_token`` "decode"; LlamaBatch.cc ``ContextDecode`` at v0.1.0a1 and ebe90bc)."""
    from perfmodel.serving import ServingConfig

    if "turbomind" not in row["system"].lower():
        return None
    if load.kind != "concurrency":
        raise _Skip("an LMDeploy TurboMind row without a concurrency (profile_generation.py's clients)")
    stated = {name: float(value) for name, value in TURBOMIND_SETTINGS.findall(row.get("notes", ""))}
    missing = [name for name in TURBOMIND_REQUIRED if name not in stated]
    if missing:
        raise _Skip(f"the TurboMind run's settings are not all stated ({', '.join(missing)})")
    if stated["cache_max_entry_count"] < 1:
        raise _Skip("cache_max_entry_count below 1 (a share of the free memory) is not modelled")
    batch, context = int(stated["max_batch_size"]), int(stated["max_context_token_num"])
    tokens = context * int(stated["session_len"]) if context <= batch else context
    config = ServingConfig(max_batch=batch, max_tokens_per_step=max(tokens, batch),
                           block_size=int(stated["cache_block_seq_len"]), memory_utilization=1.0,
                           max_kv_blocks=int(stated["cache_max_entry_count"]), first_token="decode")
    return config, int(stated["test_round"])


@dataclass(frozen=True)
class TrtllmBenchSettings:
    max_batch: int
    max_tokens: int
    kv_max_requests: float  # the heuristic's estimate of requests whose whole sequence fits in the KV cache


def trtllm_bench_settings(architecture, hardware, parallelism, scenario) -> TrtllmBenchSettings:
    """``max_batch_size`` and ``max_num_tokens`` as trtllm-bench picks them for a dataset of one
    ISL/OSL (vendor code: tensorrt_llm/bench/build/tuning.py, ``calc_engine_setting`` and
    ``finetune_setting``, https://github.com/NVIDIA/TensorRT-LLM/blob/04cba882084a25665e7f80f5bda71b35b9790b6f/
    tensorrt_llm/bench/build/tuning.py): the KV cache is 0.95 of the GPUs' memory less the weights
    (parameters x bytes per element), a request needs its whole sequence's KV (each GPU of the tp
    group holds at least one KV head), and the estimated concurrency is rounded up ("slightly
    optimistic") with a batch cap of 4096 and a token cap of 32768."""
    from perfmodel.costs.residency import on_device_capacity_bytes
    from perfmodel.dtypes import DTYPES

    gib = 2.0 ** 30
    kv_bytes = DTYPES[scenario.kv_dtype].bytes_per_element
    per_token = 2 * architecture.layers * max(parallelism.tp, architecture.kv_heads) * architecture.head_dim \
        * kv_bytes / gib
    engine = architecture.parameter_count() * DTYPES[scenario.weight_dtype].bytes_per_element / gib
    available = float(on_device_capacity_bytes(hardware)) / gib * parallelism.chips - engine
    requests = available * TRTLLM_KV_FREE_FRACTION / (per_token * (scenario.prompt_tokens + scenario.generated_tokens))
    raw_batch = min(requests, 4096) / parallelism.pp
    raw_tokens = min(raw_batch * (1 + scenario.prompt_tokens / scenario.generated_tokens), 32768)
    if raw_batch < 256:
        batch = max(64, 32 * math.ceil(raw_batch / 32))
    elif raw_batch < 1024:
        batch = 128 * math.ceil(raw_batch / 128)
    else:
        batch = 256 * math.ceil(raw_batch / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return TrtllmBenchSettings(max_batch=batch, max_tokens=tokens, kv_max_requests=requests)


def _max_load_row(architecture, hardware, parallelism, scenario, mode, how) -> tuple[float, str]:
    """A trtllm-bench max-load row through the serving simulator (see the module docstring)."""
    from perfmodel.costs.residency import on_device_capacity_bytes
    from perfmodel.serving import ArrivalProcess, Server, ServingConfig, kv_capacity, parse_length

    prompt, gen = scenario.prompt_tokens, scenario.generated_tokens
    requests = TRTLLM_BENCH_REQUESTS.get((prompt, gen))
    if requests is None:
        raise _Skip(f"the perf-overview states no request count for ISL/OSL {prompt}/{gen}")
    settings = trtllm_bench_settings(architecture, hardware, parallelism, scenario)
    if settings.kv_max_requests < 1:
        raise _Skip("the model does not fit in this configuration")
    # Every running sequence needs a token of the step's budget, so the budget is at least the batch.
    tokens = max(settings.max_tokens, settings.max_batch)
    try:
        # TensorRT-LLM gives the KV cache 0.95 of the memory left after the weights and buffers; the
        # simulator's utilization is a share of all the memory, so it is set to give the same cache.
        probe = kv_capacity(architecture, hardware, scenario, parallelism, block_size=TRTLLM_TOKENS_PER_BLOCK,
                            max_batch=settings.max_batch, max_tokens_per_step=tokens, memory_utilization=1.0)
        capacity = float(on_device_capacity_bytes(hardware))
        utilization = TRTLLM_KV_FREE_FRACTION + (1 - TRTLLM_KV_FREE_FRACTION) * (capacity - probe.budget_bytes) / capacity
        config = ServingConfig(max_batch=settings.max_batch, max_tokens_per_step=tokens,
                               block_size=TRTLLM_TOKENS_PER_BLOCK, memory_utilization=min(utilization, 1.0),
                               kv_admission="reserve")
        server = Server(architecture, hardware, parallelism, config=config, max_context=prompt + gen,
                        weight_dtype=scenario.weight_dtype, kv_dtype=scenario.kv_dtype,
                        activation_dtype=scenario.activation_dtype, mode=mode)
        result = server.simulate(ArrivalProcess(kind="burst"), requests, parse_length(f"fixed:{prompt}"),
                                 parse_length(f"fixed:{gen}"))
    except PerfmodelError as error:
        raise _Skip(f"the model does not fit in this configuration ({error})") from None
    return result.tokens_per_s, how + (
        f"; trtllm-bench max-load simulated: {requests} requests at once, max batch {settings.max_batch}, "
        f"{tokens} tokens a step (trtllm-bench's heuristic), whole sequences reserved; peak "
        f"{result.peak_kv_blocks} of {result.kv_blocks} KV blocks; total")


def _vllm_serving_row(row: dict, architecture, hardware, parallelism, scenario, mode, how) -> tuple[float, str]:
    """A ``vllm bench serve`` row through the serving simulator (see the module docstring)."""
    from perfmodel.serving import ClosedLoop, Server, ServingConfig, parse_length

    settings = {name: int(value) for name, value in VLLM_SETTINGS.findall(row.get("notes", ""))}
    missing = [f"--{name}" for name in ("num-prompts", "max-num-seqs", "max-num-batched-tokens") if name not in settings]
    users = _int(row["batch"])
    if missing or users is None:
        raise _Skip(f"the vLLM run's settings are not all stated ({', '.join(missing) or 'max concurrency'})")
    prompt, gen = scenario.prompt_tokens, scenario.generated_tokens
    batch, requests = settings["max-num-seqs"], settings["num-prompts"]
    tokens = max(settings["max-num-batched-tokens"], batch)  # every running sequence takes a token a step
    try:
        config = ServingConfig(max_batch=batch, max_tokens_per_step=tokens)
        server = Server(architecture, hardware, parallelism, config=config, max_context=prompt + gen,
                        weight_dtype=scenario.weight_dtype, kv_dtype=scenario.kv_dtype,
                        activation_dtype=scenario.activation_dtype, mode=mode)
        result = server.simulate(ClosedLoop(users=users, think_s=0.0), requests, parse_length(f"fixed:{prompt}"),
                                 parse_length(f"fixed:{gen}"))
    except PerfmodelError as error:
        raise _Skip(f"the model does not fit in this configuration ({error})") from None
    how += (f"; vllm bench serve simulated: {users} concurrent clients, {requests} requests, max {batch} sequences, "
            f"{tokens} tokens a step, on-demand paged KV ({result.peak_kv_blocks} of {result.kv_blocks} blocks at peak)")
    metric = row["metric"].lower()
    if "throughput" in metric:
        return result.tokens_per_s, how
    if "tpot" in metric and "median" in metric:
        return result.tpot.p50 * 1e3, how
    if "ttft" in metric and "mean" in metric:
        return result.ttft.mean * 1e3, how
    raise _Skip(f"metric {row['metric']!r} is not one the vLLM benchmark path predicts")


def _groq_parallelism(architecture, hardware, scenario):
    """The fewest chips that hold the model: tp 8 (growing while the heads allow), then the
    smallest pp whose weights, KV cache and activations fit in each chip's SRAM."""
    from perfmodel.llm import Parallelism
    from perfmodel.llm.metrics import placement

    tp = 8
    while tp <= architecture.heads:
        for pp in range(1, architecture.layers + 1):
            parallelism = Parallelism(tp=tp, pp=pp)
            if placement(architecture, hardware, scenario, parallelism).fits:
                return parallelism
        tp *= 2
    raise _Skip("the model does not fit on any tp x pp of this system")


def _kernel_row(row: dict, spec: str, ideal: bool = False) -> tuple[float, str]:
    from perfmodel.costs.all_reduce import NCCL_LIBRARY, NVLS
    from perfmodel.roofline import evaluate
    from perfmodel.workload.ir import Graph, Op, TensorSpec

    hardware = load_for_prediction(spec, ideal=ideal)
    workload, metric = row["workload"], row["metric"].lower()
    shape = re.search(r"(\d+)\s*x\s*(\d+)\s*x\s*(\d+)", workload)
    if "gemm" in workload.lower() and shape and "tflop" in row["unit"].lower():
        m, n, k = (int(value) for value in shape.groups())
        dtype = "fp8" if "FP8" in row["precision"].upper() else "bf16"
        operands = (TensorSpec(shape=(m, k), dtype=dtype), TensorSpec(shape=(k, n), dtype=dtype))
        op = Op(name="gemm", kind="matmul", inputs=operands,
                outputs=(TensorSpec(shape=(m, n), dtype="bf16"),), attrs={"m": m, "n": n, "k": k})
        timing = evaluate(Graph(name="gemm", ops=[op]), hardware, mode="graph").ops[0]
        device_s = max(timing.compute_s, *timing.memory_s.values()) + timing.fixed_s
        return timing.flops / device_s / 1e12, f"one {m}x{n}x{k} {dtype} matmul, device time"
    lowered = workload.lower()
    if "bandwidth" in metric and any(word in lowered for word in ("hbm", "stream", "roofline", "triad")):
        elements = 1 << 28
        streams = {"copy": (1, 1), "triad": (2, 1), "dot": (2, 0), "sum": (1, 0)}  # (reads, writes)
        reads, writes = next((value for key, value in streams.items() if key in lowered), (1, 1))
        tensor = TensorSpec(shape=(elements,), dtype="fp32")
        op = Op(name="stream", kind="elementwise", inputs=(tensor,) * reads, outputs=(tensor,) * writes)
        timing = evaluate(Graph(name="stream", ops=[op]), hardware, mode="graph").ops[0]
        level = hardware.outermost_on_device.name
        scale = 1e12 if "TB/s" in row["unit"] else 1e9
        achieved = timing.bytes[level] / timing.memory_s[level] / scale
        return achieved, f"{reads} read(s) + {writes} write(s) of 1 GiB fp32 arrays"
    if "allreduce" in workload.lower().replace(" ", "") and "bus bandwidth" in metric:
        size = re.search(r"(\d+)\s*(MB|GB)", workload)
        payload = int(size.group(1)) * (1 << 20 if size.group(2) == "MB" else 1 << 30)
        group = _int(row["chips"]) or 8
        # nccl-tests run under NCCL_ALGO=NVLS (the row says so) reduce in the NVSwitch: NCCL's NVLS algorithm,
        # whatever an engine's rule would pick; busBW keeps nccl-tests' ring-based definition either way.
        nvls = "nvls" in f"{row['system']} {workload} {row.get('notes', '')}".lower()
        forced = {"library": NCCL_LIBRARY, "algorithm": NVLS} if nvls else {}
        op = Op(name="allreduce", kind="collective", attrs={"collective": "all_reduce", "bytes": payload,
                                                              "group_size": group, "dtype": "bf16", **forced})
        timing = evaluate(Graph(name="allreduce", ops=[op]), hardware, mode="graph").ops[0]
        bus = 2 * (group - 1) / group * payload / timing.link_s
        algorithm = "NCCL NVLS (in-switch reduction)" if nvls else "ring"
        return bus / 1e9, f"{algorithm} all-reduce of {size.group(0)} over {group} GPUs, busBW = 2(p-1)/p x size / time"
    if "host-to-device" in workload.lower():
        link = next(link for link in hardware.links.values() if link.kind == "host")
        return link.bandwidth_bytes_per_s_per_direction / 1e9, f"{link.name} bandwidth per direction"
    if "device-to-device" in lowered or "device_to_device" in lowered:
        # a 1 GiB peer copy priced on the chip-to-chip link (its achievable efficiency where the spec has one);
        # nvbandwidth's bidirectional tests copy both ways at once and report the sum (testcases.h,
        # DeviceToDeviceBidirReadSM: "Copies are run in both directions between each pair, and the sum is reported")
        link = next(link for link in hardware.links.values() if link.kind == "chip_to_chip")
        payload = 1 << 30
        op = Op(name="copy", kind="collective", attrs={"collective": "send", "bytes": payload, "group_size": 2,
                                                         "dtype": "bf16", "link": link.name})
        timing = evaluate(Graph(name="copy", ops=[op]), hardware, mode="graph").ops[0]
        directions = 2 if "bidirectional" in lowered else 1
        return directions * payload / timing.link_s / 1e9, (
            f"1 GiB peer copy over {link.name}" + (", both directions at once, the sum" if directions == 2 else ""))
    raise _Skip("kernel not modeled (shape, heads or flags not stated)")


class _Skip(Exception):
    pass


def _training_recipes() -> dict[tuple[str, str, str], dict]:
    """``workloads/validation/training_recipes.csv``: each training row's published configuration,
    keyed by the measurement's (system, chips, workload); sources in TRAINING_SOURCES.md."""
    path = data_directory("workloads") / "validation" / "training_recipes.csv"
    with path.open(newline="", encoding="utf-8") as stream:
        return {(row["system"], row["chips"], row["workload"]): row for row in csv.DictReader(stream)}


def _flops_convention(text: str) -> str:
    if "76bd53b" in text:
        return "maxtext-2023"
    if text.startswith("PaLM"):
        return "palm"
    return "maxtext-causal" if "post-PR#1988" in text else "maxtext"


def _training_row(row: dict, spec: str, ideal: bool = False) -> tuple[float, str]:
    """A published training run, predicted with its published layout (``training_recipes.csv``):
    the data axes (ICI and DCN) as FSDP and replicas, ICI tensor parallelism, one micro-batch per step
    (no accumulation), one slice per fast-link domain; the metric's FLOPs counted as its source counts
    them (``training.published_flops``)."""
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.training import Layout, TrainingSetup, train_predict
    from perfmodel.training.published_flops import flops_per_sequence

    recipe = _training_recipes().get((row["system"], row["chips"], row["workload"]))
    if recipe is None:
        raise _Skip("no published training configuration in training_recipes.csv")
    if not recipe["model"]:
        raise _Skip("training tokens and step count not published (end-to-end time cannot be reproduced)")
    hardware, architecture = load_for_prediction(spec, ideal=ideal), load_architecture(recipe["model"])

    def degree(name: str) -> int:
        return _int(recipe[name]) or 1

    slices = degree("dcn_data") * degree("dcn_fsdp")
    tp, pp = degree("ici_tensor"), degree("pipeline")
    fsdp, dp = degree("ici_fsdp") * degree("dcn_fsdp"), degree("ici_data") * degree("dcn_data")
    global_batch = int(recipe["global_batch_sequences"])
    per_device = _int(recipe["per_device_batch"])
    how = ""
    if per_device and global_batch // per_device != tp * pp * fsdp * dp and "expert" in recipe["notes"]:
        folded = global_batch // per_device // (tp * pp * fsdp * dp)  # an expert axis shards the batch like FSDP
        fsdp *= folded
        how = f"; expert axis ({folded}) folded into fsdp"
    layout = Layout(tp=tp, fsdp=fsdp, dp=dp, pp=pp, micro_batch=global_batch // (fsdp * dp))  # no accumulation
    master = "bf16" if recipe["weights_dtype"] == "bfloat16" else "fp32"
    capacity = recipe["moe_capacity_factor"]  # empty: a dropless MoE, or no experts
    setup = TrainingSetup(global_batch=global_batch, seq_len=int(recipe["seq_len"]), master_dtype=master,
                          recompute=recipe["remat"] or "none", kept=tuple(recipe["kept_matmuls"].split()) or None,
                          offload=recipe["offload"] == "yes", moe_capacity_factor=float(capacity) if capacity else None,
                          attention_block=_int(recipe.get("attention_block", "")),
                          attention_kernel=recipe.get("attention_kernel") or None)
    result = train_predict(architecture, hardware, setup, layout, domain_chips=layout.chips // slices)
    if not result.fits:  # the run did fit: say by how much the memory estimate overshoots, and predict
        how += (f"; memory estimate {result.memory.total / 2**30:.0f} GiB per chip exceeds "
                f"{result.capacity_bytes / 2**30:.0f} GiB")
    policy = setup.recompute + (f" keeping {'/'.join(setup.kept)}" if setup.kept else "") + \
        (" offloaded to the host" if setup.offload else "")
    if setup.moe_capacity_factor is not None:
        how += f"; token-dropping MoE, capacity factor {setup.moe_capacity_factor:g}"
    how = (f"{architecture.name}, {layout.label()}, recompute {policy}, {slices} slice(s), global batch "
           f"{global_batch} x {setup.seq_len}; MFU {100 * result.mfu:.1f}%" + how)
    metric = row["metric"].lower()
    peak = hardware.peak_flops_per_s(setup.compute_dtype, "matrix")
    convention = _flops_convention(recipe["flops_convention"])
    published = flops_per_sequence(architecture, setup.seq_len, convention) * global_batch  # all chips
    if "tokens/s" in metric:
        return result.tokens_per_s_per_chip, how
    if "tflop/s per chip" in metric:
        return published / layout.chips / result.step_s / 1e12, how + f"; FLOPs counted as {convention}"
    if "(mfu)" in metric:
        return 100 * published / (result.step_s * peak * layout.chips), how + f"; FLOPs counted as {convention}"
    if "(hfu)" in metric:
        recomputed = (result.hfu - result.mfu) * result.step_s * peak * layout.chips
        return 100 * (published + recomputed) / (result.step_s * peak * layout.chips), \
            how + f"; FLOPs counted as {convention} plus the predicted recomputation"
    raise _Skip(f"metric {row['metric']!r} is not a training metric the model predicts")


def _in_row_unit(predicted_ms_or_rate: float, unit: str) -> float:
    """An LLM row's prediction in the row's own unit: latencies come in milliseconds (a row in seconds,
    LMDeploy's first-token latency say, compares 1000x off otherwise), converted to the row's time unit
    (``units.parse_quantity``; "ms/token" is milliseconds); rates and counts are left as they are."""
    try:
        row_unit_s = parse_quantity(f"1 {unit.strip().removesuffix('/token')}", "seconds")
    except UnitError:
        return predicted_ms_or_rate
    return predicted_ms_or_rate * 1e-3 / row_unit_s


def validate_row(line: int, row: dict, ideal: bool = False, engine: str | None = None) -> ValidationRow:
    base = dict(line=line, group=row["group"], system=row["system"], workload=row["workload"], metric=row["metric"],
                measured=_number(row["value"]), unit=row["unit"], source=(row.get("source") or "").split(" ")[0])
    try:
        if base["measured"] is None:
            raise _Skip(f"value {row['value']!r} is not a number")
        if row["value"].strip().startswith((">", "<")):
            raise _Skip(f"value {row['value']!r} is a bound, not a measurement")
        spec, known = _first(SYSTEMS, row["system"])
        if spec is None:
            detail = " (PCIe card, GH200 or unstated variant)" if known else ""
            raise _Skip("no spec for this system in the catalog" + detail)
        if "training" in row["workload"].lower():
            predicted, how = _training_row(row, spec, ideal)
            resolved = load_for_prediction(spec, ideal=ideal)
            return ValidationRow(**base, predicted=predicted, hardware=resolved.name, family=resolved.family, how=how,
                                 kind="training")
        model, _ = _first(MODELS, row["workload"])
        if row["group"] == "F" and not (model is not None and "decode" in row["metric"].lower()):
            predicted, how = _kernel_row(row, spec, ideal)
            kind = "kernel"
        else:  # an LLM row (group F's end-to-end decode rows too: eager vs compiled)
            if model is None:
                raise _Skip("no shipped config for this model")
            if "unstated" in row["chips"].lower() and spec != "groq-lpu-v1":
                raise _Skip("chip count not stated")
            spec = _serving_spec(spec, row["system"], ideal, engine)
            predicted, how = _llm_row(row, spec, model, ideal)
            predicted = _in_row_unit(predicted, row["unit"])
            kind = "served" if _served(row) else "scenario"
        resolved = load_for_prediction(spec, ideal=ideal)
        return ValidationRow(**base, predicted=predicted, hardware=resolved.name, family=resolved.family, how=how,
                             kind=kind)
    except _Skip as skip:
        return ValidationRow(**base, skipped=str(skip))
    except PerfmodelError as error:
        return ValidationRow(**base, skipped=f"cannot reproduce: {error}")


def default_csv() -> Path:
    return data_directory("workloads") / "validation" / "published_measurements.csv"


def validate(path: str | Path | None = None, *, ideal: bool = False, engine: str | None = None,
             mapper: Mapper = serial_map) -> list[ValidationRow]:
    """Every row predicted (or skipped with its reason), with each device's achievable overlay where
    one ships (an LLM row on a GPU: the overlay of the engine it names, ``_serving_spec``), or the
    datasheet specs with ``ideal``. Results are remembered per file (and its
    modification time) within a process: the serving rows simulate tens of thousands of requests.
    ``mapper`` runs the rows (``perfmodel.fanout``: on a Dask cluster, say); its rows are the same."""
    path = Path(path) if path else default_csv()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError as error:
        raise PerfmodelError(f"cannot read {path}: {error}") from None
    if mapper is not serial_map:
        return list(mapper(_RowValidator(ideal=ideal, engine=engine), _read_rows(str(path.resolve()))))
    return list(_validate_file(str(path.resolve()), stamp, ideal, engine))


@dataclass(frozen=True, kw_only=True)
class _RowValidator:
    ideal: bool
    engine: str | None

    def __call__(self, numbered: tuple[int, dict]) -> ValidationRow:
        return validate_row(numbered[0], numbered[1], self.ideal, self.engine)


def _read_rows(path: str) -> list[tuple[int, dict]]:
    """The CSV's rows with their line numbers, each checked for the columns and counts a prediction reads."""
    with Path(path).open(newline="", encoding="utf-8") as stream:
        reader = csv.DictReader(stream)
        required = {"group", "system", "chips", "workload", "precision", "batch", "input_len", "output_len", "metric",
                    "value", "unit"}
        missing = required - set(reader.fieldnames or [])
        if missing:
            raise PerfmodelError(f"{path}: missing column(s) {sorted(missing)}")
        rows = list(enumerate(reader, start=2))
    for number, row in rows:  # refused before any row is predicted: a wrong count would predict another setup
        problem = _count_problem(row)
        if problem:
            raise PerfmodelError(f"{path}: row {number}: {problem}")
    return rows


@functools.lru_cache(maxsize=8)
def _validate_file(path: str, stamp: int, ideal: bool, engine: str | None) -> tuple[ValidationRow, ...]:
    return tuple(serial_map(_RowValidator(ideal=ideal, engine=engine), _read_rows(path)))


def summary(rows: list[ValidationRow]) -> dict:
    """Median |error| per group and per family, over predicted rows."""
    result: dict[str, dict[str, float]] = {"group": {}, "family": {}}
    for key in ("group", "family"):
        values: dict[str, list[float]] = {}
        for row in rows:
            if row.error is not None:
                values.setdefault(getattr(row, key), []).append(abs(row.error))
        result[key] = {name: statistics.median(errors) for name, errors in sorted(values.items())}
    errors = [abs(row.error) for row in rows if row.error is not None]
    result["all"] = statistics.median(errors) if errors else None
    result["predicted"] = len(errors)
    result["skipped"] = sum(1 for row in rows if row.skipped)
    return result
