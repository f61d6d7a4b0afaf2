"""LLM inference metrics from the engine: TTFT, TPOT over a growing context, throughput, memory.

* TTFT = the prefill pass through all ``pp`` stages (+ the activations sent between stages).
* TPOT = one decode step through all stages, averaged over the generation: decode time is
  piecewise linear in the context length, so Simpson's rule on the first, middle and last context
  is exact for the linear part.
* tokens/s = batch / TPOT (no overlap of pipeline stages across micro-batches: conservative).
* Memory per chip: weights / (tp x pp), the KV cache of the sequences at full length, activation
  buffers during prefill (``ACTIVATION_BUFFERS`` live tensors of tokens x (hidden + intermediate/tp))
  and a logits buffer. The KV cache and activations must fit in the device's on-device memory;
  weights too, unless the device streams them from an external store (Cerebras MemoryX).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, check, pipeline_send, stage_graph
from perfmodel.roofline.evaluate import evaluate_arrays
from perfmodel.roofline.results import evaluate
from perfmodel.workload.ir import Graph

ACTIVATION_BUFFERS = 2  # input and output of the widest op are live at once
LOGIT_BYTES = 4  # fp32 logits
SIMPSON_WEIGHTS = (1 / 6, 4 / 6, 1 / 6)
HOST_MODES = {"eager": ("dynamic",), "graph": ("graph", "static")}


@dataclass(frozen=True, kw_only=True)
class LLMResult:
    model: str
    hardware: str
    mode: str
    scenario: Scenario
    parallelism: Parallelism
    ttft_s: float
    tpot_s: float
    e2e_s: float
    tokens_per_s_per_user: float
    tokens_per_s: float
    tokens_per_s_per_chip: float
    memory_bytes: dict
    capacity_bytes: float
    fits: bool
    weights_streamed: bool
    bound_by_phase: dict
    time_by_bound_by_phase: dict
    power_watts: float

    @property
    def chips(self) -> int:
        return self.parallelism.chips

    def to_dict(self) -> dict:
        return {
            "model": self.model, "hardware": self.hardware, "mode": self.mode, "chips": self.chips,
            "tp": self.parallelism.tp, "pp": self.parallelism.pp, "ep": self.parallelism.ep,
            "batch": int(self.scenario.batch), "prompt": self.scenario.prompt_tokens,
            "gen": self.scenario.generated_tokens, "weights": self.scenario.weight_dtype, "kv": self.scenario.kv_dtype,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s,
            "tokens_per_s_per_user": self.tokens_per_s_per_user, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_chip": self.tokens_per_s_per_chip, "memory_bytes": self.memory_bytes,
            "capacity_bytes_per_chip": self.capacity_bytes, "fits": self.fits,
            "weights_streamed": self.weights_streamed, "bound_by_phase": self.bound_by_phase,
            "time_by_bound_by_phase": self.time_by_bound_by_phase, "power_watts": self.power_watts,
        }


def execution_mode(hardware: Hardware, host_mode: str | None) -> str:
    """'eager' -> the spec's dynamic mode; 'graph' -> its graph or static mode; None -> default."""
    if host_mode is None:
        return hardware.scheduling.default_mode
    if host_mode not in HOST_MODES:
        raise PerfmodelError(f"mode must be 'eager' or 'graph', got {host_mode!r}")
    for candidate in HOST_MODES[host_mode]:
        if candidate in hardware.scheduling.modes:
            return candidate
    return hardware.scheduling.default_mode


def memory_per_chip(architecture: Architecture, scenario: Scenario, parallelism: Parallelism) -> dict:
    weight_bytes = DTYPES[scenario.weight_dtype].bytes_per_element
    kv_bytes = DTYPES[scenario.kv_dtype].bytes_per_element
    act_bytes = DTYPES[scenario.activation_dtype].bytes_per_element
    kv_heads_share = max(architecture.kv_heads // parallelism.tp, 1) / architecture.kv_heads
    tokens = np.asarray(scenario.batch) * (scenario.prompt_tokens + scenario.generated_tokens)
    kv = architecture.kv_bytes_per_token(kv_bytes) / parallelism.pp * kv_heads_share * tokens
    prompt_tokens = np.asarray(scenario.batch) * scenario.prompt_tokens
    widest = architecture.hidden + architecture.intermediate * max(architecture.experts_per_token, 1) / parallelism.tp
    activations = ACTIVATION_BUFFERS * prompt_tokens * widest * act_bytes
    workspace = np.asarray(scenario.batch) * architecture.vocab / parallelism.tp * LOGIT_BYTES
    return {"weights": architecture.parameter_count() * weight_bytes / parallelism.chips, "kv_cache": kv,
            "activations": activations, "workspace": workspace}


def _phase_time(graph: Graph, hardware: Hardware, mode: str, parallelism: Parallelism, send: Graph):
    arrays = evaluate_arrays(graph, hardware, mode=mode)
    stage = arrays.total_s.sum(axis=0) + arrays.program_s
    total = parallelism.pp * stage
    if parallelism.pp > 1:
        send_arrays = evaluate_arrays(send, hardware, mode=mode, fuse=False)
        total = total + (parallelism.pp - 1) * send_arrays.total_s.sum(axis=0)
    return total


def llm_predict(architecture: Architecture, hardware: Hardware, scenario: Scenario,
                parallelism: Parallelism = Parallelism(), *, mode: str | None = None) -> LLMResult:
    """Predict one scenario of ``architecture`` on ``parallelism.chips`` chips of ``hardware``."""
    check(architecture, scenario, parallelism)
    if parallelism.pp > 1 or parallelism.tp > 1:
        if not any(link.kind in ("chip_to_chip", "network") for link in hardware.links.values()):
            raise PerfmodelError(f"{hardware.name} has no chip-to-chip link in its spec, so it cannot run tp/pp > 1")
    execution = execution_mode(hardware, mode)
    prompt, gen = scenario.prompt_tokens, scenario.generated_tokens
    prefill = stage_graph(architecture, scenario, parallelism, phase="prefill", context=prompt)
    send_prefill = Graph(name="send", ops=[pipeline_send(scenario, architecture, "prefill")])
    send_decode = Graph(name="send", ops=[pipeline_send(scenario, architecture, "decode")])
    ttft = float(_phase_time(prefill, hardware, execution, parallelism, send_prefill))
    contexts = (prompt + 1, prompt + max(gen // 2, 1), prompt + gen)
    decode_graphs = [stage_graph(architecture, scenario, parallelism, phase="decode", context=c) for c in contexts]
    steps = [float(_phase_time(g, hardware, execution, parallelism, send_decode)) for g in decode_graphs]
    tpot = sum(weight * step for weight, step in zip(SIMPSON_WEIGHTS, steps, strict=True))
    prefill_eval = evaluate(prefill, hardware, mode=execution)
    decode_eval = evaluate(decode_graphs[1], hardware, mode=execution)
    memory = {key: float(value) for key, value in memory_per_chip(architecture, scenario, parallelism).items()}
    capacity = sum(level.total_capacity_bytes for level in hardware.memory if not level.off_device)
    everything = sum(memory.values())
    external = any(level.off_device for level in hardware.memory)
    streamed = everything > capacity and external
    fits = everything <= capacity or (streamed and everything - memory["weights"] <= capacity)
    tokens_per_s = scenario.batch / tpot
    return LLMResult(
        model=architecture.name, hardware=hardware.name, mode=execution, scenario=scenario, parallelism=parallelism,
        ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + (gen - 1) * tpot, tokens_per_s_per_user=1 / tpot,
        tokens_per_s=tokens_per_s, tokens_per_s_per_chip=tokens_per_s / parallelism.chips, memory_bytes=memory,
        capacity_bytes=capacity, fits=bool(fits), weights_streamed=bool(streamed),
        bound_by_phase={"prefill": prefill_eval.bound, "decode": decode_eval.bound},
        time_by_bound_by_phase={"prefill": prefill_eval.time_by_bound, "decode": decode_eval.time_by_bound},
        power_watts=hardware.power.tdp_watts * parallelism.chips)


def max_batch(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism) -> int:
    """The largest batch whose weights, KV cache and activations fit on each chip (0 if none)."""
    capacity = sum(level.total_capacity_bytes for level in hardware.memory if not level.off_device)
    one = memory_per_chip(architecture, _with_batch(scenario, 1), parallelism)
    per_sequence = float(one["kv_cache"] + one["activations"] + one["workspace"])
    streamed = any(level.off_device for level in hardware.memory) and one["weights"] > capacity
    free = capacity - (0.0 if streamed else one["weights"])
    return max(int(free // per_sequence), 0) if per_sequence > 0 else 0


def _with_batch(scenario: Scenario, batch) -> Scenario:
    from dataclasses import replace

    return replace(scenario, batch=batch)


def continuous_batching_throughput(architecture, hardware, scenario: Scenario, parallelism: Parallelism,
                                   concurrency: int, *, mode: str | None = None) -> float:
    """Steady-state tokens/s with ``concurrency`` sequences decoding while finished ones are replaced:
    each cycle generates concurrency x gen tokens in gen decode steps plus one prefill per sequence."""
    full = llm_predict(architecture, hardware, _with_batch(scenario, concurrency), parallelism, mode=mode)
    single = llm_predict(architecture, hardware, _with_batch(scenario, 1), parallelism, mode=mode)
    gen = scenario.generated_tokens
    return concurrency * gen / (gen * full.tpot_s + concurrency * single.ttft_s)
