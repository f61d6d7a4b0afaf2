"""The deployment search planners use: layouts x engines x batch limits x aggregated/disaggregated x
speculation on a fixed number of chips, its Pareto front of tokens/s per user against tokens/s per
chip, and simulation of the front (pure core). In the manner of NVIDIA's AIConfigurator and
Vidur-Search (arXiv 2405.05465).

1. **Workers.** For each engine (its hardware overlay), each layout (``llm.sizing.candidate_parallelisms``:
   tp within the chip-to-chip domain, pp powers of two, at most ``chips``; for MoE models also wide
   expert parallelism, ``wide_expert_layouts``: dp attention groups of one chip, ep = dp; as decode
   workers or aggregated replicas, each group running a batch of its own) and each speculation
   setting, one ``Server`` is built at the largest batch limit (its KV cache and step-cost grids;
   a smaller batch limit reuses them: its KV budget is then slightly conservative).
2. **Estimate** (steady state, every configuration, fast). The context is ``prompt + output / 2``.

   * Aggregated, ``replicas = chips // layout chips`` replicas at a batch limit ``b`` (running full):
     each sequence sees the ``b`` prompts that replace the batch's sequences prefilled in between its
     ``output`` decode steps, so ``TPOT = decode(b) + b x prefill(prompt) / output``; tokens/s per
     user = 1 / TPOT; tokens/s = replicas x b / TPOT; TTFT = prefill(prompt) + decode(b) (a step in
     flight). A batch whose sequences' KV cache does not fit is skipped.
   * Disaggregated ``xPyD`` (``x`` prefill workers of one layout, ``y`` decode workers of another,
     ``x, y >= 1``, every split of the chips): decode workers at batch ``b`` give ``TPOT =
     decode(b)``; the request rate is the smaller of the prefill workers' ``x / prefill(prompt)``
     and the decode workers' ``y x b / (TPOT x output)``; when the prefill workers bound it, the decode
     workers run the smallest batch that carries the rate, and TPOT is that batch's decode step;
     tokens/s = rate x output; TTFT =
     prefill(prompt) + the KV transfer (``serving.disaggregated``). Speculation applies to decode.
3. **Front.** A configuration is on the front when no other has at least its tokens/s per user and
   its tokens/s per chip, one of them higher. The SLO region: TPOT <= the TPOT target (tokens/s per
   user >= 1 / target) and TTFT <= the TTFT target.
4. **Simulate** the front's points (at most ``simulate``, spread along it, those in the SLO region
   first): a Poisson stream at ``SIMULATED_LOAD`` of the estimated request rate through the
   replicas or the prefill/decode workers (``serving.disaggregated``); the simulated TTFT / TPOT
   p99 and tokens/s per chip are reported beside the estimate.

Per dollar and per watt: tokens/s per chip x 3600 / (USD per chip-hour) is tokens per dollar;
tokens/s per chip / TDP is tokens per joule (tokens/s per watt). Both only where the spec has them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.fanout import Mapper, in_chunks, serial_map
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, check
from perfmodel.llm.sizing import candidate_parallelisms
from perfmodel.serving.disaggregated import (
    Disaggregated,
    PoolResult,
    kv_link,
    kv_transfer_bytes,
    simulate_pool,
)
from perfmodel.serving.simulator import Server, ServingConfig
from perfmodel.serving.sizing import SECONDS_PER_HOUR
from perfmodel.serving.speculation import Speculation, drafter
from perfmodel.serving.steps import StepCosts, kv_capacity
from perfmodel.serving.workload import ArrivalProcess

DEFAULT_BATCHES = (8, 16, 32, 64, 128, 256)
SIMULATED_LOAD = 0.8  # share of the estimated request rate the front's points are simulated at
SIMULATED_CONCURRENCY_MULTIPLE = 3  # a simulated run holds at least this many times the deployment's batch slots...
MAX_SIMULATED_REQUESTS = 3000  # ...up to this many requests
# Workers priced per piece of work a mapper sends out: one takes ~10-40 ms here, a Dask task's round trip
# ~20 ms on a loaded machine; four make a piece worth sending while a search of tens of workers still
# splits into enough pieces to keep a few processes busy.
WORKERS_PER_TASK = 4


@dataclass(frozen=True, kw_only=True)
class Configuration:
    """One deployment and its steady-state estimate (module docstring, step 2)."""

    engine: str
    hardware: str
    disaggregated: bool
    layout: Parallelism  # aggregated: a replica's; disaggregated: a decode worker's
    workers: int  # aggregated: replicas; disaggregated: decode workers
    prefill_layout: Parallelism | None
    prefill_workers: int
    max_batch: int
    max_tokens_per_step: int
    speculation: Speculation | None
    chips: int
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    requests_per_s: float
    price_usd_per_chip_hour: float | None
    tdp_watts: float
    meets_slo: bool

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1.0 / self.tpot_s

    @property
    def tokens_per_s_per_chip(self) -> float:
        return self.tokens_per_s / self.chips

    @property
    def tokens_per_dollar(self) -> float | None:
        price = self.price_usd_per_chip_hour
        return None if not price else self.tokens_per_s_per_chip * SECONDS_PER_HOUR / price

    @property
    def tokens_per_s_per_watt(self) -> float:
        return self.tokens_per_s_per_chip / self.tdp_watts

    @property
    def label(self) -> str:
        spec = "" if self.speculation is None else f", {self.speculation.method} k={self.speculation.tokens}"
        wide = f"dp{self.layout.dp}ep{self.layout.ep}" if self.layout.dp > 1 else ""
        if self.disaggregated:
            assert self.prefill_layout is not None
            return (f"{self.engine} {self.prefill_workers}P(tp{self.prefill_layout.tp}pp{self.prefill_layout.pp})"
                    f"{self.workers}D(tp{self.layout.tp}pp{self.layout.pp}{wide}) batch {self.max_batch}{spec}")
        return (f"{self.engine} {self.workers}x(tp{self.layout.tp}pp{self.layout.pp}{wide}) batch "
                f"{self.max_batch}{spec}")

    def to_dict(self) -> dict:
        return {"label": self.label, "engine": self.engine, "hardware": self.hardware,
                "disaggregated": self.disaggregated, "tp": self.layout.tp, "pp": self.layout.pp,
                "ep": self.layout.ep, "dp": self.layout.dp,
                "workers": self.workers,
                "prefill_tp": None if self.prefill_layout is None else self.prefill_layout.tp,
                "prefill_pp": None if self.prefill_layout is None else self.prefill_layout.pp,
                "prefill_workers": self.prefill_workers, "max_batch": self.max_batch,
                "max_tokens_per_step": self.max_tokens_per_step,
                "speculation": None if self.speculation is None else self.speculation.to_dict(),
                "chips": self.chips, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                "tokens_per_s_per_user": self.tokens_per_s_per_user, "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_chip": self.tokens_per_s_per_chip, "requests_per_s": self.requests_per_s,
                "tokens_per_dollar": self.tokens_per_dollar, "tokens_per_s_per_watt": self.tokens_per_s_per_watt,
                "meets_slo": self.meets_slo}


@dataclass(frozen=True, kw_only=True)
class Simulated:
    configuration: Configuration
    rate_per_s: float
    result: PoolResult

    def to_dict(self) -> dict:
        return {"label": self.configuration.label, "rate_per_s": self.rate_per_s, **self.result.to_dict()}


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    model: str
    chips: int
    prompt_tokens: int
    output_tokens: int
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    configurations: tuple[Configuration, ...]
    front: tuple[Configuration, ...]  # by tokens/s per user, ascending
    simulated: tuple[Simulated, ...]
    workers_built: int

    @property
    def best(self) -> Configuration | None:
        """The front's point in the SLO region with the most tokens/s per chip (None: none in it)."""
        inside = [c for c in self.front if c.meets_slo]
        return max(inside, key=lambda c: c.tokens_per_s_per_chip) if inside else None

    def to_dict(self) -> dict:
        best = self.best
        return {"model": self.model, "chips": self.chips, "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens, "ttft_slo_s": self.ttft_slo_s, "tpot_slo_s": self.tpot_slo_s,
                "configurations": len(self.configurations), "workers_built": self.workers_built,
                "front": [c.to_dict() for c in self.front], "best": None if best is None else best.to_dict(),
                "simulated": [s.to_dict() for s in self.simulated]}


def pareto_front(configurations: Sequence[Configuration]) -> list[Configuration]:
    """Configurations no other beats on both tokens/s per user and tokens/s per chip (one strictly),
    sorted by tokens/s per user; of equal points the first is kept."""
    ordered = sorted(configurations, key=lambda c: (-c.tokens_per_s_per_user, -c.tokens_per_s_per_chip))
    front: list[Configuration] = []
    best_chip = -math.inf
    for configuration in ordered:  # descending per-user rate: on the front when its per-chip rate is a new high
        if configuration.tokens_per_s_per_chip > best_chip:
            front.append(configuration)
            best_chip = configuration.tokens_per_s_per_chip
    return sorted(front, key=lambda c: c.tokens_per_s_per_user)


def _meets(ttft_s: float, tpot_s: float, ttft_slo_s: float | None, tpot_slo_s: float | None) -> bool:
    return (ttft_slo_s is None or ttft_s <= ttft_slo_s) and (tpot_slo_s is None or tpot_s <= tpot_slo_s)


def search(architecture: Architecture, hardware_by_engine: Mapping[str, Hardware], chips: int, *,
           prompt_tokens: int, output_tokens: int, batches: Sequence[int] = DEFAULT_BATCHES,
           speculations: Sequence[Speculation | None] = (None,), disaggregation: bool = True,
           ttft_slo_s: float | None = None, tpot_slo_s: float | None = None, max_tokens_per_step: int = 8192,
           weight_dtype: str = "bf16", kv_dtype: str = "bf16", expert_weight_dtype: str | None = None,
           memory_utilization: float = 0.9, max_pp: int = 4, simulate: int = 6, requests: int = 200, seed: int = 0,
           mapper: Mapper = serial_map) -> SearchResult:
    """Enumerate, estimate, take the front and simulate it (module docstring). ``mapper`` runs the
    pieces of work, each worker's step costs (step 1) and each front point's simulation (step 4)
    (``perfmodel.fanout``: here, or on a Dask cluster; the result is the same to the last bit)."""
    if chips < 1:
        raise PerfmodelError(f"chips must be at least 1, got {chips}")
    if not batches or min(batches) < 1:
        raise PerfmodelError("batch limits must be at least 1")
    if prompt_tokens < 1 or output_tokens < 1:
        raise PerfmodelError("prompt and output lengths must be at least 1 token")
    if prompt_tokens + output_tokens > architecture.max_positions:
        raise PerfmodelError(f"prompt + output = {prompt_tokens + output_tokens} tokens exceeds {architecture.name}'s "
                             f"{architecture.max_positions} positions")
    largest = max(batches)
    budget = max(max_tokens_per_step, largest)
    context = prompt_tokens + output_tokens
    mid = prompt_tokens + output_tokens / 2
    scenario = Scenario(batch=1, prompt_tokens=prompt_tokens, generated_tokens=output_tokens,
                        weight_dtype=weight_dtype, kv_dtype=kv_dtype, expert_weight_dtype=expert_weight_dtype)
    check(architecture, scenario, Parallelism())  # a bad dtype is refused, not screened out as "fits nowhere"
    # Step 1, the expensive part: one piece of work per worker (engine, layout, speculation)
    pieces = [(engine, layout, speculation) for engine, hardware in hardware_by_engine.items()
              for layout in [p for p in candidate_parallelisms(architecture, hardware, scenario)
                             if p.chips <= chips and p.pp <= max_pp] + wide_expert_layouts(architecture, hardware, chips)
              for speculation in speculations]
    estimator = _Estimator(architecture=architecture, hardware_by_engine=dict(hardware_by_engine), scenario=scenario,
                           largest=largest, budget=budget, context=round(mid), prompt_tokens=prompt_tokens,
                           memory_utilization=memory_utilization)
    priced = in_chunks(mapper, WORKERS_PER_TASK)(estimator, pieces)
    estimates = {piece: estimate for piece, estimate in zip(pieces, priced, strict=True) if estimate is not None}
    configurations: list[Configuration] = []
    for engine, hardware in hardware_by_engine.items():
        built = {(layout, speculation): estimate for (name, layout, speculation), estimate in estimates.items()
                 if name == engine}
        price, tdp = hardware.price_usd_per_hour, hardware.power.tdp_watts
        base: dict[str, Any] = dict(engine=engine, hardware=hardware.name, max_tokens_per_step=budget,
                                    price_usd_per_chip_hour=price, tdp_watts=tdp)
        prefill_s = {layout: estimate.prefill_s for (layout, speculation), estimate in built.items()
                     if speculation is None and layout.dp == 1}
        for (layout, speculation), estimate in built.items():
            fits = estimate.kv_tokens // context
            for batch in batches:
                if batch > fits:
                    continue
                replicas = chips // layout.chips
                ttft, tpot, rate = _aggregated(estimate, batch, replicas * layout.dp, output_tokens)
                configurations.append(Configuration(
                    **base, disaggregated=False, layout=layout, workers=replicas, prefill_layout=None,
                    prefill_workers=0, max_batch=batch, speculation=speculation, chips=replicas * layout.chips,
                    ttft_s=ttft, tpot_s=tpot, tokens_per_s=rate * output_tokens, requests_per_s=rate,
                    meets_slo=_meets(ttft, tpot, ttft_slo_s, tpot_slo_s)))
                if not disaggregation:
                    continue
                for prefill_layout, prefill_time in prefill_s.items():
                    transfer = _transfer_s(architecture, hardware, prefill_layout, layout, prompt_tokens, kv_dtype)
                    for prefill_workers in range(1, chips // prefill_layout.chips + 1):
                        decode_workers = (chips - prefill_workers * prefill_layout.chips) // layout.chips
                        if decode_workers < 1:
                            break
                        ttft, tpot, rate = _disaggregated(estimate, prefill_time + transfer, prefill_time, batch,
                                                          prefill_workers, decode_workers * layout.dp, output_tokens)
                        used = prefill_workers * prefill_layout.chips + decode_workers * layout.chips
                        configurations.append(Configuration(
                            **base, disaggregated=True, layout=layout, workers=decode_workers,
                            prefill_layout=prefill_layout, prefill_workers=prefill_workers, max_batch=batch,
                            speculation=speculation, chips=used, ttft_s=ttft, tpot_s=tpot,
                            tokens_per_s=rate * output_tokens, requests_per_s=rate,
                            meets_slo=_meets(ttft, tpot, ttft_slo_s, tpot_slo_s)))
    if not configurations:
        raise PerfmodelError(f"no configuration of {architecture.name} fits on {chips} chips of "
                             f"{', '.join(h.name for h in hardware_by_engine.values())}; add chips or lower the "
                             "batch limits")
    front = pareto_front(configurations)
    simulator = _FrontSimulator(hardware_by_engine=dict(hardware_by_engine), architecture=architecture,
                                requests=requests, seed=seed, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                                dtypes=dict(weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                            expert_weight_dtype=expert_weight_dtype),
                                memory_utilization=memory_utilization, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
    simulated = list(mapper(simulator, _spread(front, simulate)))
    return SearchResult(model=architecture.name, chips=chips, prompt_tokens=prompt_tokens,
                        output_tokens=output_tokens, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s,
                        configurations=tuple(configurations), front=tuple(front), simulated=tuple(simulated),
                        workers_built=len(estimates))


def _aggregated(estimate: _Estimate, batch: int, groups: int, output_tokens: int) -> tuple[float, float, float]:
    """(TTFT, TPOT, requests/s) of ``groups`` replicas (or attention-dp groups) each running ``batch``
    sequences full (module docstring, step 2)."""
    decode, prefill = estimate.decode_s[batch - 1], estimate.prefill_s
    tpot = decode + batch * prefill / output_tokens
    return prefill + decode, tpot, groups * batch / (tpot * output_tokens)


def _disaggregated(estimate: _Estimate, ttft: float, prefill_time: float, batch: int, prefill_workers: int,
                   groups: int, output_tokens: int) -> tuple[float, float, float]:
    """(TTFT, TPOT, requests/s) of ``prefill_workers`` prefill workers (``prefill_time`` a prompt) feeding
    ``groups`` decode groups at batch limit ``batch`` (module docstring, step 2)."""
    rate = min(prefill_workers / prefill_time, groups * batch / (estimate.decode_s[batch - 1] * output_tokens))
    # prefill-bound: the decode workers run the batch that carries the rate, not the limit
    running = min(batch, estimate.batch_for(rate * output_tokens / groups))
    return ttft, estimate.decode_s[running - 1], rate


def _transfer_s(architecture: Architecture, hardware: Hardware, prefill: Parallelism, decode: Parallelism,
                prompt_tokens: int, kv_dtype: str) -> float:
    link = kv_link(hardware, prefill.chips, decode.chips)
    return float(link.transfer_s(kv_transfer_bytes(architecture, prompt_tokens, kv_dtype)))


def reprice_front(architecture: Architecture, hardware_by_engine: Mapping[str, Hardware],
                  front: Sequence[Configuration], *, prompt_tokens: int, output_tokens: int, largest_batch: int,
                  weight_dtype: str = "bf16", kv_dtype: str = "bf16", expert_weight_dtype: str | None = None,
                  memory_utilization: float = 0.9, mapper: Mapper = serial_map) -> list[Configuration]:
    """``front``'s configurations estimated again on ``hardware_by_engine`` (the same specs with other
    efficiency parameters: a set drawn from each engine's fit's covariance) exactly as ``search``
    estimated them: each worker's quick step costs (``largest_batch``: the largest batch limit the
    search tried, which sized its KV cache), then the same formulas; the same deployments, their
    TTFT, TPOT and rates repriced. In ``front``'s order; every configuration's engine must be given."""
    scenario = Scenario(batch=1, prompt_tokens=prompt_tokens, generated_tokens=output_tokens,
                        weight_dtype=weight_dtype, kv_dtype=kv_dtype, expert_weight_dtype=expert_weight_dtype)
    budgets = {c.max_tokens_per_step for c in front}
    if len(budgets) > 1:
        raise PerfmodelError(f"a front priced at one token budget per step, got {sorted(budgets)}")
    pieces = list(dict.fromkeys([(c.engine, c.layout, c.speculation) for c in front]
                                + [(c.engine, c.prefill_layout, None) for c in front if c.prefill_layout is not None]))
    estimator = _Estimator(architecture=architecture, hardware_by_engine=dict(hardware_by_engine), scenario=scenario,
                           largest=largest_batch, budget=budgets.pop() if budgets else largest_batch,
                           context=round(prompt_tokens + output_tokens / 2), prompt_tokens=prompt_tokens,
                           memory_utilization=memory_utilization)
    estimates = dict(zip(pieces, in_chunks(mapper, WORKERS_PER_TASK)(estimator, pieces), strict=True))
    out = []
    for c in front:
        estimate = estimates[(c.engine, c.layout, c.speculation)]
        if estimate is None or (c.prefill_layout is not None and estimates[(c.engine, c.prefill_layout, None)] is None):
            raise PerfmodelError(f"{c.label} no longer fits on {hardware_by_engine[c.engine].name}")
        if c.disaggregated:
            assert c.prefill_layout is not None
            prefill_time = estimates[(c.engine, c.prefill_layout, None)].prefill_s  # type: ignore[union-attr]
            transfer = _transfer_s(architecture, hardware_by_engine[c.engine], c.prefill_layout, c.layout,
                                   prompt_tokens, kv_dtype)
            ttft, tpot, rate = _disaggregated(estimate, prefill_time + transfer, prefill_time, c.max_batch,
                                              c.prefill_workers, c.workers * c.layout.dp, output_tokens)
        else:
            ttft, tpot, rate = _aggregated(estimate, c.max_batch, c.workers * c.layout.dp, output_tokens)
        out.append(replace(c, ttft_s=ttft, tpot_s=tpot, tokens_per_s=rate * output_tokens, requests_per_s=rate))
    return out


def wide_expert_layouts(architecture: Architecture, hardware: Hardware, chips: int) -> list[Parallelism]:
    """MoE models: attention data parallelism over ``dp`` chips (tp 1) with the experts spread over all
    of them (``ep = dp``), for ``dp`` a power of two from 2 that divides the experts, up to ``chips``
    (within the chip-to-chip domain or past it: the all-to-alls then cross the network link)."""
    if architecture.experts <= 1 or not any(link.kind in ("chip_to_chip", "network")
                                            for link in hardware.links.values()):
        return []
    out, dp = [], 2
    while dp <= chips:
        if architecture.experts % dp == 0:
            out.append(Parallelism(tp=1, ep=dp, dp=dp))
        dp *= 2
    return out


def _spread(front: Sequence[Configuration], count: int) -> list[Configuration]:
    """Up to ``count`` points of the front: those in the SLO region first, evenly spread along it."""
    if count <= 0:
        return []
    picked: list[Configuration] = []
    for pool in ([c for c in front if c.meets_slo], list(front)):
        if not pool:
            continue
        indices = np.unique(np.linspace(0, len(pool) - 1, min(count, len(pool))).round().astype(int))
        for index in indices:
            if pool[index] not in picked and len(picked) < count:
                picked.append(pool[index])
    return picked


@dataclass(frozen=True, kw_only=True)
class _Estimate:
    """One worker's quick step costs: decode at the mean context for every batch up to the largest, and a
    fresh prompt's prefill; the tokens its KV cache holds."""

    kv_tokens: int
    decode_s: list[float]  # [batch - 1]
    prefill_s: float

    def batch_for(self, tokens_per_s: float) -> int:
        """The smallest running batch whose decode steps carry ``tokens_per_s`` (the largest if none)."""
        carried = np.maximum.accumulate(np.arange(1, len(self.decode_s) + 1) / np.asarray(self.decode_s))
        return min(int(np.searchsorted(carried, tokens_per_s * (1 - 1e-12))) + 1, len(self.decode_s))


@dataclass(frozen=True, kw_only=True)
class _Estimator:
    """One worker's ``_Estimate`` from its (engine, layout, speculation): a piece of work a mapper can send
    to another process (it carries everything it reads)."""

    architecture: Architecture
    hardware_by_engine: dict[str, Hardware]
    scenario: Scenario
    largest: int
    budget: int
    context: int
    prompt_tokens: int
    memory_utilization: float

    def __call__(self, piece: tuple[str, Parallelism, Speculation | None]) -> _Estimate | None:
        engine, layout, speculation = piece
        architecture, hardware = self.architecture, self.hardware_by_engine[engine]
        largest, budget, context = self.largest, self.budget, self.context
        quick = replace(self.scenario, prompt_tokens=1, generated_tokens=1)
        draft = None if speculation is None else drafter(architecture, speculation, quick, layout)
        try:
            kv = kv_capacity(architecture, hardware, quick, layout, block_size=16, max_batch=largest,
                             max_tokens_per_step=budget, memory_utilization=self.memory_utilization, drafter=draft)
            costs = StepCosts(architecture, hardware, quick, layout, max_batch=largest, max_tokens_per_step=budget,
                              max_context=context, resident_bytes=kv.state_bytes, speculation=speculation,
                              context_points=[context], prompt_points=[self.prompt_tokens])
        except PerfmodelError:  # does not fit (no room for a KV cache), or the layout cannot run: not a candidate
            return None
        # Steady steps (one ran before each), the engine's host work per step included (StepCosts.step_s).
        return _Estimate(kv_tokens=kv.tokens,
                         decode_s=[costs.step_s(costs.decode_s(b, context), b) for b in range(1, largest + 1)],
                         prefill_s=costs.step_s(costs.prefill_s(self.prompt_tokens, 0.0), 1))


@dataclass(frozen=True, kw_only=True)
class _FrontSimulator:
    """One front point through the request-level simulator (module docstring, step 4): a piece of work a
    mapper can send to another process."""

    hardware_by_engine: dict[str, Hardware]
    architecture: Architecture
    requests: int
    seed: int
    prompt_tokens: int
    output_tokens: int
    dtypes: dict[str, Any]
    memory_utilization: float
    ttft_slo_s: float | None
    tpot_slo_s: float | None

    def __call__(self, configuration: Configuration) -> Simulated:
        hardware = self.hardware_by_engine[configuration.engine]
        context = self.prompt_tokens + self.output_tokens

        def server(layout, speculation, batch):
            config = ServingConfig(max_batch=batch, max_tokens_per_step=configuration.max_tokens_per_step,
                                   memory_utilization=self.memory_utilization)
            return Server(self.architecture, hardware, layout, config=config, max_context=context,
                          speculation=speculation, **self.dtypes)

        concurrency = configuration.workers * configuration.max_batch
        count = min(max(self.requests, SIMULATED_CONCURRENCY_MULTIPLE * concurrency), MAX_SIMULATED_REQUESTS)
        rate = SIMULATED_LOAD * configuration.requests_per_s
        rng = np.random.default_rng(self.seed)
        times = np.asarray(ArrivalProcess(kind="poisson", rate_per_s=rate).times(rng, count), dtype=float)
        prompts = np.full(count, self.prompt_tokens, dtype=np.int64)
        outputs = np.full(count, self.output_tokens, dtype=np.int64)
        decode = server(configuration.layout, configuration.speculation, configuration.max_batch)
        ttft_slo_s, tpot_slo_s = self.ttft_slo_s, self.tpot_slo_s
        if configuration.disaggregated:
            prefill = server(configuration.prefill_layout, None, DEFAULT_BATCHES[-1])
            link = kv_link(hardware, prefill.parallelism.chips, decode.parallelism.chips)
            pool = Disaggregated(prefill=prefill, decode=decode, prefill_workers=configuration.prefill_workers,
                                 decode_workers=configuration.workers, link=link, kv_dtype=self.dtypes["kv_dtype"])
            result = pool.simulate(times, prompts, outputs, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
        else:
            result = simulate_pool(decode, configuration.workers, times, prompts, outputs, ttft_slo_s=ttft_slo_s,
                                   tpot_slo_s=tpot_slo_s)
        return Simulated(configuration=configuration, rate_per_s=rate, result=result)
