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
3. The step's device work takes ``prefill_s(prefill tokens in the step, their token-weighted tokens already
   in the cache)``, ``decode_s(decoding sequences, their mean context)``, or for both at once
   ``mixed_s`` (``steps.StepCosts``): one fused forward pass over all the step's tokens, as vLLM V1,
   TensorRT-LLM's in-flight batching and vLLM on TPU run it (the token-wise layers and their weight
   reads once over prefill tokens + decoding sequences, the attention per kind of request; SGLang's
   default separate passes, speculative decoding and spatial modes keep two: ``steps``' docstring). The
   step takes that combined with the serving engine's host work for the sequences it runs
   (``StepCosts.step_s``: the longer of the two when the engine overlaps them and a step ran just
   before, the sum otherwise; the device time alone where the spec's mode has no engine step).
   **Assumption:** several sequences' chunks in one step are priced as one chunk of their total length
   (``steps``); an engine that runs them as separate passes (SGLang by default) is charged them in one
   step, as if the decoding sequences waited for the prefill pass and then decoded.
   A sequence emits a token at the end of the step that processes its last known token (the
   prefill's last chunk yields the first token).

Prefix caching (``prefix_share`` F > 0): the first ``F x prompt`` tokens of each prompt, rounded down
to whole KV blocks (and leaving at least one token to prefill), are a shared prefix already in the
cache: the request starts with them computed, so its prefill skips them, and they take no blocks of
its own. The shared prefix is kept resident: the blocks of the longest one are reserved for the whole
run. Decode steps still read the whole context (the cached prefix included). A preempted request
keeps its cached prefix. **Assumption:** every request hits the cache (no first-request miss) and
the prefix's blocks are counted once.

KV admission (``ServingConfig.kv_admission``): "on-demand" is the rule above (vLLM); "reserve" is
TensorRT-LLM's default GUARANTEED_NO_EVICT capacity scheduler: a waiting request is admitted only when
the blocks of its whole sequence (prompt + output length, the request's max_tokens) are free; it holds
them until it finishes, so nothing is ever preempted.

Arrivals come from an arrival process, closed-loop users, or a trace (``Server.replay``: the rows'
arrival times and lengths exactly as read, ``workload.read_trace``).

The loop runs over steps; the engine is called only to build the step-cost grids. Per-request state
lives in numpy arrays (``_State``) and the running batch in a dense table in admission order
(``_Batch``), so a step updates its sequences with a few array operations (the per-sequence rule
above is applied as a prefix sum over the token budget; a step that runs out of KV blocks falls back
to the sequential rule, ``_schedule_with_preemption``). A stretch of pure decode steps (every running
sequence decoding, nothing admissible, no arrival due, no finish, the KV blocks lasting) is run as its
scalar step times and one update of the arrays; the results equal stepping one at a time to the last
bit (tested).
TTFT = first token - arrival; TPOT = mean gap between a request's later tokens; end-to-end = last
token - arrival; inter-token latencies are every gap after the first token (a preempted request's
recomputation shows up in them).
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import Hardware, Parameters
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario
from perfmodel.serving.speculation import Speculation, drafter
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


STEADY_GROWTH_SHARE = 0.05  # TTFT may grow by at most this share of the time between the quarters
STEADY_GROWTH_RATIO = 1.5  # ... or by at most this factor (noise in short runs)


def steady_state(arrival_s: np.ndarray, ttft_s: np.ndarray) -> bool | None:
    """Whether an open-loop run settled. Past saturation the queue grows by (offered - served rate) x
    time, and each request waits longer than the one before: TTFT grows in proportion to its arrival
    time. Unsettled: the median TTFT of the last quarter of the requests (in arrival order) exceeds
    that of the second quarter both by more than 5% of the time between the quarters' median arrivals
    (a served rate more than about 5% below the offered one) and by more than 1.5x (so that noise in a
    short run does not count). The latencies of such a run grow with its length and describe no
    steady state. None: fewer than 8 requests, or all arriving at once."""
    count = len(arrival_s)
    if count < 8:
        return None
    order = np.argsort(arrival_s, kind="stable")
    arrivals, ttft = arrival_s[order], ttft_s[order]
    quarter = count // 4
    second, last = slice(quarter, 2 * quarter), slice(count - quarter, count)
    elapsed = float(np.median(arrivals[last]) - np.median(arrivals[second]))
    if elapsed <= 0:
        return None
    early, late = float(np.median(ttft[second])), float(np.median(ttft[last]))
    return not (late - early > STEADY_GROWTH_SHARE * elapsed and late > STEADY_GROWTH_RATIO * early)


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
    # Open-loop arrivals only (None otherwise): whether the run settled (see ``steady_state``).
    steady_state: bool | None = None
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
            "steady_state": self.steady_state,
        }
        if per_request:
            data["per_request"] = {
                "arrival_s": list(self.arrival_s), "prompt_tokens": list(self.prompt_tokens),
                "output_tokens": list(self.output_tokens), "ttft_s": list(self.ttft_s),
                "tpot_s": [_json_float(v) for v in self.tpot_s], "e2e_s": list(self.e2e_s)}
        return data


KV_ADMISSION = ("on-demand", "reserve")
FIRST_TOKEN_STEPS = ("prefill", "decode")


@dataclass(frozen=True, kw_only=True)
class ServingConfig:
    max_batch: int = 256
    max_tokens_per_step: int = 8192
    block_size: int = 16
    memory_utilization: float = 0.9
    # "on-demand" (vLLM): a sequence takes KV blocks as its tokens arrive; when none are free the newest
    # running sequence is preempted. "reserve" (TensorRT-LLM's default GUARANTEED_NO_EVICT capacity
    # scheduler): a request is admitted only when the blocks of its whole sequence (prompt + its output
    # length, the request's max_tokens) are free, and holds them to the end: nothing is ever preempted.
    kv_admission: str = "on-demand"
    # An engine's cap on the KV cache in blocks (LMDeploy's cache_max_entry_count when >= 1, vLLM's
    # num_gpu_blocks_override); None: what memory_utilization of the memory holds. The cache is the smaller.
    max_kv_blocks: int | None = None
    # Which step emits a request's first token. "prefill" (vLLM, SGLang, TensorRT-LLM): the step that
    # completes its prompt. "decode" (FasterTransformer's and LMDeploy TurboMind's context decoding:
    # LlamaBatch.cc leaves a prompt's last token "to process with decoder later"): the prefill covers all but
    # the last prompt token, and the next decode step, which computes that token, emits the first token.
    first_token: str = "prefill"

    def __post_init__(self) -> None:
        if self.first_token not in FIRST_TOKEN_STEPS:
            raise PerfmodelError(f"first-token must be one of {', '.join(FIRST_TOKEN_STEPS)}, got {self.first_token!r}")
        if self.max_kv_blocks is not None and self.max_kv_blocks < 1:
            raise PerfmodelError(f"max-kv-blocks must be at least 1, got {self.max_kv_blocks}")
        if self.kv_admission not in KV_ADMISSION:
            raise PerfmodelError(f"kv-admission must be one of {', '.join(KV_ADMISSION)}, got {self.kv_admission!r}")
        for name in ("max_batch", "max_tokens_per_step", "block_size"):
            if getattr(self, name) < 1:
                raise PerfmodelError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_tokens_per_step < self.max_batch:
            raise PerfmodelError(f"max-tokens-per-step ({self.max_tokens_per_step}) must be at least max-batch "
                                 f"({self.max_batch}): every running sequence needs a token each step")


class _State:
    """Per-request state of a run, one numpy array per field (indexed by request), so that a step
    updates all its scheduled sequences at once."""

    def __init__(self, prompts: np.ndarray, outputs: np.ndarray, cached: np.ndarray,
                 blocks_of: Callable[[np.ndarray], np.ndarray], shifted: np.ndarray) -> None:
        count = len(prompts)
        self.prompt, self.output = prompts, outputs
        self.cached = cached  # the shared prefix already in the KV cache
        self.cached_blocks = blocks_of(cached)
        self.computed = self.cached.copy()
        self.generated = np.zeros(count, dtype=np.int64)
        self.blocks = np.zeros(count, dtype=np.int64)
        self.arrival = np.zeros(count)
        self.first = np.full(count, math.nan)
        self.second = np.full(count, math.nan)  # the second token's time (the first token's, when shifted)
        self.shifted = shifted  # prompt's last token left to a decode step (first_token decode)
        self.last = np.full(count, math.nan)
        self.finish = np.full(count, math.nan)


class _Batch:
    """The running sequences as dense arrays in admission order (the step's hot data, no gathers):
    one row of a preallocated ``table`` per field, the first ``size`` columns in use, so that
    admitting sequences writes a few columns and retiring them is one masked copy; ``store`` writes
    them back to the per-request ``_State`` when they leave the batch to wait again (preemption).
    ``held`` = KV blocks the sequence's computed tokens occupy, its cached prefix included."""

    ROWS = ("ids", "prompt", "output", "generated", "computed", "rest", "held", "cached_blocks")

    def __init__(self, capacity: int) -> None:
        self._table = np.zeros((len(self.ROWS), capacity), dtype=np.int64)
        self._last = np.zeros(capacity)
        self.size = 0
        self._views()

    def _views(self) -> None:
        table = self._table[:, :self.size]
        (self.ids, self.prompt, self.output, self.generated, self.computed, self.rest, self.held,
         self.cached_blocks) = table  # row views: updating one updates the table
        self.table, self.last = table, self._last[:self.size]  # last: time of each sequence's latest token

    def append(self, ids: list[int], state: _State) -> None:
        if len(ids) > 8:  # many at once (a burst): gathers beat a Python loop
            self._append_gathered(np.asarray(ids, dtype=np.int64), state)
            return
        columns = []
        for index in ids:
            prompt, generated, computed = int(state.prompt[index]), int(state.generated[index]), \
                int(state.computed[index])
            cached_blocks = int(state.cached_blocks[index])
            columns.append((index, prompt, int(state.output[index]), generated, computed,
                            prompt + generated - computed,  # tokens known but not computed yet
                            int(state.blocks[index]) + cached_blocks, cached_blocks))
        end = self.size + len(ids)
        self._table[:, self.size:end] = np.array(columns, dtype=np.int64).T
        self._last[self.size:end] = state.last[ids]
        self.size = end
        self._views()

    def _append_gathered(self, ids: np.ndarray, state: _State) -> None:
        end = self.size + ids.size
        table = self._table[:, self.size:end]
        table[0] = ids
        table[1], table[2] = state.prompt[ids], state.output[ids]
        table[3], table[4] = state.generated[ids], state.computed[ids]
        table[5] = table[1] + table[3] - table[4]
        table[7] = state.cached_blocks[ids]
        table[6] = state.blocks[ids] + table[7]
        self._last[self.size:end] = state.last[ids]
        self.size = end
        self._views()

    def drop(self, leaving: np.ndarray) -> None:
        """Retire the sequences where ``leaving`` is true, keeping the others' order."""
        gone = np.flatnonzero(leaving)
        end = self.size
        if gone.size == 1:  # the common case: one finishes; shift the later columns left by one
            i = int(gone[0])
            self._table[:, i:end - 1] = self._table[:, i + 1:end]
            self._last[i:end - 1] = self._last[i + 1:end]
            self.size = end - 1
        else:
            kept = ~leaving
            count = end - int(gone.size)
            self._table[:, :count] = self.table[:, kept]
            self._last[:count] = self.last[kept]
            self.size = count
        self._views()

    def store(self, state: _State) -> None:
        ids = self.ids
        state.generated[ids], state.computed[ids] = self.generated, self.computed
        state.blocks[ids] = self.held - self.cached_blocks
        state.last[ids] = self.last


class Server:
    """One replica of ``architecture`` on ``parallelism.chips`` chips of ``hardware``: its KV cache and
    step costs, built once; ``simulate`` runs a request stream through it."""

    def __init__(self, architecture: Architecture, hardware: Hardware, parallelism: Parallelism = Parallelism(), *,
                 config: ServingConfig = ServingConfig(), max_context: int | None = None,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", activation_dtype: str = "bf16",
                 mode: str | None = None, speculation: Speculation | None = None,
                 expert_weight_dtype: str | None = None) -> None:
        self.architecture, self.hardware, self.parallelism, self.config = architecture, hardware, parallelism, config
        self.speculation = speculation
        context = min(max_context or architecture.max_positions, architecture.max_positions)
        scenario = Scenario(batch=1, prompt_tokens=1, generated_tokens=1, weight_dtype=weight_dtype,
                            kv_dtype=kv_dtype, activation_dtype=activation_dtype,
                            expert_weight_dtype=expert_weight_dtype)
        self.scenario = scenario
        draft = None if speculation is None else drafter(architecture, speculation, scenario, parallelism)
        self.kv: KVCapacity = kv_capacity(architecture, hardware, scenario, parallelism,
                                          block_size=config.block_size, max_batch=config.max_batch,
                                          max_tokens_per_step=config.max_tokens_per_step,
                                          memory_utilization=config.memory_utilization, drafter=draft,
                                          max_blocks=config.max_kv_blocks)
        self._context, self._mode = context, mode
        self.costs = self._step_costs(hardware)
        self.mode = self.costs.mode

    def _step_costs(self, hardware: Hardware) -> StepCosts:
        config = self.config
        return StepCosts(self.architecture, hardware, self.scenario, self.parallelism, max_batch=config.max_batch,
                         max_tokens_per_step=config.max_tokens_per_step, max_context=self._context,
                         resident_bytes=self.kv.state_bytes, mode=self._mode, speculation=self.speculation)

    def repriced(self, parameters: Parameters) -> Server:
        """This replica with its step costs priced with other efficiency ``parameters`` (a set drawn from
        the fit's covariance: ``uncertainty.fit_samples``): the same KV cache (capacities and residency
        read no efficiency) and scheduler, so ``simulate`` with the same seed replays the same arrivals
        and lengths, and only the step times differ. Costs a step-cost grid (~26 array evaluations)."""
        other = copy.copy(self)
        other.hardware = replace(self.hardware, efficiency=parameters)
        other.costs = other._step_costs(other.hardware)
        return other

    def _blocks(self, tokens: int) -> int:
        """KV blocks that ``tokens`` tokens occupy (a sliding window keeps only its last tokens). Plain
        ints: the per-request paths (admission) call it one request at a time."""
        window = self.architecture.sliding_window
        held = tokens if window is None else min(tokens, window)
        return -(-held // self.config.block_size)

    def _block_array(self, tokens: np.ndarray) -> np.ndarray:
        """``_blocks`` of every element."""
        window = self.architecture.sliding_window
        held = tokens if window is None else np.minimum(tokens, window)
        return -(-held // self.config.block_size)

    def _cached(self, prompts: np.ndarray, prefix_share: float) -> np.ndarray:
        """Tokens of each prompt found in the prefix cache: whole blocks, one token left."""
        size = self.config.block_size
        return np.minimum((prefix_share * prompts).astype(np.int64), prompts - 1) // size * size

    def simulate(self, arrivals: ArrivalProcess | ClosedLoop, requests: int, prompt: LengthDistribution,
                 output: LengthDistribution, *, seed: int = 0, ttft_slo_s: float | None = None,
                 tpot_slo_s: float | None = None, prefix_share: float = 0.0,
                 progress: Callable[[int], None] | None = None) -> ServingResult:
        """``requests`` requests from ``arrivals`` with lengths drawn from ``prompt`` and ``output``
        (seeded); ``progress(done)`` is called as requests finish."""
        if requests < 1:
            raise PerfmodelError(f"requests must be at least 1, got {requests}")
        if seed < 0:  # numpy's generators take only non-negative seeds
            raise PerfmodelError(f"the seed must be at least 0, got {seed}")
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
             prefix_share: float, progress: Callable[[int], None] | None, trace_name: str = "",
             handed_off: bool = False) -> ServingResult:
        if not (math.isfinite(prefix_share) and 0 <= prefix_share < 1):
            raise PerfmodelError(f"prefix share must be a fraction in [0, 1), got {prefix_share!r}")
        requests = len(prompts)
        reserve = self.config.kv_admission == "reserve"
        prompts, outputs = np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64)
        # first_token "decode": a prompt's last token is computed by a decode step, which emits the first token.
        # It runs as a prompt one token shorter whose first emitted token is not shown: the same steps and KV
        # cache (a one-token prompt has no context to decode: its one step is the decode step already).
        shifted = (prompts >= 2) if self.config.first_token == "decode" and not handed_off \
            else np.zeros(requests, dtype=bool)
        prompts, outputs = prompts - shifted, outputs + shifted
        state = _State(prompts, outputs, self._cached(prompts, prefix_share), self._block_array, shifted)
        shifting = bool(shifted.any())
        if handed_off:  # prefilled elsewhere: the prompt's KV cache and the first token arrive with the request
            state.computed[:] = prompts
            state.generated[:] = 1
        reserved = int(state.cached_blocks.max())  # the shared prefix stays resident
        longest = int(np.max(prompts + outputs))
        own = int(np.max(self._block_array(prompts + outputs) - state.cached_blocks))
        if own + reserved > self.kv.blocks:
            capped = self.config.max_kv_blocks is not None and self.kv.blocks == self.config.max_kv_blocks
            raise PerfmodelError(f"a request of {longest} tokens needs {self._blocks(longest)} KV blocks, the cache "
                                 f"holds {self.kv.blocks} ({self.kv.tokens} tokens); "
                                 + ("raise --max-kv-blocks" if capped else "add chips or raise the memory utilization"))
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
        budget_max, max_batch = self.config.max_tokens_per_step, self.config.max_batch
        costs, total_blocks = self.costs, self.kv.blocks
        waiting: deque[int] = deque()
        batch = _Batch(max_batch)  # the running sequences, in admission order
        gaps: list[np.ndarray] = []
        free, peak, max_queue, preemptions, steps, done = total_blocks - reserved, reserved, 0, 0, 0, 0
        now, area = 0.0, 0.0
        pipelined = False  # a step ran just before this one (the engine's host work may hide behind it)

        while done < requests:
            while pending and pending[0][0] <= now:
                at, index = heapq.heappop(pending)
                state.arrival[index] = at
                waiting.append(index)
                area += now - at  # it arrived during the last step: in the system since then
            if not batch.size and not waiting:
                now = pending[0][0]
                pipelined = False
                continue
            max_queue = max(max_queue, len(waiting))
            if self._decode_only(batch, waiting, free, budget_max, max_batch, state):
                # A stretch of pure decode steps (nothing can be admitted, nothing finishes, the KV cache
                # lasts, no arrival is due): run it as scalar step times and one update of the arrays.
                span = int((batch.output - batch.generated).min()) - 1  # the first finish is a normal step
                lasting = self._steps_the_cache_lasts(batch, free, span)
                n, known = batch.size, int(batch.computed.sum())
                base = n + len(waiting)
                stamps: list[float] = []
                for j in range(1, lasting + 1):
                    if j > 1 and pending and pending[0][0] <= now:
                        break
                    step = costs.step_s(costs.decode_s(n, (known + n * j) / n), n, pipelined=pipelined or j > 1)
                    area += base * step
                    now += step
                    stamps.append(now)
                if stamps:
                    pipelined = True
                    k = len(stamps)
                    if shifting:
                        second = batch.generated == 1
                        state.second[batch.ids[second]] = stamps[0]
                        gaps.append((stamps[0] - batch.last)[~(second & state.shifted[batch.ids])])
                    else:
                        gaps.append(stamps[0] - batch.last)
                    if k > 1:
                        gaps.append(np.repeat(np.diff(np.asarray(stamps)), n))
                    if not reserve:
                        held = self._block_array(batch.computed + k)
                        free -= int(held.sum() - batch.held.sum())
                        batch.held[:] = held
                    batch.computed += k
                    batch.generated += k
                    batch.last[:] = now
                    steps += k
                    peak = max(peak, total_blocks - free)
                    continue
            # Running sequences first, in admission order, each taking what is left of the token budget.
            rest = batch.rest
            wanted = int(rest.sum())
            need = rest if wanted <= budget_max else np.clip(budget_max - (np.cumsum(rest) - rest), 0, rest)
            if reserve:  # the whole sequence's blocks were taken at admission
                held, more = batch.held, 0
            else:
                held = self._block_array(batch.computed + need)
                more = int((held - batch.held).sum())
            if more <= free:  # every sequence gets its blocks: no preemption this step
                batch.held[:] = held
                free -= more
                spent = wanted if wanted <= budget_max else int(need.sum())
                preempted = False
            else:  # the KV cache runs out: the scheduler's sequential rule, preempting from the tail
                batch.store(state)
                order, free, budget, taken, preemptions = self._schedule_with_preemption(
                    state, batch.ids.tolist(), free, budget_max, preemptions, waiting)
                batch = _Batch(max_batch)
                batch.append(order, state)
                need = np.asarray(taken, dtype=np.int64)
                spent = budget_max - budget
                preempted = True
            budget = budget_max - spent
            # The step's work so far: decoding sequences (one known token each) and prefill chunks
            # (their tokens, and the tokens each already has in the cache).
            if not preempted and wanted == batch.size:  # every running sequence has one token to compute
                decoding_mask = batch.generated >= 1
            else:
                decoding_mask = (need == 1) & (batch.rest == 1) & (batch.generated >= 1)
            decoding = int(np.count_nonzero(decoding_mask))
            if decoding == batch.size:
                decoded, prefill_tokens, earlier_sum = int(batch.computed.sum()), 0, 0
            else:
                decoded = int(batch.computed[decoding_mask].sum()) if decoding else 0
                prefill_tokens = spent - decoding
                earlier_sum = int((need * batch.computed).sum()) - decoded
            admitted: list[int] = []
            admitted_needs: list[int] = []
            while not preempted and waiting and batch.size + len(admitted) < max_batch and budget > 0:
                index = waiting[0]
                generated, computed = int(state.generated[index]), int(state.computed[index])
                known = int(state.prompt[index]) + generated - computed
                take = min(known, budget)
                grow = self._admission_blocks(state, index, take)
                if grow > free:
                    break
                waiting.popleft()
                state.blocks[index] += grow
                free -= grow
                budget -= take
                admitted.append(index)
                admitted_needs.append(take)
                if take == 1 and known == 1 and generated >= 1:  # a resumed sequence back to decoding
                    decoding += 1
                    decoded += computed
                else:
                    prefill_tokens += take
                    earlier_sum += take * computed
            if admitted:
                if handed_off:  # the first token reaches the user as the decode worker takes the request
                    fresh = [index for index in admitted if math.isnan(state.first[index])]
                    state.first[fresh] = state.last[fresh] = now
                batch.append(admitted, state)
                need = np.concatenate([need, np.asarray(admitted_needs, dtype=np.int64)])
            if not (spent or admitted):
                raise PerfmodelError("the scheduler could not place any request (KV cache too small)")
            peak = max(peak, total_blocks - free)
            # the chunks' tokens already in the cache, weighted by each chunk's tokens
            earlier = earlier_sum / prefill_tokens if prefill_tokens else 0.0
            device = costs.mixed_s(prefill_tokens, earlier, decoding, (decoded + decoding) / decoding) if decoding \
                else costs.prefill_s(prefill_tokens, earlier)
            step = costs.step_s(device, int(np.count_nonzero(need)), pipelined=pipelined)
            pipelined = True
            area += (batch.size + len(waiting)) * step
            now, steps = now + step, steps + 1
            batch.computed += need
            batch.rest -= need
            emitted = batch.rest == 0
            count = int(np.count_nonzero(emitted))
            if count:
                every = count == batch.size  # the common decode step: no masks needed
                generated = batch.generated if every else batch.generated[emitted]
                first_token = generated == 0
                firsts = int(np.count_nonzero(first_token))
                if firsts < count:
                    last = batch.last if every else batch.last[emitted]
                    if shifting:  # a shifted request's second emission is its first token: no gap before it
                        ids = batch.ids if every else batch.ids[emitted]
                        second = generated == 1
                        state.second[ids[second]] = now
                        gaps.append((now - last)[~first_token & ~(second & state.shifted[ids])])
                    else:
                        gaps.append(now - (last[~first_token] if firsts else last))
                if firsts:
                    state.first[(batch.ids if every else batch.ids[emitted])[first_token]] = now
                if every:
                    batch.last[:] = now
                    batch.generated += 1
                    batch.rest[:] = 1
                else:
                    batch.last[emitted] = now
                    batch.generated[emitted] = generated + 1
                    batch.rest[emitted] = 1
                finished = batch.generated == batch.output
                if not every:
                    finished &= emitted
                if finished.any():
                    ids = batch.ids[finished]
                    state.finish[ids] = now
                    free += int((batch.held - batch.cached_blocks)[finished].sum())
                    done += int(ids.size)
                    if closed:
                        for _ in range(int(ids.size)):
                            if issued < requests:
                                heapq.heappush(pending, (now + think_s, issued))
                                issued += 1
                    batch.drop(finished)
                    if progress is not None:
                        progress(done)
        return self._result(state, arrivals, lengths, seed, np.concatenate(gaps) if gaps else np.zeros(0), now, area,
                            max_queue, peak, preemptions, steps, ttft_slo_s, tpot_slo_s, prefix_share, trace_name)

    def _decode_only(self, batch: _Batch, waiting: deque[int], free: int, budget_max: int, max_batch: int,
                     state: _State) -> bool:
        """Whether the next step only decodes the running batch: every sequence has one known token to
        compute and no waiting request can be admitted (the batch is full, the budget is spent, or
        the head of the queue needs more KV blocks than are free, which stays true while decoding
        only takes blocks)."""
        if not batch.size:
            return False
        budget = budget_max - batch.size
        if waiting and batch.size < max_batch and budget > 0:
            head = waiting[0]
            take = min(int(state.prompt[head] + state.generated[head] - state.computed[head]), budget)
            if self._admission_blocks(state, head, take) <= free:
                return False
        return int(batch.rest.max()) == 1 and int(batch.generated.min()) >= 1

    def _admission_blocks(self, state: _State, index: int, take: int) -> int:
        """KV blocks request ``index`` needs to be admitted with ``take`` tokens to compute: those
        tokens' blocks (on demand), or its whole sequence's (reserve)."""
        tokens = int(state.prompt[index] + state.output[index]) if self.config.kv_admission == "reserve" \
            else int(state.computed[index]) + take
        return self._blocks(tokens) - int(state.cached_blocks[index]) - int(state.blocks[index])

    def _steps_the_cache_lasts(self, batch: _Batch, free: int, span: int) -> int:
        """How many of the next ``span`` decode steps find the KV blocks they need free."""
        if span < 1 or self.config.kv_admission == "reserve":
            return max(span, 0)
        held = int(batch.held.sum())
        if int(self._block_array(batch.computed + span).sum()) - held <= free:
            return span
        needed = self._block_array(np.add.outer(np.arange(1, span + 1), batch.computed)).sum(axis=1) - held
        return int(np.count_nonzero(needed <= free))

    def _schedule_with_preemption(self, state: _State, running: list[int], free: int, budget: int,
                                  preemptions: int, waiting: deque[int]):
        """The sequential rule of a step that runs out of KV blocks: each running sequence in turn takes
        its tokens and blocks; when none are free, the most recently admitted running sequence is
        preempted (blocks freed, back at the head of the queue, recomputed later)."""
        prompt, generated, computed, blocks = state.prompt, state.generated, state.computed, state.blocks
        taken: list[int] = []

        def preempt(victim: int) -> None:
            nonlocal free, preemptions
            running.remove(victim)
            free += int(blocks[victim])
            blocks[victim], computed[victim] = 0, state.cached[victim]
            waiting.appendleft(victim)
            preemptions += 1

        position = 0
        while position < len(running):
            index = running[position]
            need = min(int(prompt[index] + generated[index] - computed[index]), budget)
            if need <= 0:
                taken.append(0)
                position += 1
                continue
            extra = self._blocks(int(computed[index]) + need) - int(state.cached_blocks[index]) - int(blocks[index])
            while extra > free and running[-1] != index:
                preempt(running[-1])
            if extra > free:
                preempt(index)
                continue
            blocks[index] += extra
            free -= extra
            budget -= need
            taken.append(need)
            position += 1
        return running, free, budget, taken, preemptions

    def _result(self, state: _State, arrivals, lengths, seed, gaps, now, area, max_queue, peak, preemptions, steps,
                ttft_slo_s, tpot_slo_s, prefix_share, trace_name) -> ServingResult:
        arrival = state.arrival
        # A shifted request (first_token "decode") shows its second emitted token as its first.
        first = np.where(state.shifted, state.second, state.first)
        ttft = first - arrival
        e2e = state.finish - arrival
        out_tokens = state.output - state.shifted
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out_tokens > 1, (state.finish - first) / np.maximum(out_tokens - 1, 1), math.nan)
        start = float(arrival.min())
        duration = max(now - start, 1e-30)
        goodput = goodput_rate = None
        if ttft_slo_s is not None or tpot_slo_s is not None:
            ok = np.ones(len(arrival), dtype=bool)
            if ttft_slo_s is not None:
                ok &= ttft <= ttft_slo_s
            if tpot_slo_s is not None:
                ok &= np.isnan(tpot) | (tpot <= tpot_slo_s)
            goodput, goodput_rate = float(ok.mean()), float(ok.sum() / duration)
        open_loop = isinstance(arrivals, Trace) or (isinstance(arrivals, ArrivalProcess) and arrivals.kind != "burst")
        settled = steady_state(arrival, ttft) if open_loop else None
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
            requests=len(arrival), seed=seed,
            duration_s=duration, ttft=Percentiles.of(ttft), tpot=Percentiles.of(tpot), e2e=Percentiles.of(e2e),
            itl=Percentiles.of(gaps), tokens_per_s=float(out_tokens.sum() / duration),
            requests_per_s=len(arrival) / duration, goodput=goodput, goodput_requests_per_s=goodput_rate,
            ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, mean_in_system=area / duration, max_queue=max_queue,
            kv_blocks=self.kv.blocks, block_size=self.kv.block_size, peak_kv_blocks=peak, preemptions=preemptions,
            steps=steps, arrival_s=tuple(arrival.tolist()), prompt_tokens=tuple((state.prompt + state.shifted).tolist()),
            output_tokens=tuple(out_tokens.tolist()), ttft_s=tuple(ttft.tolist()),
            tpot_s=tuple(tpot.tolist()), e2e_s=tuple(e2e.tolist()), prefix_share=prefix_share,
            steady_state=settled, itl_samples_s=np.asarray(gaps, dtype=float))


RATE_TOLERANCE = 0.02  # the bisection stops when the bracket is this share of the rate
RATE_SEARCH_STEPS = 14
LOWEST_RATE_SHARE = 1 / 1024  # the search gives up below this share of the offline throughput


@dataclass(frozen=True, kw_only=True)
class ServerScenario:
    """MLPerf Inference's Server scenario: the highest arrival rate whose p99 TTFT and p99 TPOT meet
    the constraints (and whose run settles), found by bisection; ``offline`` is the Offline scenario
    (every request at once), whose request rate bounds the search."""

    rate_per_s: float | None  # None: not even the lowest rate tried meets the constraints
    result: ServingResult | None  # the run at that rate
    offline: ServingResult
    tried: tuple[tuple[float, bool], ...]  # (rate, met) in the order tried
    ttft_slo_s: float | None
    tpot_slo_s: float | None


def server_scenario(server: Server, requests: int, prompt: LengthDistribution, output: LengthDistribution, *,
                    ttft_slo_s: float | None, tpot_slo_s: float | None, seed: int = 0, arrival: str = "poisson",
                    progress: Callable[[int], None] | None = None) -> ServerScenario:
    """The highest ``arrival`` rate (seeded runs of ``requests``) meeting the p99 constraints."""
    if ttft_slo_s is None and tpot_slo_s is None:
        raise PerfmodelError("the server scenario needs a TTFT or a TPOT constraint (--ttft-slo, --tpot-slo)")
    offline = server.simulate(ArrivalProcess(kind="burst"), requests, prompt, output, seed=seed)
    tried: list[tuple[float, bool]] = []
    runs: dict[float, ServingResult] = {}

    def meets(rate: float) -> bool:
        result = server.simulate(ArrivalProcess(kind=arrival, rate_per_s=rate), requests, prompt, output, seed=seed,
                                 ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
        ok = result.steady_state is not False \
            and (ttft_slo_s is None or result.ttft.p99 <= ttft_slo_s) \
            and (tpot_slo_s is None or math.isnan(result.tpot.p99) or result.tpot.p99 <= tpot_slo_s)
        tried.append((rate, ok))
        runs[rate] = result
        if progress is not None:
            progress(len(tried))
        return ok

    ceiling = offline.requests_per_s
    high = ceiling
    if meets(high):
        return ServerScenario(rate_per_s=high, result=runs[high], offline=offline, tried=tuple(tried),
                              ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
    low = high / 2
    while not meets(low):
        high, low = low, low / 2
        if low < ceiling * LOWEST_RATE_SHARE:
            return ServerScenario(rate_per_s=None, result=None, offline=offline, tried=tuple(tried),
                                  ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
    for _ in range(RATE_SEARCH_STEPS):
        if high - low <= RATE_TOLERANCE * high:
            break
        middle = (low + high) / 2
        if meets(middle):
            low = middle
        else:
            high = middle
    return ServerScenario(rate_per_s=low, result=runs[low], offline=offline, tried=tuple(tried),
                          ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)


KNEE_GROWTH = 1.10  # without a TTFT SLO, the knee is the first rate after which throughput grows by 10% or less


def knee_rate(rates: Sequence[float], results: Sequence[ServingResult], ttft_slo_s: float | None) -> float | None:
    """The knee of a load sweep (``results[i]`` simulated at ``rates[i]``, ascending): the last rate whose
    p99 TTFT meets ``ttft_slo_s``; without an SLO, the first rate after which throughput grows by no more
    than 10% (``KNEE_GROWTH``). None: no rate meets the SLO, or throughput keeps growing."""
    if len(rates) != len(results):
        raise PerfmodelError(f"{len(rates)} rates but {len(results)} results")
    if ttft_slo_s is not None:
        meeting = [rate for rate, result in zip(rates, results, strict=True) if result.ttft.p99 <= ttft_slo_s]
        return meeting[-1] if meeting else None
    for index in range(len(rates) - 1):
        if results[index + 1].tokens_per_s <= KNEE_GROWTH * results[index].tokens_per_s:
            return rates[index]
    return None


def max_context(prompt: LengthDistribution, output: LengthDistribution) -> int | None:
    """The longest sequence the two distributions can make (None: unbounded)."""
    if prompt.largest is None or output.largest is None:
        return None
    return prompt.largest + output.largest
