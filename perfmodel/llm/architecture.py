"""Decoder-only transformer architectures from Hugging Face ``config.json`` fields (pure core).

Supported families: Llama/Mistral/Granite/Gemma-style (RMS norm, gated SiLU/GELU MLP, GQA),
Mixtral-style mixture of experts (``num_local_experts``, ``num_experts_per_tok``), and GPT-J
(``n_embd``/``n_layer``/``n_head``; parallel attention and a plain GELU MLP with biases).

Two optional perfmodel keys describe blocks Hugging Face's Llama config cannot: ``gated_mlp: false``
(a plain two-matrix MLP, e.g. MaxText's 2023 synthetic models) and ``parallel_attention_mlp: true``
(PaLM/GPT-J-style parallel layers sharing one pre-norm; the attention and MLP are still priced one
after the other).

Parameter counting convention: every weight matrix and bias, the norms' scales (and biases for
layer norm), the token embedding, and the LM head unless tied to the embedding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from perfmodel.errors import PerfmodelError

GATED_MLP_MATRICES = 3  # gate, up, down
PLAIN_MLP_MATRICES = 2  # fc_in, fc_out


@dataclass(frozen=True, kw_only=True)
class Architecture:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_positions: int
    tied_embeddings: bool
    gated_mlp: bool = True
    mlp_bias: bool = False
    layer_norm_bias: bool = False
    norms_per_layer: int = 2
    experts: int = 1
    experts_per_token: int = 1
    lm_head_bias: bool = False
    sliding_window: int | None = None  # keys each query sees (Mistral); None: the whole context
    activation: str = "silu"  # the MLP's activation function (config ``hidden_act``/``activation_function``)

    def cached_tokens(self, context):
        """Tokens of KV cache a sequence keeps: a sliding-window model keeps a rolling buffer of the
        last ``sliding_window`` (Mistral 7B paper, arXiv 2310.06825, section 2 "Rolling Buffer Cache")."""
        return context if self.sliding_window is None else np.minimum(context, self.sliding_window)

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def attention_parameters(self) -> int:
        return self.hidden * self.q_width * 2 + self.hidden * self.kv_width * 2

    @property
    def expert_parameters(self) -> int:
        matrices = GATED_MLP_MATRICES if self.gated_mlp else PLAIN_MLP_MATRICES
        biases = (self.intermediate + self.hidden) if self.mlp_bias else 0
        return matrices * self.hidden * self.intermediate + biases

    @property
    def layer_parameters(self) -> int:
        router = self.hidden * self.experts if self.experts > 1 else 0
        norm = self.hidden * (2 if self.layer_norm_bias else 1)
        return self.attention_parameters + self.experts * self.expert_parameters + router + self.norms_per_layer * norm

    def parameter_count(self) -> int:
        embedding = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else self.vocab * self.hidden + (self.vocab if self.lm_head_bias else 0)
        final_norm = self.hidden * (2 if self.layer_norm_bias else 1)
        return embedding + self.layers * self.layer_parameters + final_norm + head

    def active_parameter_count(self) -> int:
        """Parameters touched per token (MoE: only the routed experts)."""
        inactive = (self.experts - self.experts_per_token) * self.expert_parameters * self.layers
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

    def stage_parameters(self, pp: int) -> int:
        """Parameters of the fullest of ``pp`` pipeline stages: ``ceil(layers / pp)`` layers and the
        larger end (embedding or LM head); one stage holds both ends, sharing a tied head's matrix."""
        if pp == 1:
            tied = self.vocab * self.hidden if self.tied_embeddings else 0
            ends = self.embedding_parameters + self.head_parameters - tied
        else:
            ends = max(self.embedding_parameters, self.head_parameters)
        return math.ceil(self.layers / pp) * self.layer_parameters + ends

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """2 (K and V) x layers x kv_heads x head_dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_bytes_per_element


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


def from_hf_config(config: Mapping, name: str | None = None) -> Architecture:
    """An :class:`Architecture` from a Hugging Face ``config.json`` mapping (no download). Sizes must be
    whole numbers from 1 to :data:`MAX_CONFIG_SIZE`, flags JSON booleans: anything else is a
    :class:`PerfmodelError` naming the field."""
    if not isinstance(config, Mapping):
        raise PerfmodelError(f"a model config is a JSON object of fields (hidden_size, num_attention_heads...), got "
                             f"{type(config).__name__}; {CONFIG_HINT}")
    model_type = _text(config, "model_type", "llama")
    name = name or str(config.get("_name_or_path") or model_type)
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
