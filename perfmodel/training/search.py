"""Find the fastest training layout that fits (pure core).

Every layout of ``chips`` is a product tp x cp x fsdp x pp x dp (``training.layout``). The search
tries tensor degrees up to 16 that divide the heads within one fast-link domain (Megatron-LM and
MaxText recipes stay at or below 8), context degrees up to 8 that leave each chip at least 2048
tokens of a sequence (shorter shards only add ring traffic),
pipeline depths that divide the layers, three ways to spend the remaining data-parallel chips
(all FSDP; all replicas with ZeRO-1; FSDP inside a domain and replicas across), micro-batches of
powers of two and every recompute policy (unless one is fixed). The per-micro-batch costs depend
only on (tp, cp, recompute) and are priced once for all micro-batch sizes in one vectorized
evaluation, so a search over thousands of layouts takes seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from perfmodel.costs.residency import on_device_capacity_bytes
from perfmodel.errors import PerfmodelError
from perfmodel.fanout import Mapper, serial_map
from perfmodel.hardware.execution_models import resolve_mode
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.training.layout import RECOMPUTE_POLICIES, Layout, TrainingSetup, check
from perfmodel.training.step import (
    TrainingResult,
    default_domain_chips,
    micro_batch_costs,
    model_flops_per_sequence,
    train_predict,
    training_memory,
)

MAX_CONTEXT_PARALLEL = 8
MAX_TENSOR_PARALLEL = 16
MIN_TOKENS_PER_CONTEXT_SHARD = 2048
MAX_MICRO_BATCH = 16


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    best: TrainingResult | None
    ranked: tuple[TrainingResult, ...]    # fitting layouts, fastest first
    tried: int
    rejected: int                          # layouts that break a constraint or do not fit


def _divisors(value: int) -> list[int]:
    return [d for d in range(1, value + 1) if value % d == 0]


def _data_splits(rest: int, inner: int, domain: int) -> list[tuple[int, int, int]]:
    """(fsdp, dp, zero) ways to use ``rest`` data-parallel chips whose stride is ``inner``."""
    if rest == 1:
        return [(1, 1, 0)]
    splits = {(rest, 1, 0), (1, rest, 1)}
    inside = max(d for d in _divisors(rest) if d * inner <= max(domain, inner))
    splits.add((inside, rest // inside, 0))
    return sorted(splits)


def candidate_layouts(architecture: Architecture, setup: TrainingSetup, chips: int, domain: int):
    """Every layout the search tries (before fitting), grouped by what their micro-batch costs share."""
    a = architecture
    tensor = [t for t in _divisors(chips) if a.heads % t == 0 and a.intermediate % t == 0
              and t <= min(domain, MAX_TENSOR_PARALLEL)
              and (a.kv_heads % t == 0 or t % a.kv_heads == 0)]
    for tp in tensor:
        for cp in (c for c in (1, 2, 4, 8) if c <= MAX_CONTEXT_PARALLEL and tp * c <= domain
                   and setup.seq_len % c == 0 and (chips // tp) % c == 0
                   and (c == 1 or (setup.seq_len // c >= MIN_TOKENS_PER_CONTEXT_SHARD
                                   and not setup.mtp))):  # MTP is not modelled with context parallelism
            for pp in (p for p in _divisors(chips // (tp * cp)) if a.layers % p == 0):
                rest = chips // (tp * cp * pp)
                for fsdp, dp, zero in _data_splits(rest, tp * cp, domain):
                    shards = fsdp * dp
                    if setup.global_batch % shards:
                        continue
                    micro = [m for m in (2 ** i for i in range(MAX_MICRO_BATCH.bit_length()))
                             if m <= MAX_MICRO_BATCH and (setup.global_batch // shards) % m == 0
                             and (pp == 1 or setup.global_batch // (shards * m) >= pp)]
                    for m in micro:
                        yield Layout(dp=dp, fsdp=fsdp, tp=tp, pp=pp, cp=cp, zero=zero, micro_batch=m)


def search(architecture: Architecture, hardware: Hardware, setup: TrainingSetup, chips: int, *,
           mode: str | None = None, domain_chips: int | None = None, recompute: tuple[str, ...] = RECOMPUTE_POLICIES,
           keep: int = 10, mapper: Mapper = serial_map) -> SearchResult:
    """The fastest layouts of ``chips`` that fit, over every ``recompute`` policy given. The layouts
    that share their micro-batch costs (a recompute policy, tp and cp) are one piece of work; ``mapper``
    runs the pieces (``perfmodel.fanout``: here, or on a Dask cluster; the answer is the same)."""
    if chips < 1:
        raise PerfmodelError(f"chips must be at least 1, got {chips}")
    execution = resolve_mode(hardware, mode)
    domain = domain_chips or default_domain_chips(hardware, chips)
    groups: list[_Group] = []
    for policy in recompute:
        policy_setup = replace(setup, recompute=policy)
        members: dict[tuple[int, int], list[Layout]] = {}
        for layout in candidate_layouts(architecture, policy_setup, chips, domain):
            members.setdefault((layout.tp, layout.cp), []).append(layout)
        groups.extend(_Group(setup=policy_setup, tp=tp, cp=cp, layouts=tuple(layouts))
                      for (tp, cp), layouts in members.items())
    # MFU's model FLOPs, priced once (with the first priced policy's setup) for every layout
    flops = model_flops_per_sequence(architecture, hardware, groups[0].setup) * setup.global_batch if groups else 0.0
    price = _GroupPricer(architecture=architecture, hardware=hardware, chips=chips, mode=execution, domain=domain,
                         flops=flops)
    results: list[TrainingResult] = []
    tried = rejected = 0
    for fitting, group_tried, group_rejected in mapper(price, groups):
        results.extend(fitting)
        tried += group_tried
        rejected += group_rejected
    results.sort(key=lambda result: result.step_s)
    return SearchResult(best=results[0] if results else None, ranked=tuple(results[:keep]), tried=tried,
                        rejected=rejected)


def reprice(architecture: Architecture, hardware: Hardware, results: Sequence[TrainingResult], chips: int, *,
            mode: str | None = None, domain_chips: int | None = None) -> list[TrainingResult]:
    """``results`` of ``search`` priced again on ``hardware`` (the same spec with other efficiency
    parameters: a set drawn from the fit's covariance) exactly as the search priced them: the layouts of
    one recompute policy, tp and cp in one evaluation of their micro-batch costs. In ``results``' order;
    a layout that no longer fits (another spec) is an error."""
    execution = resolve_mode(hardware, mode)
    domain = domain_chips or default_domain_chips(hardware, chips)
    members: dict[tuple[TrainingSetup, int, int], list[Layout]] = {}
    for result in results:
        members.setdefault((result.setup, result.layout.tp, result.layout.cp), []).append(result.layout)
    groups = [_Group(setup=setup, tp=tp, cp=cp, layouts=tuple(layouts)) for (setup, tp, cp), layouts in members.items()]
    flops = model_flops_per_sequence(architecture, hardware, groups[0].setup) * groups[0].setup.global_batch \
        if groups else 0.0
    price = _GroupPricer(architecture=architecture, hardware=hardware, chips=chips, mode=execution, domain=domain,
                         flops=flops)
    priced = {(found.setup, found.layout): found for group in groups for found in price(group)[0]}
    missing = [result.layout.label() for result in results if (result.setup, result.layout) not in priced]
    if missing:
        raise PerfmodelError(f"{', '.join(missing)} no longer fit(s) on {hardware.name}")
    return [priced[(result.setup, result.layout)] for result in results]


@dataclass(frozen=True, kw_only=True)
class _Group:
    """Layouts of one recompute policy, tp and cp: their micro-batch costs are priced in one evaluation."""

    setup: TrainingSetup
    tp: int
    cp: int
    layouts: tuple[Layout, ...]


@dataclass(frozen=True, kw_only=True)
class _GroupPricer:
    """Prices a group's layouts: (the fitting results in the group's order, layouts tried, rejected)."""

    architecture: Architecture
    hardware: Hardware
    chips: int
    mode: str
    domain: int
    flops: float

    def __call__(self, group: _Group) -> tuple[list[TrainingResult], int, int]:
        sizes = sorted({layout.micro_batch for layout in group.layouts})
        priced = micro_batch_costs(self.architecture, self.hardware, group.setup, Layout(tp=group.tp, cp=group.cp),
                                   self.mode, micro_batch=np.array(sizes), domain_chips=self.domain)
        capacity = on_device_capacity_bytes(self.hardware)
        results: list[TrainingResult] = []
        rejected = 0
        for layout in group.layouts:
            costs = priced.point(sizes.index(layout.micro_batch))
            try:
                check(self.architecture, group.setup, layout, self.chips)
                if training_memory(self.architecture, group.setup, layout, costs).total > capacity:
                    rejected += 1  # does not fit: no need to price its communication
                    continue
                result = train_predict(self.architecture, self.hardware, group.setup, layout, mode=self.mode,
                                       domain_chips=self.domain, costs=costs, model_flops=self.flops)
            except PerfmodelError:
                rejected += 1
                continue
            if result.fits:
                results.append(result)
            else:
                rejected += 1
        return results, len(group.layouts), rejected
