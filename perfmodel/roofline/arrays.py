"""The three-bottleneck evaluation, vectorized with numpy over ops and sweep points.

For each op (or fused kernel) on a device with parameters p::

    compute_s    = executed_flops / (peak[engine, dtype] * compute_efficiency)
    memory_s[L]  = bytes[L] / (bandwidth[L] * memory_efficiency[L])          for every level L
    link_s       = link_bytes / link_bandwidth + steps * link_latency         (collectives)
    busy_s       = max(compute_s, memory_s..., link_s)    overlap "max"   (or their sum: "sum")
                 = compute_s + max(memory_s..., link_s)   a vector kernel on an engine whose streaming
                                                          loops wait for their data (a CPU core:
                                                          ``vector_kernels_hide_memory: false``)

Every kernel (a fused group counts once) also pays its engine's device-side fixed time
``kernel_fixed_s`` (start-up and tail; spec ``kernel_fixed_time``), added to ``busy_s``, whoever
launched it. The scheduling cost comes from the execution mode in the spec (never from the family
name), priced by its registered behaviour (``hardware.execution_models``):

* ``dynamic`` (GPU eager, CPU): the host dispatches every kernel, overlapping device work, so an op
  takes ``max(busy_s, launches * kernel_launch_s)``: a stream of small kernels is host-bound. Where
  the spec says the host does not overlap (``host_overlap: false``: a CPU dispatches and computes
  on the same thread) the two add up instead. An op the framework hands to a library pays the mode's
  ``library_dispatch`` cost for its ATen op on top (PyTorch's exact gelu on a CPU goes to oneDNN).
* ``graph`` (CUDA graphs, torch.compile, XLA): chains are fused; the program pays one
  ``program_launch_s``, and each kernel ``per_node_s`` of device-side gap: ``busy_s + per_node_s``.
* ``static`` (Groq, Cerebras, Spyre): the compiler fixed the schedule and fused the chains; no
  per-op dispatch, but each program pays ``program_launch_s`` and its runtime-orchestrated DMAs
  (``dma_setup_s`` each), and barriers inside (collectives) cost ``sync_s``. DMAs between memory
  levels inside a program are compiled into the schedule and priced as memory traffic.

The program-level costs appear as one extra row named ``<program launch>`` (kind ``launch``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Sequence

import numpy as np

from perfmodel.costs.columns import op_costs
from perfmodel.costs.fusion import FusionPlan, no_fusion, plan_fusion
from perfmodel.costs.residency import residency
from perfmodel.costs.rules import (
    CostContext,
    OpCost,
    compute_rate_flops_per_s,
    compute_time_s,
    exponential_time_s,
    kernel_busy_s,
    memory_time_s,
    pricing_kind,
)
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import execution_model, resolve_mode
from perfmodel.hardware.model import MODE_FIELDS, ExecutionMode, Hardware, Parameters
from perfmodel.tracing import argmax, clip, equal, floats, is_traced, largest, maximum, minimum, sqrt, where
from perfmodel.workload.ir import Graph, Op
from perfmodel.workload.op_kinds import is_vector_kind

Overlap = Literal["max", "sum"]
PROGRAM_LAUNCH_NAME = "<program launch>"
DATASHEET = Parameters()

@dataclass(frozen=True, kw_only=True)
class ArrayEvaluation:
    """Per-op arrays, shape (ops,) or (ops, points) for sweeps; times already multiplied by count."""

    hardware: Hardware
    mode: str
    overlap: str
    level_names: tuple[str, ...]
    costs: tuple[OpCost, ...]
    fusion: FusionPlan
    counts: np.ndarray
    flops: np.ndarray
    executed_flops: np.ndarray
    bytes_by_level: np.ndarray          # (levels, ops[, points])
    compute_s: np.ndarray
    memory_s: np.ndarray                # (levels, ops[, points])
    link_s: np.ndarray
    scheduling_s: np.ndarray
    fixed_s: np.ndarray                 # device-side fixed time of the kernels (start-up and tail)
    total_s: np.ndarray
    bound_index: np.ndarray             # 0 compute, 1..L memory levels, L+1 link, L+2 scheduling
    program_s: Any                      # program-level scheduling (scalar or (points,))
    weights_resident: bool
    weight_bytes: Any
    on_device_bytes: float
    parameters: Parameters = DATASHEET


# Fields of an ArrayEvaluation whose last axis runs over sweep points (when the evaluation has one).
_PER_POINT_FIELDS = ("flops", "executed_flops", "bytes_by_level", "compute_s", "memory_s", "link_s", "scheduling_s",
                     "fixed_s", "total_s", "bound_index")


def link_parameters(parameters: Parameters, cost: OpCost) -> tuple[Any, Any]:
    """(bandwidth efficiency, alpha) a collective is charged: its link's, or its kernel class's
    (``OpCost.link_class``; arrays where the class changes over sweep points)."""
    classes = cost.link if cost.link_class is None else cost.link_class
    if isinstance(classes, str):
        return parameters.link(classes)
    names = np.asarray(classes)
    efficiency, alpha = np.ones(names.shape), np.zeros(names.shape)
    for name in set(names.ravel().tolist()):
        efficiency[names == name], alpha[names == name] = parameters.link(str(name))
    return efficiency, alpha


def at_point(evaluation: ArrayEvaluation, index: int) -> ArrayEvaluation:
    """Point ``index`` of a one-axis sweep's evaluation: what evaluating that point alone gives."""
    def pick(value):
        return value[..., index] if isinstance(value, np.ndarray) and value.ndim else value

    def cost_at(cost: OpCost) -> OpCost:
        fields = {name: pick(getattr(cost, name)) for name in ("flops", "executed_flops", "link_bytes",
                                                                 "link_latency_s", "kernel", "side_flops", "link_class",
                                                                 "exponentials")}
        fields["bytes_by_level"] = tuple(pick(value) for value in cost.bytes_by_level)
        for name in ("kernel", "link_class"):
            if isinstance(fields[name], np.str_):
                fields[name] = str(fields[name])
        return replace(cost, **fields)

    shared = evaluation.total_s.ndim - 1  # axes before the points: ops (and levels for memory arrays)
    if shared != 1 or evaluation.total_s.shape[-1] <= index:
        raise PerfmodelError(f"at_point needs a one-axis sweep with more than {index} points")
    return replace(evaluation, costs=tuple(cost_at(cost) for cost in evaluation.costs),
                   program_s=pick(evaluation.program_s), weight_bytes=pick(evaluation.weight_bytes),
                   **{name: getattr(evaluation, name)[..., index] for name in _PER_POINT_FIELDS})


def at_first_axis(evaluation: ArrayEvaluation, index: int) -> ArrayEvaluation:
    """Point ``index`` along the first of a two-axis sweep's axes (ops x A x B becomes ops x B)."""
    if evaluation.total_s.ndim != 3:
        raise PerfmodelError("at_first_axis needs a two-axis sweep (ops x A x B)")
    program_s = evaluation.program_s
    if isinstance(program_s, np.ndarray) and program_s.ndim == 2:
        program_s = program_s[index]
    return replace(evaluation, program_s=program_s,
                   **{name: getattr(evaluation, name)[..., index, :] for name in _PER_POINT_FIELDS})


def kernels_launched(evaluation: ArrayEvaluation, graph: Graph) -> float:
    """Kernels one run of ``graph`` launches (a fused group once), as ``Evaluation`` counts them."""
    return sum(float(cost.launches) * op.count for position, (op, cost) in enumerate(zip(graph.ops, evaluation.costs,
                                                                                          strict=True))
               if evaluation.fusion.group_of[position] == position)


def bound_labels(level_names, link_name: str = "link") -> list[str]:
    return ["compute", *[f"memory:{name}" for name in level_names], link_name, "scheduling"]


def time_by_bound_points(evaluation: ArrayEvaluation, *, every_bound: bool = False) -> dict[str, np.ndarray]:
    """Time by bound at each point of a one-axis sweep, as ``Evaluation.time_by_bound`` gives for one
    point (a link bound named after its link; the program launch counted as scheduling), without
    building a report per point. Bounds that bind no op at any point are left out; the dict runs from
    the most time over all points to the least. An evaluation without a sweep is one point.

    ``every_bound``: every bound the graph could have (each link its ops use), zero where it binds
    nothing, in the order of ``bound_labels``: what a traced run (``tracing``) computes, so that which
    bounds bind stays a number of the replay rather than a decision."""
    if evaluation.total_s.ndim == 1:
        evaluation = replace(evaluation, total_s=evaluation.total_s[:, None],
                             bound_index=evaluation.bound_index[:, None])
    if evaluation.total_s.ndim != 2:
        raise PerfmodelError("time_by_bound_points needs a one-axis sweep (ops x points)")
    labels = bound_labels(evaluation.level_names)
    link_index = labels.index("link")
    link_names = np.asarray([f"link:{cost.link}" for cost in evaluation.costs])
    groups: dict[str, np.ndarray] = {}
    linked = np.asarray([cost.link is not None for cost in evaluation.costs], dtype=bool)
    for index, label in enumerate(labels):
        bound_here = equal(evaluation.bound_index, index)
        if index == link_index:
            names = sorted(set(link_names[linked if every_bound else bound_here.any(axis=1)]))
        else:
            names = [label]
        for name in names:
            selected = bound_here * (link_names[:, None] == name) if index == link_index else bound_here
            if every_bound or selected.any():
                groups[str(name)] = where(selected, evaluation.total_s, 0.0).sum(axis=0)
    program_s = np.broadcast_to(np.asarray(evaluation.program_s, dtype=float), evaluation.total_s.shape[1:])
    if np.any(program_s > 0):
        groups["scheduling"] = groups.get("scheduling", 0.0) + program_s
    return groups if every_bound else dict(sorted(groups.items(), key=lambda item: -np.sum(item[1])))


def pipelined_totals(per_instance: np.ndarray, count_column: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Per-op time of ``items`` tokens streaming through a spatial pipeline whose stages are the op
    instances: ``sum_i t_i / items + (items - 1) / items x max_i t_i`` (``t_i``: instance i's time for
    all items together). The first token crosses every stage; the rest leave the slowest stage one
    item-time apart. Each op keeps its share of the first term; the slowest op carries the second."""
    slowest = argmax(per_instance, axis=0)
    is_slowest = equal(slowest, np.arange(per_instance.shape[0]).reshape((-1,) + (1,) * (per_instance.ndim - 1)))
    return per_instance * count_column / items + where(is_slowest, per_instance * (items - 1) / items, 0.0)


def spatial_shares(graph: Graph, costs) -> np.ndarray:
    """Share of the device each op instance is allotted in spatial dataflow (see
    ``hardware.execution_models``): its weight bytes over all weight bytes of the program; a weightless
    op an average region. It runs on at most this share (``spatial_regions``)."""
    weights = np.asarray([sum(float(np.max(t.bytes)) for t in op.inputs if t.role == "weight") for op in graph.ops])
    counts = np.asarray([op.count for op in graph.ops], dtype=float)
    total, holders = float(np.sum(weights * counts)), float(np.sum(counts[weights > 0]))
    if total <= 0:
        return np.ones(len(graph.ops))
    return np.where(weights > 0, weights / total, 1.0 / holders)


def spatial_regions(allotted: np.ndarray, scaled_s: np.ndarray, unscaled_s: np.ndarray | float, cores: np.ndarray,
                    fabric_hop_s: np.ndarray | float) -> np.ndarray:
    """Cores each op instance runs on in spatial dataflow: its allotted region (``spatial_shares`` x
    cores), but never more cores than lower its latency.

    On ``A`` cores an op takes ``t(A) = max(s x cores / A, u) + 2 sqrt(A) x hop``: ``s`` is its time on
    the whole device (compute and memory, which divide among the cores), ``u`` what does not divide
    (its link time; 0 where the components add up), and a token's input is broadcast along the rows
    of a square region and its partial sums reduced along the columns, ``sqrt(A)`` hops each. The
    first term falls with ``A``, the second grows, so ``t`` falls up to
    ``A* = min((s x cores / hop)^(2/3), s x cores / u)`` (where ``dt/dA = -s cores / A^2 + hop /
    sqrt(A) = 0``, or where ``u`` takes over) and grows beyond: spread wider, an op only waits longer
    on the fabric, so the compiler maps it onto ``min(allotted, A*)`` cores (at least one), leaving
    the rest of its region idle. A weight-holding layer of a model that fills the wafer is allotted
    far less than ``A*`` (Llama-3.1-8B decode's q_proj: 1,880 cores allotted, ``A*`` ~16,000); a norm
    or residual add of 4,096 elements, allotted an average region of ~4,600 cores (under one element
    a core), runs on ~120. Since ``t`` never rises as ``A`` shrinks below ``A*``, an op added to the
    program, which only shrinks the others' allotments (``spatial_shares``), never makes one of them
    faster; with whole allotments an op allotted more than ``A*`` got faster when a new region
    squeezed it (its 2 sqrt(A) hops fell more than its work grew), and a graph of small ops with it."""
    scaled = floats(scaled_s) * cores
    hop, unscaled = floats(fabric_hop_s), floats(unscaled_s)
    # No fabric latency (hop 0): nothing limits the width; nothing to divide (s 0): one core.
    widest = np.where(hop > 0, (scaled / np.where(hop > 0, hop, 1.0)) ** (2.0 / 3.0), np.inf)
    widest = minimum(widest, np.where(unscaled > 0, scaled / np.where(unscaled > 0, unscaled, 1.0), np.inf))
    return minimum(allotted, maximum(widest, 1.0))


def _sweep_shape(*groups) -> tuple[int, ...]:
    """The shape every array among ``groups`` broadcasts to (() when all are scalars)."""
    flat = [value for values in groups for value in values]
    try:  # all scalars (the common case): one conversion in C instead of a test per value
        if np.asarray(flat, dtype=float).ndim == 1:
            return ()
    except (TypeError, ValueError):  # sweep arrays of different shapes among the values
        pass
    shapes = [value.shape for value in flat if isinstance(value, np.ndarray) and value.ndim]
    return np.broadcast_shapes(*shapes) if shapes else ()


def _kept_shares(graph: Graph, plan: FusionPlan) -> list | np.ndarray:
    """Each op's share of its tensors' bytes that leaves its fused group (1: all of it)."""
    internal = [inside + outside for inside, outside in zip(plan.internal_input_bytes, plan.internal_output_bytes,
                                                              strict=True)]
    fused = any(np.any(inside) if isinstance(inside, np.ndarray) else inside for inside in internal)
    if not fused and not any(isinstance(dim, np.ndarray) for op in graph.ops for tensor in (*op.inputs, *op.outputs)
                             for dim in tensor.shape):
        return np.ones(len(graph.ops))  # nothing fused and no sweep among the tensors: every byte leaves its op
    sizes = [op.input_bytes + op.output_bytes for op in graph.ops]
    if not _sweep_shape(sizes, internal):  # a scalar graph: one array operation for all ops
        return clip(1.0 - np.array(internal, dtype=float) / maximum(np.array(sizes, dtype=float), 1.0), 0.0, 1.0)
    return [clip(1.0 - inside / maximum(size, 1.0), 0.0, 1.0) for inside, size in zip(internal, sizes, strict=True)]


def serial_vector_kernels(hardware: Hardware, costs: Sequence[OpCost], ops: Sequence[Op]) -> np.ndarray:
    """Per op: a vector kernel on an engine that does not hide its memory traffic behind its math
    (``ComputeEngine.vector_kernels_hide_memory``), whose compute and data movement add up."""
    engines = {name for name, engine in hardware.compute.items() if not engine.vector_kernels_hide_memory}
    if not engines:
        return np.zeros(len(ops), dtype=bool)
    return np.asarray([cost.engine in engines and is_vector_kind(op.kind) for cost, op in zip(costs, ops, strict=True)])


def library_dispatch_s(execution: ExecutionMode, ops: Sequence[Op]) -> np.ndarray | None:
    """Per op, the mode's extra host cost of handing it to a library (``ExecutionMode.library_dispatch_s``,
    by ATen op name from the op's provenance); None when the mode has none."""
    table = execution.library_dispatch_s
    if not table:
        return None
    return np.asarray([table.get(op.provenance.removeprefix("aten."), 0.0) for op in ops], dtype=float)


def weight_bytes(graph: Graph):
    return sum(tensor.bytes * op.count for op in graph.ops for tensor in op.inputs if tensor.role == "weight")


def evaluate_arrays(graph: Graph, hardware: Hardware, *, mode: str | None = None, overlap: Overlap = "max",
                    parameters: Parameters = DATASHEET, fuse: bool | None = None,
                    resident_bytes=0.0, stream_items=1) -> ArrayEvaluation:
    """Evaluate every op of ``graph`` on ``hardware``; see the module docstring for the model.

    ``resident_bytes``: what else the device holds beside the graph's weights (an LLM's KV cache
    and activations), so that weights are priced as streamed exactly when they do not fit beside it
    (``costs.residency``). ``stream_items``: independent items (tokens) the graph's work is made of,
    which a spatial dataflow pipeline overlaps: the first crosses every region, the rest follow one
    slowest-stage time apart (``pipelined_totals``); other modes ignore it."""
    if overlap not in ("max", "sum"):
        raise PerfmodelError(f"overlap must be 'max' or 'sum', got {overlap!r}")
    mode_name = resolve_mode(hardware, mode)
    execution, model = hardware.scheduling.modes[mode_name], execution_model(mode_name)
    if parameters is DATASHEET and hardware.efficiency is not None:
        parameters = hardware.efficiency  # a calibrated spec carries its fitted efficiencies
    if not graph.ops:
        raise PerfmodelError(f"workload {graph.name!r} has no ops")
    weights = weight_bytes(graph)
    placement = residency(hardware, weights, resident_bytes)
    on_device, resident = placement.capacity_bytes, placement.weights_resident
    # Rules that choose (a matmul's kernel) choose by the time charged below, with these parameters.
    context = CostContext(hardware=hardware, weights_resident=resident, parameters=parameters, overlap=overlap)
    costs = op_costs(graph.ops, context)
    fused = model.fuses if fuse is None else fuse
    plan = plan_fusion(graph) if fused else no_fusion(graph)

    levels = hardware.memory
    counts = floats([op.count for op in graph.ops])
    spec_values = [level.bandwidth_bytes_per_s for level in levels]
    spec_values += [rate for engine in hardware.compute.values() for rate in engine.peak_flops_per_s.values()]
    spec_values += [getattr(execution, attribute) for attribute in MODE_FIELDS.values()]
    # Fusion keeps a group's intermediates on chip: only the innermost level still sees them. The
    # traffic an op moves outside is scaled by the share of its tensors that leave the group. The
    # shares come from the graph's tensors, which may be sweep arrays where the op's costs are not (a
    # view's), so they take part in the sweep's shape like the costs and the spec's values.
    kept_shares = _kept_shares(graph, plan) if len(levels) > 1 else []
    shape = _sweep_shape([value for cost in costs
                          for value in (cost.flops, cost.executed_flops, cost.link_bytes, *cost.bytes_by_level)],
                         spec_values, kept_shares)

    def stack(values) -> np.ndarray:
        if not shape:  # scalar workload: a plain float array is ~10x cheaper than broadcasting each value
            return np.array(values, dtype=float)
        stacked = np.empty((len(values), *shape), dtype=object if any(map(is_traced, values)) else float)
        for row, value in enumerate(values):
            stacked[row] = value  # assignment broadcasts a row's scalar or array to the sweep's shape
        return stacked

    count_column = counts.reshape((-1,) + (1,) * len(shape))

    def column(values) -> np.ndarray:
        """Per-op constants (rates, efficiencies) as a column that broadcasts over the sweep's points
        (the same numbers as ``stack``'s rows, without filling them)."""
        if any(map(is_traced, values)) or any(isinstance(value, np.ndarray) and value.ndim for value in values):
            return stack(values)
        return np.array(values, dtype=float).reshape(count_column.shape)

    flops = stack([c.flops for c in costs])
    executed = stack([c.executed_flops for c in costs])
    if shape and not any(is_traced(c.bytes_by_level[index]) for c in costs for index in range(len(levels))):
        bytes_by_level = np.empty((len(levels), len(costs), *shape))
        for index in range(len(levels)):
            for row, cost in enumerate(costs):
                bytes_by_level[index, row] = cost.bytes_by_level[index]
    else:
        bytes_by_level = np.stack([stack([c.bytes_by_level[index] for c in costs]) for index in range(len(levels))])
    if isinstance(kept_shares, np.ndarray) and kept_shares.dtype != object:  # one share per op (no sweep)
        if not np.all(kept_shares == 1.0):  # (all ones where nothing is fused: nothing to scale)
            bytes_by_level[1:] = bytes_by_level[1:] * kept_shares.reshape(count_column.shape)
    elif len(kept_shares):
        bytes_by_level[1:] = bytes_by_level[1:] * stack(kept_shares)

    # Rates and efficiencies depend on (engine, dtype, kind) only: looked up once per distinct key. The
    # kind is the one that prices the op (``pricing_kind``: decode attention has its own kernels).
    priced_as = [pricing_kind(op) for op in graph.ops]
    rates: dict[tuple[str, str, str], Any] = {}
    for c, kind in zip(costs, priced_as, strict=True):
        key = (c.engine, c.peak_dtype, kind)
        if key not in rates:
            rates[key] = compute_rate_flops_per_s(hardware, parameters, *key)
    peaks = column([rates[(c.engine, c.peak_dtype, kind)] for c, kind in zip(costs, priced_as, strict=True)])
    latencies = [parameters.latency(kind, c.peak_dtype) for c, kind in zip(costs, priced_as, strict=True)]
    kinds = set(priced_as)
    # A kernel that counts thread blocks with a fixed cost each (``OpCost.work_units``: attention) pays its
    # start-up latency beside its bottlenecks, as it pays its blocks' (below), not hidden under its memory time.
    blocked = np.asarray([is_traced(c.work_units) or bool(np.any(c.work_units)) for c in costs], dtype=bool)
    compute_s = compute_time_s(executed, peaks, column([0.0 if outside else value
                                                        for value, outside in zip(latencies, blocked, strict=True)]))
    # A flash prefill kernel's softmax exponentials run on the special-function units in series with its matmuls
    # (``OpCost.exponentials``): their time adds to the kernel's compute time.
    if any(is_traced(c.exponentials) or bool(np.any(c.exponentials)) for c in costs):
        compute_s = compute_s + stack([exponential_time_s(hardware, parameters, c, kind)
                                       for c, kind in zip(costs, priced_as, strict=True)])
    # A second engine inside the same kernel (weight dequantization on the vector engine) works in
    # parallel with the first: the kernel's compute time is the slower of the two.
    if any(c.side_engine is not None for c in costs):
        side_s = stack([0.0 if c.side_engine is None else compute_time_s(c.side_flops, compute_rate_flops_per_s(
            hardware, parameters, c.side_engine, c.side_peak_dtype, op.kind), 0.0)
            for c, op in zip(costs, graph.ops, strict=True)])
        compute_s = maximum(compute_s, side_s)
    # A kernel that touches a level waits its latency once (saturating bandwidth efficiency).
    def efficiencies(level: str) -> np.ndarray:
        by_kind = {kind: parameters.memory(level, kind) for kind in kinds}
        return column([by_kind[kind] for kind in priced_as])

    memory_s = np.stack([memory_time_s(bytes_by_level[index], floats(level.bandwidth_bytes_per_s),
                                       efficiencies(level.name), parameters.memory_latency(level.name))
                         for index, level in enumerate(levels)])
    link_s = np.zeros_like(compute_s)
    for position, cost in enumerate(costs):
        if cost.link is not None:
            link = hardware.links[cost.link]
            efficiency, alpha = link_parameters(parameters, cost)
            link_s[position] = (floats(cost.link_bytes) / (link.bandwidth_bytes_per_s_per_direction * efficiency)
                                + floats(cost.link_latency_s) + alpha)
    fabric_s: float | np.ndarray = 0.0
    # Layer pipelining needs every region's weights resident; streamed weights run one layer at a time
    # on the whole device (Cerebras weight streaming), as the static mode prices it.
    spatial = model.spatial and resident
    if spatial:
        cores = np.asarray([hardware.compute[c.engine].units for c in costs], dtype=float).reshape(count_column.shape)
        scaled = compute_s + memory_s.sum(axis=0) if overlap == "sum" else maximum(compute_s, largest(memory_s, axis=0))
        region = spatial_regions(spatial_shares(graph, costs).reshape(count_column.shape) * cores, scaled,
                                 link_s if overlap == "max" else 0.0, cores, execution.fabric_hop_s)
        compute_s = compute_s * (cores / region)
        memory_s = memory_s * (cores / region)
        fabric_s = 2.0 * sqrt(maximum(region, 1.0)) * execution.fabric_hop_s

    anchors = floats([1.0 if plan.group_of[i] == i else 0.0 for i in range(len(costs))]).reshape(count_column.shape)
    launches = floats([c.launches for c in costs]).reshape(count_column.shape) * anchors
    barriers = floats([c.barriers for c in costs]).reshape(count_column.shape)
    host_calls = floats([c.host_calls for c in costs]).reshape(count_column.shape)
    scale = parameters.scheduling_scale
    synchronization = barriers * execution.sync_s * scale
    scheduling_s = (launches * model.per_kernel_s(execution) + host_calls * model.per_host_op_s(execution)) * scale \
        + synchronization + fabric_s
    library = library_dispatch_s(execution, graph.ops)
    if library is not None:
        scheduling_s = scheduling_s + library.reshape(count_column.shape) * scale
    scheduling_s = np.broadcast_to(scheduling_s, compute_s.shape).copy()

    # Every kernel pays its engine's device-side fixed time (start-up and tail), whoever launched it.
    fixed_s = np.broadcast_to(anchors * stack([hardware.compute[c.engine].kernel_fixed_s for c in costs])
                              * scale, compute_s.shape).copy()
    # Kernels whose thread blocks each pay a fixed prologue and epilogue (attention's Q tiles) pay it once a
    # block and engine unit, on top of their busy time (``OpCost.work_units``, ``Parameters.unit_latency``).
    # Decode kernels' blocks (``OpCost.blocks_overlap``) pay theirs under the kernel's streaming instead: their
    # time is one more bottleneck of the kernel (``blocks_s``), the start-up latency still on top.
    blocks_s: Any = 0.0
    overlapping: Any = False
    if blocked.any():
        per_unit = {kind: parameters.unit_latency(kind) for kind in kinds}
        blocks_s = stack([c.work_units / hardware.compute[c.engine].units * per_unit[kind]
                          for c, kind in zip(costs, priced_as, strict=True)])
        overlapping = stack([c.blocks_overlap for c in costs])
        if isinstance(overlapping, np.ndarray) and overlapping.dtype != object:
            overlapping = overlapping.astype(bool)
        fixed_s = fixed_s + where(overlapping, 0.0, blocks_s) + stack(
            [startup if outside else 0.0 for startup, outside in zip(latencies, blocked, strict=True)])
    # A decode kernel that splits its sequences' keys over blocks ends with a phase combining their partial
    # results (``OpCost.splits_keys``), a fixed time after its streaming (``Parameters.split_latency``).
    if any(is_traced(c.splits_keys) or bool(np.any(c.splits_keys)) for c in costs):
        per_split = {kind: parameters.split_latency(kind) for kind in kinds}
        fixed_s = fixed_s + stack([where(c.splits_keys, per_split[kind], 0.0)
                                   for c, kind in zip(costs, priced_as, strict=True)])

    # The bottlenecks, and the scheduling bottleneck after them (launch/dispatch costs and the kernel's
    # fixed time together), in one array: ``components`` are all rows but the last.
    bottlenecks = np.concatenate([compute_s[None], memory_s, link_s[None], (scheduling_s + fixed_s)[None]])
    components = bottlenecks[:-1]
    exposed: Any = stack([c.exposed_traffic for c in costs]) if blocked.any() else False
    if isinstance(exposed, np.ndarray) and exposed.dtype != object:  # (traced flags stay objects for the replay)
        exposed = exposed.astype(bool)
    busy = kernel_busy_s(components, overlap, serial_vector_kernels(hardware, costs, graph.ops).reshape(
        count_column.shape), exposed)
    if is_traced(overlapping) or np.any(overlapping):
        busy = where(overlapping, maximum(busy, blocks_s), busy)
    busy = busy + fixed_s
    per_instance = model.combine(busy, scheduling_s, execution)
    total_s = per_instance * count_column
    if spatial:  # one item streams as no pipeline: the formula gives per_instance x count exactly
        total_s = pipelined_totals(per_instance, count_column, floats(stream_items))
    bound_index = argmax(bottlenecks, axis=0)

    program_s = model.per_program_s(execution) * scale

    def counted(values: np.ndarray) -> np.ndarray:
        """Per-instance values times the op's count, in place: each of these arrays was made above
        for this evaluation alone (none is a view of another), and is not read again."""
        values *= count_column
        return values

    return ArrayEvaluation(
        hardware=hardware, mode=mode_name, overlap=overlap, level_names=tuple(level.name for level in levels),
        costs=costs, fusion=plan, counts=counts, flops=counted(flops), executed_flops=counted(executed),
        bytes_by_level=counted(bytes_by_level), compute_s=counted(compute_s), memory_s=counted(memory_s),
        link_s=counted(link_s), scheduling_s=counted(scheduling_s), fixed_s=counted(fixed_s), total_s=total_s,
        bound_index=bound_index, program_s=program_s,
        weights_resident=resident, weight_bytes=weights, on_device_bytes=on_device, parameters=parameters)
