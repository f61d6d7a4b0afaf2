"""Prefill and decode graphs of one pipeline stage on one chip (pure core).

Tensor parallelism (``tp``) splits heads and the MLP's intermediate dimension (Megatron style: two
all-reduces of the activations per layer); pipeline parallelism (``pp``) gives each chip
``ceil(layers / pp)`` layers; expert parallelism (``ep``) gives each chip ``experts / ep`` whole
experts and adds two all-to-alls per MoE layer. KV heads are split by ``tp`` while ``tp`` <= kv
heads and replicated beyond (as vLLM does). The same engine prices these graphs as any other: there
is no second set of formulas for LLMs.

Dimensions may be numpy arrays (batch sweeps for sizing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.llm.architecture import MAX_CONFIG_SIZE, Architecture
from perfmodel.tracing import maximum, minimum, whole
from perfmodel.workload.ir import Graph, Op, TensorSpec
from perfmodel.workload.op_kinds import activation_flops_per_element

#: Weight formats whose GEMMs quantize their bf16 input activations to the same format in a kernel before the
#: GEMM (per-tensor fp8, W8A8): the engines' fp8 linear methods do, and the serving engines' GEMM tables time
#: that kernel with the GEMM (``calibration.aiconfigurator.gemm_ops``). Block-scaled fp8 (``fp8_block``) is not
#: here: its per-token-group quantization is priced inside its own kernel class (``costs.rules.BLOCK_FP8_MATMUL``).
QUANTIZED_ACTIVATION_GEMMS = ("fp8",)
#: The 16-bit dtype a quantized GEMM's input is read in and its output written in (the engines' fp8 GEMMs
#: write bf16, as the tables' GEMM rows do).
QUANTIZED_INPUT_CARRIER = "bf16"


def quantize_activations_op(m, k, dtype: str, *, name: str = "quantize_activations", count: int = 1) -> Op:
    """The quantization of a GEMM's ``m x k`` bf16 input to ``dtype`` (a format of
    ``QUANTIZED_ACTIVATION_GEMMS``): one element-wise op reading bf16 and writing ``dtype``. The one
    definition of this op: the GEMM rows of the engines' tables hold it (``calibration.aiconfigurator``) and
    the LLM graphs emit it before each such GEMM (``stage_graph``). Where a fusing mode (``graph``) runs it
    right after a norm or as a GEMM's epilogue (after the gated activation), ``costs.fusion`` folds it into that
    kernel, as the engines do: TensorRT-LLM's residual + RMSNorm + fp8 quantization in one kernel
    (``AllReduceFusionOp.RESIDUAL_RMS_NORM_QUANT_FP8``, tensorrt_llm/functional.py; TensorRT fuses the
    QuantizeLayer of its older engines into the producer), vLLM's compiled RMSNorm/SiLU-and-mul + quant fusion
    (vllm/compilation/fusion.py, activation_quant_fusion.py). Eager (``dynamic``) runs it as its own kernel."""
    return Op(name=name, kind="elementwise", count=count,
              inputs=(TensorSpec(shape=(m, k), dtype=QUANTIZED_INPUT_CARRIER),),
              outputs=(TensorSpec(shape=(m, k), dtype=dtype),), attrs={"dtype": QUANTIZED_INPUT_CARRIER})


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One inference request shape: ``batch`` sequences of ``prompt_tokens`` generating ``generated_tokens``."""

    # Ints, or arrays broadcast together that evaluate many scenarios at once (llm_predict, sizing);
    # typed Any for the prompt and generated tokens because their readers do integer arithmetic.
    batch: int | np.ndarray
    prompt_tokens: Any
    generated_tokens: Any
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    activation_dtype: str = "bf16"
    # The routed experts' weights when stored apart (gpt-oss: MXFP4 experts, bf16 elsewhere); None: weight_dtype.
    expert_weight_dtype: str | None = None
    # The dtype the attention kernels compute in and write; None: the activation dtype. An fp8 model whose engine
    # has no fp8 attention kernel (TensorRT-LLM before --use_fp8_context_fmha) computes it in 16 bits, reading
    # an fp8 KV cache, and its output projection then quantizes its input (``with_quantized_inputs``).
    attention_dtype: str | None = None
    # Whether the LM head and the MoE routers are quantized with the other linear layers. False: they keep 16-bit
    # weights, as the serving engines' quantizers leave them (NVIDIA ModelOpt's ``_default_disabled_quantizer_cfg``
    # disables ``*lm_head*`` and the routers in every format it exports to TensorRT-LLM, vLLM and SGLang; vLLM's
    # fp8 method quantizes ``LinearBase`` layers only, not its ``ParallelLMHead``). True: gpt-fast's quantize.py,
    # which replaces every ``nn.Linear``, the output layer and the MoE gate included. The token embedding is a
    # 16-bit table either way (a lookup, never a quantized GEMM).
    quantized_head: bool = False

    @property
    def embedding_weight_dtype(self) -> str:
        """The token embedding table's dtype: the weight dtype where it is 16 bits or wider, else the 16-bit float
        the activations are carried in (``float_carrier``): no quantizer touches the lookup table."""
        return self.weight_dtype if DTYPES[self.weight_dtype].bits >= 16 else self.float_carrier

    @property
    def head_weight_dtype(self) -> str:
        """The weight dtype of the LM head and the routers: the weight dtype where they are quantized with the rest
        (``quantized_head``), else the embedding's (16 bits)."""
        return self.weight_dtype if self.quantized_head else self.embedding_weight_dtype

    @property
    def float_carrier(self) -> str:
        """The 16-bit (or wider) float dtype between the layers: ``carried_dtype``, or bf16 where that is narrower
        (the checkpoint dtype of the models perfmodel ships)."""
        carried = DTYPES[self.carried_dtype]
        return self.carried_dtype if carried.kind == "float" and carried.bits >= 16 else QUANTIZED_INPUT_CARRIER

    @property
    def head_scenario(self) -> Scenario:
        """This scenario as the LM head and the routers see it: their weight dtype (``head_weight_dtype``) and,
        where that is not quantized, 16-bit activations (no quantize kernel before them)."""
        weights = self.head_weight_dtype
        if weights == self.weight_dtype:
            return self
        return replace(self, weight_dtype=weights, activation_dtype=self.float_carrier, expert_weight_dtype=None)

    @property
    def quantizes_gemm_inputs(self) -> bool:
        """Whether each GEMM quantizes its input in a kernel of its own (``quantize_activations_op``): weights
        of a format in ``QUANTIZED_ACTIVATION_GEMMS`` with activations of that format (W8A8 fp8)."""
        return self.weight_dtype in QUANTIZED_ACTIVATION_GEMMS and self.activation_dtype == self.weight_dtype

    @property
    def carried_dtype(self) -> str:
        """The dtype activations travel in between the GEMMs: the activation dtype, but 16 bits where the GEMMs
        quantize their inputs (``quantizes_gemm_inputs``). The engines' fp8 linear layers take bf16 in and write
        bf16 out (TensorRT-LLM's ``FP8QDQLinear`` / ``Linear`` with ``QuantAlgo.FP8``, vLLM's ``Fp8LinearMethod``,
        SGLang's ``Fp8LinearMethod``), so the residual stream, the norms, the activation function and the
        all-reduces stay in bf16; only a GEMM's input is fp8."""
        return QUANTIZED_INPUT_CARRIER if self.quantizes_gemm_inputs else self.activation_dtype

    @property
    def experts_scenario(self) -> Scenario:
        """This scenario with the routed experts' weight dtype as its weight dtype."""
        return self if self.expert_weight_dtype is None else replace(self, weight_dtype=self.expert_weight_dtype,
                                                                     expert_weight_dtype=None)


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    """``tp`` x ``pp`` chips run a copy of the model; ``dp`` > 1 (attention data parallelism, with wide
    expert parallelism: DeepSeek-V3's decode, SGLang's ``--enable-dp-attention``) runs ``dp`` such
    groups side by side, each on its own sequences (the scenario's batch is one group's), whose MoE
    layers spread the experts over ``ep`` <= ``tp x dp`` chips of all groups."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1

    @property
    def chips(self) -> int:
        return self.tp * self.pp * self.dp


# The most sequences a scenario may batch: orders of magnitude beyond any deployment, and the size
# of a config field (``MAX_CONFIG_SIZE``), so that tensor sizes built from it stay in range.
MAX_SEQUENCES = MAX_CONFIG_SIZE


def check(architecture: Architecture, scenario: Scenario, parallelism: Parallelism) -> None:
    """Raise a clear error for a scenario or a parallelism the model cannot run."""
    problems = []
    counts = (scenario.batch, scenario.prompt_tokens, scenario.generated_tokens)
    if all(type(value) is int for value in counts):  # one scenario: Python's comparisons, not numpy's per-call cost
        batch, prompt, gen = counts
        total = prompt + gen
        low, high = min(counts) < 1, batch > MAX_SEQUENCES
    else:
        batch, prompt, gen = (np.asarray(value) for value in counts)
        total = int(np.max(prompt + gen))
        low, high = bool(np.any(batch < 1) or np.any(prompt < 1) or np.any(gen < 1)), bool(np.any(batch > MAX_SEQUENCES))
    if low:
        problems.append("batch, prompt and generated tokens must each be at least 1")
    elif high:
        problems.append(f"batch {np.max(batch)} is more than {MAX_SEQUENCES:,} sequences: a typo, not a deployment")
    if total > architecture.max_positions:
        problems.append(f"prompt + generated = {total} tokens exceeds {architecture.name}'s "
                        f"{architecture.max_positions} positions (max_position_embeddings)")
    roles = ("weight_dtype", "kv_dtype", "activation_dtype") + (("attention_dtype",) if scenario.attention_dtype else ())
    for role in roles:
        if getattr(scenario, role) not in DTYPES:
            problems.append(f"{role} {getattr(scenario, role)!r} is unknown; allowed: {', '.join(DTYPES)}")
        elif role != "weight_dtype" and DTYPES[getattr(scenario, role)].block_scaled:
            problems.append(f"{role} {getattr(scenario, role)!r} is a block-scaled weight format; give it as the "
                            f"weights' dtype (--weights) and {DTYPES[getattr(scenario, role)].element} here")
    if scenario.expert_weight_dtype is not None:
        if scenario.expert_weight_dtype not in DTYPES:
            problems.append(f"expert_weight_dtype {scenario.expert_weight_dtype!r} is unknown; allowed: "
                            f"{', '.join(DTYPES)}")
        if architecture.experts <= 1:
            problems.append(f"an expert weight dtype is for models with routed experts; {architecture.name} has none")
    tp, pp, ep, dp = parallelism.tp, parallelism.pp, parallelism.ep, parallelism.dp
    if min(tp, pp, ep, dp) < 1:
        problems.append("tp, pp, ep and dp must be at least 1")
    elif architecture.heads % tp:
        problems.append(f"tp={tp} does not divide {architecture.heads} attention heads")
    elif architecture.kv_heads % tp and tp % architecture.kv_heads:
        problems.append(f"tp={tp} neither divides nor is a multiple of {architecture.kv_heads} KV heads")
    mixer = architecture.mixer
    if mixer is not None and min(tp, pp, ep, dp) >= 1 and (mixer.heads % tp or (mixer.key_heads % tp
                                                                              and tp % mixer.key_heads)):
        problems.append(f"tp={tp} must divide the {mixer.kind} layers' {mixer.heads} heads, and divide or be a "
                        f"multiple of their {mixer.key_heads} key heads (groups)")
    if pp > architecture.layers:
        problems.append(f"pp={pp} is more than the {architecture.layers} layers")
    if min(tp, pp, ep, dp) >= 1:  # every shard must keep some of the MLP and of the vocabulary
        split = max(tp * dp // ep, 1) if architecture.experts > 1 else tp
        if architecture.intermediate // split < 1:
            problems.append(f"tp={tp} leaves no MLP width on a chip: {architecture.name}'s intermediate size is "
                            f"{architecture.intermediate}")
        if architecture.vocab // tp < 1:
            problems.append(f"tp={tp} leaves no vocabulary on a chip: {architecture.name} has {architecture.vocab} tokens")
    if ep > 1 and (architecture.experts % ep or ep > tp * dp):
        problems.append(f"ep={ep} must divide the {architecture.experts} experts and be at most tp={tp}"
                        + (f" x dp={dp}" if dp > 1 else ""))
    if dp > 1 and architecture.experts <= 1:
        problems.append(f"dp={dp} (attention data parallelism) is for MoE models with wide expert parallelism; "
                        f"{architecture.name} has no experts: run dp replicas instead")
    elif min(tp, ep, dp) >= 1 and dp > 1 and (tp * dp) % ep:
        problems.append(f"ep={ep} must divide tp x dp = {tp * dp} chips")
    if problems:
        raise PerfmodelError("; ".join(problems))


def _t(shape, dtype, role="activation") -> TensorSpec:
    return TensorSpec(shape=tuple(shape), dtype=dtype, role=role)


def _linear(name, tokens, k, n, scenario: Scenario, count, batch=1) -> Op:
    act, weight = scenario.activation_dtype, scenario.weight_dtype
    return Op(name=name, kind="matmul", count=count, provenance="aten.mm",
              inputs=(_t((tokens, k), act), _t((batch, k, n) if np.ndim(batch) or batch != 1 else (k, n), weight, "weight")),
              outputs=(_t((tokens, n), scenario.carried_dtype),),
              attrs={"m": tokens, "n": n, "k": k, "batch": batch, "dtype": act})


def _elementwise(name, tokens, width, dtype, count, inputs=1, flops_per_element=1, kind="elementwise", **attrs) -> Op:
    tensor = _t((tokens, width), dtype)
    return Op(name=name, kind=kind, count=count, inputs=(tensor,) * inputs, outputs=(tensor,),
              attrs={"flops_per_element": flops_per_element, **attrs})


def _collective(name, collective, payload_bytes, group, dtype, count, **extra) -> Op:
    return Op(name=name, kind="collective", count=count, provenance=f"c10d.{collective}",
              attrs={"collective": collective, "bytes": payload_bytes, "group_size": group, "dtype": dtype, **extra})


def expert_capacity(architecture: Architecture, seq, capacity_factor: float):
    """Tokens each expert takes from one sequence in a token-dropping MoE: MaxText's
    ``generate_masks``, ``int(max(ceil(seq * top_k / experts) * capacity_factor, capacity_factor))``."""
    routed = np.ceil(np.asarray(seq) * architecture.experts_per_token / architecture.experts)
    return whole(maximum(routed * capacity_factor, capacity_factor))


def _dropping_moe(a: Architecture, s: Scenario, batch, seq, width: int, layers: int,
                  capacity_factor: float) -> list[Op]:
    """A token-dropping MoE as MaxText's ``dense_matmul`` runs it (``capacity_factor`` > 0, no sparse
    kernels; GShard's formulation): one-hot einsums route each sequence's tokens into per-expert
    buffers of ``expert_capacity`` slots and back, and every expert computes its whole buffer, empty
    slots included. Dispatch ``BSM,BSEC -> EBCM`` (the mask, boolean, takes no gradient), the expert
    matmuls over ``(E, B*C)`` rows, combine ``EBCM,BSEC -> BSM`` (its weights come from the router,
    so both operands take gradients)."""
    act, hidden = s.activation_dtype, a.hidden
    capacity = expert_capacity(a, seq, capacity_factor)
    slots = a.experts * capacity  # one sequence's buffer rows, over all experts
    dispatch = Op(name="layers.moe.dispatch_einsum", kind="matmul", count=layers, provenance="jnp.einsum",
                  inputs=(_t((batch, slots, seq), act), _t((batch, seq, hidden), act)),
                  outputs=(_t((batch, slots, hidden), act),),
                  attrs={"m": slots, "n": hidden, "k": seq, "batch": batch, "dtype": act, "first_operand_is_mask": True})
    combine = Op(name="layers.moe.combine_einsum", kind="matmul", count=layers, provenance="jnp.einsum",
                 inputs=(_t((batch, seq, slots), act), _t((batch, slots, hidden), act)),
                 outputs=(_t((batch, seq, hidden), act),),
                 attrs={"m": seq, "n": hidden, "k": slots, "batch": batch, "dtype": act})
    rows = batch * capacity  # each expert's buffer rows over the micro-batch
    return [dispatch,
            _linear("layers.moe.experts.gate_up", rows, hidden, 2 * width, s, layers, batch=a.experts),
            _elementwise("layers.moe.experts.act", rows * a.experts, width, act, layers, inputs=2,
                         flops_per_element=activation_flops_per_element(a.activation, gated=True)),
            _linear("layers.moe.experts.down", rows, width, hidden, s, layers, batch=a.experts),
            combine]


def routed_expert_ops(routed, local_experts: int, hidden: int, width: int, scenario: Scenario, count, *,
                      activation: str, activation_rows) -> list[Op]:
    """A dropless MoE layer's expert work on one chip: ``routed`` token-expert pairs spread evenly over
    ``local_experts`` experts of ``width`` intermediate columns, so at most ``min(local_experts, routed)``
    experts are touched, each with ``ceil(routed / touched)`` rows; their batched gated-up GEMM, the gated
    activation over ``activation_rows`` rows, their batched down GEMM (the grouped GEMMs of vLLM's,
    SGLang's and TensorRT-LLM's fused MoE kernels)."""
    touched = minimum(local_experts, maximum(routed, 1))
    per_expert = whole(maximum(np.ceil(routed / touched), 1))
    touched = whole(touched)
    return [_linear("layers.moe.experts.gate_up", per_expert, hidden, 2 * width, scenario, count, batch=touched),
            _elementwise("layers.moe.experts.act", activation_rows, width, scenario.carried_dtype, count, inputs=2,
                         flops_per_element=activation_flops_per_element(activation, gated=True)),
            _linear("layers.moe.experts.down", per_expert, width, hidden, scenario, count, batch=touched)]


@dataclass(frozen=True, kw_only=True)
class LayerGroups:
    """How many of one pipeline stage's layers are of each kind: ``layers`` in all, ``windows`` (keys
    seen, None: the whole context) -> layers, and MoE / dense MLP layers."""

    layers: int
    windows: dict[int | None, int]  # the attention layers only
    moe: int
    dense: int
    linear: int = 0  # layers whose token mixer is a recurrent one (a hybrid's linear-attention / SSM layers)
    mixerless: int = 0  # Nemotron-H's MLP/MoE blocks: no token mixer (nor its norm and residual)
    mlpless: int = 0  # Nemotron-H's attention/Mamba-2 blocks: no MLP (nor its norm and residual)

    @property
    def attention(self) -> int:
        return self.layers - self.linear - self.mixerless

    @property
    def mixing(self) -> int:
        """Layers with a token mixer (attention or recurrent): each has its pre-norm, residual and all-reduce."""
        return self.layers - self.mixerless

    @property
    def mlps(self) -> int:
        return self.layers - self.mlpless


def layer_groups(architecture: Architecture, pp: int) -> LayerGroups:
    """The layer kinds of the heaviest pipeline stage (``Architecture.stage_layers``). A uniform model
    counts ``ceil(layers / pp)`` layers of its one kind (the fullest stage)."""
    a = architecture
    if a.moe_layers is None and a.uniform_window and a.linear_layers is None and a.mixerless_layers is None \
            and a.mlpless_layers is None:
        count = math.ceil(a.layers / pp)
        window = a.window(0)
        moe = count if a.experts > 1 else 0
        return LayerGroups(layers=count, windows={window: count}, moe=moe, dense=count - moe)
    stage = a.stage_layers(pp)
    windows: dict[int | None, int] = {}
    for layer in stage:
        if not a.is_linear_layer(layer) and a.has_mixer(layer):
            windows[a.window(layer)] = windows.get(a.window(layer), 0) + 1
    moe = sum(a.is_moe_layer(layer) for layer in stage)
    mixerless = sum(not a.has_mixer(layer) for layer in stage)
    mlpless = sum(not a.has_mlp(layer) for layer in stage)
    return LayerGroups(layers=len(stage), windows=windows, moe=moe, dense=len(stage) - moe - mlpless,
                       linear=a.linear_layers_in(stage), mixerless=mixerless, mlpless=mlpless)


@dataclass(frozen=True, kw_only=True)
class _Shape:
    batch: Any
    seq: Any
    tokens: Any
    layers: int
    training: bool
    phase: str
    context: Any
    context_shards: int


def _dense_mlp(a: Architecture, s: Scenario, prefix: str, tokens, width: int, count: int) -> list[Op]:
    act = s.carried_dtype
    if a.gated_mlp:
        ops = [_linear(f"{prefix}.gate_up_proj", tokens, a.hidden, 2 * width, s, count),
               _elementwise(f"{prefix}.act", tokens, width, act, count, inputs=2,
                            flops_per_element=activation_flops_per_element(a.activation, gated=True))]
    else:
        ops = [_linear(f"{prefix}.fc_in", tokens, a.hidden, width, s, count),
               _elementwise(f"{prefix}.act", tokens, width, act, count,
                            flops_per_element=activation_flops_per_element(a.activation, gated=False))]
    return [*ops, _linear(f"{prefix}.down_proj", tokens, width, a.hidden, s, count)]


def _sdpa(name: str, a: Architecture, s: Scenario, shape: _Shape, *, heads: int, kv_heads: int, head_dim: int,
          window: int | None, count: int, v_head_dim: int | None = None, kv_shared: bool = False) -> Op:
    """One flash attention kernel over ``count`` layers that see ``window`` keys (None: all). ``v_head_dim``
    and ``kv_shared`` (the values are the first ``v_head_dim`` elements of the cached keys: MLA's
    latent) default to per-head K and V of ``head_dim``."""
    act, kv_role = s.attention_dtype or s.activation_dtype, "activation" if shape.training else "kv_cache"
    if shape.training and shape.context_shards > 1:  # each query sees half the sequence on average (causal, balanced)
        kv_tokens, causal = math.ceil(s.prompt_tokens / 2), False
    else:
        kv_tokens = shape.context if window is None else np.minimum(shape.context, window)
        causal = shape.phase != "decode"
    value_dim = head_dim if v_head_dim is None else v_head_dim
    keys = _t((shape.batch, kv_heads, kv_tokens, head_dim), s.kv_dtype, kv_role)
    inputs = (_t((shape.batch, heads, shape.seq, head_dim), act), keys) if kv_shared else \
        (_t((shape.batch, heads, shape.seq, head_dim), act), keys,
         _t((shape.batch, kv_heads, kv_tokens, value_dim), s.kv_dtype, kv_role))
    extra: dict[str, Any] = {"window": window} if window else {}
    if window and a.chunked_attention:
        extra["chunked"] = True
    if v_head_dim is not None:
        extra["v_head_dim"] = v_head_dim
    if kv_shared:
        extra["kv_shared"] = True
    return Op(name=name, kind="attention", count=count, provenance="aten._scaled_dot_product_flash_attention",
              inputs=inputs, outputs=(_t((shape.batch, heads, shape.seq, value_dim), act),),
              attrs={"batch": shape.batch, "heads": heads, "kv_heads": kv_heads, "seq_q": shape.seq,
                     "seq_kv": kv_tokens if shape.training else shape.context, "head_dim": head_dim, "causal": causal,
                     "implementation": "flash", "dtype": act, **extra})


def _sdpa_ops(a: Architecture, s: Scenario, shape: _Shape, groups: LayerGroups, **kernel: Any) -> list[Op]:
    """One attention op per window the stage's layers use (``layers.attn.sdpa`` for the first kind,
    ``layers.attn.sdpa_window<W>`` / ``sdpa_full`` for the others)."""
    ops = []
    for index, (window, count) in enumerate(groups.windows.items()):
        name = "layers.attn.sdpa" if index == 0 else f"layers.attn.sdpa_{f'window{window}' if window else 'full'}"
        ops.append(_sdpa(name, a, s, shape, window=window, count=count, **kernel))
    return ops


def _attention(a: Architecture, s: Scenario, p: Parallelism, shape: _Shape, groups: LayerGroups) -> list[Op]:
    """Per-head attention (MHA, GQA, MQA): q, k, v projections, the kernels, the output projection (a
    gated attention's q_proj also makes the output gate, applied to the kernel's output)."""
    heads, kv_heads, layers, tokens = a.heads // p.tp, max(a.kv_heads // p.tp, 1), groups.attention, shape.tokens
    gate = 2 if a.attention_gate else 1
    ops = [_linear("layers.attn.q_proj", tokens, a.hidden, gate * heads * a.head_dim, s, layers),
           _linear("layers.attn.k_proj", tokens, a.hidden, kv_heads * a.head_dim, s, layers),
           _linear("layers.attn.v_proj", tokens, a.hidden, kv_heads * a.head_dim, s, layers)]
    if a.qk_norm:  # RMSNorm over each query and key head (Qwen3, Gemma 3)
        ops.append(_elementwise("layers.attn.qk_norm", tokens, (heads + kv_heads) * a.head_dim, s.carried_dtype,
                                layers, kind="norm", norm="rms"))
    if shape.training and shape.context_shards > 1:  # K and V blocks travel the ring before the kernel uses them
        kv_bytes = 2 * shape.batch * kv_heads * s.prompt_tokens * a.head_dim * DTYPES[s.kv_dtype].bytes_per_element
        ops.append(_collective("layers.attn.context_ring", "all_gather", kv_bytes, shape.context_shards,
                               s.activation_dtype, layers))
    ops += _sdpa_ops(a, s, shape, groups, heads=heads, kv_heads=kv_heads, head_dim=a.head_dim)
    if a.attention_gate:  # output x sigmoid(gate), element by element
        ops.append(_elementwise("layers.attn.output_gate", tokens, heads * a.head_dim, s.carried_dtype, layers,
                                inputs=2, flops_per_element=activation_flops_per_element("sigmoid", gated=True)))
    ops.append(_linear("layers.attn.o_proj", tokens, heads * a.head_dim, a.hidden, s, layers))
    return ops


# FLOPs per state element of one recurrent step (decode), from the update rules:
# gated delta net (arXiv 2412.06464 eq. 10: S_t = S_{t-1} a_t (I - b_t k_t k_t^T) + b_t v_t k_t^T, o_t = S_t q_t):
# the decay (1), the retrieval k^T S (2), the rank-1 correction b k (v - k^T S)^T (2) and the read-out S q (2);
# Mamba-2 (arXiv 2405.21060 eq. 1 with scalar A: h_t = exp(dt A) h_{t-1} + dt B_t x_t^T, y_t = C_t^T h_t):
# the decay (1), the rank-1 input (2) and the read-out (2).
RECURRENT_STEP_FLOPS = {"gated_delta_net": 7, "mamba2": 5}
# The chunk length of the chunked (parallel) scans prefill runs: flash-linear-attention's chunk_gated_delta_rule
# (fla/ops/gated_delta_rule/chunk.py, BT = 64) and Mamba-2's SSD kernels (mamba_ssm ssd_combined.py,
# chunk_size 256 in the Mamba-2, Bamba and Granite-4.0-H configs; 64 in transformers' torch fallback).
SCAN_CHUNK = {"gated_delta_net": 64, "mamba2": 256}


def _bmm(name: str, batch, m, n, k, dtype: str, count: int, *, state_out: bool = False) -> Op:
    """A batched product of two activations (a scan's chunk matrices): ``batch`` products of (m x k)(k x n)."""
    out_role = "kv_cache" if state_out else "activation"
    return Op(name=name, kind="matmul", count=count, provenance="triton.chunk_scan",
              inputs=(_t((batch, m, k), dtype), _t((batch, k, n), dtype)), outputs=(_t((batch, m, n), dtype, out_role),),
              attrs={"m": m, "n": n, "k": k, "batch": batch, "dtype": dtype})


def _recurrent_mixer(a: Architecture, s: Scenario, p: Parallelism, shape: _Shape, groups: LayerGroups) -> list[Op]:
    """A hybrid's linear layers (``RecurrentMixer``), heads split by tp (vLLM shards them as attention heads;
    key heads / groups fewer than tp are replicated, ``RecurrentMixer.local_key_heads``).

    The input projection (q, k, v, the output gate z and the per-head b, a of a gated delta net; z, x, B,
    C, dt of Mamba-2), the depthwise causal conv over the q/k/v (x/B/C) channels, the token mixing, the
    gated RMSNorm (norm(o) x silu(z)) and the output projection. Decode is one recurrent step: each
    sequence's state (``heads x key_dim x value_dim``) and conv state are read and written once
    (``RECURRENT_STEP_FLOPS``). Prefill runs the chunked scan: within a chunk of ``SCAN_CHUNK`` tokens the
    products of its queries/keys (C B^T), across chunks the state passed chunk to chunk and written per
    chunk (FLA's ``chunk_h``, SSD's chunk states):

    * gated delta net (arXiv 2406.06484 section 3.3, the WY/UT form FLA runs): K K^T and Q K^T (C x C x dk),
      the triangular solve (I + tril(b K K^T))^-1 (C^3/3 multiply-adds, priced as a C x C x C/3 product),
      W = T bK and U = T bV (C x (dk + dv) x C), W S and Q S (C x dv x dk), the state update K^T (U - W S)
      (dk x dv x C) and the intra-chunk output (C x dv x C);
    * Mamba-2's SSD (arXiv 2405.21060 section 6, ``ssd_minimal_discrete``): C B^T per group (C x C x N), the
      masked product with X per head (C x P x C), the chunk states B^T X (N x P x C), the output from the
      states C h (C x P x N)."""
    m, act = a.mixer, s.activation_dtype
    assert m is not None
    heads, key_heads, layers, tokens = m.heads // p.tp, m.local_key_heads(p.tp), groups.linear, shape.tokens
    key_width, value_width, channels = key_heads * m.key_dim, heads * m.value_dim, m.local_conv_channels(p.tp)
    gdn = m.kind == "gated_delta_net"
    projected = 2 * key_width + 2 * value_width + (2 * heads if gdn else heads)
    conv_state = _t((shape.batch, channels, m.conv_kernel), s.kv_dtype, "kv_cache")
    mixed = _t((tokens, channels), s.carried_dtype)
    decode = shape.phase == "decode"
    conv = Op(name="layers.linear_attn.conv1d", kind="elementwise", count=layers, provenance="causal_conv1d",
              inputs=(mixed, conv_state) if decode else (mixed,), outputs=(mixed, conv_state),
              attrs={"flops_per_element": 2 * m.conv_kernel + activation_flops_per_element("silu", gated=False),
                     "elements": tokens * channels})
    ops = [_linear("layers.linear_attn.in_proj", tokens, a.hidden, projected, s, layers), conv]
    if decode:
        state = _t((shape.batch, heads, m.key_dim, m.value_dim), a.state_dtype or s.kv_dtype, "kv_cache")
        ops.append(Op(name="layers.linear_attn.recurrent_step", kind="elementwise", count=layers,
                      provenance="fused_recurrent", inputs=(state, mixed), outputs=(state, _t((tokens, value_width), act)),
                      attrs={"flops_per_element": RECURRENT_STEP_FLOPS[m.kind], "dtype": act,
                             "elements": shape.batch * heads * m.key_dim * m.value_dim}))
    else:
        chunk = SCAN_CHUNK[m.kind]
        chunks = whole(np.ceil(np.asarray(shape.seq) / chunk))
        per_head = shape.batch * heads * chunks
        kd, vd = m.key_dim, m.value_dim
        if gdn:
            ops += [_bmm("layers.linear_attn.chunk_scores", 2 * per_head, chunk, chunk, kd, act, layers),
                    _bmm("layers.linear_attn.chunk_solve", per_head, chunk, chunk, math.ceil(chunk / 3), act, layers),
                    _bmm("layers.linear_attn.chunk_wy", per_head, chunk, kd + vd, chunk, act, layers),
                    _bmm("layers.linear_attn.chunk_state_read", 2 * per_head, chunk, vd, kd, act, layers),
                    _bmm("layers.linear_attn.chunk_states", per_head, kd, vd, chunk, act, layers, state_out=True),
                    _bmm("layers.linear_attn.chunk_output", per_head, chunk, vd, chunk, act, layers)]
        else:
            per_group = shape.batch * key_heads * chunks
            ops += [_bmm("layers.linear_attn.chunk_scores", per_group, chunk, chunk, kd, act, layers),
                    _bmm("layers.linear_attn.chunk_output", per_head, chunk, vd, chunk, act, layers),
                    _bmm("layers.linear_attn.chunk_states", per_head, kd, vd, chunk, act, layers, state_out=True),
                    _bmm("layers.linear_attn.chunk_state_read", per_head, chunk, vd, kd, act, layers)]
    ops += [_elementwise("layers.linear_attn.gated_norm", tokens, value_width, s.carried_dtype, layers, kind="norm",
                         norm="rms"),
            _linear("layers.linear_attn.out_proj", tokens, value_width, a.hidden, s, layers)]
    return ops


def _latent_attention(a: Architecture, s: Scenario, p: Parallelism, shape: _Shape, groups: LayerGroups) -> list[Op]:
    """Multi-head latent attention (DeepSeek-V2/V3). Heads are split by tp; the down-projections and
    the latent cache are replicated on every chip (vLLM and SGLang's MLA under tensor parallelism).

    Prefill and training *materialize* keys and values: ``kv_b_proj`` up-projects every token's
    latent, then a per-head kernel of head dim nope + rope for q.k and ``v_head_dim`` for values.
    Decode *absorbs* the up-projections into the query and the output (FlashMLA; arXiv 2405.04434,
    appendix C): queries become ``kv_lora_rank``-wide, the kernel is multi-query over the cached
    latent + rotary key (keys 576 wide for DeepSeek-V3, values its first 512: one read of the cache),
    and the output is projected back per head before ``o_proj``."""
    m, tokens, layers = a.latent, shape.tokens, groups.attention
    assert m is not None
    heads = a.heads // p.tp
    ops = []
    if m.q_lora_rank is None:
        ops.append(_linear("layers.attn.q_proj", tokens, a.hidden, heads * m.qk_head_dim, s, layers))
    else:
        ops += [_linear("layers.attn.q_a_proj", tokens, a.hidden, m.q_lora_rank, s, layers),
                _elementwise("layers.attn.q_a_norm", tokens, m.q_lora_rank, s.carried_dtype, layers, kind="norm",
                             norm="rms"),
                _linear("layers.attn.q_b_proj", tokens, m.q_lora_rank, heads * m.qk_head_dim, s, layers)]
    ops += [_linear("layers.attn.kv_a_proj", tokens, a.hidden, m.cached_width, s, layers),
            _elementwise("layers.attn.kv_a_norm", tokens, m.kv_lora_rank, s.carried_dtype, layers, kind="norm",
                         norm="rms")]
    if shape.phase == "decode":
        ops += [_linear("layers.attn.q_absorb", tokens, m.qk_nope_head_dim, m.kv_lora_rank, s, layers, batch=heads),
                *_sdpa_ops(a, s, shape, groups, heads=heads, kv_heads=1, head_dim=m.cached_width,
                           v_head_dim=m.kv_lora_rank, kv_shared=True),
                _linear("layers.attn.v_absorb", tokens, m.kv_lora_rank, m.v_head_dim, s, layers, batch=heads)]
    else:
        ops += [_linear("layers.attn.kv_b_proj", tokens, m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim),
                        s, layers),
                *_sdpa_ops(a, s, shape, groups, heads=heads, kv_heads=heads, head_dim=m.qk_head_dim,
                           v_head_dim=m.v_head_dim)]
    ops.append(_linear("layers.attn.o_proj", tokens, heads * m.v_head_dim, a.hidden, s, layers))
    return ops


def stage_graph(architecture: Architecture, scenario: Scenario, parallelism: Parallelism, *, phase: str,
                context, context_shards: int = 1, sequence_parallel: bool = False,
                moe_capacity_factor: float | None = None, every_logit: bool = False,
                all_reduce_library: str | None = None) -> Graph:
    """One chip's pipeline stage for ``phase`` 'prefill' (the whole prompt), 'decode' (one new
    token per sequence attending to ``context`` tokens) or 'train' (the forward pass of a training
    step: ``prompt_tokens`` is the sequence length, logits and a cross-entropy loss for every token,
    no KV cache). Embedding and LM head are included.

    ``context_shards`` (train only) splits each sequence over that many chips (context parallelism,
    load-balanced ring attention): a chip holds ``seq / shards`` queries, attends on average to half
    of the sequence (the causal triangle spread evenly), and the K/V blocks travel the ring as an
    all-gather of K and V per layer.

    ``sequence_parallel`` (train, ``tp`` > 1; Megatron-LM's sequence parallelism, Korthikanti et al.
    2022, which MaxText's sharding of activations over the tensor axis matches): the norms and
    residual adds work on ``tokens / tp`` rows, and each tensor-parallel all-reduce becomes an
    all-gather before the block and a reduce-scatter after it (the same bytes on the wire).

    ``moe_capacity_factor``: None prices a MoE layer's experts on the tokens routed to them (a dropless
    grouped matmul); a factor prices MaxText's token-dropping implementation (``_dropping_moe``).

    ``every_logit`` (prefill): logits for every new token, not only each sequence's last (a
    speculative verifier scoring its drafted tokens, ``serving.speculation``).

    ``all_reduce_library`` (``costs.all_reduce.LIBRARIES``): the tensor-parallel all-reduces call that library
    at every size instead of the engine's own choice (an engine built to use NCCL, as TensorRT-LLM's engines
    were without ``--use_custom_all_reduce``)."""
    a, s, p = architecture, scenario, parallelism
    reduce_with = {"library": all_reduce_library} if all_reduce_library else {}
    training = phase == "train"
    batch = np.asarray(s.batch) if np.ndim(s.batch) else int(s.batch)
    seq = s.prompt_tokens // context_shards if training else s.prompt_tokens if phase == "prefill" else 1
    tokens = batch * seq
    groups = layer_groups(a, p.pp)
    layers = groups.layers
    act = s.carried_dtype  # (the GEMMs read their inputs in the activation dtype: _linear, with_quantized_inputs)
    act_bytes = DTYPES[act].bytes_per_element
    hidden = a.hidden
    residual_bytes = tokens * hidden * act_bytes
    sharded = training and sequence_parallel and p.tp > 1
    rows_per_chip = tokens // p.tp if sharded else tokens  # the residual stream's rows on each chip
    shape = _Shape(batch=batch, seq=seq, tokens=tokens, layers=layers, training=training, phase=phase,
                   context=context, context_shards=context_shards)
    ops = [
        Op(name="embed_tokens", kind="embedding", provenance="aten.embedding",
           inputs=(_t((tokens,), "int64"), _t((a.vocab, hidden), s.embedding_weight_dtype, "weight")),
           outputs=(_t((tokens, hidden), act),)),
        _elementwise("layers.input_norm", rows_per_chip, hidden, act, groups.mixing, kind="norm", norm="rms"),
    ]
    if groups.attention:
        ops += _latent_attention(a, s, p, shape, groups) if a.latent is not None else _attention(a, s, p, shape, groups)
    if groups.linear:
        ops += _recurrent_mixer(a, s, p, shape, groups)
    if sharded:
        ops.insert(2, _collective("layers.attn.all_gather", "all_gather", residual_bytes, p.tp, act, groups.mixing))
        ops.append(_collective("layers.attn.reduce_scatter", "reduce_scatter", residual_bytes, p.tp, act,
                               groups.mixing))
    elif p.tp > 1:
        ops.append(_collective("layers.attn.all_reduce", "all_reduce", residual_bytes, p.tp, act, groups.mixing,
                               **reduce_with))
    ops.append(_elementwise("layers.attn.residual", rows_per_chip, hidden, act, groups.mixing, inputs=2))
    # A parallel block with one norm (GPT-J, PaLM, MaxText's 2023 synthetic models: y = x + Attention(LN(x)) +
    # MLP(LN(x))) feeds the MLP the attention's normalized, gathered input: no second norm, no second all-gather.
    if not a.shared_block_input:
        ops.append(_elementwise("layers.post_norm", rows_per_chip, hidden, act, groups.mlps, kind="norm", norm="rms"))
    if sharded and not a.shared_block_input:
        ops.append(_collective("layers.mlp.all_gather", "all_gather", residual_bytes, p.tp, act, groups.mlps))
    if groups.moe:
        ops.append(_linear("layers.moe.router", tokens, hidden, a.experts, s.head_scenario, groups.moe))
    if groups.moe and moe_capacity_factor is not None:
        ops += _dropping_moe(a, s.experts_scenario, batch, seq, a.expert_width // p.tp, groups.moe, moe_capacity_factor)
    elif groups.moe:
        local_experts = a.experts // p.ep
        # the tokens of all dp groups (each group's tp chips hold the same ones) meet at the ep chips
        routed = tokens * p.dp * a.experts_per_token / p.ep
        width = a.expert_width // (p.tp * p.dp // p.ep)
        # wide expert parallelism may span more chips than the chip-to-chip domain (costs.rules)
        wide = {"beyond_domain": "network"} if p.dp > 1 else {}
        if p.ep > 1:
            ops.append(_collective("layers.moe.dispatch", "all_to_all", routed * hidden * act_bytes, p.ep, act,
                                   groups.moe, **wide))
        ops += routed_expert_ops(routed, local_experts, hidden, width, s.experts_scenario, groups.moe,
                                 activation=a.activation, activation_rows=tokens * a.experts_per_token)
        if p.ep > 1:
            ops.append(_collective("layers.moe.combine", "all_to_all", routed * hidden * act_bytes, p.ep, act,
                                   groups.moe, **wide))
        if a.shared_intermediate:  # every token also passes the shared experts (a dense gated MLP, tp-split)
            ops += _dense_mlp(a, s, "layers.moe.shared_experts", tokens, a.shared_intermediate // p.tp, groups.moe)
            if a.shared_expert_gate:
                ops.append(_linear("layers.moe.shared_expert_gate", tokens, hidden, 1, s.head_scenario, groups.moe))
    if groups.dense:
        ops += _dense_mlp(a, s, "layers.mlp", tokens, a.intermediate // p.tp, groups.dense)
    if sharded:
        ops.append(_collective("layers.mlp.reduce_scatter", "reduce_scatter", residual_bytes, p.tp, act, groups.mlps))
    elif p.tp > 1:
        ops.append(_collective("layers.mlp.all_reduce", "all_reduce", residual_bytes, p.tp, act, groups.mlps,
                               **reduce_with))
    rows = tokens if training or every_logit else batch  # inference computes logits for each sequence's last token only
    ops += [_elementwise("layers.mlp.residual", rows_per_chip, hidden, act, groups.mlps, inputs=2),
            _elementwise("final_norm", rows, hidden, act, 1, kind="norm", norm="rms"),
            _linear("lm_head", rows, hidden, a.vocab // p.tp, s.head_scenario, 1)]
    if training:  # softmax cross-entropy over the vocabulary shard (fused kernels upcast inside)
        ops.append(_elementwise("loss", rows, a.vocab // p.tp, act, 1, kind="softmax"))
    ops = [op for op in ops if op.count]  # (a stage of Nemotron-H blocks may lack every mixer or every MLP)
    if s.quantizes_gemm_inputs:
        ops = with_quantized_inputs(ops, s.carried_dtype)
    names = [op.name for op in ops]
    # ``check`` validated the architecture, scenario and parallelism these ops are built from.
    return Graph.prechecked(f"{a.name}.{phase}", ops, list(zip(names, names[1:], strict=False)))


def _quantized_gemm(op: Op, carried: str) -> bool:
    """Whether ``op`` is a GEMM of weights in a ``QUANTIZED_ACTIVATION_GEMMS`` format reading an input in
    another dtype than the graph carries (its input is quantized for it)."""
    return (op.kind == "matmul" and any(t.role == "weight" and t.dtype in QUANTIZED_ACTIVATION_GEMMS
                                        for t in op.inputs) and op.inputs[0].dtype != carried)


#: GEMMs that read the input of the GEMM listed just before them (the projections the engines run as one fused
#: GEMM behind one quantization: QKV, and MLA's q_a / kv_a down-projections of the same hidden states).
SHARED_INPUT = {"layers.attn.k_proj": ("layers.attn.q_proj",), "layers.attn.v_proj": ("layers.attn.k_proj",),
                "layers.attn.kv_a_proj": ("layers.attn.q_a_proj", "layers.attn.q_proj")}


def with_quantized_inputs(ops: list[Op], carried: str) -> list[Op]:
    """``ops`` with the quantization of each quantized GEMM's input (``quantize_activations_op``) before the
    GEMM: one per input tensor, so projections that read the same input one after the other (``SHARED_INPUT``:
    q, k and v, which TensorRT-LLM, vLLM and SGLang run as one fused QKV GEMM) share the first's quantization;
    the names say which, not the shapes (a batch-1 router and its experts' rows have the same shape, not the
    same tensor); none where the op before already writes the GEMM's input dtype (an fp8 attention kernel
    writes fp8 for the output projection: TensorRT-LLM's FP8 context FMHA and XQA kernels with an fp8 KV cache)."""
    out: list[Op] = []
    for op in ops:
        if _quantized_gemm(op, carried):
            before = out[-1] if out else None
            shared = before is not None and before.name in SHARED_INPUT.get(op.name, ())
            written = before is not None and before.kind != "matmul" and \
                any(t.dtype == op.inputs[0].dtype for t in before.outputs)
            if not shared and not written:
                rows, width = op.inputs[0].shape
                out.append(quantize_activations_op(rows, width, op.inputs[0].dtype, name=f"{op.name}.quantize_input",
                                                   count=op.count))
        out.append(op)
    return out


def pipeline_send(scenario: Scenario, architecture: Architecture, phase: str) -> Op:
    """The activations one stage hands to the next."""
    tokens = np.asarray(scenario.batch) * (scenario.prompt_tokens if phase == "prefill" else 1)
    payload = tokens * architecture.hidden * DTYPES[scenario.carried_dtype].bytes_per_element
    return _collective("pipeline.send", "send", payload, 2, scenario.carried_dtype, 1)
