"""Request-level serving simulation: an iteration-level scheduler in the style of vLLM (pure core).

Each scheduler step (``Server.simulate``):

1. The running sequences, in admission order, are scheduled first: a decoding sequence takes one
   token of the step's budget (``max_tokens_per_step``), a sequence still in prefill takes the rest
   of its prompt or what is left of the budget (chunked prefill: a long prompt is prefilled over
   several steps). Each gets the paged-KV blocks (``block_size`` tokens) its new tokens need; when
   none are free, the most recently admitted running sequence is preempted (its blocks freed, put
   back at the head of the queue, and later recomputed: its prompt and the tokens it generated are
   prefilled again).
2. If nothing was preempted, waiting requests are admitted first come, first served while the batch
   is below ``max_batch``, the token budget lasts and the KV cache has blocks for their first chunk.
3. The step takes ``prefill_s(prefill tokens in the step) + decode_s(decoding sequences, their mean
   context)`` (``steps.StepCosts``). **Assumption:** a mixed step costs its prefill chunk plus its
   decode batch, as two passes (the weights are read twice; a fused engine reads them once, so mixed
   steps are priced conservatively). A sequence emits a token at the end of the step that processes
   its last known token (the prefill's last chunk yields the first token).

Prefix caching (``prefix_share`` F > 0): the first ``F x prompt`` tokens of each prompt, rounded down
to whole KV blocks (and leaving at least one token to prefill), are a shared prefix already in the
cache: the request starts with them computed, so its prefill skips them, and they take no blocks of
its own. The shared prefix is kept resident: the blocks of the longest one are reserved for the whole
run. Decode steps still read the whole context (the cached prefix included). A preempted request
keeps its cached prefix. **Assumption:** every request hits the cache (no first-request miss) and
the prefix's blocks are counted once.

Arrivals come from an arrival process, closed-loop users, or a trace (``Server.replay``: the rows'
arrival times and lengths exactly as read, ``workload.read_trace``).

The loop is plain Python over steps; the engine is called only to build the step-cost grids.
TTFT = first token - arrival; TPOT = mean gap between a request's later tokens; end-to-end = last
token - arrival; inter-token latencies are every gap after the first token (a preempted request's
recomputation shows up in them).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario
from perfmodel.serving.steps import KVCapacity, StepCosts, kv_capacity
from perfmodel.serving.workload import ArrivalProcess, ClosedLoop, LengthDistribution, Trace


@dataclass(frozen=True, kw_only=True)
class Percentiles:
    p50: float
    p90: float
    p99: float
    mean: float

    @staticmethod
    def of(values) -> Percentiles:
        data = np.asarray(values, dtype=float)
        data = data[~np.isnan(data)]
        if not data.size:
            return Percentiles(p50=math.nan, p90=math.nan, p99=math.nan, mean=math.nan)
        p50, p90, p99 = np.percentile(data, [50, 90, 99])
        return Percentiles(p50=float(p50), p90=float(p90), p99=float(p99), mean=float(data.mean()))

    def to_dict(self) -> dict:
        return {key: _json_float(value) for key, value in
                {"p50": self.p50, "p90": self.p90, "p99": self.p99, "mean": self.mean}.items()}


def _json_float(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


@dataclass(frozen=True, kw_only=True)
class ServingResult:
    model: str
    hardware: str
    mode: str
    parallelism: Parallelism
    workload: str  # arrivals and lengths, in words
    requests: int
    seed: int
    duration_s: float
    ttft: Percentiles
    tpot: Percentiles
    e2e: Percentiles
    itl: Percentiles
    tokens_per_s: float  # output tokens over the run
    requests_per_s: float
    goodput: float | None  # share of requests meeting the SLO (None: no SLO given)
    goodput_requests_per_s: float | None
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    mean_in_system: float  # time-average of requests waiting or running
    max_queue: int
    kv_blocks: int
    block_size: int
    peak_kv_blocks: int
    preemptions: int
    steps: int
    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    ttft_s: tuple[float, ...]
    tpot_s: tuple[float, ...]
    e2e_s: tuple[float, ...]
    prefix_share: float = 0.0
    itl_samples_s: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)

    @property
    def peak_kv_share(self) -> float:
        return self.peak_kv_blocks / self.kv_blocks

    def to_dict(self, per_request: bool = True) -> dict:
        data = {
            "model": self.model, "hardware": self.hardware, "mode": self.mode, "tp": self.parallelism.tp,
            "pp": self.parallelism.pp, "chips": self.parallelism.chips, "workload": self.workload,
            "requests": self.requests, "seed": self.seed, "duration_s": self.duration_s,
            "ttft_s": self.ttft.to_dict(), "tpot_s": self.tpot.to_dict(), "e2e_s": self.e2e.to_dict(),
            "itl_s": self.itl.to_dict(), "tokens_per_s": self.tokens_per_s, "requests_per_s": self.requests_per_s,
            "goodput": self.goodput, "goodput_requests_per_s": self.goodput_requests_per_s,
            "ttft_slo_s": self.ttft_slo_s, "tpot_slo_s": self.tpot_slo_s, "mean_in_system": self.mean_in_system,
            "max_queue": self.max_queue, "kv_blocks": self.kv_blocks, "block_size": self.block_size,
            "peak_kv_blocks": self.peak_kv_blocks, "peak_kv_share": self.peak_kv_share,
            "preemptions": self.preemptions, "steps": self.steps, "prefix_share": self.prefix_share,
        }
        if per_request:
            data["per_request"] = {
                "arrival_s": list(self.arrival_s), "prompt_tokens": list(self.prompt_tokens),
                "output_tokens": list(self.output_tokens), "ttft_s": list(self.ttft_s),
                "tpot_s": [_json_float(v) for v in self.tpot_s], "e2e_s": list(self.e2e_s)}
        return data


@dataclass(frozen=True, kw_only=True)
class ServingConfig:
    max_batch: int = 256
    max_tokens_per_step: int = 8192
    block_size: int = 16
    memory_utilization: float = 0.9

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_tokens_per_step", "block_size"):
            if getattr(self, name) < 1:
                raise PerfmodelError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_tokens_per_step < self.max_batch:
            raise PerfmodelError(f"max-tokens-per-step ({self.max_tokens_per_step}) must be at least max-batch "
                                 f"({self.max_batch}): every running sequence needs a token each step")


class _Request:
    __slots__ = ("arrival", "prompt", "output", "generated", "computed", "blocks", "first", "last", "finish",
                 "cached", "cached_blocks")

    def __init__(self, arrival: float, prompt: int, output: int, cached: int = 0, cached_blocks: int = 0) -> None:
        self.arrival, self.prompt, self.output = arrival, prompt, output
        self.generated = self.blocks = 0
        self.cached, self.cached_blocks = cached, cached_blocks  # the shared prefix already in the KV cache
        self.computed = cached
        self.first = self.last = self.finish = math.nan


class Server:
    """One replica of ``architecture`` on ``parallelism.chips`` chips of ``hardware``: its KV cache and
    step costs, built once; ``simulate`` runs a request stream through it."""

    def __init__(self, architecture: Architecture, hardware: Hardware, parallelism: Parallelism = Parallelism(), *,
                 config: ServingConfig = ServingConfig(), max_context: int | None = None,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", activation_dtype: str = "bf16",
                 mode: str | None = None) -> None:
        self.architecture, self.hardware, self.parallelism, self.config = architecture, hardware, parallelism, config
        context = min(max_context or architecture.max_positions, architecture.max_positions)
        scenario = Scenario(batch=1, prompt_tokens=1, generated_tokens=1, weight_dtype=weight_dtype,
                            kv_dtype=kv_dtype, activation_dtype=activation_dtype)
        self.kv: KVCapacity = kv_capacity(architecture, hardware, scenario, parallelism,
                                          block_size=config.block_size, max_batch=config.max_batch,
                                          max_tokens_per_step=config.max_tokens_per_step,
                                          memory_utilization=config.memory_utilization)
        self.costs = StepCosts(architecture, hardware, scenario, parallelism, max_batch=config.max_batch,
                               max_tokens_per_step=config.max_tokens_per_step, max_context=context,
                               resident_bytes=self.kv.state_bytes, mode=mode)
        self.mode = self.costs.mode

    def _blocks(self, tokens: int) -> int:
        window = self.architecture.sliding_window
        held = tokens if window is None else min(tokens, window)
        return -(-held // self.config.block_size)

    def _cached(self, prompt: int, prefix_share: float) -> int:
        """Tokens of a ``prompt``-token prompt found in the prefix cache: whole blocks, one token left."""
        size = self.config.block_size
        return min(int(prefix_share * prompt), prompt - 1) // size * size

    def simulate(self, arrivals: ArrivalProcess | ClosedLoop, requests: int, prompt: LengthDistribution,
                 output: LengthDistribution, *, seed: int = 0, ttft_slo_s: float | None = None,
                 tpot_slo_s: float | None = None, prefix_share: float = 0.0,
                 progress: Callable[[int], None] | None = None) -> ServingResult:
        """``requests`` requests from ``arrivals`` with lengths drawn from ``prompt`` and ``output``
        (seeded); ``progress(done)`` is called as requests finish."""
        if requests < 1:
            raise PerfmodelError(f"requests must be at least 1, got {requests}")
        rng = np.random.default_rng(seed)
        limit = self.architecture.max_positions
        prompts = np.minimum(prompt.sample(rng, requests), limit - 1)
        outputs = np.maximum(np.minimum(output.sample(rng, requests), limit - prompts), 1)
        times = None if isinstance(arrivals, ClosedLoop) else arrivals.times(rng, requests)
        return self._run(arrivals, times, prompts, outputs, f"prompt {prompt.text}, output {output.text}", seed=seed,
                         ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, prefix_share=prefix_share, progress=progress)

    def replay(self, trace: Trace, *, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None,
               prefix_share: float = 0.0, progress: Callable[[int], None] | None = None) -> ServingResult:
        """The trace's requests at its arrival times with its lengths, exactly as read."""
        if not len(trace):
            raise PerfmodelError(f"trace {trace.source} holds no requests")
        trace.check_context(self.architecture.max_positions, self.architecture.name)
        times = np.asarray(trace.arrival_s, dtype=float)
        if np.any(np.diff(times) < 0) or times[0] < 0:
            raise PerfmodelError(f"trace {trace.source}: arrival times must be at least 0 and sorted")
        return self._run(trace, times, np.asarray(trace.prompt_tokens, dtype=np.int64),
                         np.asarray(trace.output_tokens, dtype=np.int64), "prompt and output lengths from the trace",
                         seed=0, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, prefix_share=prefix_share,
                         progress=progress, trace_name=Path(trace.source).name)

    def _run(self, arrivals: ArrivalProcess | ClosedLoop | Trace, times: np.ndarray | None, prompts: np.ndarray,
             outputs: np.ndarray, lengths: str, *, seed: int, ttft_slo_s: float | None, tpot_slo_s: float | None,
             prefix_share: float, progress: Callable[[int], None] | None, trace_name: str = "") -> ServingResult:
        if not (math.isfinite(prefix_share) and 0 <= prefix_share < 1):
            raise PerfmodelError(f"prefix share must be a fraction in [0, 1), got {prefix_share!r}")
        requests = len(prompts)
        cached = [self._cached(int(p), prefix_share) for p in prompts]
        cached_blocks = [self._blocks(c) for c in cached]
        reserved = max(cached_blocks)  # the shared prefix stays resident
        longest = int(np.max(prompts + outputs))
        own = max(self._blocks(int(p + o)) - b for p, o, b in zip(prompts, outputs, cached_blocks, strict=True))
        if own + reserved > self.kv.blocks:
            raise PerfmodelError(f"a request of {longest} tokens needs {self._blocks(longest)} KV blocks, the cache "
                                 f"holds {self.kv.blocks} ({self.kv.tokens} tokens); add chips or raise the memory "
                                 "utilization")
        think_s = arrivals.think_s if isinstance(arrivals, ClosedLoop) else 0.0
        closed = isinstance(arrivals, ClosedLoop)
        if isinstance(arrivals, ClosedLoop) or times is None:
            first = min(arrivals.users, requests) if isinstance(arrivals, ClosedLoop) else requests
            pending = [(0.0, index) for index in range(first)]
            issued = first
        else:
            pending = [(float(t), index) for index, t in enumerate(times)]
            issued = requests
        heapq.heapify(pending)
        reqs = [_Request(0.0, int(p), int(o), c, b)
                for p, o, c, b in zip(prompts, outputs, cached, cached_blocks, strict=True)]
        budget_max, max_batch = self.config.max_tokens_per_step, self.config.max_batch
        costs, total_blocks = self.costs, self.kv.blocks
        waiting: deque[_Request] = deque()
        running: list[_Request] = []
        gaps: list[float] = []
        free, peak, max_queue, preemptions, steps, done = total_blocks - reserved, reserved, 0, 0, 0, 0
        now, area = 0.0, 0.0

        def preempt(victim: _Request) -> None:
            nonlocal free, preemptions
            running.remove(victim)
            free += victim.blocks
            victim.blocks, victim.computed = 0, victim.cached
            waiting.appendleft(victim)
            preemptions += 1

        while done < requests:
            while pending and pending[0][0] <= now:
                at, index = heapq.heappop(pending)
                reqs[index].arrival = at
                waiting.append(reqs[index])
                area += now - at  # it arrived during the last step: in the system since then
            if not running and not waiting:
                now = pending[0][0]
                continue
            max_queue = max(max_queue, len(waiting))
            budget, scheduled, preempted = budget_max, [], False
            position = 0
            while position < len(running):
                seq = running[position]
                need = min(seq.prompt + seq.generated - seq.computed, budget)
                if need <= 0:
                    position += 1
                    continue
                extra = self._blocks(seq.computed + need) - seq.cached_blocks - seq.blocks
                while extra > free and running[-1] is not seq:
                    preempt(running[-1])
                    preempted = True
                if extra > free:
                    preempt(seq)
                    preempted = True
                    continue
                seq.blocks += extra
                free -= extra
                budget -= need
                scheduled.append((seq, need))
                position += 1
            while not preempted and waiting and len(running) < max_batch and budget > 0:
                seq = waiting[0]
                need = min(seq.prompt + seq.generated - seq.computed, budget)
                extra = self._blocks(seq.computed + need) - seq.cached_blocks - seq.blocks
                if extra > free:
                    break
                waiting.popleft()
                running.append(seq)
                seq.blocks += extra
                free -= extra
                budget -= need
                scheduled.append((seq, need))
            if not scheduled:
                raise PerfmodelError("the scheduler could not place any request (KV cache too small)")
            peak = max(peak, total_blocks - free)
            prefill_tokens, decoding, context_sum = 0, 0, 0
            for seq, need in scheduled:
                if need == 1 and seq.generated >= 1 and seq.computed == seq.prompt + seq.generated - 1:
                    decoding += 1
                    context_sum += seq.computed + 1
                else:
                    prefill_tokens += need
            step = costs.prefill_s(prefill_tokens) + (costs.decode_s(decoding, context_sum / decoding)
                                                      if decoding else 0.0)
            area += (len(running) + len(waiting)) * step
            now, steps = now + step, steps + 1
            finished = False
            for seq, need in scheduled:
                seq.computed += need
                if seq.computed < seq.prompt + seq.generated:
                    continue
                if seq.generated == 0 and math.isnan(seq.first):
                    seq.first = now
                else:
                    gaps.append(now - seq.last)
                seq.last = now
                seq.generated += 1
                if seq.generated == seq.output:
                    seq.finish, finished = now, True
                    free += seq.blocks
                    seq.blocks = 0
                    done += 1
                    if closed and issued < requests:
                        heapq.heappush(pending, (now + think_s, issued))
                        issued += 1
            if finished:
                running = [seq for seq in running if math.isnan(seq.finish)]
                if progress is not None:
                    progress(done)
        return self._result(reqs, arrivals, lengths, seed, gaps, now, area, max_queue, peak, preemptions,
                            steps, ttft_slo_s, tpot_slo_s, prefix_share, trace_name)

    def _result(self, reqs, arrivals, lengths, seed, gaps, now, area, max_queue, peak, preemptions, steps,
                ttft_slo_s, tpot_slo_s, prefix_share, trace_name) -> ServingResult:
        arrival = np.array([r.arrival for r in reqs])
        ttft = np.array([r.first - r.arrival for r in reqs])
        e2e = np.array([r.finish - r.arrival for r in reqs])
        tpot = np.array([(r.finish - r.first) / (r.output - 1) if r.output > 1 else math.nan for r in reqs])
        start = float(arrival.min())
        duration = max(now - start, 1e-30)
        out_tokens = np.array([r.output for r in reqs])
        goodput = goodput_rate = None
        if ttft_slo_s is not None or tpot_slo_s is not None:
            ok = np.ones(len(reqs), dtype=bool)
            if ttft_slo_s is not None:
                ok &= ttft <= ttft_slo_s
            if tpot_slo_s is not None:
                ok &= np.isnan(tpot) | (tpot <= tpot_slo_s)
            goodput, goodput_rate = float(ok.mean()), float(ok.sum() / duration)
        if isinstance(arrivals, Trace):
            how = f"trace {trace_name}, arrivals {arrival.min():g} s to {arrival.max():g} s"
        elif isinstance(arrivals, ClosedLoop):
            how = f"{arrivals.users} closed-loop users, think {arrivals.think_s:g} s"
        elif arrivals.kind == "burst":
            how = "burst (all at t = 0)"
        else:
            how = f"{arrivals.kind} arrivals at {arrivals.rate_per_s:g}/s"
        return ServingResult(
            model=self.architecture.name, hardware=self.hardware.name, mode=self.mode, parallelism=self.parallelism,
            workload=f"{how}; {lengths}" + (f", prefix share {prefix_share:g}" if prefix_share else ""),
            requests=len(reqs), seed=seed,
            duration_s=duration, ttft=Percentiles.of(ttft), tpot=Percentiles.of(tpot), e2e=Percentiles.of(e2e),
            itl=Percentiles.of(gaps), tokens_per_s=float(out_tokens.sum() / duration),
            requests_per_s=len(reqs) / duration, goodput=goodput, goodput_requests_per_s=goodput_rate,
            ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, mean_in_system=area / duration, max_queue=max_queue,
            kv_blocks=self.kv.blocks, block_size=self.kv.block_size, peak_kv_blocks=peak, preemptions=preemptions,
            steps=steps, arrival_s=tuple(arrival.tolist()), prompt_tokens=tuple(int(r.prompt) for r in reqs),
            output_tokens=tuple(int(r.output) for r in reqs), ttft_s=tuple(ttft.tolist()),
            tpot_s=tuple(tpot.tolist()), e2e_s=tuple(e2e.tolist()), prefix_share=prefix_share,
            itl_samples_s=np.asarray(gaps, dtype=float))


def max_context(prompt: LengthDistribution, output: LengthDistribution) -> int | None:
    """The longest sequence the two distributions can make (None: unbounded)."""
    if prompt.largest is None or output.largest is None:
        return None
    return prompt.largest + output.largest
