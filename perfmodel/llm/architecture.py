"""Decoder-only transformer architectures (pure core).

An :class:`Architecture` is the record every price and every byte count is derived from. It is made
in one of two ways:

* from the model's own ``transformers`` class built on the meta device (``perfmodel.llm.model_class``,
  an edge module): every parameter's shape and the module structure are read there, and the record
  it derives is checked to count exactly the class's parameters, module kind by module kind;
* by hand from a perfmodel-native block description (:func:`from_hf_config`): the Llama-style
  fields plus two keys Hugging Face's configs cannot express, ``gated_mlp: false`` (a plain
  two-matrix MLP, e.g. MaxText's 2023 synthetic models) and ``parallel_attention_mlp: true``
  (PaLM/GPT-J-style parallel layers sharing one pre-norm; the attention and MLP are still priced one
  after the other). Only the families whose fields this reader prices exactly are accepted by hand.

Layers may differ (``moe_layers``: which layers route to experts, the others are dense;
``layer_windows``: the keys each layer's queries see). Attention is standard multi-head (MHA, GQA,
MQA) or DeepSeek's multi-head latent attention (:class:`LatentAttention`).

Parameter counting convention: every weight matrix and bias, the norms' scales (and biases for
layer norm), attention sinks, the token embedding, and the LM head unless tied to the embedding.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import Mapping

import numpy as np

from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError

GATED_MLP_MATRICES = 3  # gate, up, down
PLAIN_MLP_MATRICES = 2  # fc_in, fc_out
WHOLE_CONTEXT = 0  # a layer window of 0: the layer attends to the whole context


@dataclass(frozen=True, kw_only=True)
class LatentAttention:
    """DeepSeek-V2/V3's multi-head latent attention (arXiv 2405.04434, section 2.1): keys and values
    are up-projected from one compressed latent of ``kv_lora_rank`` per token plus a shared rotary key
    of ``qk_rope_head_dim``, and that pair is all the KV cache holds. ``q_lora_rank`` None: the
    query is projected directly (DeepSeek-V2-Lite)."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def cached_width(self) -> int:
        """Elements one token keeps per layer: the latent and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def parameters(self, hidden: int, heads: int, output_bias: bool) -> int:
        """q_a + q_a_norm + q_b (or q_proj), kv_a_proj_with_mqa + kv_a_norm + kv_b, o_proj."""
        q_width = heads * self.qk_head_dim
        query = hidden * q_width if self.q_lora_rank is None else \
            hidden * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * q_width
        kv = hidden * self.cached_width + self.kv_lora_rank \
            + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return query + kv + heads * self.v_head_dim * hidden + (hidden if output_bias else 0)


# The recurrent token mixers priced instead of attention in a hybrid's linear layers.
RECURRENT_KINDS = ("gated_delta_net", "mamba2")


@dataclass(frozen=True, kw_only=True)
class RecurrentMixer:
    """A linear-attention or state-space token mixer: a fixed-size state per sequence instead of a KV cache.

    * ``gated_delta_net`` (Yang, Kautz, Hatamizadeh, "Gated Delta Networks", arXiv 2412.06464; Qwen3-Next's
      ``Qwen3NextGatedDeltaNet``): ``key_heads`` query/key heads of ``key_dim``, ``heads`` value heads of
      ``value_dim``; each value head keeps a ``key_dim x value_dim`` matrix state
      ``S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T``, read out as ``o_t = S_t^T q_t``.
    * ``mamba2`` (Dao & Gu, "Transformers are SSMs", arXiv 2405.21060, the SSD layer; transformers'
      ``BambaMixer`` / ``GraniteMoeHybridMambaLayer``): ``heads`` heads of ``value_dim`` (``mamba_d_head``),
      ``key_heads`` groups sharing B and C of ``key_dim`` (``mamba_d_state``); each head keeps a
      ``value_dim x key_dim`` state ``h_t = exp(dt A) h_{t-1} + dt x_t B_t^T``, read out as ``y_t = h_t C_t``.

    Both first run a depthwise causal convolution of ``conv_kernel`` taps over ``conv_channels`` channels
    (q, k, v / x, B, C), whose last inputs are kept as the conv state."""

    kind: str
    heads: int
    key_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int
    conv_bias: bool = False

    @property
    def value_width(self) -> int:
        return self.heads * self.value_dim

    @property
    def conv_channels(self) -> int:
        """q and k (or B and C) of every key head/group, and v (or x) of every head."""
        return 2 * self.key_heads * self.key_dim + self.value_width

    @property
    def state_elements(self) -> int:
        """One sequence's recurrent state in one layer: a key_dim x value_dim matrix per head."""
        return self.heads * self.key_dim * self.value_dim

    @property
    def conv_state_elements(self) -> int:
        """One sequence's conv state in one layer: transformers' ``LinearAttentionLayer`` keeps the last
        ``conv_kernel`` inputs of every channel (vLLM keeps ``conv_kernel - 1``; the difference is under 2%
        of the state)."""
        return self.conv_channels * self.conv_kernel

    def local_key_heads(self, tp: int) -> int:
        """Key heads (groups) on one of ``tp`` chips: split while tp <= key heads, replicated beyond (vLLM's
        MambaMixer2 duplicates the groups so that every chip holds those of its heads)."""
        return max(self.key_heads // tp, 1)

    def local_conv_channels(self, tp: int) -> int:
        return 2 * self.local_key_heads(tp) * self.key_dim + self.value_width // tp

    def state_elements_per_chip(self, tp: int) -> tuple[int, int]:
        """(recurrent, conv) state elements of one sequence in one layer on one of ``tp`` chips."""
        return self.state_elements // tp, self.local_conv_channels(tp) * self.conv_kernel

    def parameters(self, hidden: int) -> int:
        """GDN: in_proj_qkvz (q, k, v, and the output gate z as wide as v), in_proj_ba (b, a per head),
        conv1d, dt_bias and A_log per head, the gated norm (value_dim), out_proj. Mamba-2: in_proj (z, x,
        B, C, dt), conv1d (+ bias), dt_bias, A_log and D per head, the gated norm (the whole x width),
        out_proj."""
        conv = self.conv_channels * self.conv_kernel + (self.conv_channels if self.conv_bias else 0)
        if self.kind == "gated_delta_net":
            projections = hidden * (2 * self.key_heads * self.key_dim + 2 * self.value_width) + hidden * 2 * self.heads
            return projections + conv + 2 * self.heads + self.value_dim + self.value_width * hidden
        projections = hidden * (2 * self.value_width + 2 * self.key_heads * self.key_dim + self.heads)
        return projections + conv + 3 * self.heads + self.value_width + self.value_width * hidden


@dataclass(frozen=True, kw_only=True)
class Architecture:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # the dense MLP's width (and the experts' when ``expert_intermediate`` is None)
    vocab: int
    max_positions: int
    tied_embeddings: bool
    gated_mlp: bool = True
    mlp_bias: bool = False  # biases on the MLP's (and the experts') matrices
    layer_norm_bias: bool = False
    norms_per_layer: int = 2
    experts: int = 1
    experts_per_token: int = 1
    lm_head_bias: bool = False
    sliding_window: int | None = None  # keys each query sees (Mistral); None: the whole context
    activation: str = "silu"  # the MLP's activation function (config ``hidden_act``/``activation_function``)
    expert_intermediate: int | None = None  # a routed expert's width (moe_intermediate_size); None: intermediate
    shared_intermediate: int = 0  # the shared experts' width together (DeepSeek, Llama 4); 0: none
    router_bias: bool = False  # a bias (or DeepSeek's score-correction bias) on the router's logits
    moe_layers: tuple[bool, ...] | None = None  # per layer: routes to experts; None: every layer when experts > 1
    layer_windows: tuple[int, ...] | None = None  # per layer: keys seen (0: all); None: sliding_window for all
    # The windowed layers are chunked, not sliding (Llama 4's chunked local attention: a query sees the keys of its
    # own chunk of ``window`` positions, from the chunk's start to itself, not the last ``window`` keys).
    chunked_attention: bool = False
    latent: LatentAttention | None = None  # multi-head latent attention instead of per-head K and V
    qk_norm: bool = False  # a norm scale of head_dim on queries and keys (Qwen3, Gemma 3)
    qkv_bias: bool = False
    output_bias: bool = False  # a bias on the attention's output projection (gpt-oss)
    attention_sinks: bool = False  # one learned logit per head in the softmax's denominator (gpt-oss)
    mtp_modules: int = 0  # multi-token-prediction modules (DeepSeek-V3's num_nextn_predict_layers); not in the class
    # Qwen3-Next's gated attention (Qiu et al., "Gated Attention for Large Language Models", arXiv 2505.06708):
    # q_proj also makes a sigmoid gate as wide as the query that scales the attention's output per element.
    attention_gate: bool = False
    shared_expert_gate: bool = False  # a sigmoid gate (hidden -> 1) on the shared expert's output (Qwen2/3-MoE-style)
    mixer: RecurrentMixer | None = None  # the token mixer of the hybrid's linear layers
    linear_layers: tuple[bool, ...] | None = None  # per layer: the recurrent mixer instead of attention
    # The recurrent state's dtype when the config fixes it (Qwen3.5's ``mamba_ssm_dtype``, Nemotron-H's
    # ``mamba_ssm_cache_dtype``: float32); None: the KV cache's (vLLM's ``mamba_ssm_cache_dtype`` "auto").
    state_dtype: str | None = None
    # Nemotron-H's blocks hold one part each (a Mamba-2 mixer, an attention, a MoE or an MLP): per layer, no
    # token mixer / no MLP; None: every layer has both.
    mixerless_layers: tuple[bool, ...] | None = None
    mlpless_layers: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        if (self.mixer is None) != (self.linear_layers is None):
            raise PerfmodelError(f"{self.name}: a recurrent mixer and the layers that use it go together")
        for label, flags in (("moe_layers", self.moe_layers), ("layer_windows", self.layer_windows),
                             ("linear_layers", self.linear_layers), ("mixerless_layers", self.mixerless_layers),
                             ("mlpless_layers", self.mlpless_layers)):
            if flags is not None and len(flags) != self.layers:
                raise PerfmodelError(f"{self.name}: {label} lists {len(flags)} layers, the model has {self.layers}")

    # -- per layer ----------------------------------------------------------------------------------
    def is_moe_layer(self, layer: int) -> bool:
        if self.experts <= 1 or not self.has_mlp(layer):
            return False
        return True if self.moe_layers is None else self.moe_layers[layer]

    def is_linear_layer(self, layer: int) -> bool:
        """``layer`` mixes tokens with the recurrent mixer (a fixed state), not attention (a KV cache)."""
        return self.linear_layers is not None and self.linear_layers[layer]

    def has_mixer(self, layer: int) -> bool:
        """``layer`` mixes tokens (attention or a recurrent mixer); not one of Nemotron-H's MLP/MoE blocks."""
        return self.mixerless_layers is None or not self.mixerless_layers[layer]

    def has_mlp(self, layer: int) -> bool:
        """``layer`` has an MLP or MoE; not one of Nemotron-H's attention/Mamba-2 blocks."""
        return self.mlpless_layers is None or not self.mlpless_layers[layer]

    def attention_layers_in(self, layers: range) -> int:
        return sum(not self.is_linear_layer(layer) and self.has_mixer(layer) for layer in layers)

    def linear_layers_in(self, layers: range) -> int:
        return sum(self.is_linear_layer(layer) for layer in layers)

    @property
    def attention_layer_count(self) -> int:
        return self.attention_layers_in(range(self.layers))

    def window(self, layer: int) -> int | None:
        """Keys a query of ``layer`` sees; None: the whole context."""
        if self.layer_windows is None:
            return self.sliding_window
        return self.layer_windows[layer] or None

    @property
    def uniform_window(self) -> bool:
        """Every layer sees the same keys (the whole context, or one sliding window)."""
        return self.layer_windows is None or len(set(self.layer_windows)) <= 1

    @property
    def expert_width(self) -> int:
        return self.intermediate if self.expert_intermediate is None else self.expert_intermediate

    def cached_tokens(self, context, layer: int | None = None):
        """Tokens of KV cache a sequence keeps in ``layer`` (None: a layer of the uniform case): a
        windowed layer keeps a rolling buffer of its last ``window`` tokens (Mistral 7B paper, arXiv
        2310.06825, section 2 "Rolling Buffer Cache"; vLLM and transformers' sliding-window caches)."""
        window = self.sliding_window if layer is None else self.window(layer)
        return context if window is None else np.minimum(context, window)

    # -- shapes -------------------------------------------------------------------------------------
    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def attention_parameters(self) -> int:
        sinks = self.heads if self.attention_sinks else 0
        norms = 2 * self.head_dim if self.qk_norm else 0
        if self.latent is not None:
            return self.latent.parameters(self.hidden, self.heads, self.output_bias) + sinks + norms
        biases = (self.q_width + 2 * self.kv_width if self.qkv_bias else 0) + (self.hidden if self.output_bias else 0)
        gate = self.hidden * self.q_width + (self.q_width if self.qkv_bias else 0) if self.attention_gate else 0
        return self.hidden * self.q_width * 2 + self.hidden * self.kv_width * 2 + biases + sinks + norms + gate

    @property
    def mixer_parameters(self) -> int:
        """One linear layer's recurrent mixer (0 without one)."""
        return 0 if self.mixer is None else self.mixer.parameters(self.hidden)

    def _mlp_parameters(self, width: int) -> int:
        matrices = GATED_MLP_MATRICES if self.gated_mlp else PLAIN_MLP_MATRICES
        biases = ((matrices - 1) * width + self.hidden) if self.mlp_bias else 0
        return matrices * self.hidden * width + biases

    @property
    def dense_mlp_parameters(self) -> int:
        return self._mlp_parameters(self.intermediate)

    @property
    def expert_parameters(self) -> int:
        """One routed expert."""
        return self._mlp_parameters(self.expert_width)

    @property
    def shared_expert_parameters(self) -> int:
        if not self.shared_intermediate:
            return 0
        return self._mlp_parameters(self.shared_intermediate) + (self.hidden if self.shared_expert_gate else 0)

    @property
    def router_parameters(self) -> int:
        return (self.hidden + (1 if self.router_bias else 0)) * self.experts

    @property
    def shared_block_input(self) -> bool:
        """A parallel block whose attention and MLP read one normalized input, ``y = x + Attention(LN(x)) +
        MLP(LN(x))`` (GPT-J, PaLM section 2, MaxText's 2023 ``DecoderLayer``): one norm in a layer that has
        both (a hybrid model's one norm per layer is a block of one kind, not a shared input)."""
        return self.norms_per_layer == 1 and self.mixerless_layers is None and self.mlpless_layers is None

    @property
    def norm_parameters(self) -> int:
        """The norms of one layer (the MLA and QK norms belong to the attention)."""
        return self.norms_per_layer * self.hidden * (2 if self.layer_norm_bias else 1)

    @cached_property
    def _per_layer_parameters(self) -> tuple[int, ...]:
        moe = self.norm_parameters + self.experts * self.expert_parameters + self.shared_expert_parameters \
            + self.router_parameters
        dense = self.norm_parameters + self.dense_mlp_parameters
        return tuple(self.norm_parameters
                     + ((moe if self.is_moe_layer(layer) else dense) - self.norm_parameters if self.has_mlp(layer) else 0)
                     + (self.mixer_parameters if self.is_linear_layer(layer) else
                        self.attention_parameters if self.has_mixer(layer) else 0)
                     for layer in range(self.layers))

    def parameters_of_layer(self, layer: int) -> int:
        return self._per_layer_parameters[layer]

    @property
    def layer_parameters(self) -> int:
        """The heaviest layer's parameters."""
        return max(self._per_layer_parameters)

    @cached_property
    def moe_layer_count(self) -> int:
        return sum(self.is_moe_layer(layer) for layer in range(self.layers))

    def parameters_by_kind(self) -> dict[str, int]:
        """Parameters by module kind, the same kinds ``perfmodel.llm.model_class`` reads off a model
        class: embedding, attention, linear_attention (a hybrid's recurrent mixers), mlp (dense layers),
        experts (routed), shared_experts, router,
        norms (the layers' and the final one) and lm_head (0 when tied)."""
        moe = self.moe_layer_count
        dense = sum(self.has_mlp(layer) for layer in range(self.layers)) - moe
        final_norm = self.hidden * (2 if self.layer_norm_bias else 1)
        head = 0 if self.tied_embeddings else self.vocab * self.hidden + (self.vocab if self.lm_head_bias else 0)
        linear = self.linear_layers_in(range(self.layers))
        return {"embedding": self.vocab * self.hidden,
                "attention": self.attention_layer_count * self.attention_parameters,
                "linear_attention": linear * self.mixer_parameters,
                "mlp": dense * self.dense_mlp_parameters, "experts": moe * self.experts * self.expert_parameters,
                "shared_experts": moe * self.shared_expert_parameters, "router": moe * self.router_parameters,
                "norms": self.layers * self.norm_parameters + final_norm, "lm_head": head}

    def parameter_count(self) -> int:
        """The model class's parameters (multi-token-prediction modules apart: ``mtp_parameters``)."""
        return sum(self.parameters_by_kind().values())

    @property
    def mtp_module_parameters(self) -> int:
        """One multi-token-prediction module (DeepSeek-V3, arXiv 2412.19437 section 2.2; the checkpoint's
        ``model.layers.61.*``): RMSNorms of the hidden state and of the next token's embedding (``hnorm``,
        ``enorm``), the projection of their concatenation (``eh_proj``, 2 x hidden -> hidden, no bias), one
        decoder layer of the last layer's kind (MoE in DeepSeek-V3) and the output head's norm
        (``shared_head.norm``). The embedding and output head are the main model's, shared (section 2.2: "shared
        embedding layer" and "shared output head"); the checkpoint stores copies of them, which this does not
        count."""
        return 3 * self.hidden + 2 * self.hidden * self.hidden + self.parameters_of_layer(self.layers - 1)

    @property
    def mtp_parameters(self) -> int:
        return self.mtp_modules * self.mtp_module_parameters

    def active_parameter_count(self) -> int:
        """Parameters touched per token (MoE: only the routed experts)."""
        inactive = (self.experts - self.experts_per_token) * self.expert_parameters * self.moe_layer_count
        return self.parameter_count() - inactive

    @property
    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden

    @property
    def head_parameters(self) -> int:
        """The LM head and final norm (a tied head is still held by a last pipeline stage that
        does not hold the embedding: Megatron keeps a copy there)."""
        final_norm = self.hidden * (2 if self.layer_norm_bias else 1)
        return self.vocab * self.hidden + (self.vocab if self.lm_head_bias else 0) + final_norm

    def stage_layers(self, pp: int) -> range:
        """The layers of the heaviest of ``pp`` pipeline stages: contiguous slices of ``ceil(layers /
        pp)`` layers (the last may be shorter), the one holding the most parameters (the first of
        equals). Uniform models: the first ``ceil(layers / pp)`` layers."""
        size = math.ceil(self.layers / pp)
        slices = [range(start, min(start + size, self.layers)) for start in range(0, self.layers, size)]
        weights = [sum(self._per_layer_parameters[stage.start:stage.stop]) for stage in slices]
        return slices[weights.index(max(weights))]

    def stage_end_bytes(self, pp: int, embedding_bytes: float, head_bytes: float) -> float:
        """Bytes of the ends the fullest of ``pp`` stages holds (``stage_parameters``' ends) when the embedding
        table and the LM head are stored with ``embedding_bytes`` and ``head_bytes`` an element (a tied head is
        the embedding's matrix, in its dtype; the final norm is counted with the head)."""
        embedding, head = self.embedding_parameters * embedding_bytes, self.head_parameters * head_bytes
        if pp > 1:
            return max(embedding, head)
        tied = self.vocab * self.hidden * head_bytes if self.tied_embeddings else 0.0
        return embedding + head - tied

    def stage_end_parameters(self, pp: int) -> int:
        """Parameters of the ends (embedding, LM head) the fullest of ``pp`` stages holds."""
        return round(self.stage_end_bytes(pp, 1, 1))

    def stage_parameters(self, pp: int) -> int:
        """Parameters of the fullest of ``pp`` pipeline stages: its layers and the larger end
        (embedding or LM head); one stage holds both ends, sharing a tied head's matrix."""
        ends = self.stage_end_parameters(pp)
        size = math.ceil(self.layers / pp)
        layers = self.stage_layers(pp)
        # A stage always holds ceil(layers / pp) layers' worth (the fullest): a shorter last slice is padded.
        per_layer = sum(self._per_layer_parameters[layers.start:layers.stop])
        return per_layer + (size - len(layers)) * self.layer_parameters + ends

    # -- KV cache -----------------------------------------------------------------------------------
    def kv_elements_per_token(self) -> int:
        """Elements one token keeps in one layer's cache: K and V of every KV head, or MLA's latent
        and rotary key (one copy: the keys and values are both made from it)."""
        return self.latent.cached_width if self.latent is not None else 2 * self.kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """Bytes one token keeps over all attention layers when every one keeps the whole context (a
        hybrid's linear layers keep a state instead: ``state_bytes``)."""
        return self.attention_layer_count * self.kv_elements_per_token() * kv_bytes_per_element

    def state_elements_per_sequence(self, layers: range | None = None) -> int:
        """Elements of recurrent and conv state one sequence keeps in ``layers`` (default: all): a fixed
        size, whatever the context (0 without linear layers)."""
        if self.mixer is None:
            return 0
        layers = range(self.layers) if layers is None else layers
        return self.linear_layers_in(layers) * (self.mixer.state_elements + self.mixer.conv_state_elements)

    def state_bytes(self, kv_bytes_per_element: float, layers: range | None = None, tp: int = 1) -> float:
        """Bytes of state one sequence keeps in ``layers`` on one of ``tp`` chips (the heads split, the key
        heads/groups split or replicated, ``RecurrentMixer.local_key_heads``): the conv state at the KV
        cache's element size, the recurrent state at ``state_dtype``'s (the KV cache's when None: vLLM's
        default ``mamba_ssm_cache_dtype`` "auto" keeps it in the model's dtype)."""
        if self.mixer is None:
            return 0.0
        layers = range(self.layers) if layers is None else layers
        linear = self.linear_layers_in(layers)
        state = kv_bytes_per_element if self.state_dtype is None else DTYPES[self.state_dtype].bytes_per_element
        recurrent, conv = self.mixer.state_elements_per_chip(tp)
        return linear * (recurrent * state + conv * kv_bytes_per_element)

    def kv_cache_bytes(self, context, kv_bytes_per_element: float, layers: range | None = None):
        """Bytes one sequence of ``context`` tokens keeps in ``layers`` (default: all), each layer's
        cache capped at its window."""
        layers = range(self.layers) if layers is None else layers
        per_token = self.kv_elements_per_token() * kv_bytes_per_element
        if self.uniform_window:
            return self.attention_layers_in(layers) * per_token * self.cached_tokens(context)
        return per_token * sum(self.cached_tokens(context, layer) for layer in layers
                               if not self.is_linear_layer(layer) and self.has_mixer(layer))

    def kv_tp_share(self, tp: int) -> float:
        """The share of a layer's cache one of ``tp`` chips holds: its KV heads (a KV head is
        replicated once tp exceeds the KV heads, as vLLM does); MLA's latent is replicated on all."""
        if self.latent is not None:
            return 1.0
        return max(self.kv_heads // tp, 1) / self.kv_heads


HYBRID_FIELDS = ("attention_gate", "shared_expert_gate", "mixer", "linear_layers", "state_dtype", "mixerless_layers",
                 "mlpless_layers", "chunked_attention")
_DEFAULTS = {field.name: field.default for field in fields(Architecture)}


def architecture_record(architecture: Architecture) -> dict:
    """The fields of ``architecture`` as JSON-ready values (the stored form of a derived record)."""
    record = asdict(architecture)
    for key in ("moe_layers", "layer_windows", "linear_layers", "mixerless_layers", "mlpless_layers"):
        if record[key] is not None:
            record[key] = list(record[key])
    for key in HYBRID_FIELDS:  # the records of models without them stay as they were (fields added since)
        if record[key] == _DEFAULTS[key]:
            del record[key]
    return record


def architecture_from_record(record: Mapping) -> Architecture:
    """The inverse of :func:`architecture_record`; an unknown or missing field is an error."""
    names = {field.name for field in fields(Architecture)}
    unknown = sorted(set(record) - names)
    if unknown:
        raise PerfmodelError(f"an architecture record has unknown fields {', '.join(unknown)}")
    values = dict(record)
    for key in ("moe_layers", "layer_windows", "linear_layers", "mixerless_layers", "mlpless_layers"):
        if values.get(key) is not None:
            values[key] = tuple(values[key])
    if values.get("latent") is not None:
        values["latent"] = LatentAttention(**values["latent"])
    if values.get("mixer") is not None:
        values["mixer"] = RecurrentMixer(**values["mixer"])
    return Architecture(**values)


# The largest size a config field may hold: beyond any published model by orders of magnitude (the
# largest vocabulary is ~10^6, the widest hidden size ~10^5), and small enough that parameter counts
# stay exact in float64 arithmetic. A larger value is a typo or a corrupt file, not a model.
MAX_CONFIG_SIZE = 2**31 - 1
CONFIG_HINT = "see workloads/llm/*.json for complete configs"


def _present(config: Mapping, keys: tuple[str, ...]) -> tuple[str, object] | None:
    """The first of ``keys`` that the config sets (to anything but null)."""
    for key in keys:
        if config.get(key) is not None:
            return key, config[key]
    return None


def _size(config: Mapping, *keys: str, default: int | None = None) -> int:
    """A whole number from 1 to :data:`MAX_CONFIG_SIZE` from the first of ``keys`` set; ``default``
    when none is (an error when there is no default). A JSON integer, or a float with no fraction
    (``4096.0``); never a string, a boolean, NaN or a fraction."""
    found = _present(config, keys)
    if found is None:
        if default is None:
            raise PerfmodelError(f"config lacks {' / '.join(keys)}: a decoder config needs it ({CONFIG_HINT})")
        return default
    key, value = found
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if (number is None or (isinstance(number, float) and not (math.isfinite(number) and number.is_integer()))
            or not 1 <= number <= MAX_CONFIG_SIZE):
        raise PerfmodelError(f"config field {key!r}: expected a whole number from 1 to {MAX_CONFIG_SIZE}, got "
                             f"{value!r}; fix the value ({CONFIG_HINT})")
    return int(number)


def _flag(config: Mapping, key: str, default: bool) -> bool:
    """A JSON boolean (``true``/``false``; null: the default). The string ``"false"`` is an error, not true."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PerfmodelError(f"config field {key!r}: expected true or false, got {value!r}")
    return value


def _text(config: Mapping, key: str, default: str) -> str:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, str) or not value:
        raise PerfmodelError(f"config field {key!r}: expected a non-empty string, got {value!r}")
    return value


# The activation names Hugging Face's configs use (transformers.activations.ACT2CLS, 2025).
HF_ACTIVATIONS = ("gelu", "gelu_10", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_python", "gelu_python_tanh",
                  "gelu_pytorch_tanh", "hardswish", "laplace", "leaky_relu", "linear", "mish", "prelu", "quick_gelu",
                  "relu", "relu2", "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "xielu")


def _activation(config: Mapping, default: str) -> str:
    """The MLP activation's function family: ``gelu_new``, ``gelu_pytorch_tanh``... -> gelu; swish -> silu.
    A name Hugging Face does not know is an error (it would be priced as one FLOP an element)."""
    key = "hidden_act" if config.get("hidden_act") is not None else "activation_function"
    name = _text(config, key, default).lower()
    if name not in HF_ACTIVATIONS:
        raise PerfmodelError(f"config field {key!r}: unknown activation {name!r}; Hugging Face's are "
                             f"{', '.join(HF_ACTIVATIONS)}")
    return "gelu" if name.startswith("gelu") else "silu" if name in ("silu", "swish") else name


# RoPE's base (``rope_theta``): 10^4 (Llama 2) to 5x10^5 (Llama 3.1) and 10^6-10^7 for long-context
# models; beyond 10^12 it is a typo (and an integer past int64 cannot reach the rotary tables at all).
MAX_ROPE_THETA = 1e12


def _check_rope(config: Mapping) -> None:
    """``rope_theta`` (read by the eager capture, not by the condensed graphs): a finite number from
    just above 0 to MAX_ROPE_THETA."""
    if "rope_theta" not in config:
        return
    value = config["rope_theta"]  # null is not "absent": transformers would use it as the base
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_ROPE_THETA:
        raise PerfmodelError(f"config field 'rope_theta': expected RoPE's base, a number more than 0 and at most "
                             f"{MAX_ROPE_THETA:g} (Llama 3.1: 500000.0), got {value!r}")


def _head_dim(config: Mapping, hidden: int, heads: int, key: str, head_key: str) -> int:
    if _present(config, ("head_dim",)) is not None:
        return _size(config, "head_dim")
    if hidden % heads:
        raise PerfmodelError(f"config field {head_key!r} ({heads}) must divide {key!r} ({hidden}) when the config "
                             "gives no head_dim")
    return hidden // heads


# The families whose config fields the hand reader prices exactly (the rest come from their classes).
HAND_READ_MODEL_TYPES = ("llama", "mistral", "mixtral", "gptj", "gemma", "granite")
# Fields with which a config of those families would describe a structure the hand reader does not price.
STRUCTURE_FIELDS = ("attention_bias", "mlp_bias", "moe_intermediate_size", "n_shared_experts", "kv_lora_rank",
                    "first_k_dense_replace", "layer_types", "num_experts", "use_qk_norm")


# Multimodal configs whose text model (``text_config``) serves the tokens: its model_type in transformers.
# The vision encoder is not priced.
MULTIMODAL_TEXT_MODELS = {"llama4": "llama4_text", "gemma3": "gemma3_text", "qwen3_5": "qwen3_5_text",
                          "qwen3_5_moe": "qwen3_5_moe_text", "mistral3": "mistral"}
# Wrappers whose text_config names its own model type (Mistral3ForConditionalGeneration: Mistral Small 3.1/3.2's
# text model is "mistral", Ministral 3's "ministral3"); the type above when it names none (the class's default).
TEXT_CONFIG_NAMES_ITS_TYPE = ("mistral3",)


def text_model_type(config: Mapping) -> str:
    """The model type that serves a multimodal config's tokens (``MULTIMODAL_TEXT_MODELS``)."""
    wrapper, text = config["model_type"], config.get("text_config")
    named = text.get("model_type") if isinstance(text, Mapping) else None
    if wrapper in TEXT_CONFIG_NAMES_ITS_TYPE and isinstance(named, str) and named:
        return named
    return MULTIMODAL_TEXT_MODELS[wrapper]


def is_native_block(config: Mapping) -> bool:
    """A perfmodel-native block description (MaxText, PaLM): the keys no transformers class has."""
    return any(key in config for key in ("gated_mlp", "parallel_attention_mlp"))


# Fields a class would fill with its defaults when absent: a config must give them (a default is a guess).
CLASS_REQUIRED_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
CLASS_SIZE_FIELDS = (*CLASS_REQUIRED_FIELDS, "num_key_value_heads", "intermediate_size", "head_dim",
                     "max_position_embeddings", "moe_intermediate_size", "num_experts", "num_local_experts",
                     "n_routed_experts", "num_experts_per_tok", "kv_lora_rank", "q_lora_rank", "sliding_window")


def check_config_fields(config: Mapping) -> None:
    """Check the fields of a config before its class is built, with the messages of the hand reader: a
    family it reads is read (and its result dropped); any other needs its core sizes given, and every
    size, flag, activation and RoPE base it gives must be valid."""
    if not isinstance(config, Mapping):
        raise PerfmodelError(f"a model config is a JSON object of fields (hidden_size, num_attention_heads...), got "
                             f"{type(config).__name__}; {CONFIG_HINT}")
    model_type = _text(config, "model_type", "llama")
    if model_type in HAND_READ_MODEL_TYPES and not any(config.get(key) not in (None, False, [], 0)
                                                       for key in STRUCTURE_FIELDS):
        from_hf_config(config)
        return
    if model_type in MULTIMODAL_TEXT_MODELS and isinstance(config.get("text_config"), Mapping):
        config = config["text_config"]
    _check_rope(config)
    for key in CLASS_REQUIRED_FIELDS:
        _size(config, key)
    for key in CLASS_SIZE_FIELDS:
        if config.get(key) is not None:
            _size(config, key)
    _flag(config, "tie_word_embeddings", False)
    if config.get("hidden_act") is not None:
        _activation(config, "silu")


def from_hf_config(config: Mapping, name: str | None = None) -> Architecture:
    """An :class:`Architecture` from a Hugging Face ``config.json`` mapping (no download). Sizes must be
    whole numbers from 1 to :data:`MAX_CONFIG_SIZE`, flags JSON booleans: anything else is a
    :class:`PerfmodelError` naming the field."""
    if not isinstance(config, Mapping):
        raise PerfmodelError(f"a model config is a JSON object of fields (hidden_size, num_attention_heads...), got "
                             f"{type(config).__name__}; {CONFIG_HINT}")
    model_type = _text(config, "model_type", "llama")
    name = name or str(config.get("_name_or_path") or model_type)
    if model_type not in HAND_READ_MODEL_TYPES:
        raise PerfmodelError(f"model_type {model_type!r} is not read by hand (only {', '.join(HAND_READ_MODEL_TYPES)} "
                             "are): its architecture comes from its transformers class, "
                             "perfmodel.llm.model_class.architecture_from_class (perfmodel llm --model config.json)")
    for key in STRUCTURE_FIELDS:
        if config.get(key) not in (None, False, [], 0):
            raise PerfmodelError(f"config field {key!r} ({config[key]!r}) changes the structure the hand reader prices; "
                                 "read the config from its transformers class (perfmodel.llm.model_class."
                                 "architecture_from_class) instead")
    _check_rope(config)
    tied = _flag(config, "tie_word_embeddings", False)
    if model_type == "gptj":
        hidden = _size(config, "n_embd")
        heads = _size(config, "n_head")
        return Architecture(
            name=name, hidden=hidden, layers=_size(config, "n_layer"), heads=heads, kv_heads=heads,
            head_dim=_head_dim(config, hidden, heads, "n_embd", "n_head"),
            intermediate=_size(config, "n_inner", default=4 * hidden), vocab=_size(config, "vocab_size"),
            max_positions=_size(config, "n_positions"), tied_embeddings=tied, gated_mlp=False, mlp_bias=True,
            layer_norm_bias=True, norms_per_layer=1, lm_head_bias=True, activation=_activation(config, "gelu"))
    hidden = _size(config, "hidden_size")
    heads = _size(config, "num_attention_heads")
    kv_heads = _size(config, "num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise PerfmodelError(f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})")
    experts = _size(config, "num_local_experts", default=1)
    experts_per_token = _size(config, "num_experts_per_tok", default=1)
    if experts_per_token > experts:
        raise PerfmodelError(f"config field 'num_experts_per_tok' ({experts_per_token}) exceeds 'num_local_experts' "
                             f"({experts}): a token cannot use more experts than a layer has")
    window = config.get("sliding_window")
    return Architecture(
        name=name, hidden=hidden, layers=_size(config, "num_hidden_layers"), heads=heads, kv_heads=kv_heads,
        head_dim=_head_dim(config, hidden, heads, "hidden_size", "num_attention_heads"),
        intermediate=_size(config, "intermediate_size"), vocab=_size(config, "vocab_size"),
        max_positions=_size(config, "max_position_embeddings"), tied_embeddings=tied,
        gated_mlp=_flag(config, "gated_mlp", True),
        norms_per_layer=1 if _flag(config, "parallel_attention_mlp", False) else 2,
        experts=experts, experts_per_token=experts_per_token,
        sliding_window=None if window is None or window is False else _size(config, "sliding_window"),
        activation=_activation(config, "silu"))
