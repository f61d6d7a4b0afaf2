"""Deployment sizing: the fewest chips of a system (and the parallelism) that meet TTFT and TPOT
targets at a request rate (pure core).

For each parallelism (tp over the chip-to-chip domain, pp over layers) whose weights and one
sequence's KV cache fit, TPOT is evaluated for every batch that fits, at once (the decode graph's
batch is a numpy array). The largest batch that meets the TPOT target serves as the replica's
concurrency; its steady throughput under continuous batching is
``concurrency x gen / (gen x TPOT + prefill of concurrency prompts batched together)``
(``metrics.batched_prefill_s``), and replicas are added until they carry ``rate x gen`` tokens per
second. TTFT is a batch-1 prefill (no queueing). The option with the
fewest chips wins; the Pareto table lists options not beaten on both chips and TPOT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from perfmodel.costs.residency import has_external_store, on_device_capacity_bytes
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import resolve_mode
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, check, pipeline_send, stage_graph
from perfmodel.llm.metrics import batched_prefill_s, llm_predict, max_batch, phase_time
from perfmodel.roofline.arrays import evaluate_arrays
from perfmodel.workload.ir import Graph

MAX_BATCH_EVALUATED = 4096


@dataclass(frozen=True, kw_only=True)
class Targets:
    ttft_s: float
    tpot_s: float
    rate_per_s: float
    prompt_tokens: int
    generated_tokens: int


@dataclass(frozen=True, kw_only=True)
class SizingOption:
    hardware: str
    parallelism: Parallelism
    replicas: int
    concurrency: int
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    memory_bytes_per_chip: float
    capacity_bytes_per_chip: float
    power_watts: float
    cost_usd_per_hour: float | None
    meets_targets: bool

    @property
    def chips(self) -> int:
        return self.replicas * self.parallelism.chips

    def to_dict(self) -> dict:
        return {"hardware": self.hardware, "chips": self.chips, "replicas": self.replicas,
                "tp": self.parallelism.tp, "pp": self.parallelism.pp, "concurrency": self.concurrency,
                "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "tokens_per_s": self.tokens_per_s,
                "memory_bytes_per_chip": self.memory_bytes_per_chip,
                "capacity_bytes_per_chip": self.capacity_bytes_per_chip, "power_watts": self.power_watts,
                "cost_usd_per_hour": self.cost_usd_per_hour, "meets_targets": self.meets_targets}


def _domain(hardware: Hardware) -> int:
    sizes = [link.max_chips or 1 for link in hardware.links.values() if link.kind in ("chip_to_chip", "network")]
    return max(sizes, default=1)


def candidate_parallelisms(architecture: Architecture, hardware: Hardware, scenario: Scenario) -> list[Parallelism]:
    """tp: powers of two within the chip-to-chip domain that the heads allow; pp: powers of two, and
    the smallest pp whose weights fit on each chip (SRAM-only systems need exactly that)."""
    domain = _domain(hardware)
    capacity, streams = on_device_capacity_bytes(hardware), has_external_store(hardware)
    weight_bytes = architecture.parameter_count() * _bytes(scenario.weight_dtype)
    options = []
    tp = 1
    while tp <= min(domain, architecture.heads):
        pps = {1 << i for i in range(int(math.log2(architecture.layers)) + 1)}
        smallest = math.ceil(weight_bytes / (tp * capacity * 0.9))
        if not streams and smallest <= architecture.layers:
            pps.update({smallest, min(smallest + 1, architecture.layers)})
        for pp in sorted(pps):
            parallelism = Parallelism(tp=tp, pp=pp)
            if tp * pp > 1 and domain < 2:
                continue
            try:
                check(architecture, scenario, parallelism)
            except PerfmodelError:  # an invalid combination (heads not divisible...) is not a candidate
                continue
            options.append(parallelism)
        tp *= 2
    return options


def _bytes(dtype: str) -> float:
    from perfmodel.dtypes import DTYPES

    return DTYPES[dtype].bytes_per_element


def size_system(architecture: Architecture, hardware: Hardware, targets: Targets, *, weight_dtype: str = "bf16",
                kv_dtype: str = "bf16", activation_dtype: str = "bf16", expert_weight_dtype: str | None = None,
                mode: str | None = None) -> list[SizingOption]:
    """Every viable option for ``hardware``, cheapest (fewest chips) first. ``expert_weight_dtype``:
    the routed experts' weights (``Scenario.expert_weight_dtype``; None: ``weight_dtype``)."""
    base = Scenario(batch=1, prompt_tokens=targets.prompt_tokens, generated_tokens=targets.generated_tokens,
                    weight_dtype=weight_dtype, kv_dtype=kv_dtype, activation_dtype=activation_dtype,
                    expert_weight_dtype=expert_weight_dtype)
    check(architecture, base, Parallelism())  # a bad dtype is refused, not screened out as "no option fits"
    execution = resolve_mode(hardware, mode)
    options = []
    for parallelism in candidate_parallelisms(architecture, hardware, base):
        largest = min(max_batch(architecture, hardware, base, parallelism), MAX_BATCH_EVALUATED)
        if largest < 1:
            continue
        single = llm_predict(architecture, hardware, base, parallelism, mode=mode)
        batches = np.unique(np.geomspace(1, largest, num=min(largest, 24)).astype(np.int64))
        scenario = replace(base, batch=batches)
        context = targets.prompt_tokens + max(targets.generated_tokens // 2, 1)
        decode = stage_graph(architecture, scenario, parallelism, phase="decode", context=context)
        send = Graph(name="send", ops=[pipeline_send(scenario, architecture, "decode")])
        stage = evaluate_arrays(decode, hardware, mode=execution, stream_items=batches)
        tpot = np.broadcast_to(phase_time(stage, hardware, parallelism, send), batches.shape)
        ok = tpot <= targets.tpot_s
        index = int(np.nonzero(ok)[0][-1]) if ok.any() else 0
        concurrency, step = int(batches[index]), float(tpot[index])
        gen = targets.generated_tokens
        prefill = batched_prefill_s(architecture, hardware, base, parallelism, concurrency, mode=mode)
        throughput = concurrency * gen / (gen * step + prefill)
        needed = targets.rate_per_s * gen
        replicas = max(1, math.ceil(needed / throughput))
        per_chip = single.memory_bytes.for_sequences(concurrency).total
        chips = replicas * parallelism.chips
        price = hardware.price_usd_per_hour
        options.append(SizingOption(
            hardware=hardware.name, parallelism=parallelism, replicas=replicas, concurrency=concurrency,
            ttft_s=single.ttft_s, tpot_s=step, tokens_per_s=throughput * replicas, memory_bytes_per_chip=per_chip,
            capacity_bytes_per_chip=single.capacity_bytes, power_watts=hardware.power.tdp_watts * chips,
            cost_usd_per_hour=None if price is None else price * chips,
            meets_targets=bool(ok.any() and single.ttft_s <= targets.ttft_s)))
    return sorted(options, key=lambda o: (not o.meets_targets, o.chips, o.tpot_s))


def pareto(options: list[SizingOption]) -> list[SizingOption]:
    """Options that meet the targets and that no other option beats on both chips and TPOT."""
    viable = [o for o in options if o.meets_targets]
    return [o for o in viable
            if not any((other.chips <= o.chips and other.tpot_s < o.tpot_s)
                       or (other.chips < o.chips and other.tpot_s <= o.tpot_s) for other in viable)]
