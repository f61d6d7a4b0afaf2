"""One training step on every chip of a layout: time by phase, tokens/s, MFU/HFU, memory (pure core).

Per micro-batch each chip runs its pipeline stage's forward (``llm.graphs.stage_graph`` with phase
'train': the same layer definition as inference), then the recomputed ops and the backward
(``training.backward``); the engine prices both like any graph, tensor- and context-parallel
collectives included (they sit on the critical path, as in Megatron-LM without overlap).

Step time (``a`` = micro-batches per chip per step, ``p`` pipeline stages, ``v`` virtual stages)::

    compute   = (a + (p - 1) / v) * (forward + backward)        1F1B; the (p-1)/v term is the bubble
    sends     = 2 * a * send                                    activations forward, gradients back
    exposed   = sharded-weight traffic not hidden by compute + gradient sync not hidden by the last backward
    step      = compute + sends + exposed + optimizer + program launch

Overlap of data-parallel communication is an explicit assumption: FSDP's all-gathers (forward and
again in the backward, ZeRO-3) and gradient reduce-scatters of a micro-batch are prefetched under
that micro-batch's compute, so only the excess and one layer's gather and reduce-scatter per step
show (nothing can hide the first gather); the replicas' gradient all-reduce (or ZeRO-1/2's
reduce-scatter) is bucketed under the last micro-batch's backward; ZeRO-1/2's all-gather of the
updated weights follows the optimizer and is exposed.

Each collective runs on the links its group spans: a group whose chips lie in one fast-link domain
(an NVLink node, a TPU slice: ``domain_chips``) uses the chip-to-chip link; a group that crosses
domains is hierarchical (NCCL's tree/ring over nodes, MaxText's DCN axes): the members inside a
domain work on the chip-to-chip link, and the domains exchange ``1 / members-inside`` of the
payload over the spec's ``network`` link.

Memory per chip (the fullest stage): compute-dtype weights (an FSDP chip holds its shard plus one
gathered layer for the forward and the backward), fp32 master weights and both AdamW moments
(sharded by FSDP, and over replicas from ZeRO-1), fp32 gradients (sharded by FSDP, over replicas
from ZeRO-2), the activations kept for the backward (``training.backward.saved_activation_bytes``)
for every micro-batch in flight (1F1B keeps up to ``p`` on the first stage), and a workspace: one
layer's recomputed tensors and the fp32 logits of a micro-batch.

Recompute keeps what ``TrainingSetup.recompute`` (and ``kept``) says; with ``offload`` the kept
tensors live in host memory (two layers' worth stay on the device) and their copies out during the
forward and back during the backward show only where the host link is slower than the pass. A
spatial (layer-pipelined) machine streams a micro-batch's tokens through its regions.

MFU counts the model's FLOPs (3x the forward's useful FLOPs: the backward is twice the forward),
HFU adds the recomputed forward, both over the matrix engines' peak at the compute dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from perfmodel.costs.residency import on_device_capacity_bytes
from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import resolve_mode
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, stage_graph
from perfmodel.roofline.arrays import ArrayEvaluation, bound_labels, evaluate_arrays
from perfmodel.training.backward import (
    BACKWARD_PREFIX,
    LAYER_PREFIX,
    RECOMPUTE_PREFIX,
    attention_kernel_attrs,
    backward_with_recompute,
    saved_activation_bytes,
)
from perfmodel.training.layout import Layout, TrainingSetup, accumulation_steps, check
from perfmodel.workload.ir import Graph, Op, TensorSpec

ADAMW_FLOPS_PER_PARAMETER = 12  # two moment updates (7), bias-corrected step with sqrt and epsilon, decay (5)
ADAMW_TENSORS_WRITTEN = 4  # master weight, both moments, the compute-dtype copy


@dataclass(frozen=True, kw_only=True)
class TrainingMemory:
    """Bytes per chip of the fullest pipeline stage (floats, or arrays over micro-batch sizes)."""

    weights: Any
    gradients: Any
    optimizer: Any
    activations: Any
    workspace: Any

    @property
    def total(self) -> Any:
        return self.weights + self.gradients + self.optimizer + self.activations + self.workspace

    def as_dict(self) -> dict[str, Any]:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
                "activations": self.activations, "workspace": self.workspace}


@dataclass(frozen=True, kw_only=True)
class TrainingResult:
    model: str
    hardware: str
    parameters: str
    mode: str
    setup: TrainingSetup
    layout: Layout
    step_s: float
    time_by_phase: dict[str, float]          # forward, backward, recompute, pipeline_bubble, ... (sum = step)
    communication_s: dict[str, float]        # each data-parallel collective's time per step, before overlap
    time_by_bound: dict[str, float]          # forward + backward + recompute time by bottleneck
    tokens_per_s: float
    model_flops_per_step: float              # whole model, all chips
    mfu: float
    hfu: float
    memory: TrainingMemory
    capacity_bytes: float
    power_watts: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def chips(self) -> int:
        return self.layout.chips

    @property
    def fits(self) -> bool:
        return bool(np.all(self.memory.total <= self.capacity_bytes))

    @property
    def tokens_per_s_per_chip(self) -> float:
        return self.tokens_per_s / self.chips

    @property
    def bound(self) -> str:
        return max(self.time_by_bound, key=lambda key: self.time_by_bound[key])

    def to_dict(self) -> dict:
        layout = {name: getattr(self.layout, name) for name in ("dp", "fsdp", "tp", "pp", "cp", "ep", "zero",
                                                                 "micro_batch", "virtual_stages")}
        return {"model": self.model, "hardware": self.hardware, "parameters": self.parameters, "mode": self.mode,
                "chips": self.chips, "layout": layout, "global_batch": self.setup.global_batch,
                "seq_len": self.setup.seq_len, "recompute": self.setup.recompute, "step_s": self.step_s,
                "time_by_phase": self.time_by_phase, "communication_s": self.communication_s,
                "time_by_bound": self.time_by_bound, "bound": self.bound, "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_chip": self.tokens_per_s_per_chip, "model_flops_per_step": self.model_flops_per_step,
                "mfu": self.mfu, "hfu": self.hfu, "memory_bytes": {k: float(v) for k, v in self.memory.as_dict().items()},
                "capacity_bytes_per_chip": self.capacity_bytes, "fits": self.fits, "power_watts": self.power_watts,
                "notes": list(self.notes)}


def _scenario(setup: TrainingSetup, micro_batch) -> Scenario:
    dtype = setup.compute_dtype
    return Scenario(batch=micro_batch, prompt_tokens=setup.seq_len, generated_tokens=1, weight_dtype=dtype,
                    kv_dtype=dtype, activation_dtype=dtype)


def forward_graph(architecture: Architecture, setup: TrainingSetup, layout: Layout, micro_batch=None,
                  domain_chips: int | None = None) -> Graph:
    """One chip's forward pass of one micro-batch (its pipeline stage, tensor and context shards),
    followed by the multi-token-prediction modules' with ``setup.mtp`` (``mtp_ops``). With
    ``domain_chips`` the tensor- and context-parallel collectives say where their groups lie in the
    fast-link domain (``placed_collectives``)."""
    scenario = _scenario(setup, layout.micro_batch if micro_batch is None else micro_batch)
    parallelism = Parallelism(tp=layout.tp, pp=layout.pp, ep=layout.ep)
    graph = stage_graph(architecture, scenario, parallelism, phase="train", context=setup.seq_len,
                        context_shards=layout.cp, sequence_parallel=layout.sequence_parallel,
                        moe_capacity_factor=setup.moe_capacity_factor)
    if domain_chips is not None:
        graph = Graph.prechecked(graph.name, placed_collectives(list(graph.ops), layout, domain_chips), graph.edges)
    if setup.attention_block is not None:
        graph = Graph.prechecked(graph.name, blocked_attention(list(graph.ops), setup.attention_block), graph.edges)
    if setup.attention_kernel is not None:
        attrs = attention_kernel_attrs(setup.attention_kernel, setup.seq_len // layout.cp, setup.attention_block)
        graph = Graph.prechecked(graph.name, [replace(op, attrs={**op.attrs, **attrs}) if op.kind == "attention" else op
                                              for op in graph.ops], graph.edges)
    if not setup.mtp:
        return graph
    return Graph(name=graph.name, ops=[*graph.ops, *mtp_ops(architecture, scenario, parallelism, setup.seq_len)])


def placed_collectives(ops: list[Op], layout: Layout, domain_chips: int) -> list[Op]:
    """The layer's collectives with their place in a domain of ``domain_chips`` chips: tensor- and
    expert-parallel groups are the innermost axis (stride 1), the context ring the next one (stride
    ``tp``): on a torus they drive only the links of the axes they span (``costs.topology``)."""
    def placed(op: Op) -> Op:
        if op.kind != "collective" or op.attrs.get("collective") == "send":
            return op
        stride = layout.tp if op.name.endswith("context_ring") else 1
        return replace(op, attrs={**op.attrs, "stride": stride, "slice_chips": domain_chips})

    return [placed(op) for op in ops]


def blocked_attention(ops: list[Op], block: int) -> list[Op]:
    """The attention ops with the flash kernel's block the run configures (``kv_block``): a causal
    kernel computes every block that holds an attended pair and skips only whole masked ones
    (MaxText's flash kernel at 76bd53b, ``pl.when(below_or_on_diag)``; splash attention's block
    mask), so the masked pairs it computes grow with the block (``costs.rules.attention_cost``)."""
    return [replace(op, attrs={**op.attrs, "kv_block": block}) if op.kind == "attention" else op for op in ops]


def mtp_ops(architecture: Architecture, scenario: Scenario, parallelism: Parallelism, seq_len: int) -> list[Op]:
    """The forward of each multi-token-prediction module on a micro-batch: the same module ``serve
    --speculative mtp`` drafts with (``serving.speculation.drafter_graph``: the two RMSNorms,
    ``eh_proj``, one decoder layer of the last layer's kind, and a second pass through the shared
    output head: the module's own logits), over every token of the sequence. Named ``mtp<k>.``, they
    are priced with the stage's ends (embedding, head), not split over the decoder layers."""
    from perfmodel.serving.speculation import Speculation, drafter, drafter_graph

    module = drafter(architecture, Speculation(method="mtp", tokens=1, acceptance=1.0), scenario, parallelism)
    graph = drafter_graph(architecture, module, scenario, phase="train", context=seq_len)
    return [replace(op, name=f"mtp{index}.{op.name}") for index in range(architecture.mtp_modules) for op in graph.ops]


def mtp_saved_activation_bytes(architecture: Architecture, setup: TrainingSetup, layout: Layout) -> float:
    """Bytes one micro-batch's multi-token-prediction modules keep for their backward, from a module's
    definition (arXiv 2412.19437 section 2.2) under the run's recompute policy, kept as a decoder
    layer's are (``saved_activation_bytes``): the RMSNorms of the main model's last hidden state and of
    the next tokens' embeddings (``hnorm``, ``enorm``; both inputs are what 'full' recomputation keeps),
    ``eh_proj`` on their concatenation (2 x hidden -> hidden), and one decoder layer of the last layer's
    kind, tensor- and sequence-parallel as the model's layers (Megatron-core's MTP layer: its norms in
    the sequence-parallel region, ``eh_proj`` column-parallel). Its logits are the head's workspace,
    one at a time, as the main model's are."""
    if not setup.mtp:
        return 0.0
    from perfmodel.serving.speculation import Speculation, drafter
    from perfmodel.workload.builders import linear

    scenario = _scenario(setup, layout.micro_batch)
    model, parallelism = drafter(architecture, Speculation(method="mtp", tokens=1, acceptance=1.0), scenario,
                                 Parallelism(tp=layout.tp, ep=layout.ep))
    sharded = layout.sequence_parallel and parallelism.tp > 1
    layer = stage_graph(model, scenario, parallelism, phase="train", context=setup.seq_len,
                        sequence_parallel=sharded)
    rows = layout.micro_batch * setup.seq_len // (parallelism.tp if sharded else 1)  # cp > 1 is refused with MTP
    act, hidden = scenario.activation_dtype, architecture.hidden
    state = TensorSpec(shape=(rows, hidden), dtype=act)
    norms = Op(name=f"{LAYER_PREFIX}mtp.enorm_hnorm", kind="norm", count=2, inputs=(state,), outputs=(state,),
               attrs={"norm": "rms"})
    projection = replace(linear("mtp.eh_proj", rows, 2 * hidden, hidden, act, scenario.weight_dtype),
                         name=f"{LAYER_PREFIX}mtp.eh_proj")
    module = Graph(name="mtp", ops=[norms, projection, *(op for op in layer.ops if op.name.startswith(LAYER_PREFIX))])
    return architecture.mtp_modules * float(saved_activation_bytes(module, setup.recompute, setup.kept))


def trained_parameters(architecture: Architecture, setup: TrainingSetup, pp: int) -> int:
    """Parameters of the fullest of ``pp`` pipeline stages that get gradients and optimizer state:
    ``Architecture.stage_parameters``, and with ``setup.mtp`` the MTP modules' own (``mtp_parameters``;
    their embedding and head are the model's), held with the head on the last stage."""
    return architecture.stage_parameters(pp) + (architecture.mtp_parameters if setup.mtp else 0)


# ------------------------------------------------------------------------------------------ links
def fast_link(hardware: Hardware):
    return next((link for link in hardware.links.values() if link.kind == "chip_to_chip"), None)


def network_link(hardware: Hardware):
    return next((link for link in hardware.links.values() if link.kind == "network"), None)


def default_domain_chips(hardware: Hardware, chips: int) -> int:
    """Chips one fast-link domain holds: the chip-to-chip link's reach (an NVLink node, a TPU pod), at
    most the chips in use; 1 without a chip-to-chip link."""
    link = fast_link(hardware)
    if link is None:
        return 1
    return min(chips, link.max_chips) if link.max_chips else chips


def group_collective(hardware: Hardware, name: str, collective: str, payload, size: int, stride: int,
                     domain_chips: int, dtype: str, count: int = 1) -> list[Op]:
    """A collective over ``size`` chips ``stride`` apart, on the links that group spans (see the
    module docstring); [] for a group of one."""
    if size <= 1:
        return []
    fast, network = fast_link(hardware), network_link(hardware)
    inside = max(min(domain_chips // stride, size), 1)

    def op(suffix: str, link, group: int, share) -> Op:
        # where the group lies in its fast-link domain: a torus drives only the links of the axes it spans
        placement = {"stride": stride, "slice_chips": domain_chips} if link is fast else {}
        return Op(name=name + suffix, kind="collective", count=count, provenance=f"c10d.{collective}",
                  attrs={"collective": collective, "bytes": share, "group_size": group, "dtype": dtype,
                         "link": link.name, **placement})

    if inside >= size:
        if fast is None:
            raise PerfmodelError(f"{hardware.name} has no chip-to-chip link in its spec, so {size} chips cannot "
                                 f"run {name}; add one or use one chip")
        return [op("", fast, size, payload)]
    if network is None:
        raise PerfmodelError(f"{name} spans {stride * size} chips, more than one fast-link domain of {domain_chips}, "
                             f"but {hardware.name} has no network link (kind: network) in its spec; add one or "
                             f"use at most {domain_chips} chip{'s' if domain_chips > 1 else ''}")
    ops = [op(".intra", fast, inside, payload)] if inside > 1 and fast is not None else []
    return ops + [op(".inter", network, size // inside, payload / inside)]


# ----------------------------------------------------------------------------------- the step
def _sum(arrays: ArrayEvaluation, rows=None):
    total = arrays.total_s if rows is None else arrays.total_s[rows]
    return total.sum(axis=0)


@dataclass(frozen=True, kw_only=True)
class MicroBatchCosts:
    """One micro-batch on one chip of a tensor/context group, split into one decoder layer and the
    ends (embedding, final norm, LM head, loss): a stage of any depth is ``layer * layers + ends``.
    Values are floats, or arrays over micro-batch sizes."""

    forward_layer: Any
    forward_ends: Any
    backward_layer: Any             # recompute included
    backward_ends: Any
    recompute_layer: Any
    recompute_flops_layer: Any
    saved_layer: Any                # activations kept for the backward, per layer (the recompute policy's)
    all_outputs_layer: Any          # every tensor a layer's forward produces (recompute workspace)
    bound_layer: dict[str, Any]
    bound_ends: dict[str, Any]
    parameters: str
    program_s: float

    def point(self, index: int) -> MicroBatchCosts:
        """The costs at one micro-batch size of an array-valued evaluation."""
        def pick(value: Any) -> Any:
            return float(np.asarray(value).reshape(-1)[index]) if np.ndim(value) else value

        return replace(self, **{name: pick(getattr(self, name)) for name in (
            "forward_layer", "forward_ends", "backward_layer", "backward_ends", "recompute_layer",
            "recompute_flops_layer", "saved_layer", "all_outputs_layer")},
            bound_layer={key: pick(value) for key, value in self.bound_layer.items()},
            bound_ends={key: pick(value) for key, value in self.bound_ends.items()})

    def stage(self, layers: int) -> tuple[Any, Any, Any]:
        """Forward, backward (with recompute) and recompute time of a stage of ``layers`` layers."""
        return (self.forward_layer * layers + self.forward_ends, self.backward_layer * layers + self.backward_ends,
                self.recompute_layer * layers)


def micro_batch_costs(architecture: Architecture, hardware: Hardware, setup: TrainingSetup, layout: Layout, mode: str,
                      micro_batch=None, domain_chips: int | None = None) -> MicroBatchCosts:
    """Price the forward and backward of the whole model once (``pp`` = 1) and split it per layer; the
    layer's collectives lie in a fast-link domain of ``domain_chips`` chips (default: the hardware's
    domain for the layout's chips)."""
    whole = replace(layout, pp=1, virtual_stages=1)
    domain = domain_chips or default_domain_chips(hardware, layout.chips)
    forward = forward_graph(architecture, setup, whole, micro_batch, domain_chips=domain)
    # A TPU runs programs XLA compiles from a traced graph (JAX's remat keeps only the recomputed ops the backward
    # reads); GPU stacks differ (Megatron-LM's full recompute re-runs the whole layer), so they keep the whole tail.
    backward = backward_with_recompute(forward, setup.recompute, setup.kept, drop_dead=hardware.family == "tpu")
    # A spatial (layer-pipelined) machine streams the micro-batch's tokens through its regions.
    tokens = (layout.micro_batch if micro_batch is None else micro_batch) * (setup.seq_len // layout.cp)
    f_arrays = evaluate_arrays(forward, hardware, mode=mode, stream_items=tokens)
    b_arrays = evaluate_arrays(backward, hardware, mode=mode, stream_items=tokens)
    layers = architecture.layers

    def rows(graph: Graph, predicate) -> np.ndarray:
        return np.array([predicate(op.name) for op in graph.ops])

    f_layer = rows(forward, lambda name: name.startswith(LAYER_PREFIX))
    b_recompute = rows(backward, lambda name: name.startswith(RECOMPUTE_PREFIX))
    b_layer = rows(backward, lambda name: name.startswith((RECOMPUTE_PREFIX, BACKWARD_PREFIX + LAYER_PREFIX)))
    labels = bound_labels(f_arrays.level_names)

    def by_bound(arrays: ArrayEvaluation, mask: np.ndarray, scale: float) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_point = np.asarray(arrays.bound_index).reshape(len(arrays.costs), -1)[:, 0]
        for row in np.flatnonzero(mask):
            label = labels[first_point[row]]
            result[label] = result.get(label, 0.0) + arrays.total_s[row] / scale
        return result

    def merged(*parts: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for part in parts:
            for key, value in part.items():
                result[key] = result.get(key, 0.0) + value
        return result

    return MicroBatchCosts(
        forward_layer=_sum(f_arrays, f_layer) / layers, forward_ends=_sum(f_arrays, ~f_layer),
        backward_layer=_sum(b_arrays, b_layer) / layers, backward_ends=_sum(b_arrays, ~b_layer),
        recompute_layer=_sum(b_arrays, b_recompute) / layers if b_recompute.any() else 0.0,
        recompute_flops_layer=b_arrays.flops[b_recompute].sum(axis=0) / layers if b_recompute.any() else 0.0,
        saved_layer=np.asarray(saved_activation_bytes(forward, setup.recompute, setup.kept)) / layers,
        all_outputs_layer=np.asarray(saved_activation_bytes(forward, "none")) / layers,
        bound_layer=merged(by_bound(f_arrays, f_layer, layers), by_bound(b_arrays, b_layer, layers)),
        bound_ends=merged(by_bound(f_arrays, ~f_layer, 1.0), by_bound(b_arrays, ~b_layer, 1.0)),
        parameters=f_arrays.parameters.label, program_s=float(f_arrays.program_s))


def model_flops_per_sequence(architecture: Architecture, hardware: Hardware, setup: TrainingSetup) -> float:
    """The model's FLOPs to train on one sequence: 3x the forward's useful FLOPs (the backward is
    twice the forward), attention causal, the embedding lookup free, the LM head counted; a MoE layer
    counts its routed tokens' expert work only (a token-dropping MoE's dispatch, combine and empty
    buffer slots are hardware FLOPs, not model FLOPs)."""
    whole = stage_graph(architecture, _scenario(setup, 1), Parallelism(), phase="train", context=setup.seq_len)
    if setup.mtp:  # the MTP modules' work is the model's: DeepSeek-V3 trains them with it
        whole = Graph(name=whole.name, ops=[*whole.ops, *mtp_ops(architecture, _scenario(setup, 1), Parallelism(),
                                                                 setup.seq_len)])
    return 3 * float(evaluate_arrays(whole, hardware).flops.sum())


def train_predict(architecture: Architecture, hardware: Hardware, setup: TrainingSetup, layout: Layout, *,
                  mode: str | None = None, domain_chips: int | None = None, overlap: bool = True,
                  costs: MicroBatchCosts | None = None, model_flops: float | None = None) -> TrainingResult:
    """Predict one training step (see the module docstring). ``costs`` and ``model_flops`` let a
    layout search reuse what does not depend on the layout's pp, dp and fsdp."""
    check(architecture, setup, layout)
    execution = resolve_mode(hardware, mode)
    domain = domain_chips or default_domain_chips(hardware, layout.chips)
    if layout.tp * layout.cp > domain:
        raise PerfmodelError(f"tp x cp = {layout.tp * layout.cp} chips exceed one fast-link domain of {domain} "
                             f"({hardware.name}); tensor and context parallelism need the fast links")
    peak = hardware.peak_flops_per_s(setup.compute_dtype, "matrix") * layout.chips
    if not np.all(np.asarray(peak) > 0):
        offered = sorted({dtype for engine in hardware.compute.values() if engine.kind == "matrix"
                          for dtype in engine.peak_flops_per_s})
        raise PerfmodelError(f"{hardware.name} has no matrix engine for compute dtype {setup.compute_dtype!r}; "
                             f"it offers {', '.join(offered) or 'none'} (use --compute-dtype)")
    costs = costs or micro_batch_costs(architecture, hardware, setup, layout, execution, domain_chips=domain)
    compute, master = DTYPES[setup.compute_dtype].bytes_per_element, DTYPES[setup.master_dtype].bytes_per_element
    stage_layers = architecture.layers // layout.pp
    t_forward, t_backward_all, t_recompute = costs.stage(stage_layers)
    t_micro = t_forward + t_backward_all
    steps = accumulation_steps(setup, layout)
    bubble = (layout.pp - 1) / layout.virtual_stages * t_micro

    # Pipeline sends: one micro-batch's activations forward and their gradients back, per boundary.
    tokens = layout.micro_batch * (setup.seq_len // layout.cp)
    send_ops = group_collective(hardware, "pipeline.send", "send", tokens * architecture.hidden * compute,
                                2 if layout.pp > 1 else 1, layout.stride("pp"), domain, setup.compute_dtype)

    # Data-parallel communication: FSDP per micro-batch, replicas' gradient sync per step.
    parameters = trained_parameters(architecture, setup, layout.pp) / layout.tp
    fsdp_stride = layout.stride("fsdp")
    fsdp_ops = group_collective(hardware, "fsdp.all_gather", "all_gather", parameters * compute, layout.fsdp,
                                fsdp_stride, domain, setup.compute_dtype, count=2)
    fsdp_ops += group_collective(hardware, "fsdp.reduce_scatter", "reduce_scatter", parameters * master, layout.fsdp,
                                 fsdp_stride, domain, setup.master_dtype)
    shard = parameters / layout.fsdp
    dp_stride = layout.stride("dp")
    gather_ops: list[Op] = []
    if layout.zero == 0:
        sync_ops = group_collective(hardware, "dp.all_reduce", "all_reduce", shard * master, layout.dp, dp_stride,
                                    domain, setup.master_dtype)
    else:
        sync_ops = group_collective(hardware, "dp.reduce_scatter", "reduce_scatter", shard * master, layout.dp,
                                    dp_stride, domain, setup.master_dtype)
        gather_ops = group_collective(hardware, "dp.all_gather", "all_gather", shard * compute, layout.dp, dp_stride,
                                      domain, setup.compute_dtype)
    optimizer_shard = shard / (layout.dp if layout.zero >= 1 else 1)  # this chip's shard of the master weights
    # Everything outside the micro-batch graphs, priced in one evaluation and summed per group.
    t_send, t_fsdp, t_sync, t_gather, t_optimizer = _evaluate_groups(
        [send_ops, fsdp_ops, sync_ops, gather_ops, [_adamw(optimizer_shard, setup)]], hardware, execution)
    if overlap:
        first_layer = t_fsdp / max(stage_layers, 1)  # the first gather and the last reduce-scatter cannot hide
        exposed_fsdp = steps * max(t_fsdp - t_micro, 0.0) + (first_layer if layout.fsdp > 1 else 0.0)
        exposed_sync = max(t_sync - t_backward_all, 0.0)
    else:
        exposed_fsdp, exposed_sync = steps * t_fsdp, t_sync

    # Offloaded activations go out during the forward and come back during the backward, each way
    # hidden by that pass's compute as far as the host link allows.
    exposed_offload = 0.0
    if setup.offload:
        host = next((link for link in hardware.links.values() if link.kind == "host"), None)
        if host is None:
            raise PerfmodelError(f"{hardware.name} has no host link in its spec, so activations cannot be offloaded")
        copy_s = float(costs.saved_layer) * stage_layers / host.bandwidth_bytes_per_s_per_direction
        exposed_offload = steps * (max(copy_s - t_forward, 0.0) + max(copy_s - t_backward_all, 0.0))
    phases = {"forward": steps * t_forward, "backward": steps * (t_backward_all - t_recompute),
              "recompute": steps * t_recompute, "pipeline_bubble": bubble,
              "pipeline_sends": 2 * steps * t_send if layout.pp > 1 else 0.0,
              "exposed_communication": exposed_fsdp + exposed_sync + t_gather, "activation_offload": exposed_offload,
              "optimizer": t_optimizer, "program_launch": costs.program_s}
    step = float(sum(phases.values()))

    model_flops = model_flops if model_flops is not None else \
        model_flops_per_sequence(architecture, hardware, setup) * setup.global_batch
    recompute_flops = steps * costs.recompute_flops_layer * stage_layers * layout.chips
    by_bound = {key: steps * value * stage_layers for key, value in costs.bound_layer.items()}
    for key, value in costs.bound_ends.items():
        by_bound[key] = by_bound.get(key, 0.0) + steps * value
    notes = []
    if layout.pp > 1:
        notes.append("every pipeline stage is priced as the fullest one (its layers, the embedding and the LM head)")
    if setup.mtp:
        notes.append(f"{architecture.mtp_modules} multi-token-prediction module(s) trained beside the model "
                     f"({architecture.mtp_parameters / 1e9:.2f} B parameters, one more output-head pass each)")
    return TrainingResult(
        model=architecture.name, hardware=hardware.name, parameters=costs.parameters, mode=execution,
        setup=setup, layout=layout, step_s=step, time_by_phase={k: float(v) for k, v in phases.items()},
        communication_s={"fsdp_per_micro_batch": float(t_fsdp), "gradient_sync": float(t_sync),
                         "weight_all_gather": float(t_gather), "pipeline_send": float(t_send)},
        time_by_bound={k: float(v) for k, v in by_bound.items()},
        tokens_per_s=setup.global_batch * setup.seq_len / step, model_flops_per_step=model_flops,
        mfu=float(model_flops / (step * peak)), hfu=float((model_flops + recompute_flops) / (step * peak)),
        memory=training_memory(architecture, setup, layout, costs),
        capacity_bytes=float(on_device_capacity_bytes(hardware)), power_watts=hardware.power.tdp_watts * layout.chips,
        notes=tuple(notes))


def _scalar(value):
    array = np.asarray(value, dtype=float)
    return float(array) if array.ndim == 0 else array


def _evaluate_groups(groups: list[list[Op]], hardware: Hardware, mode: str) -> list[float]:
    """The time of each group of ops (0 for an empty one), from one unfused evaluation."""
    ops = [op for group in groups for op in group]
    if not ops:
        return [0.0] * len(groups)
    per_op = evaluate_arrays(Graph(name="step", ops=ops), hardware, mode=mode, fuse=False).total_s
    times, start = [], 0
    for group in groups:
        times.append(float(np.sum(per_op[start:start + len(group)])))
        start += len(group)
    return times


def _adamw(parameters: float, setup: TrainingSetup) -> Op:
    from perfmodel.workload.ir import TensorSpec

    elements = max(int(parameters), 1)
    master = TensorSpec(shape=(elements,), dtype=setup.master_dtype)
    copy = TensorSpec(shape=(elements,), dtype=setup.compute_dtype)
    return Op(name="optimizer.adamw", kind="elementwise", provenance="torch.optim.AdamW",
              inputs=(master, master, master, master), outputs=(master, master, master, copy),
              attrs={"flops_per_element": ADAMW_FLOPS_PER_PARAMETER / ADAMW_TENSORS_WRITTEN})


def training_memory(architecture: Architecture, setup: TrainingSetup, layout: Layout,
                    costs: MicroBatchCosts) -> TrainingMemory:
    """Bytes per chip of the fullest stage (see the module docstring)."""
    parameters = trained_parameters(architecture, setup, layout.pp) / layout.tp  # one chip's shard of its stage
    stage_layers = architecture.layers // layout.pp
    compute, master = DTYPES[setup.compute_dtype].bytes_per_element, DTYPES[setup.master_dtype].bytes_per_element
    shard = parameters / layout.fsdp
    layer = parameters / max(stage_layers, 1)
    weights = shard * compute + (2 * layer * compute if layout.fsdp > 1 else 0.0)
    gradients = shard * master / (layout.dp if layout.zero >= 2 else 1)
    optimizer = 3 * shard * master / (layout.dp if layout.zero >= 1 else 1)  # master weights and two moments
    in_flight = min(layout.pp, accumulation_steps(setup, layout)) if layout.pp > 1 else 1
    tokens = layout.micro_batch * (setup.seq_len // layout.cp)
    logits = tokens * architecture.vocab / layout.tp * 4  # fp32 logits and their gradient, one at a time
    # offloading: one layer each way in flight (the MTP modules' tensors offloaded with the layers')
    kept_layers = 2 if setup.offload else stage_layers * in_flight
    mtp = 0.0 if setup.offload else mtp_saved_activation_bytes(architecture, setup, layout) * in_flight
    return TrainingMemory(weights=weights, gradients=gradients, optimizer=optimizer,
                          activations=float(costs.saved_layer) * kept_layers + mtp,
                          workspace=float(costs.all_outputs_layer) + logits)
