"""Scheduler-step costs from the engine, precomputed on a grid and interpolated (pure core).

* Decode: one step of ``b`` running sequences at mean context ``c`` is the decode stage graph
  (``llm.graphs.stage_graph``) with the batch an array of every size 1..max_batch, evaluated at once
  (``roofline.arrays.evaluate_arrays``) at a grid of contexts, through all pipeline stages
  (``llm.metrics.phase_time``). Between grid contexts the time is interpolated linearly (decode
  time is piecewise linear in the context; attention reads are linear, so the mean context of the
  batch prices its KV reads exactly).
* Prefill: ``n`` prompt tokens in one step that follow ``e`` tokens already in the KV cache (the
  earlier chunks of a chunked prompt, or a cached prefix) are priced as the prefill graph of ``n``
  queries attending causally to the last ``n`` of ``n + e`` positions (``costs.traffic.attended_pairs``;
  the earlier keys are read from the KV cache), on a grid of ``n`` (geometric and linear points up to
  the step's token budget, evaluated at once with the prompt length an array) times a grid of ``e``
  (9 points up to the longest context), and interpolated bilinearly. Several sequences' chunks in one
  step are priced as one chunk of their total length after their token-weighted mean ``e``: exact for
  one chunk; for several fresh prompts their attention is over-charged (as one prompt of the total
  length).
* Mixed steps (``mixed_s``): a step that runs prefill chunks and decoding sequences together is one
  fused forward pass over the flattened batch of their tokens, as the engines run it (vLLM V1's
  ``GPUModelRunner._prepare_inputs`` / ``execute_model``: every scheduled request's tokens in one
  batch; TensorRT-LLM's in-flight batching: context and generation requests in one engine step,
  docs/source/advanced/gpt-attention.md; vLLM on TPU: one jitted step over the ragged token batch).
  The token-wise part of the layer (its GEMMs and their weight reads, norms, residuals, the
  tensor-parallel all-reduces, the MoE) runs once over ``m`` = prefill tokens + decoding sequences;
  the attention kernels run per kind of request (``per_kind``: the chunks causally over their
  context, the decoding tokens over their caches), and the LM head computes one row per sequence
  (each decoding sequence and the chunks' sequence). Each part is a sum of rows of the evaluations
  above (the prefill grid's token-wise rows interpolated at ``m``, its attention rows bilinearly at
  the chunk's point, the decode grid's attention rows at the batch's point, its head rows at the
  batch + 1): exactly the evaluation of the fused graph (``mixed_graph``) at grid points, except
  where a point-wise op fuses into the kernel beside it across the two kinds' ops (a hybrid's conv
  after its projection, a gated attention's output gate: within 1% for Qwen3-Next, tested).
  Kept as two passes (``prefill_s + decode_s``, each reading the weights): an engine that runs prefill
  and decode as separate passes (``EngineStep.fuses_mixed`` false: SGLang, whose ``--enable-mixed-chunk``
  is off by default), speculative decoding (its decode step is a per-token expected value, not one
  pass) and spatial dataflow modes (a layer pipeline's regions are sized to the whole graph, so its
  rows do not add up across graphs). Disaggregated prefill workers never mix (every request leaves
  at its first token); decode workers mix only to recompute a preempted request.
* Engine host work (``step_s``): a step's device time (prefill, decode or mixed above) combined with the
  serving engine's host work per step, ``host_fixed + host_per_sequence x sequences`` (the spec mode's
  ``EngineStep``, from the per-engine overlays): the longer of the two where the engine overlaps them
  and a step ran just before, their sum otherwise. Modes without an engine step (eager, the datasheet
  specs) charge the device time alone.
* Speculative decoding (``speculation``, ``serving.speculation``): a decode step is the drafter's
  ``k`` decode steps plus the verifier's pass over ``k + 1`` tokens a sequence, divided by the tokens a
  step yields on average (the simulator then advances one token per step: expected-value stepping);
  the drafter also prefills every prompt, and its weights and KV cache share the memory.
* KV capacity: what ``memory_utilization`` of the chip's on-device memory holds after the weights
  of the fullest stage (kept resident when they fit; else streamed from an external store where the
  spec has one, ``costs.residency``), the
  activation buffers of a full step's prefill and the logits of a full batch
  (``llm.metrics.memory_per_chip``), divided into blocks of ``block_size`` tokens of
  ``Architecture.kv_bytes_per_token`` (the fullest stage's layers and this chip's KV heads). A hybrid's
  linear layers keep a fixed state per sequence instead (``Architecture.state_bytes``): ``max_batch``
  states come off the budget first, and the blocks hold the attention layers' KV only.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from perfmodel.costs.residency import residency
from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import execution_model, resolve_mode
from perfmodel.hardware.model import EngineStep, Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, check, pipeline_send, stage_graph
from perfmodel.llm.metrics import memory_per_chip, phase_time
from perfmodel.roofline.arrays import ArrayEvaluation, evaluate_arrays
from perfmodel.serving.speculation import Speculation, drafter, drafter_graph, drafter_weight_bytes
from perfmodel.workload.ir import Graph

CONTEXT_POINTS = 17
PREFILL_GEOMETRIC_POINTS = 40
PREFILL_LINEAR_POINTS = 17
# Cache lengths before a chunk: its time is close to linear in them (the attention pairs and the KV
# reads grow linearly), so a few points suffice.
PREFILL_EARLIER_POINTS = 9
# The ops that compute logits: one row per sequence, not per token (``stage_graph``), and the quantization
# of their input where the GEMM reads a quantized one (``with_quantized_inputs`` names it so).
HEAD_OPS = frozenset({"final_norm", "lm_head", "lm_head.quantize_input"})
# A recurrent mixer's causal conv: in decode it reads each sequence's conv state (``_recurrent_mixer``).
STATEFUL_OPS = frozenset({"layers.linear_attn.conv1d"})


def per_kind(graph: Graph, other: Graph) -> np.ndarray:
    """Which of ``graph``'s ops a fused mixed step runs once per kind of request (module docstring): the
    attention kernels, the ops that the other phase's graph ``other`` lacks (MLA's absorbed projections in
    decode and its key/value up-projection in prefill, a recurrent mixer's step or chunked scan, the
    quantizations before them) and the ops that read per-sequence state (``STATEFUL_OPS``)."""
    names = {op.name for op in other.ops}
    return np.array([op.kind == "attention" or op.name not in names or op.name in STATEFUL_OPS
                     for op in graph.ops], dtype=bool)


def head_ops(graph: Graph) -> np.ndarray:
    """Which of ``graph``'s ops compute the logits (``HEAD_OPS``)."""
    return np.array([op.name in HEAD_OPS for op in graph.ops], dtype=bool)


def mixed_graph(architecture: Architecture, scenario: Scenario, parallelism: Parallelism, *, prefill_tokens: int,
                earlier: int, decoding: int, context: int) -> Graph:
    """One fused step (module docstring): ``prefill_tokens`` prompt tokens after ``earlier`` cached ones
    and ``decoding`` sequences at ``context`` tokens, as one stage graph: the token-wise ops over their
    ``prefill_tokens + decoding`` tokens, the chunk's per-kind ops (``per_kind``) then the decoding
    sequences' (renamed ``<name>.decode``) where the attention sits, and logits for ``decoding + 1``
    sequences. ``StepCosts.mixed_s`` sums the same rows from its grids."""
    a, p, n, b = architecture, parallelism, prefill_tokens, decoding
    if n < 1 or b < 1:
        raise PerfmodelError(f"a mixed step needs prefill tokens and decoding sequences, got {n} and {b}")
    tokens = stage_graph(a, replace(scenario, batch=1, prompt_tokens=n + b), p, phase="prefill", context=n + b)
    chunk = stage_graph(a, replace(scenario, batch=1, prompt_tokens=n), p, phase="prefill", context=n + earlier)
    decode = stage_graph(a, replace(scenario, batch=b), p, phase="decode", context=context)
    logits = stage_graph(a, replace(scenario, batch=b + 1), p, phase="decode", context=context)
    # Each block of per-kind ops (the attention's, a recurrent mixer's) where the layer has it: the chunk's,
    # then the decoding sequences'.
    blocks: dict[str, list] = {}
    for graph, other, suffix in ((chunk, decode, ""), (decode, chunk, ".decode")):
        for op, keep in zip(graph.ops, per_kind(graph, other), strict=True):
            if keep:
                blocks.setdefault(_block(op.name), []).append(replace(op, name=op.name + suffix))
    heads = iter([op for op, keep in zip(logits.ops, head_ops(logits), strict=True) if keep])
    ops = []
    for op, kind, head in zip(tokens.ops, per_kind(tokens, decode), head_ops(tokens), strict=True):
        if kind:
            ops += blocks.pop(_block(op.name), [])
        else:
            ops.append(next(heads) if head else op)
    ops += [op for block in blocks.values() for op in block]  # (a block only decode has: none today)
    names = [op.name for op in ops]
    return Graph.prechecked(f"{a.name}.mixed", ops, list(zip(names, names[1:], strict=False)))


def _block(name: str) -> str:
    """The part of the layer an op belongs to: ``attn``, ``linear_attn``, ``mlp``... (``layers.<part>.<op>``)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "layers" and len(parts) > 2 else name


def _rows(stage: ArrayEvaluation, which: np.ndarray) -> np.ndarray:
    """The summed times of the ops ``which`` picks, at every point of the evaluation."""
    return np.asarray(stage.total_s)[which].sum(axis=0)


@dataclass(frozen=True, kw_only=True)
class KVCapacity:
    blocks: int
    block_size: int
    bytes_per_token: float  # per chip of the fullest stage
    budget_bytes: float  # bytes per chip given to the KV cache
    state_bytes: float  # everything but the weights that the chip holds (KV budget, activations, logits)

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size


def kv_capacity(architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism, *,
                block_size: int, max_batch: int, max_tokens_per_step: int,
                memory_utilization: float,
                drafter: tuple[Architecture, Parallelism] | None = None,
                max_blocks: int | None = None) -> KVCapacity:
    """The paged KV cache of one replica (see the module docstring); ``drafter``: a speculative
    drafter's architecture and parallelism, whose weights and KV cache share the chips; ``max_blocks``:
    an engine's configured cap on the cache in blocks (LMDeploy's ``cache_max_entry_count`` >= 1, vLLM's
    ``num_gpu_blocks_override``): the cache is the smaller of it and what the memory holds."""
    if not 0 < memory_utilization <= 1:
        raise PerfmodelError(f"memory utilization must be in (0, 1], got {memory_utilization!r}")
    a = architecture
    check(a, replace(scenario, batch=1, prompt_tokens=1, generated_tokens=1), parallelism)  # dtypes, layout
    one = replace(scenario, batch=1, prompt_tokens=max_tokens_per_step, generated_tokens=1)
    memory = memory_per_chip(a, one, parallelism)
    workspace = float(memory.workspace) * max_batch
    activations = float(memory.activations)
    weights = float(np.max(memory.weights))
    if drafter is not None:
        weights += drafter_weight_bytes(a, drafter, one)
    # Weights stay on the chip when they fit beside a full step's buffers (the one residency rule,
    # costs.residency); otherwise an external store streams them (Cerebras MemoryX) and the KV cache
    # may use the whole memory.
    # (Both sides over the utilization cap: weights + buffers <= cap x capacity.)
    placed = residency(hardware, weights / memory_utilization, (activations + workspace) / memory_utilization)
    capacity = float(np.min(placed.capacity_bytes)) * memory_utilization
    if placed.external_store and not placed.weights_resident:
        weights = 0.0
    kv_element = DTYPES[scenario.kv_dtype].bytes_per_element
    # A hybrid's linear layers keep one fixed state per running sequence (vLLM holds one state slot per
    # request): max_batch of them come off the budget first.
    states = max_batch * a.state_bytes(kv_element, a.stage_layers(parallelism.pp), parallelism.tp)
    budget = capacity - weights - activations - workspace - states
    # Blocks hold whole-context tokens: a model whose layers differ in window is charged the full
    # context in every attention layer (a paged cache without a hybrid allocator; conservative).
    per_token = a.attention_layers_in(a.stage_layers(parallelism.pp)) * a.kv_elements_per_token() \
        * DTYPES[scenario.kv_dtype].bytes_per_element * a.kv_tp_share(parallelism.tp)
    if drafter is not None:
        model, split = drafter
        per_token += model.layers * model.kv_elements_per_token() * DTYPES[scenario.kv_dtype].bytes_per_element \
            * model.kv_tp_share(split.tp)
    blocks = int(budget // (per_token * block_size)) if budget > 0 else 0
    if blocks < 1:
        raise PerfmodelError(
            f"{a.name} leaves no room for a KV cache on {hardware.name} (tp {parallelism.tp}, pp {parallelism.pp}) "
            f"at memory utilization {memory_utilization:g}: weights {weights / 2**30:.2f} GiB, activations and "
            f"logits {(activations + workspace) / 2**30:.2f} GiB of {capacity / 2**30:.2f} GiB; "
            "add chips (--tp/--pp), or lower --max-batch / --max-tokens-per-step")
    if max_blocks is not None and max_blocks < blocks:
        # The engine allocates only the capped cache: the rest of the budget stays free.
        blocks, budget = max_blocks, max_blocks * block_size * per_token
    return KVCapacity(blocks=blocks, block_size=block_size, bytes_per_token=per_token, budget_bytes=budget,
                      state_bytes=budget + activations + workspace + states)


class StepCosts:
    """Device time of a scheduler step: ``prefill_s(tokens, earlier)``, ``decode_s(batch, mean_context)``, or
    ``mixed_s`` for both in one step."""

    def __init__(self, architecture: Architecture, hardware: Hardware, scenario: Scenario, parallelism: Parallelism,
                 *, max_batch: int, max_tokens_per_step: int, max_context: int, resident_bytes: float,
                 mode: str | None = None, speculation: Speculation | None = None,
                 context_points: Sequence[int] | None = None, prompt_points: Sequence[int] | None = None) -> None:
        """``context_points`` / ``prompt_points``: price decode at these contexts only and prefill these fresh prompt
        lengths only (no earlier tokens), instead of the grids (a quick estimate: ``serving.search``)."""
        check(architecture, replace(scenario, batch=1), parallelism)
        if parallelism.chips > 1 and not any(link.kind in ("chip_to_chip", "network")
                                             for link in hardware.links.values()):
            raise PerfmodelError(f"{hardware.name} has no chip-to-chip link in its spec, so it cannot run tp/pp > 1")
        self.mode = resolve_mode(hardware, mode)
        engine_step = hardware.scheduling.mode(self.mode).engine_step
        if engine_step is not None and speculation is not None:
            # A speculative step is charged per token it yields (module docstring): so is its host work,
            # which the engine pays once per real step.
            engine_step = replace(engine_step, host_fixed_s=engine_step.host_fixed_s / speculation.tokens_per_step,
                                  host_per_sequence_s=engine_step.host_per_sequence_s / speculation.tokens_per_step)
        self.engine_step: EngineStep | None = engine_step
        a, p = architecture, parallelism
        batches = np.arange(1, max_batch + 1, dtype=np.int64)
        decode_scenario = replace(scenario, batch=batches)
        contexts = np.unique(np.asarray(context_points, dtype=np.int64)) if context_points is not None else \
            np.unique(np.linspace(1, max(max_context, 2), CONTEXT_POINTS).round().astype(np.int64))
        self.speculation = speculation
        draft = None if speculation is None else drafter(a, speculation, scenario, p)
        decode_graph, decode_stage = None, None
        if speculation is None:
            # Every (batch, context) point of the grid in one evaluation: the graph with both the batch
            # and the context arrays over the flattened grid (the same numbers as a column per context).
            grid_batch, grid_context = np.repeat(batches, contexts.size), np.tile(contexts, batches.size)
            grid = replace(scenario, batch=grid_batch)
            graph = stage_graph(a, grid, p, phase="decode", context=grid_context)
            send = Graph(name="send", ops=[pipeline_send(grid, a, "decode")])
            stage = evaluate_arrays(graph, hardware, mode=self.mode, resident_bytes=resident_bytes,
                                    stream_items=grid_batch)
            table = np.broadcast_to(phase_time(stage, hardware, p, send), grid_batch.shape).reshape(
                batches.size, contexts.size)
            decode_graph, decode_stage = graph, stage
        else:
            assert draft is not None
            table = np.stack([self._speculative_step(a, hardware, decode_scenario, p, draft, speculation,
                                                     int(context), resident_bytes) for context in contexts], axis=1)
        self.contexts = [float(c) for c in contexts]
        self._decode = table.tolist()  # [batch - 1][context index]: plain floats, fast to read
        points = np.concatenate([np.geomspace(1, max_tokens_per_step, PREFILL_GEOMETRIC_POINTS),
                                 np.linspace(1, max_tokens_per_step, PREFILL_LINEAR_POINTS)])
        tokens = np.unique(points.round().astype(np.int64)) if prompt_points is None else \
            np.unique(np.asarray(prompt_points, dtype=np.int64))
        # Every token count at once: the prefill graph with the prompt length an array (the graph
        # builders broadcast it like a batch array), once per count of earlier tokens in the cache.
        earlier = np.zeros(1, dtype=np.int64) if prompt_points is not None else \
            np.unique(np.linspace(0, max(max_context - 1, 1), PREFILL_EARLIER_POINTS).round().astype(np.int64))
        # Every (earlier, tokens) point at once, flattened as the decode grid is.
        grid_tokens, grid_earlier = np.tile(tokens, earlier.size), np.repeat(earlier, tokens.size)
        prompts = replace(scenario, batch=1, prompt_tokens=grid_tokens)
        send = Graph(name="send", ops=[pipeline_send(prompts, a, "prefill")])
        graph = stage_graph(a, prompts, p, phase="prefill", context=grid_tokens + grid_earlier)
        stage = evaluate_arrays(graph, hardware, mode=self.mode, resident_bytes=resident_bytes,
                                stream_items=grid_tokens)
        times = np.broadcast_to(phase_time(stage, hardware, p, send), grid_tokens.shape)
        if draft is not None:  # the drafter reads every prompt too
            split = draft[1]
            graph = drafter_graph(a, draft, prompts, phase="prefill", context=grid_tokens + grid_earlier)
            stage = evaluate_arrays(graph, hardware, mode=self.mode, resident_bytes=resident_bytes,
                                    stream_items=grid_tokens)
            times = times + np.broadcast_to(phase_time(stage, hardware, split, send), grid_tokens.shape)
        self.prefill_tokens = tokens.astype(float)
        self.prefill_earlier = [float(e) for e in earlier]
        self.prefill_times = np.array(times, dtype=float).reshape(earlier.size, tokens.size)  # [earlier, tokens]
        self.max_batch, self.max_tokens_per_step = max_batch, max_tokens_per_step
        # The parts of a fused mixed step (module docstring), from the rows of the two evaluations above;
        # None where the step stays two passes (speculation, spatial modes) or the grids are a quick
        # estimate's (no token grid up to the budget).
        self._mixed: tuple[np.ndarray, list[float], np.ndarray, list[list[float]]] | None = None
        if decode_graph is not None and decode_stage is not None and prompt_points is None \
                and not execution_model(self.mode).spatial and (engine_step is None or engine_step.fuses_mixed):
            prefill_kind, decode_kind = per_kind(graph, decode_graph), per_kind(decode_graph, graph)
            tokenwise = ~(prefill_kind | head_ops(graph))
            # The token-wise rows through the pipeline (the stages' program launches and the sends of the
            # step's tokens included), at no earlier tokens (these rows read no context).
            masked = replace(stage, total_s=np.where(tokenwise.reshape((-1,) + (1,) * (np.ndim(stage.total_s) - 1)),
                                                     stage.total_s, 0.0))
            token_row = np.broadcast_to(phase_time(masked, hardware, p, send), grid_tokens.shape)[:tokens.size]
            chunk = p.pp * np.broadcast_to(_rows(stage, prefill_kind), grid_tokens.shape).reshape(
                earlier.size, tokens.size)
            shape = (batches.size, contexts.size)
            decode_rows = p.pp * np.broadcast_to(_rows(decode_stage, decode_kind), grid_batch.shape).reshape(shape)
            logits = p.pp * np.broadcast_to(_rows(decode_stage, head_ops(decode_graph)), grid_batch.shape).reshape(
                shape)[:, 0]
            self._mixed = (np.array(token_row, dtype=float), logits.astype(float).tolist(), np.array(chunk, dtype=float),
                           np.array(decode_rows, dtype=float).tolist())

    def _speculative_step(self, a: Architecture, hardware: Hardware, decode_scenario: Scenario,
                          p: Parallelism, draft: tuple[Architecture, Parallelism], speculation: Speculation,
                          context: int, resident_bytes: float) -> np.ndarray:
        """One speculative step per batch size at ``context``, per token it yields (module docstring)."""
        batches = np.asarray(decode_scenario.batch)
        k = speculation.tokens
        model, split = draft
        graph = drafter_graph(a, draft, decode_scenario, phase="decode", context=context)
        send = Graph(name="send", ops=[pipeline_send(decode_scenario, model, "decode")])
        stage = evaluate_arrays(graph, hardware, mode=self.mode, resident_bytes=resident_bytes, stream_items=batches)
        drafting = k * np.broadcast_to(phase_time(stage, hardware, split, send), batches.shape)
        verify = replace(decode_scenario, prompt_tokens=k + 1)
        graph = stage_graph(a, verify, p, phase="prefill", context=context + k, every_logit=True)
        send = Graph(name="send", ops=[pipeline_send(verify, a, "prefill")])
        stage = evaluate_arrays(graph, hardware, mode=self.mode, resident_bytes=resident_bytes,
                                stream_items=batches * (k + 1))
        verifying = np.broadcast_to(phase_time(stage, hardware, p, send), batches.shape)
        return (drafting + verifying) / speculation.tokens_per_step

    def prefill_s(self, tokens: int, earlier: float = 0.0) -> float:
        """``tokens`` prompt tokens after ``earlier`` tokens already in the KV cache."""
        if tokens <= 0:
            return 0.0
        return self._on_prefill_grid(self.prefill_times, tokens, earlier)

    def mixed_s(self, tokens: int, earlier: float, batch: int, mean_context: float) -> float:
        """One step's device time for ``tokens`` prompt tokens after ``earlier`` cached ones (``prefill_s``)
        and ``batch`` decoding sequences at ``mean_context`` (``decode_s``) together: one fused pass (module
        docstring), or the two passes where the step is not fused. Either alone is its own step's time."""
        if tokens <= 0 or batch <= 0 or self._mixed is None:
            return self.prefill_s(tokens, earlier) + self.decode_s(batch, mean_context)
        token_row, logits, chunk, decode_rows = self._mixed
        return (float(np.interp(tokens + batch, self.prefill_tokens, token_row))
                + logits[min(batch + 1, self.max_batch) - 1]
                + self._on_prefill_grid(chunk, tokens, earlier)
                + self._along_contexts(decode_rows[batch - 1], mean_context))

    def _on_prefill_grid(self, rows: np.ndarray, tokens: int, earlier: float) -> float:
        """``rows`` (``[earlier, tokens]``, as ``prefill_times``) interpolated at ``(earlier, tokens)``."""
        grid = self.prefill_earlier
        if len(grid) == 1:
            return float(np.interp(tokens, self.prefill_tokens, rows[0]))
        i = min(max(bisect_right(grid, earlier) - 1, 0), len(grid) - 2)
        low = float(np.interp(tokens, self.prefill_tokens, rows[i]))
        high = float(np.interp(tokens, self.prefill_tokens, rows[i + 1]))
        return low + (earlier - grid[i]) / (grid[i + 1] - grid[i]) * (high - low)

    def step_s(self, device_s: float, sequences: int, *, pipelined: bool = True) -> float:
        """A scheduler step of ``sequences`` sequences whose device work takes ``device_s`` (``prefill_s``,
        ``decode_s`` or ``mixed_s``), the serving engine's host work per step added or overlapped (``EngineStep``); the
        device time alone where the spec's mode has no engine step. ``pipelined``: a step ran just before
        (an engine that overlaps hides this step's host work behind it)."""
        step = self.engine_step
        return device_s if step is None else step.step_s(device_s, sequences, pipelined=pipelined)

    def decode_s(self, batch: int, mean_context: float) -> float:
        if batch <= 0:
            return 0.0
        return self._along_contexts(self._decode[batch - 1], mean_context)

    def _along_contexts(self, row: list[float], mean_context: float) -> float:
        """One batch's ``row`` over the context grid, interpolated at ``mean_context``."""
        contexts = self.contexts
        i = min(max(bisect_right(contexts, mean_context) - 1, 0), len(contexts) - 2) if len(contexts) > 1 else 0
        if len(contexts) == 1:
            return row[0]
        low, high = contexts[i], contexts[i + 1]
        share = (mean_context - low) / (high - low)
        return row[i] + share * (row[i + 1] - row[i])
