"""Deployment sizing against SLO percentile targets, checked by the serving simulator (pure core).

``size_deployment`` answers: how many chips of one system (replicas x tensor and pipeline
parallelism) serve a load while TTFT and TPOT statistics (p50, p90, p99 or mean over the simulated
requests) stay within their targets?

1. **Screen** (``llm.sizing.size_system``, the steady-state formula, fast): every parallelism whose
   weights and KV cache fit, with the largest batch that meets the tightest TPOT target and the
   replica count whose steady throughput carries the load. Options that miss the targets even then
   (batch-1 TPOT or prefill over a target) are dropped.
2. **Check** (``Server.simulate``, the request-level simulator): for the screened parallelisms, fewest
   steady-state chips first, a replica of ``max_batch`` sequences (the serving default, 256, or what
   fits) runs a seeded stream of ``requests`` requests at its share of the load, and replicas are
   added until every target holds (``fewest_replicas``: a probe, geometric growth, then bisection;
   at most ``MAX_REPLICA_GROWTH`` times the probe and ``MAX_SIMULATIONS`` runs per parallelism).
   A parallelism is rejected at once when one request at a time (zero load) already misses a target.
   Parallelisms whose steady-state floor cannot beat the best answer so far are not simulated.

Load per replica. Open loop (``ArrivalProcess``): requests are spread uniformly at random over the
replicas, and splitting a Poisson stream that way gives Poisson streams of ``rate / replicas``
(fixed-gap arrivals, dealt round robin, stay fixed at ``rate / replicas``). **Floor:** fewer
replicas than the screen's steady-state count cannot carry an open-loop load indefinitely (their
batches would have to exceed the batch that meets TPOT), however a short simulation looks, so the
search starts there. Closed loop (``ClosedLoop``): users are dealt to replicas, and the busiest
replica (``ceil(users / replicas)`` users) is simulated; the probe assumes every user's request
takes its zero-load end-to-end time.

Reported figures: the simulated replica's TTFT and TPOT percentiles; output tokens per second of
the whole deployment (open loop: the rate times the simulated requests' mean output, all of it
served since the replicas are stable, without the short run's drain tail; closed loop: the busiest
replica's simulated rate per user, times the users); power = TDP x chips; cost = price per
chip-hour x chips; cost per million output tokens = USD per hour / (tokens per second x 3600 s/h)
x 1e6.

**Assumptions:** replicas do not share a KV cache or a queue; a step's costs are those of
``serving.steps`` (see ``serving.simulator``); the percentiles of a few hundred simulated requests
estimate the tail (p99 of 200 requests is close to their second-largest value).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import resolve_mode
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario
from perfmodel.llm.metrics import max_batch as fitting_batch
from perfmodel.llm.sizing import SizingOption, Targets, size_system
from perfmodel.serving.simulator import Percentiles, Server, ServingConfig, ServingResult, max_context
from perfmodel.serving.steps import kv_capacity
from perfmodel.serving.workload import ArrivalProcess, ClosedLoop, LengthDistribution
from perfmodel.units import format_quantity

METRICS = {"ttft": "TTFT", "tpot": "TPOT"}
STATISTICS = ("p50", "p90", "p99", "mean")
RANKINGS = ("chips", "cost", "watts")
DEFAULT_REQUESTS = 200
DEFAULT_MAX_BATCH = 256  # the serving default (``perfmodel serve --max-batch``)
DEFAULT_TOKENS_PER_STEP = 8192  # halved until a step's activations fit beside the weights
ZERO_LOAD_REQUESTS = 20  # requests run one at a time for the zero-load check (1 when every length is fixed)
MAX_REPLICA_GROWTH = 8  # the search gives up beyond this many times its probe
MAX_SIMULATIONS = 12  # simulations per parallelism
MAX_PARALLELISMS = 6  # parallelisms simulated per system
SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6


@dataclass(frozen=True, kw_only=True)
class Target:
    """``metric`` (ttft or tpot) ``statistic`` (p50, p90, p99 or mean over the requests) <= ``limit_s``."""

    metric: str
    statistic: str
    limit_s: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise PerfmodelError(f"target metric {self.metric!r}: expected one of {', '.join(METRICS)}")
        if self.statistic not in STATISTICS:
            raise PerfmodelError(f"target statistic {self.statistic!r}: expected one of {', '.join(STATISTICS)}")
        if not (math.isfinite(self.limit_s) and self.limit_s > 0):
            raise PerfmodelError(f"{self.label} target must be a positive time, got {self.limit_s!r} s")

    @property
    def label(self) -> str:
        return f"{METRICS[self.metric]} {self.statistic}"

    def measured_s(self, result: ServingResult) -> float:
        percentiles: Percentiles = getattr(result, self.metric)
        value: float = getattr(percentiles, self.statistic)
        return value

    def met(self, result: ServingResult) -> bool:
        """NaN (no request generated a second token, so there is no TPOT) misses nothing."""
        value = self.measured_s(result)
        return math.isnan(value) or value <= self.limit_s

    def to_dict(self) -> dict:
        return {"metric": self.metric, "statistic": self.statistic, "limit_s": self.limit_s}


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """One answer: ``replicas`` replicas of ``parallelism`` on ``hardware`` and what the simulation saw."""

    hardware: str
    parameters: str  # the parameter set: the achievable overlay's label, or "ideal (datasheet)"
    mode: str
    parallelism: Parallelism
    replicas: int
    steady_state_replicas: int  # where the search started: the screen's count (open loop: the floor)
    max_batch: int
    max_tokens_per_step: int
    weight_dtype: str
    kv_dtype: str
    expert_weight_dtype: str | None  # the routed experts' weights (None: weight_dtype)
    replica_load: ArrivalProcess | ClosedLoop  # what one replica was simulated with
    ttft: Percentiles
    tpot: Percentiles
    tokens_per_s: float  # output tokens per second of all replicas
    power_watts: float  # TDP x chips
    price_usd_per_chip_hour: float | None
    simulations: int

    @property
    def chips(self) -> int:
        return self.replicas * self.parallelism.chips

    @property
    def cost_usd_per_hour(self) -> float | None:
        return None if self.price_usd_per_chip_hour is None else self.price_usd_per_chip_hour * self.chips

    @property
    def usd_per_million_tokens(self) -> float | None:
        cost = self.cost_usd_per_hour
        if cost is None or not self.tokens_per_s > 0:
            return None
        return cost / (self.tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_MILLION

    def to_dict(self) -> dict:
        load = self.replica_load
        return {"hardware": self.hardware, "parameters": self.parameters, "mode": self.mode, "chips": self.chips,
                "replicas": self.replicas, "steady_state_replicas": self.steady_state_replicas,
                "tp": self.parallelism.tp, "pp": self.parallelism.pp,
                "max_batch": self.max_batch, "max_tokens_per_step": self.max_tokens_per_step,
                "weight_dtype": self.weight_dtype, "kv_dtype": self.kv_dtype,
                "expert_weight_dtype": self.expert_weight_dtype,
                "replica_rate_per_s": load.rate_per_s if isinstance(load, ArrivalProcess) else None,
                "replica_users": load.users if isinstance(load, ClosedLoop) else None,
                "ttft_s": self.ttft.to_dict(), "tpot_s": self.tpot.to_dict(), "tokens_per_s": self.tokens_per_s,
                "power_watts": self.power_watts, "price_usd_per_chip_hour": self.price_usd_per_chip_hour,
                "cost_usd_per_hour": self.cost_usd_per_hour, "usd_per_million_tokens": self.usd_per_million_tokens,
                "simulations": self.simulations}


@dataclass(frozen=True, kw_only=True)
class SystemSizing:
    """The answer for one system: ``best`` (None when no deployment meets the targets, ``note`` says why)."""

    hardware: str
    parameters: str
    mode: str
    best: Deployment | None
    note: str
    closest: SizingOption | None  # without an answer: the screen's fastest option (lowest TPOT)
    simulations: int
    considered: tuple[SizingOption, ...] = ()  # every option the steady-state screen priced (for charts)

    def to_dict(self) -> dict:
        return {"hardware": self.hardware, "parameters": self.parameters, "mode": self.mode,
                "best": None if self.best is None else self.best.to_dict(), "note": self.note,
                "closest": None if self.closest is None else self.closest.to_dict(), "simulations": self.simulations}


def parameter_set(hardware: Hardware) -> str:
    """Which parameters priced ``hardware``: its achievable overlay's label, or the datasheet."""
    return hardware.efficiency.label if hardware.efficiency else "ideal (datasheet)"


def replica_load(load: ArrivalProcess | ClosedLoop, replicas: int) -> ArrivalProcess | ClosedLoop:
    """One replica's share: ``rate / replicas`` (Poisson split uniformly stays Poisson), or the busiest
    replica's ``ceil(users / replicas)`` users."""
    if isinstance(load, ClosedLoop):
        return replace(load, users=-(-load.users // replicas))
    return replace(load, rate_per_s=load.rate_per_s / replicas)


def fewest_replicas(meets: Callable[[int], bool], *, floor: int, probe: int, cap: int) -> int | None:
    """The fewest replicas in ``[floor, cap]`` for which ``meets`` holds (None: not even ``cap``),
    for a ``meets`` that holds from some count on: ``probe``, then geometric growth past a miss,
    then bisection. ``floor - 1`` is taken to miss."""
    probe = min(max(probe, floor), cap)
    low, high = floor - 1, probe
    if not meets(probe):
        low, high = probe, 0
        while not high:
            if low >= cap:
                return None
            trial = min(cap, max(low + 1, 2 * low))
            if meets(trial):
                high = trial
            else:
                low = trial
    while high - low > 1:
        middle = (low + high) // 2
        if meets(middle):
            high = middle
        else:
            low = middle
    return high


def rank(sizings: Sequence[SystemSizing], by: str = "chips") -> list[SystemSizing]:
    """Systems with an answer first, ordered by ``by`` (chips, cost or watts) and then the other two
    (chips, then cost per million tokens, then watts); a missing price ranks after every price."""
    if by not in RANKINGS:
        raise PerfmodelError(f"rank by {by!r}: expected one of {', '.join(RANKINGS)}")

    def key(sizing: SystemSizing) -> tuple:
        best = sizing.best
        if best is None:
            return (1, ())
        cost = best.usd_per_million_tokens
        values = {"chips": float(best.chips), "cost": math.inf if cost is None else cost, "watts": best.power_watts}
        order = [by, *(name for name in RANKINGS if name != by)]
        return (0, tuple(values[name] for name in order))

    return sorted(sizings, key=key)


def size_deployment(architecture: Architecture, hardware: Hardware, targets: Sequence[Target],
                    load: ArrivalProcess | ClosedLoop, prompt: LengthDistribution, output: LengthDistribution, *,
                    requests: int = DEFAULT_REQUESTS, seed: int = 0, weight_dtype: str = "bf16",
                    kv_dtype: str = "bf16", activation_dtype: str = "bf16", expert_weight_dtype: str | None = None,
                    mode: str | None = None, price_usd_per_chip_hour: float | None = None, memory_utilization: float = 0.9,
                    block_size: int = 16,
                    limit_factor: Callable[[Parallelism], Mapping[str, float]] | None = None) -> SystemSizing:
    """The fewest chips of ``hardware`` that serve ``load`` within every target (see the module
    docstring). ``price_usd_per_chip_hour`` None: the spec's price, if it has one. ``limit_factor``:
    a further factor per metric (ttft, tpot) on the targets for the simulated check of a parallelism
    (the parameter uncertainty of its step times, ``cli.held``); the screen takes the targets as given."""
    if not targets:
        raise PerfmodelError("give at least one TTFT or TPOT target")
    if requests < 1:
        raise PerfmodelError(f"requests must be at least 1, got {requests}")
    if isinstance(load, ArrivalProcess) and load.kind == "burst":
        raise PerfmodelError("sizing needs a load that lasts: a rate (poisson or fixed arrivals) or closed-loop "
                             "users, not a burst")
    execution = resolve_mode(hardware, mode)
    price = hardware.price_usd_per_hour if price_usd_per_chip_hour is None else price_usd_per_chip_hour
    prompt_tokens, output_tokens = max(round(prompt.mean), 1), max(round(output.mean), 1)
    limits = {metric: min((t.limit_s for t in targets if t.metric == metric), default=math.inf) for metric in METRICS}
    screen_rate = load.rate_per_s if isinstance(load, ArrivalProcess) else 1.0  # closed loop: replicas set below
    screen = size_system(architecture, hardware, Targets(
        ttft_s=limits["ttft"], tpot_s=limits["tpot"], rate_per_s=screen_rate, prompt_tokens=prompt_tokens,
        generated_tokens=output_tokens), weight_dtype=weight_dtype, kv_dtype=kv_dtype,
        activation_dtype=activation_dtype, expert_weight_dtype=expert_weight_dtype, mode=mode)
    candidates = [option for option in screen if option.meets_targets]
    base = dict(hardware=hardware.name, parameters=parameter_set(hardware), mode=execution)
    if not candidates:
        closest = min(screen, key=lambda o: o.tpot_s) if screen else None
        note = "no option fits" if closest is None else (
            f"misses the targets in steady state; fastest: TPOT {_s(closest.tpot_s)}, TTFT "
            f"{_s(closest.ttft_s)} on {closest.parallelism.chips} chip{'' if closest.parallelism.chips == 1 else 's'}")
        return SystemSizing(**base, best=None, note=note, closest=closest, simulations=0, considered=tuple(screen))
    scenario = Scenario(batch=1, prompt_tokens=prompt_tokens, generated_tokens=output_tokens,
                        weight_dtype=weight_dtype, kv_dtype=kv_dtype, activation_dtype=activation_dtype,
                        expert_weight_dtype=expert_weight_dtype)
    check = _Check(architecture=architecture, hardware=hardware, targets=tuple(targets), load=load, prompt=prompt,
                   output=output, requests=requests, seed=seed, scenario=scenario, mode=mode, price=price,
                   memory_utilization=memory_utilization, block_size=block_size, limit_factor=limit_factor)
    best: Deployment | None = None
    misses: list[tuple[float, str]] = []
    ordered = sorted(candidates, key=lambda o: (_floor(o, load) * o.parallelism.chips,
                                                o.parallelism.chips))
    for option in ordered[:MAX_PARALLELISMS]:
        if best is not None and _floor(option, load) * option.parallelism.chips >= best.chips:
            continue
        found = check.deployment(option, output_tokens, misses, None if best is None else best.chips)
        if found is not None and (best is None or found.chips < best.chips):
            best = found
    note = "meets the targets" if best is not None else min(misses)[1] if misses else "no option fits"
    return SystemSizing(**base, best=best, note=note, closest=None if best is not None else min(
        candidates, key=lambda o: o.tpot_s), simulations=check.runs, considered=tuple(screen))


def _floor(option: SizingOption, load: ArrivalProcess | ClosedLoop) -> int:
    """The screen's steady-state replica count for an open-loop load; 1 for closed-loop users."""
    return option.replicas if isinstance(load, ArrivalProcess) else 1


@dataclass(kw_only=True)
class _Check:
    """Simulates the screened parallelisms of one system (and counts its runs)."""

    architecture: Architecture
    hardware: Hardware
    targets: tuple[Target, ...]
    load: ArrivalProcess | ClosedLoop
    prompt: LengthDistribution
    output: LengthDistribution
    requests: int
    seed: int
    scenario: Scenario
    mode: str | None
    price: float | None
    memory_utilization: float
    block_size: int
    limit_factor: Callable[[Parallelism], Mapping[str, float]] | None = None
    runs: int = 0

    def targets_for(self, parallelism: Parallelism) -> tuple[Target, ...]:
        """The targets the simulated check of ``parallelism`` holds (``limit_factor``)."""
        if self.limit_factor is None:
            return self.targets
        factors = self.limit_factor(parallelism)
        return tuple(replace(target, limit_s=target.limit_s * factors[target.metric]) for target in self.targets)

    def simulate(self, server: Server, load: ArrivalProcess | ClosedLoop, requests: int) -> ServingResult:
        self.runs += 1
        return server.simulate(load, requests, self.prompt, self.output, seed=self.seed)

    def deployment(self, option: SizingOption, output_tokens: int, misses: list[tuple[float, str]],
                   fewer_than_chips: int | None = None) -> Deployment | None:
        """The fewest replicas of ``option.parallelism`` that meet the targets on fewer than
        ``fewer_than_chips`` chips (None: a miss, added to ``misses`` as (how far over, why))."""
        parallelism = option.parallelism
        where = f"(tp {parallelism.tp}, pp {parallelism.pp})"
        targets = self.targets_for(parallelism)
        try:
            server = self.server(parallelism)
            fixed = self.prompt.kind == "fixed" and self.output.kind == "fixed"
            alone = self.simulate(server, ClosedLoop(users=1, think_s=0.0),
                                  1 if fixed else min(self.requests, ZERO_LOAD_REQUESTS))
        except PerfmodelError as error:  # a request longer than the KV cache, no room for one...
            misses.append((math.inf, f"{where}: {error}"))
            return None
        over = _worst(targets, alone)
        if over is not None:
            misses.append((over[0], f"misses at zero load on {parallelism.chips} chips {where}: {over[1]}"))
            return None
        results: dict[int, ServingResult] = {}

        def meets(replicas: int) -> bool:
            if len(results) >= MAX_SIMULATIONS:
                return False
            results[replicas] = self.simulate(server, replica_load(self.load, replicas), self.requests)
            return all(target.met(results[replicas]) for target in targets)

        if isinstance(self.load, ClosedLoop):
            demand = self.load.users / (self.load.think_s + alone.e2e.mean) * output_tokens
            throughput = option.tokens_per_s / option.replicas
            probe, cap = max(math.ceil(demand / throughput), 1), self.load.users
        else:
            probe, cap = option.replicas, option.replicas * MAX_REPLICA_GROWTH
        if fewer_than_chips is not None:
            cap = min(cap, (fewer_than_chips - 1) // parallelism.chips)
        floor = _floor(option, self.load)
        replicas = fewest_replicas(meets, floor=floor, probe=probe, cap=max(cap, floor))
        if replicas is None:
            tried = max(results)
            over = _worst(targets, results[tried])
            why = "" if over is None else f": at {tried} replicas {over[1]}"
            misses.append((math.inf if over is None else over[0],
                           f"no replica count up to {tried} of {where} meets the targets{why}"))
            return None
        result = results[replicas]
        load = replica_load(self.load, replicas)
        if isinstance(self.load, ArrivalProcess):  # served = offered (the floor keeps the replicas stable)
            tokens_per_s = self.load.rate_per_s * sum(result.output_tokens) / len(result.output_tokens)
        else:  # the busiest replica's rate per user, times the users
            tokens_per_s = result.tokens_per_s / -(-self.load.users // replicas) * self.load.users
        return Deployment(hardware=self.hardware.name, parameters=parameter_set(self.hardware), mode=server.mode,
                          parallelism=parallelism, replicas=replicas, steady_state_replicas=probe,
                          max_batch=server.config.max_batch,
                          max_tokens_per_step=server.config.max_tokens_per_step,
                          weight_dtype=self.scenario.weight_dtype, kv_dtype=self.scenario.kv_dtype,
                          expert_weight_dtype=self.scenario.expert_weight_dtype, replica_load=load,
                          ttft=result.ttft, tpot=result.tpot,
                          tokens_per_s=tokens_per_s,
                          power_watts=self.hardware.power.tdp_watts * replicas * parallelism.chips,
                          price_usd_per_chip_hour=self.price, simulations=len(results) + 1)

    def server(self, parallelism: Parallelism) -> Server:
        """A replica: ``DEFAULT_MAX_BATCH`` sequences or what fits, and the largest token budget per
        step (halving from ``DEFAULT_TOKENS_PER_STEP``) that leaves room for a KV cache."""
        fits = fitting_batch(self.architecture, self.hardware, self.scenario, parallelism)
        batch = max(min(DEFAULT_MAX_BATCH, fits), 1)
        budget, error = DEFAULT_TOKENS_PER_STEP, None
        while True:
            config = ServingConfig(max_batch=batch, max_tokens_per_step=max(budget, batch), block_size=self.block_size,
                                   memory_utilization=self.memory_utilization)
            try:
                kv_capacity(self.architecture, self.hardware, self.scenario, parallelism, block_size=self.block_size,
                            max_batch=config.max_batch, max_tokens_per_step=config.max_tokens_per_step,
                            memory_utilization=self.memory_utilization)
                break
            except PerfmodelError as failure:
                error = failure
            if budget > batch:
                budget //= 2
            elif batch > 1:
                batch //= 2
            else:
                raise PerfmodelError(str(error))
        return Server(self.architecture, self.hardware, parallelism, config=config,
                      max_context=max_context(self.prompt, self.output), weight_dtype=self.scenario.weight_dtype,
                      kv_dtype=self.scenario.kv_dtype, activation_dtype=self.scenario.activation_dtype,
                      expert_weight_dtype=self.scenario.expert_weight_dtype, mode=self.mode)


def _worst(targets: Sequence[Target], result: ServingResult) -> tuple[float, str] | None:
    """The most-missed target of ``result``: (measured / limit, "TTFT p99 1.2 s > 1 s"); None: all met."""
    missed = [(target.measured_s(result) / target.limit_s, target) for target in targets if not target.met(result)]
    if not missed:
        return None
    ratio, target = max(missed, key=lambda item: item[0])
    return ratio, f"{target.label} {_s(target.measured_s(result))} > {_s(target.limit_s)}"


def _s(seconds: float) -> str:
    return format_quantity(seconds, "seconds")
