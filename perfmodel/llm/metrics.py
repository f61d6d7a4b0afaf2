"""LLM inference metrics from the engine: TTFT, TPOT over a growing context, throughput, memory.

* TTFT = the prefill pass through all ``pp`` stages (+ the activations sent between stages).
* TPOT = one decode step through all stages, averaged over the generation: decode time is
  piecewise linear in the context length, so Simpson's rule on the first, middle and last context
  is exact for the linear part.
* tokens/s = batch / TPOT (no overlap of pipeline stages across micro-batches: conservative).
* Memory per chip, for the fullest pipeline stage (every stage holds ``ceil(layers / pp)`` layers;
  the first also the embedding, the last the final norm and LM head, both when pp = 1), split by
  tp: weights, the KV cache of the sequences at full length (a rolling buffer of the window for
  sliding-window models), activation buffers during prefill (``ACTIVATION_BUFFERS`` live tensors of
  tokens x (hidden + intermediate/tp)) and a logits buffer. Whether that fits, or the weights are
  streamed from an external store (Cerebras MemoryX), is decided once, in ``costs.residency``, and
  the same decision prices the weight traffic.
* Continuous batching (``continuous_batching_throughput``): an iteration-level scheduler keeps
  ``concurrency`` sequences running; finished ones are replaced, and the new requests' prompts are
  prefilled together in batched passes of at most ``max_tokens_per_step`` tokens (chunked prefill),
  while the running batch decodes at its mean context.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from perfmodel.costs.residency import Residency, residency
from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import execution_model, resolve_mode
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, check, layer_groups, pipeline_send, stage_graph
from perfmodel.roofline.arrays import (
    ArrayEvaluation,
    at_first_axis,
    evaluate_arrays,
    kernels_launched,
    time_by_bound_points,
)
from perfmodel.tracing import Replays, all_finite, floats, is_traced, maximum, replaced
from perfmodel.workload.ir import Graph

# Builds one pipeline stage's graph: (architecture, scenario, parallelism, *, phase, context) -> Graph.
StageGraphs = Callable[..., Graph]
ACTIVATION_BUFFERS = 2  # input and output of the widest op are live at once
LOGIT_BYTES = 4  # fp32 logits
SIMPSON_WEIGHTS = (1 / 6, 4 / 6, 1 / 6)


@dataclass(frozen=True, kw_only=True)
class MemoryPerChip:
    """Bytes on each chip of the fullest pipeline stage: weights, and the per-batch state (KV cache,
    activation buffers, logits workspace). Fields are floats, or arrays over a sweep of batch sizes;
    breakdowns add field by field and scale with the number of sequences they hold."""

    weights: Any
    kv_cache: Any
    activations: Any
    workspace: Any

    @property
    def state(self) -> Any:
        """Bytes that grow with the sequences held (everything but the weights)."""
        return self.kv_cache + self.activations + self.workspace

    @property
    def total(self) -> Any:
        return self.weights + self.state

    def __add__(self, other: MemoryPerChip) -> MemoryPerChip:
        return MemoryPerChip(weights=self.weights + other.weights, kv_cache=self.kv_cache + other.kv_cache,
                             activations=self.activations + other.activations,
                             workspace=self.workspace + other.workspace)

    def for_sequences(self, factor: Any) -> MemoryPerChip:
        """The same weights holding ``factor`` times the sequences (state scales, weights do not)."""
        return replace(self, kv_cache=self.kv_cache * factor, activations=self.activations * factor,
                       workspace=self.workspace * factor)

    def peak(self) -> MemoryPerChip:
        """Largest value of each field over a sweep (plain floats)."""
        return MemoryPerChip(**{key: float(np.max(value)) for key, value in self.as_dict().items()})

    def as_dict(self) -> dict[str, Any]:
        return {"weights": self.weights, "kv_cache": self.kv_cache, "activations": self.activations,
                "workspace": self.workspace}


@dataclass(frozen=True, kw_only=True)
class LLMResult:
    model: str
    hardware: str
    mode: str
    scenario: Scenario
    parallelism: Parallelism
    # Floats (bools), or arrays over scenarios when llm_predict was given arrays (``at`` picks one).
    ttft_s: Any
    tpot_s: Any
    e2e_s: Any
    tokens_per_s_per_user: Any
    tokens_per_s: Any
    tokens_per_s_per_chip: Any
    memory_bytes: MemoryPerChip
    capacity_bytes: float
    fits: Any
    weights_streamed: Any
    bound_by_phase: dict
    time_by_bound_by_phase: dict
    power_watts: float
    parameters: str = "ideal (datasheet)"
    graph: str = "condensed LLM graph"      # which stage graphs priced it (condensed, or the eager stream)
    ops_per_decode_step: Mapping[str, float] = field(default_factory=dict)  # kernels, ops, host-only ops

    @property
    def chips(self) -> int:
        return self.parallelism.chips

    @property
    def points(self) -> int | None:
        """How many scenarios the result holds (None: one scenario, fields are floats)."""
        return int(np.size(self.tpot_s)) if np.ndim(self.tpot_s) else None

    def at(self, index: int) -> LLMResult:
        """Scenario ``index`` of an array result, as ``llm_predict`` of that scenario alone gives it."""
        if self.points is None:
            raise PerfmodelError("at() picks a scenario of an array result; this result holds one scenario")
        return _named_bounds(self._picked(index))

    def _picked(self, index: int) -> LLMResult:
        """Scenario ``index``'s numbers, every bound's time kept (``_named_bounds`` names them)."""
        def pick(value: Any) -> Any:
            return value[index].item() if isinstance(value, np.ndarray) and value.ndim else value

        s = self.scenario
        return replace(
            self, scenario=replace(s, batch=pick(np.broadcast_to(s.batch, self.tpot_s.shape)),
                                   prompt_tokens=pick(np.broadcast_to(s.prompt_tokens, self.tpot_s.shape)),
                                   generated_tokens=pick(np.broadcast_to(s.generated_tokens, self.tpot_s.shape))),
            **{name: pick(getattr(self, name)) for name in ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s_per_user",
                                                             "tokens_per_s", "tokens_per_s_per_chip", "fits",
                                                             "weights_streamed")},
            memory_bytes=MemoryPerChip(**{key: pick(value) for key, value in self.memory_bytes.as_dict().items()}),
            time_by_bound_by_phase={phase: {name: pick(time) for name, time in shares.items()}
                                    for phase, shares in self.time_by_bound_by_phase.items()})

    def to_dict(self) -> dict:
        """JSON-ready fields (an array result gives lists, one entry per scenario)."""
        return _lists({
            "model": self.model, "hardware": self.hardware, "mode": self.mode, "chips": self.chips,
            "tp": self.parallelism.tp, "pp": self.parallelism.pp, "ep": self.parallelism.ep,
            "batch": _plain(self.scenario.batch), "prompt": _plain(self.scenario.prompt_tokens),
            "gen": _plain(self.scenario.generated_tokens), "weights": self.scenario.weight_dtype,
            "expert_weights": self.scenario.experts_scenario.weight_dtype, "kv": self.scenario.kv_dtype,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s,
            "tokens_per_s_per_user": self.tokens_per_s_per_user, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_chip": self.tokens_per_s_per_chip, "memory_bytes": self.memory_bytes.as_dict(),
            "capacity_bytes_per_chip": self.capacity_bytes, "fits": self.fits,
            "weights_streamed": self.weights_streamed, "bound_by_phase": self.bound_by_phase,
            "time_by_bound_by_phase": self.time_by_bound_by_phase, "power_watts": self.power_watts,
            "parameters": self.parameters, "graph": self.graph, "ops_per_decode_step": dict(self.ops_per_decode_step),
        })


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _lists(item) for key, item in value.items()}
    return value.tolist() if isinstance(value, np.ndarray) else value


def _plain(value: Any) -> Any:
    """A count, or a list of them for an array result (JSON-ready)."""
    return np.asarray(value).tolist() if np.ndim(value) else int(value)


def memory_per_chip(architecture: Architecture, scenario: Scenario, parallelism: Parallelism) -> MemoryPerChip:
    """Bytes on each chip of the fullest pipeline stage (see the module docstring)."""
    weight_bytes = DTYPES[scenario.weight_dtype].bytes_per_element
    kv_bytes = DTYPES[scenario.kv_dtype].bytes_per_element
    act_bytes = DTYPES[scenario.activation_dtype].bytes_per_element
    a, tp, pp = architecture, parallelism.tp, parallelism.pp
    stage_parameters = a.stage_parameters(pp)
    per_sequence = a.kv_cache_bytes(scenario.prompt_tokens + scenario.generated_tokens, kv_bytes, a.stage_layers(pp))
    # a hybrid's linear layers keep a fixed state per sequence instead (Architecture.state_bytes)
    state = a.state_bytes(kv_bytes, a.stage_layers(pp), tp)
    kv = (per_sequence * a.kv_tp_share(tp) + state) * np.asarray(scenario.batch)
    prompt_tokens = np.asarray(scenario.batch) * scenario.prompt_tokens
    widest = a.hidden + _widest_mlp(a) / tp
    activations = ACTIVATION_BUFFERS * prompt_tokens * widest * act_bytes
    workspace = np.asarray(scenario.batch) * a.vocab / tp * LOGIT_BYTES
    expert_bytes = DTYPES[scenario.experts_scenario.weight_dtype].bytes_per_element
    moe_layers = sum(a.is_moe_layer(layer) for layer in a.stage_layers(pp))
    experts = moe_layers * a.experts * a.expert_parameters
    weights = stage_parameters * weight_bytes / tp
    # the embedding table, the LM head and the routers in their own dtype (``Scenario.quantized_head``)
    head_bytes = DTYPES[scenario.head_weight_dtype].bytes_per_element
    end_bytes = a.stage_end_bytes(pp, DTYPES[scenario.embedding_weight_dtype].bytes_per_element, head_bytes)
    routers = moe_layers * a.router_parameters
    weights = weights + (end_bytes - a.stage_end_parameters(pp) * weight_bytes
                         + routers * (head_bytes - weight_bytes)) / tp
    if expert_bytes != weight_bytes:  # the routed experts stored in their own dtype
        weights = weights + experts * (expert_bytes - weight_bytes) / tp
    if parallelism.dp > 1:  # wide expert parallelism: the routed experts are spread over tp x dp chips
        weights -= experts * expert_bytes / tp * (1 - 1 / parallelism.dp)
    return MemoryPerChip(weights=weights, kv_cache=kv, activations=activations, workspace=workspace)


def _widest_mlp(a: Architecture) -> int:
    """The widest MLP activation a token makes: a dense layer's, or a MoE layer's routed experts'
    and shared experts' together."""
    moe = a.expert_width * max(a.experts_per_token, 1) + a.shared_intermediate if a.moe_layer_count else 0
    dense = a.intermediate if a.moe_layer_count < a.layers else 0
    return max(moe, dense)


def placement(architecture: Architecture, hardware: Hardware, scenario: Scenario,
              parallelism: Parallelism) -> Residency:
    """Whether the fullest stage fits on its chips, or streams its weights (``costs.residency``)."""
    memory = memory_per_chip(architecture, scenario, parallelism)
    return residency(hardware, memory.weights, memory.state)


def phase_time(stage: ArrayEvaluation, hardware: Hardware, parallelism: Parallelism, send: Graph):
    """One phase through all ``pp`` stages: the evaluated stage (and its program launch) ``pp`` times,
    plus the activations handed between stages ``pp - 1`` times."""
    total = parallelism.pp * (stage.total_s.sum(axis=0) + stage.program_s)
    if parallelism.pp > 1:
        send_arrays = evaluate_arrays(send, hardware, mode=stage.mode, fuse=False)
        total = total + (parallelism.pp - 1) * send_arrays.total_s.sum(axis=0)
    return total


def llm_predict(architecture: Architecture, hardware: Hardware, scenario: Scenario,
                parallelism: Parallelism = Parallelism(), *, mode: str | None = None,
                graphs: StageGraphs = stage_graph) -> LLMResult:
    """Predict one scenario of ``architecture`` on ``parallelism.chips`` chips of ``hardware``.

    ``graphs`` builds each stage's graph: the condensed graphs (default), or another builder with the
    same signature, such as ``llm.eager.CapturedStream`` (the real eager op stream).

    ``scenario``'s batch, prompt and generated tokens may be arrays (broadcast together, one axis):
    the result then holds arrays over those scenarios (``LLMResult.at`` picks one), computed on the
    condensed graphs in one evaluation per phase instead of one per scenario."""
    scenario = _plain_counts(scenario)
    check(architecture, scenario, parallelism)
    if parallelism.pp > 1 or parallelism.tp > 1:
        if not any(link.kind in ("chip_to_chip", "network") for link in hardware.links.values()):
            raise PerfmodelError(f"{hardware.name} has no chip-to-chip link in its spec, so it cannot run tp/pp > 1")
    execution = resolve_mode(hardware, mode)
    values = (scenario.batch, scenario.prompt_tokens, scenario.generated_tokens)
    if (type(values[0]) is int and type(values[1]) is int and type(values[2]) is int) \
            or not any(np.ndim(value) for value in values):
        if graphs is stage_graph and not hardware.is_swept:
            replayed = _replayed_one(architecture, hardware, scenario, parallelism, execution)
            if replayed is not None:
                return replayed
        return _predict_one(architecture, hardware, scenario, parallelism, execution, graphs)
    try:
        points = [np.asarray(value, dtype=np.int64) for value in np.broadcast_arrays(*values)]
    except ValueError:
        raise PerfmodelError(f"batch, prompt and generated tokens must broadcast together; got shapes "
                             f"{[np.shape(value) for value in values]}") from None
    if points[0].ndim != 1:
        raise PerfmodelError(f"arrays of scenarios must have one axis; got shape {points[0].shape}")
    if hardware.is_swept:
        raise PerfmodelError("llm_predict takes arrays of scenarios or a swept spec, not both at once")
    batch, prompt, gen = points
    swept = replace(scenario, batch=batch, prompt_tokens=prompt, generated_tokens=gen)
    return _predict_points(architecture, hardware, swept, parallelism, execution, graphs)


def _plain_counts(scenario: Scenario) -> Scenario:
    """``scenario`` with numpy integer scalars as Python integers: an ``np.int32`` batch times a hidden
    size stays int32 under numpy's promotion rules and wraps around (array scenarios are made int64)."""
    if type(scenario.batch) is int and type(scenario.prompt_tokens) is int and type(scenario.generated_tokens) is int:
        return scenario  # (one scenario of Python integers, the common case: nothing to look at)
    counts: dict[str, Any] = {name: operator.index(value) for name in ("batch", "prompt_tokens", "generated_tokens")
                              if isinstance(value := getattr(scenario, name), np.integer)}
    return replace(scenario, **counts) if counts else scenario


# Compiled replays of one scenario's numbers, per model, device, parallelism and mode (``tracing``).
_REPLAYS = Replays()


def _replayed_one(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism,
                  execution: str) -> LLMResult | None:
    """One scenario on the condensed graphs, from a compiled replay of what ``_point_numbers`` computes
    for it (``tracing``): what ``_predict_one`` gives, to float rounding (``tests/test_tracing.py``),
    in a small part of its time; None where no replay holds yet (the caller evaluates)."""
    values = [value for value in (scenario.batch, scenario.prompt_tokens, scenario.generated_tokens)
              if isinstance(value, int)]  # numpy integers were made ints (_plain_counts)
    if len(values) < 3:
        return None
    key = (id(architecture), id(hardware), parallelism, execution, scenario.weight_dtype, scenario.kv_dtype,
           scenario.activation_dtype, scenario.expert_weight_dtype, scenario.attention_dtype, scenario.quantized_head)
    numbers = prediction_numbers(architecture, hardware, scenario, parallelism, execution)
    result = _REPLAYS(key, (architecture, hardware), numbers, values)
    return None if result is None else _named_bounds(result, scenario=scenario)


def prediction_numbers(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism,
                       execution: str) -> Callable[[Any, Any, Any], LLMResult]:
    """What a replay traces: (batch, prompt tokens, generated tokens) -> the numbers of one scenario of
    the condensed graphs, bounds not yet named (``_named_bounds``), its ``scenario`` the one given (which
    gives the dtypes; the caller sets the replayed scenario). The
    numbers go in as one-element object arrays, so the array code path carries traced numbers."""
    def numbers(batch: Any, prompt: Any, gen: Any) -> LLMResult:
        def one(value: Any) -> np.ndarray:
            return np.asarray([value], dtype=object)
        points = replace(scenario, batch=one(batch), prompt_tokens=one(prompt), generated_tokens=one(gen))
        # the scenario itself is not among the numbers: a replay's caller sets it (not rebuilt to be replaced)
        return replace(_point_numbers(architecture, hardware, points, parallelism, execution)._picked(0),
                       scenario=scenario)
    return numbers


def _predict_one(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism,
                 execution: str, graphs: StageGraphs) -> LLMResult:
    memory = memory_per_chip(architecture, scenario, parallelism).peak()
    placed = placement(architecture, hardware, scenario, parallelism)
    state = placed.other_bytes
    prompt, gen = scenario.prompt_tokens, scenario.generated_tokens
    prefill = graphs(architecture, scenario, parallelism, phase="prefill", context=prompt)
    send_prefill = Graph.prechecked("send", [pipeline_send(scenario, architecture, "prefill")])
    send_decode = Graph.prechecked("send", [pipeline_send(scenario, architecture, "decode")])
    prefill_arrays = evaluate_arrays(prefill, hardware, mode=execution, resident_bytes=state,
                                     stream_items=scenario.batch * prompt)
    ttft = float(phase_time(prefill_arrays, hardware, parallelism, send_prefill))
    contexts = (prompt + 1, prompt + max(gen // 2, 1), prompt + gen)
    # (a stage of a hybrid's linear layers alone reads no context, so an array context would not sweep it)
    if graphs is stage_graph and layer_groups(architecture, parallelism.pp).attention:
        # The three decode contexts as one graph whose context is an array (the condensed graphs take
        # array dimensions): one evaluation, three points.
        decode_graph = graphs(architecture, scenario, parallelism, phase="decode", context=np.asarray(contexts))
        swept = evaluate_arrays(decode_graph, hardware, mode=execution, resident_bytes=state,
                                stream_items=scenario.batch)
        steps = [float(step) for step in phase_time(swept, hardware, parallelism, send_decode)]
        middle, decode_shares = swept, _spent(time_by_bound_points(swept), 1)
    else:
        decode_graphs = [graphs(architecture, scenario, parallelism, phase="decode", context=c) for c in contexts]
        decode_arrays = [evaluate_arrays(g, hardware, mode=execution, resident_bytes=state,
                                         stream_items=scenario.batch) for g in decode_graphs]
        steps = [float(phase_time(arrays, hardware, parallelism, send_decode)) for arrays in decode_arrays]
        decode_graph, middle = decode_graphs[1], decode_arrays[1]
        decode_shares = _spent(time_by_bound_points(middle), 0)
    tpot = sum(weight * step for weight, step in zip(SIMPSON_WEIGHTS, steps, strict=True))
    _refuse_non_finite(architecture, hardware, ttft, tpot)
    prefill_shares = _spent(time_by_bound_points(prefill_arrays), 0)
    tokens_per_s = float(scenario.batch / tpot)
    return LLMResult(
        model=architecture.name, hardware=hardware.name, mode=execution, scenario=scenario, parallelism=parallelism,
        ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + (gen - 1) * tpot, tokens_per_s_per_user=1 / tpot,
        tokens_per_s=tokens_per_s, tokens_per_s_per_chip=tokens_per_s / parallelism.chips, memory_bytes=memory,
        capacity_bytes=placed.capacity_bytes, fits=placed.fits, weights_streamed=placed.weights_streamed,
        bound_by_phase={"prefill": next(iter(prefill_shares)), "decode": next(iter(decode_shares))},
        time_by_bound_by_phase={"prefill": prefill_shares, "decode": decode_shares},
        power_watts=hardware.power.tdp_watts * parallelism.chips, parameters=middle.parameters.label,
        graph=getattr(graphs, "label", "condensed LLM graph"),
        ops_per_decode_step=op_counts(decode_graph, kernels_launched(middle, decode_graph),
                                      math.ceil(architecture.layers / parallelism.pp)))


def _spent(shares: Mapping[str, np.ndarray], point: int) -> dict[str, float]:
    """Point ``point``'s time by bound (``_took_time``)."""
    return _took_time({name: float(time[point]) for name, time in shares.items()})


def _took_time(shares: Mapping[str, float]) -> dict[str, float]:
    """One scenario's time by bound, from the most to the least, leaving out bounds that took no time
    (they bound an op at another point of a sweep); where nothing took time (no such LLM step exists),
    the first bound at zero."""
    spent = [item for item in shares.items() if item[1] > 0]
    spent.sort(key=_time_of, reverse=True)  # (a stable sort, reversed or not: ties keep their order)
    return dict(spent) if spent else {next(iter(shares)): 0.0}


_time_of = operator.itemgetter(1)


def _refuse_non_finite(architecture: Architecture, hardware: Hardware, ttft, tpot) -> None:
    if not (all_finite(ttft) and all_finite(tpot)):  # never print a NaN as a prediction
        raise FloatingPointError(f"the prediction of {architecture.name} on {hardware.name} is not a finite time "
                                 f"(TTFT {ttft}, TPOT {tpot}): an input that no check refused, or a bug")


def _predict_points(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism,
                    execution: str, graphs: StageGraphs) -> LLMResult:
    """``llm_predict`` over the scenarios of ``scenario``'s equal-length arrays."""
    batch, prompt, gen = (np.asarray(value) for value in (scenario.batch, scenario.prompt_tokens,
                                                           scenario.generated_tokens))
    placed = placement(architecture, hardware, scenario, parallelism)
    # Residency is one decision per evaluation (it picks how weights are priced): scenarios on either
    # side of it (Cerebras: resident, or streamed from MemoryX) are evaluated apart and merged.
    resident = _resident(placed, np.shape(batch))
    if graphs is not stage_graph or (resident.any() and not resident.all()):
        groups = [[index] for index in range(len(batch))] if graphs is not stage_graph else \
            [np.flatnonzero(resident), np.flatnonzero(~resident)]
        parts = []
        for indices in groups:
            part = replace(scenario, batch=batch[indices], prompt_tokens=prompt[indices],
                           generated_tokens=gen[indices])
            if graphs is not stage_graph:  # a captured stream is built for one scenario at a time
                one = replace(scenario, batch=int(batch[indices[0]]), prompt_tokens=int(prompt[indices[0]]),
                              generated_tokens=int(gen[indices[0]]))
                parts.append((indices, _predict_one(architecture, hardware, one, parallelism, execution, graphs)))
            else:
                parts.append((indices, _predict_points(architecture, hardware, part, parallelism, execution, graphs)))
        return _merged(parts, scenario)
    return _named_bounds(_chunked_numbers(architecture, hardware, scenario, parallelism, execution))


# Scenarios evaluated together: numpy's temporaries over (ops x contexts x points) then stay in the
# caches (before blocks, 10^4 scenarios ran at about twice the rate of 10^5 here; ``benchmarks/scale.py``).
# Blocks are of equal size, each above ``costs.columns.MAX_STACKED_POINTS`` (blocks of n > 8,192 scenarios
# hold more than n/2 each), so that every block's ops are priced as the whole array's would be.
CHUNK_POINTS = 8_192


def _chunked_numbers(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism,
                     execution: str) -> LLMResult:
    """``_point_numbers`` over blocks of at most ``CHUNK_POINTS`` scenarios, joined: the numbers of each
    scenario are computed by the same arithmetic as over the whole array (element by element), so they
    are the same numbers."""
    count = int(np.size(scenario.batch))
    blocks = -(-count // CHUNK_POINTS)
    if blocks <= 1:
        return _point_numbers(architecture, hardware, scenario, parallelism, execution)
    batch, prompt, gen = (np.asarray(value) for value in (scenario.batch, scenario.prompt_tokens,
                                                           scenario.generated_tokens))
    parts = [_point_numbers(architecture, hardware, replace(scenario, batch=batch[indices], prompt_tokens=prompt[indices],
                                                            generated_tokens=gen[indices]), parallelism, execution)
             for indices in np.array_split(np.arange(count), blocks)]
    first = parts[0]

    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(part, name) for part in parts])

    arrays: dict[str, Any] = {name: joined(name) for name in (
        "ttft_s", "tpot_s", "e2e_s", "tokens_per_s_per_user", "tokens_per_s", "tokens_per_s_per_chip", "fits",
        "weights_streamed")}
    return replace(
        first, scenario=scenario, **arrays,
        memory_bytes=MemoryPerChip(**{key: np.concatenate([part.memory_bytes.as_dict()[key] for part in parts])
                                      for key in first.memory_bytes.as_dict()}),
        time_by_bound_by_phase={phase: {name: np.concatenate([part.time_by_bound_by_phase[phase][name]
                                                               for part in parts]) for name in shares}
                                for phase, shares in first.time_by_bound_by_phase.items()},
        ops_per_decode_step={key: max(part.ops_per_decode_step[key] for part in parts)
                             for key in first.ops_per_decode_step})


def _resident(placed: Residency, shape: tuple[int, ...]) -> np.ndarray:
    """Per scenario, whether weights and everything else fit on the chips."""
    # A decision (a bool array), also where the sizes are traced numbers (``tracing``).
    fits = np.asarray(np.asarray(placed.weight_bytes) + np.asarray(placed.other_bytes) <= placed.capacity_bytes,
                      dtype=bool)
    return np.broadcast_to(fits, shape)


def _point_numbers(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism,
                   execution: str) -> LLMResult:
    """``_predict_points`` on the condensed graphs for scenarios on one side of the residency decision,
    before naming bounds: ``time_by_bound_by_phase`` holds every bound (zero where it binds nothing,
    ``time_by_bound_points(every_bound=True)``) and ``bound_by_phase`` is empty. Everything here is
    arithmetic on the scenarios' numbers, which ``tracing`` can record and replay."""
    batch, prompt, gen = (np.asarray(value) for value in (scenario.batch, scenario.prompt_tokens,
                                                           scenario.generated_tokens))
    memory = memory_per_chip(architecture, scenario, parallelism)
    placed = residency(hardware, memory.weights, memory.state)  # ``placement``, from the memory at hand
    resident = _resident(placed, np.shape(batch))
    state = memory.state
    prefill = stage_graph(architecture, scenario, parallelism, phase="prefill", context=prompt)
    prefill_arrays = evaluate_arrays(prefill, hardware, mode=execution, resident_bytes=state,
                                     stream_items=batch * prompt)
    send_prefill = Graph.prechecked("send", [pipeline_send(scenario, architecture, "prefill")])
    send_decode = Graph.prechecked("send", [pipeline_send(scenario, architecture, "decode")])
    ttft = np.broadcast_to(phase_time(prefill_arrays, hardware, parallelism, send_prefill), batch.shape)
    contexts = np.stack([prompt + 1, prompt + maximum(gen // 2, 1), prompt + gen])
    decode_graph = stage_graph(architecture, scenario, parallelism, phase="decode", context=contexts)
    varying = _context_ops(decode_graph, execution)
    if varying is None:
        decode_arrays = evaluate_arrays(decode_graph, hardware, mode=execution, resident_bytes=state,
                                        stream_items=batch)
        steps = np.broadcast_to(phase_time(decode_arrays, hardware, parallelism, send_decode), contexts.shape)
        middle = at_first_axis(decode_arrays, 1)
    else:
        # Only the ops that read the context (attention) differ between the three contexts, and each op
        # is priced on its own in this mode: the whole stage at the middle context, and those ops at all
        # three, whose difference from the middle moves the other two steps.
        decode_graph = stage_graph(architecture, scenario, parallelism, phase="decode", context=contexts[1])
        middle = decode_arrays = evaluate_arrays(decode_graph, hardware, mode=execution, resident_bytes=state,
                                                 stream_items=batch)
        moving = evaluate_arrays(varying, hardware, mode=execution, resident_bytes=state, stream_items=batch)
        moved = moving.total_s.sum(axis=0)  # (contexts, points)
        steps = phase_time(middle, hardware, parallelism, send_decode) + parallelism.pp * (moved - moved[1])
    tpot = np.tensordot(np.asarray(SIMPSON_WEIGHTS), steps, axes=1)
    _refuse_non_finite(architecture, hardware, ttft, tpot)
    by_bound = {"prefill": time_by_bound_points(prefill_arrays, every_bound=True),
                "decode": time_by_bound_points(middle, every_bound=True)}
    tokens_per_s = batch / tpot
    # Per scenario, as ``costs.residency`` decides for one: streamed where the weights are not resident
    # but everything else fits beside an external store; a group of non-resident scenarios can hold
    # both kinds (a Cerebras batch that streams, and one too large even for that).
    other = np.broadcast_to(floats(placed.other_bytes), batch.shape)
    streamed = ~resident & np.asarray(other <= placed.capacity_bytes, dtype=bool) if placed.external_store \
        else np.zeros_like(resident)
    return LLMResult(
        model=architecture.name, hardware=hardware.name, mode=execution, scenario=scenario, parallelism=parallelism,
        ttft_s=ttft, tpot_s=tpot, e2e_s=ttft + (gen - 1) * tpot, tokens_per_s_per_user=1 / tpot,
        tokens_per_s=tokens_per_s, tokens_per_s_per_chip=tokens_per_s / parallelism.chips,
        memory_bytes=MemoryPerChip(**{key: np.broadcast_to(floats(value), batch.shape)
                                      for key, value in memory.as_dict().items()}),
        capacity_bytes=placed.capacity_bytes, fits=resident | streamed, weights_streamed=streamed,
        bound_by_phase={}, time_by_bound_by_phase=by_bound, power_watts=hardware.power.tdp_watts * parallelism.chips,
        parameters=decode_arrays.parameters.label, graph="condensed LLM graph",
        ops_per_decode_step=op_counts(decode_graph, kernels_launched(decode_arrays, decode_graph),
                                      math.ceil(architecture.layers / parallelism.pp)))


def _context_ops(graph: Graph, execution: str) -> Graph | None:
    """The ops of a decode stage over contexts x points that vary with the context (an array over both
    axes among their numbers), as a graph of their own, where pricing them apart from the others gives
    their own numbers: a mode that prices every op on its own (no fusion, no spatial layout), ops
    without weights (whose residency the stage decides), and traced numbers left to the whole stage
    (``tracing`` replays the plain computation). None where that does not hold or nothing is saved."""
    model = execution_model(execution)
    if model.fuses or model.spatial:
        return None
    varying = []
    for op in graph.ops:
        numbers = [*op.attrs.values(), *(dim for tensor in (*op.inputs, *op.outputs) for dim in tensor.shape)]
        if any(is_traced(value) for value in numbers):
            return None
        if any(isinstance(value, np.ndarray) and value.ndim >= 2 for value in numbers):
            if any(tensor.role == "weight" for tensor in op.inputs):
                return None
            varying.append(op)
    if not varying or len(varying) == len(graph.ops):
        return None
    return Graph.prechecked(f"{graph.name} (context)", varying)


def _named_bounds(result: LLMResult, **changes: Any) -> LLMResult:
    """``result`` with its bounds named from its time by bound: per phase, the bounds that took time
    (at some scenario of an array result), from the most time (over all scenarios) to the least, and
    the bound that took the most (at each scenario); ``changes``: other fields to replace at once."""
    if isinstance(result.tpot_s, float) or not np.shape(result.tpot_s):  # one scenario: plain floats (the common
        # case, without numpy's per-call cost)
        spent = {phase: _took_time(shares) for phase, shares in result.time_by_bound_by_phase.items()}
        return replaced(result, time_by_bound_by_phase=spent,
                        bound_by_phase={phase: next(iter(shares)) for phase, shares in spent.items()}, **changes)
    shape = np.shape(result.tpot_s)
    # A phase where nothing took time (no such LLM step exists) keeps its first bound, at zero.
    by_bound = {phase: dict(sorted(((name, time) for name, time in shares.items() if np.any(time)),
                                   key=lambda item: -np.sum(item[1]))) or dict(list(shares.items())[:1])
                for phase, shares in result.time_by_bound_by_phase.items()}
    return replace(result, time_by_bound_by_phase=by_bound,
                   bound_by_phase={phase: _largest(shares, shape) for phase, shares in by_bound.items()}, **changes)


def _largest(shares: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """At each point, the bound with the most time (ties to the earlier, as ``Evaluation.bound``)."""
    names = list(shares)
    stacked = np.stack([np.broadcast_to(shares[name], shape) for name in names])
    return np.asarray(names)[stacked.argmax(axis=0)]


def _merged(parts: list[tuple[Any, LLMResult]], scenario: Scenario) -> LLMResult:
    """One array result from results over disjoint index sets of ``scenario``'s points."""
    count = int(np.size(scenario.batch))
    results = [result for _, result in parts]

    def gather(values: list[Any], dtype: Any = float) -> np.ndarray:
        out = np.empty(count, dtype=dtype)
        for (indices, _), value in zip(parts, values, strict=True):
            out[indices] = value
        return out

    def field(name: str, dtype: Any = float) -> np.ndarray:
        return gather([getattr(result, name) for result in results], dtype)

    def names(values: list[Any]) -> np.ndarray:
        """Bound names gathered as numpy strings as wide as the longest (what ``astype(str)`` of the
        names as objects gives), without a Python string per scenario on the way."""
        gathered = gather(values, np.result_type(*(np.asarray(value).dtype for value in values)))
        if gathered.dtype.kind != "U":
            return gathered.astype(str)
        return gathered.astype(f"<U{max(int(np.char.str_len(gathered).max(initial=0)), 1)}")

    phases = ("prefill", "decode")
    shares = {phase: [result.time_by_bound_by_phase[phase] for result in results] for phase in phases}
    bounds = {phase: list(dict.fromkeys(name for share in shares[phase] for name in share)) for phase in phases}
    memory = [result.memory_bytes.as_dict() for result in results]
    tpot = field("tpot_s")
    return replace(
        results[0], scenario=scenario, ttft_s=field("ttft_s"), tpot_s=tpot, e2e_s=field("e2e_s"),
        tokens_per_s_per_user=1 / tpot, tokens_per_s=field("tokens_per_s"),
        tokens_per_s_per_chip=field("tokens_per_s_per_chip"), fits=field("fits", bool),
        weights_streamed=field("weights_streamed", bool),
        memory_bytes=MemoryPerChip(**{key: gather([part[key] for part in memory]) for key in memory[0]}),
        bound_by_phase={phase: names([result.bound_by_phase[phase] for result in results]) for phase in phases},
        time_by_bound_by_phase={phase: {name: gather([share.get(name, 0.0) for share in shares[phase]])
                                        for name in bounds[phase]} for phase in phases},
        ops_per_decode_step={key: max(float(np.max(result.ops_per_decode_step[key])) for result in results)
                             for key in results[0].ops_per_decode_step})


def op_counts(graph: Graph, kernels: float, stage_layers: int) -> dict[str, float]:
    """Ops of one stage's step (``ops``: those that launch work; ``per_layer``: in one decoder layer;
    ``host_only``: views and reshapes that launch nothing) and the ``kernels`` the mode launches."""
    working = [op for op in graph.ops if op.kind != "view"]
    return {"ops": sum(op.count for op in working),
            "per_layer": sum(op.count for op in working if op.name.startswith("layers.")) / stage_layers,
            "host_only": sum(op.count for op in graph.ops if op.kind == "view"),
            "kernels": kernels}


def max_batch(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism) -> int:
    """The largest batch for which the fullest stage still ``fits`` (``costs.residency``; 0 if none)."""
    one = placement(architecture, hardware, _with_batch(scenario, 1), parallelism)
    per_sequence = float(one.other_bytes)
    return max(int(one.room_for_state_bytes // per_sequence), 0) if per_sequence > 0 else 0


def _with_batch(scenario: Scenario, batch) -> Scenario:
    return replace(scenario, batch=batch)


def batched_prefill_s(architecture: Architecture, hardware: Hardware, scenario: Scenario,
                      parallelism: Parallelism, sequences: int, *, mode: str | None = None,
                      max_tokens_per_step: int | None = None, graphs: StageGraphs = stage_graph) -> float:
    """Time to prefill the prompts of ``sequences`` new requests, batched together in passes of at
    most ``max_tokens_per_step`` tokens (None: one pass). A pass holds whole prompts when the budget
    allows; a prompt longer than the budget is prefilled in chunks (each priced as a pass of the
    budget's tokens: the attention to earlier chunks is not charged)."""
    prompt = scenario.prompt_tokens
    budget = max_tokens_per_step or sequences * prompt
    if budget >= prompt:
        per_pass = max(min(budget // prompt, sequences), 1)
        full, rest = divmod(sequences, per_pass)
        time = 0.0
        for batch, passes in ((per_pass, full), (rest, 1 if rest else 0)):
            if passes:
                time += passes * llm_predict(architecture, hardware, _with_batch(scenario, batch), parallelism,
                                             mode=mode, graphs=graphs).ttft_s
        return time
    chunks = math.ceil(prompt / budget)
    chunk = replace(scenario, batch=1, prompt_tokens=budget)
    return sequences * chunks * llm_predict(architecture, hardware, chunk, parallelism, mode=mode, graphs=graphs).ttft_s


def continuous_batching_throughput(architecture, hardware, scenario: Scenario, parallelism: Parallelism,
                                   concurrency: int, *, mode: str | None = None,
                                   max_tokens_per_step: int | None = None, graphs: StageGraphs = stage_graph) -> float:
    """Steady-state tokens/s of an iteration-level scheduler (vLLM, TensorRT-LLM in-flight batching)
    with ``concurrency`` sequences running: in the time the running batch takes for ``gen`` decode
    steps at its mean context (decode time is linear in context, so the mean is exact), every
    sequence is replaced once, and the ``concurrency`` new prompts are prefilled in batched passes
    (``batched_prefill_s``)."""
    full = llm_predict(architecture, hardware, _with_batch(scenario, concurrency), parallelism, mode=mode,
                       graphs=graphs)
    prefill = batched_prefill_s(architecture, hardware, scenario, parallelism, concurrency, mode=mode,
                                max_tokens_per_step=max_tokens_per_step, graphs=graphs)
    gen = scenario.generated_tokens
    return concurrency * gen / (gen * full.tpot_s + prefill)
