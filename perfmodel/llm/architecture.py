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


def _required(config: Mapping, *keys: str):
    for key in keys:
        if key in config and config[key] is not None:
            return config[key]
    raise PerfmodelError(f"config lacks {' / '.join(keys)}: a decoder config needs it (see workloads/llm/*.json)")


def _activation(config: Mapping, default: str) -> str:
    """The MLP activation's function family: ``gelu_new``, ``gelu_pytorch_tanh``... -> gelu; swish -> silu."""
    name = str(config.get("hidden_act") or config.get("activation_function") or default).lower()
    return "gelu" if name.startswith("gelu") else "silu" if name in ("silu", "swish") else name


def from_hf_config(config: Mapping, name: str | None = None) -> Architecture:
    """An :class:`Architecture` from a Hugging Face ``config.json`` mapping (no download)."""
    model_type = str(config.get("model_type", "llama"))
    name = name or str(config.get("_name_or_path") or model_type)
    if model_type == "gptj":
        hidden = int(_required(config, "n_embd"))
        heads = int(_required(config, "n_head"))
        return Architecture(
            name=name, hidden=hidden, layers=int(_required(config, "n_layer")), heads=heads, kv_heads=heads,
            head_dim=hidden // heads, intermediate=int(config.get("n_inner") or 4 * hidden),
            vocab=int(_required(config, "vocab_size")), max_positions=int(_required(config, "n_positions")),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)), gated_mlp=False, mlp_bias=True,
            layer_norm_bias=True, norms_per_layer=1, lm_head_bias=True, activation=_activation(config, "gelu"))
    hidden = int(_required(config, "hidden_size"))
    heads = int(_required(config, "num_attention_heads"))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    if heads % kv_heads:
        raise PerfmodelError(f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})")
    return Architecture(
        name=name, hidden=hidden, layers=int(_required(config, "num_hidden_layers")), heads=heads, kv_heads=kv_heads,
        head_dim=int(config.get("head_dim") or hidden // heads), intermediate=int(_required(config, "intermediate_size")),
        vocab=int(_required(config, "vocab_size")), max_positions=int(_required(config, "max_position_embeddings")),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        gated_mlp=bool(config.get("gated_mlp", True)),
        norms_per_layer=1 if config.get("parallel_attention_mlp") else 2,
        experts=int(config.get("num_local_experts") or 1), experts_per_token=int(config.get("num_experts_per_tok") or 1),
        sliding_window=int(config["sliding_window"]) if config.get("sliding_window") else None,
        activation=_activation(config, "silu"))
