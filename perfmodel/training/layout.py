"""A training run's setup and parallel layout, and the constraints between them (pure core).

Chips are arranged as nested groups, innermost first: ``tp`` (tensor), ``cp`` (context), ``fsdp``
(ZeRO-3 sharding), ``pp`` (pipeline stages), ``dp`` (replicas). A collective over one axis joins
chips that are ``stride`` apart, where ``stride`` is the product of the axes inside it; the group
spans ``stride x size`` consecutive chips. Inner axes talk most (tensor parallel every layer), so
they are placed on the fastest links: Megatron-LM's order (tp innermost, dp outermost) and
MaxText's (ICI axes inside a slice, DCN axes across slices).

Expert parallelism (``ep``) spreads a MoE layer's experts over the ``tp`` chips of a group
(``ep`` <= ``tp``, as in inference), so it adds no chips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, stage_graph
from perfmodel.training.backward import ATTENTION_KERNELS, kept_name

RECOMPUTE_POLICIES = ("none", "selective", "full")
PIPELINE_SCHEDULES = ("1f1b", "interleaved")
AXES = ("tp", "cp", "fsdp", "pp", "dp")  # innermost first


@dataclass(frozen=True, kw_only=True)
class TrainingSetup:
    """What one optimizer step trains on, and how numbers are stored.

    ``global_batch`` sequences of ``seq_len`` tokens per step. ``compute_dtype`` is the matmul and
    activation dtype (bf16 mixed precision); ``master_dtype`` holds the fp32 master weights, the
    gradients as reduced and both AdamW moments. ``recompute``: 'none' keeps every tensor a layer's
    forward produces; 'selective' keeps the matmul outputs and recomputes the rest (norms,
    activations, attention: JAX's ``checkpoint_dots``, MaxText's 'minimal'); 'full' keeps only each
    layer's input and recomputes its whole forward in the backward. ``kept`` narrows 'selective' to
    the matmuls named (the last part of their op name: q_proj, k_proj, v_proj, o_proj, gate_up_proj,
    down_proj), as MaxText's named policies do; the other matmuls are recomputed. ``offload`` moves
    the kept tensors to host memory after each layer's forward and back before its backward
    (MaxText's offload policies): they leave device memory, and the copies cross the host link
    while the chip computes."""

    global_batch: int
    seq_len: int
    compute_dtype: str = "bf16"
    master_dtype: str = "fp32"
    recompute: str = "none"
    kept: tuple[str, ...] | None = None
    offload: bool = False
    optimizer: str = "adamw"
    # None: a MoE layer's experts compute only the tokens routed to them (dropless grouped matmuls);
    # a factor: MaxText's token-dropping MoE (GShard one-hot dispatch and combine einsums, experts
    # computing buffers of ``llm.graphs.expert_capacity`` slots per sequence).
    moe_capacity_factor: float | None = None
    # Train the model's multi-token-prediction modules beside it (``Architecture.mtp_modules``,
    # DeepSeek-V3's recipe, arXiv 2412.19437 section 2.2): each module's forward and backward, its
    # extra pass through the shared output head, and its weights, gradients and optimizer state.
    mtp: bool = False
    # The flash-attention kernel's block, the larger of its query and key blocks (MaxText's
    # ``sa_block_q`` / ``sa_block_kv``): a causal kernel skips only whole masked blocks, so each query
    # row also computes (block - 1) / 2 masked pairs on average (``costs.rules.attention_cost``).
    # None: the engine's own (``attention_kv_block``, else the rules' default).
    attention_block: int | None = None
    # The flash-attention kernel, for how it computes the gradient (``training.backward.ATTENTION_KERNELS``:
    # flash, pallas-flash, splash, splash-fused). None: FlashAttention-2's one gradient kernel.
    attention_kernel: str | None = None


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Degrees of each parallel axis, the micro-batch size and the pipeline schedule.

    ``zero`` (0-2) shards optimizer state (1) and gradients (2) over the ``dp`` replicas; ``fsdp``
    shards weights too (ZeRO-3) over its own axis. ``micro_batch`` sequences per forward/backward
    pass; gradients accumulate over ``global_batch / (dp * fsdp * micro_batch)`` of them per step.
    ``virtual_stages`` > 1 is the interleaved 1F1B schedule (each chip holds that many chunks).
    ``sequence_parallel`` shards the norms, residual adds and the tensors they keep over the ``tp``
    chips (Megatron-LM's default with tensor parallelism, and MaxText's activation sharding)."""

    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    micro_batch: int = 1
    virtual_stages: int = 1
    sequence_parallel: bool = True  # shard the residual stream over tp (with tp > 1; see llm.graphs)

    @property
    def chips(self) -> int:
        return self.dp * self.fsdp * self.tp * self.pp * self.cp

    @property
    def data_shards(self) -> int:
        """Chips that see different sequences (the batch splits over them)."""
        return self.dp * self.fsdp

    def stride(self, axis: str) -> int:
        """Chips between two members of a group along ``axis`` (the product of the axes inside it)."""
        return math.prod(getattr(self, inner) for inner in AXES[:AXES.index(axis)])

    def label(self) -> str:
        parts = [f"{axis} {getattr(self, axis)}" for axis in AXES if getattr(self, axis) > 1]
        if self.ep > 1:
            parts.append(f"ep {self.ep}")
        if self.zero:
            parts.append(f"zero-{self.zero}")
        if self.virtual_stages > 1:
            parts.append(f"{self.virtual_stages} virtual stages")
        return ", ".join(parts or ["1 chip"]) + f"; micro-batch {self.micro_batch}"


def accumulation_steps(setup: TrainingSetup, layout: Layout) -> int:
    """Micro-batches each chip runs per optimizer step."""
    return setup.global_batch // (layout.data_shards * layout.micro_batch)


@lru_cache(maxsize=32)
def layer_matmul_names(architecture: Architecture, token_dropping: bool = False) -> tuple[str, ...]:
    """The names ``TrainingSetup.kept`` can give: the last part of each matmul's name in a layer of
    ``architecture``'s training graph (q_proj, ..., down_proj; a MoE's router, experts and einsums)."""
    graph = stage_graph(architecture, Scenario(batch=1, prompt_tokens=1, generated_tokens=1), Parallelism(),
                        phase="train", context=1, moe_capacity_factor=1.0 if token_dropping else None)
    return tuple(dict.fromkeys(kept_name(op) for op in graph.ops if op.kind == "matmul" and op.name.startswith("layers.")))


def check(architecture: Architecture, setup: TrainingSetup, layout: Layout, chips: int | None = None) -> None:
    """Raise one clear error naming every constraint the layout breaks."""
    problems = []
    a = architecture
    if setup.global_batch < 1 or setup.seq_len < 1:
        problems.append("global batch and sequence length must each be at least 1")
    if setup.seq_len > a.max_positions:
        problems.append(f"sequence length {setup.seq_len} exceeds {a.name}'s {a.max_positions} positions "
                        "(max_position_embeddings)")
    for role in ("compute_dtype", "master_dtype"):
        if getattr(setup, role) not in DTYPES:
            problems.append(f"{role} {getattr(setup, role)!r} is unknown; allowed: {', '.join(DTYPES)}")
    if setup.recompute not in RECOMPUTE_POLICIES:
        problems.append(f"recompute {setup.recompute!r} is unknown; allowed: {', '.join(RECOMPUTE_POLICIES)}")
    if setup.optimizer != "adamw":
        problems.append(f"optimizer {setup.optimizer!r} is not modeled; allowed: adamw")
    if setup.kept is not None:
        names = layer_matmul_names(a, setup.moe_capacity_factor is not None and a.experts > 1)
        unknown = [name for name in setup.kept if name not in names]
        if setup.recompute != "selective":
            problems.append(f"kept matmuls narrow selective recomputation; recompute is {setup.recompute!r}")
        elif unknown:
            problems.append(f"kept {', '.join(map(repr, unknown))}: not a matmul of a {a.name} layer; "
                            f"choose from {', '.join(names)}")
    if setup.attention_block is not None and setup.attention_block < 1:
        problems.append(f"attention block {setup.attention_block} must be at least 1 key")
    if setup.attention_kernel is not None and setup.attention_kernel not in ATTENTION_KERNELS:
        problems.append(f"attention kernel {setup.attention_kernel!r} is unknown; allowed: {', '.join(ATTENTION_KERNELS)}")
    if setup.attention_block is None and ATTENTION_KERNELS.get(setup.attention_kernel or "", {}).get(
            "backward_dq_partials"):
        problems.append(f"attention kernel {setup.attention_kernel!r} writes one partial dQ per key block: give its "
                        "block (attention block, MaxText's sa_block_kv_dkv)")
    if setup.mtp and a.mtp_modules < 1:
        problems.append(f"multi-token prediction needs a model with MTP modules (num_nextn_predict_layers); "
                        f"{a.name} has none")
    if setup.mtp and layout.cp > 1:
        problems.append(f"multi-token prediction is not modelled with context parallelism (cp {layout.cp}); use cp 1")
    if setup.mtp and setup.moe_capacity_factor is not None:
        problems.append("multi-token prediction is not modelled with a token-dropping MoE (a capacity factor); "
                        "drop the capacity factor")
    factor = setup.moe_capacity_factor
    if factor is not None:
        if a.experts <= 1:
            problems.append(f"a MoE capacity factor needs a MoE model; {a.name} has no experts")
        elif not (isinstance(factor, (int, float)) and math.isfinite(factor) and 0 < factor <= a.experts):
            problems.append(f"MoE capacity factor {factor!r} must be a number more than 0 and at most the "
                            f"{a.experts} experts")
        elif layout.ep > 1:
            problems.append("a token-dropping MoE (capacity factor) with expert parallelism (ep > 1) is not modeled; "
                            "use ep 1 or the dropless MoE")
    degrees = {axis: getattr(layout, axis) for axis in (*AXES, "ep", "micro_batch", "virtual_stages")}
    small = [f"{axis}={value}" for axis, value in degrees.items() if value < 1]
    if small:
        problems.append(f"{', '.join(small)}: every degree must be at least 1")
        raise PerfmodelError("; ".join(problems))
    if chips is not None and layout.chips != chips:
        problems.append(f"dp x fsdp x tp x pp x cp = {layout.dp} x {layout.fsdp} x {layout.tp} x {layout.pp} x "
                        f"{layout.cp} = {layout.chips}, not the {chips} chips asked for")
    if a.heads % layout.tp:
        problems.append(f"tp={layout.tp} does not divide {a.name}'s {a.heads} attention heads")
    elif a.kv_heads % layout.tp and layout.tp % a.kv_heads:
        problems.append(f"tp={layout.tp} neither divides nor is a multiple of {a.kv_heads} KV heads")
    if a.intermediate % layout.tp:
        problems.append(f"tp={layout.tp} does not divide the MLP width {a.intermediate}")
    stages = layout.pp * layout.virtual_stages
    if a.layers % stages:
        problems.append(f"pp x virtual stages = {stages} does not divide {a.name}'s {a.layers} layers")
    if layout.virtual_stages > 1 and layout.pp == 1:
        problems.append("virtual stages (interleaved 1F1B) need pp > 1")
    if setup.seq_len % layout.cp:
        problems.append(f"cp={layout.cp} does not divide the sequence length {setup.seq_len}")
    if layout.ep > 1 and (a.experts % layout.ep or layout.ep > layout.tp):
        problems.append(f"ep={layout.ep} must divide the {a.experts} experts and be at most tp={layout.tp}")
    if layout.zero not in (0, 1, 2):
        problems.append(f"zero={layout.zero}: use 0, 1 or 2 (ZeRO-3 is the fsdp axis)")
    per_step = layout.data_shards * layout.micro_batch
    if setup.global_batch % per_step:
        problems.append(f"global batch {setup.global_batch} is not a multiple of dp x fsdp x micro-batch = "
                        f"{layout.dp} x {layout.fsdp} x {layout.micro_batch} = {per_step}")
    elif layout.pp > 1 and setup.global_batch // per_step < layout.pp:
        problems.append(f"{setup.global_batch // per_step} micro-batches per step cannot fill {layout.pp} pipeline "
                        "stages (1F1B needs at least one per stage)")
    if problems:
        raise PerfmodelError("; ".join(problems))
