"""Eager PyTorch as it really runs: the op stream of the Hugging Face model class (edge: torch, transformers).

The condensed LLM graphs (``llm.graphs``) have ~10 ops a layer: the work that matters for a compiled
program. Eager PyTorch runs every aten op of the model's Python code: a Llama layer's RMS norms are
eight kernels each (cast, pow, mean, add, rsqrt, mul, cast, mul), rotary embeddings ten, the KV-cache
update two, plus ~30 views and reshapes that launch nothing but still cost the host Python and the
dispatcher. On a GPU at batch 1 that host work, not HBM, sets the decode time (gpt-fast: 39.2 ms a
token eager vs 9.5 ms with CUDA graphs and torch.compile, Llama-2-7B on an A100).

:class:`CapturedStream` builds a stage graph from the real module: the ``transformers`` class of the
shipped config, with one decoder layer (a stage's layers are identical, so its ops get ``count =
layers``), on meta tensors, with a ``StaticCache`` (an in-place KV cache of the context's length,
as gpt-fast and torch.compile users run; ``DynamicCache`` would copy the whole cache every step).
Tensor parallelism runs each rank's shard (heads, KV heads, MLP width and vocabulary divided by
``tp``) plus the condensed graph's all-reduces; views become one ``view`` op per module group,
which eager mode charges the spec's ``host_op`` each. The KV-cache writes (``index_copy_``, in
place) move the new token's K and V only.

Mixture-of-experts layers are captured with ``transformers``' ``grouped_mm`` experts implementation
(its default where ``torch`` has grouped GEMMs): the router's matmul, softmax and top-k, the sort of
the token-expert pairs, ``histc`` and ``cumsum`` of the group offsets, the gathers, the gating and the
weighted sum are the real kernels with static shapes (tokens x top-k rows). Routing itself is data
dependent, so each of the two grouped GEMMs (``aten._grouped_mm``, which the capture sees reading every
expert's weights) is replaced by the condensed graph's expert matmul at the expected load: the routed
tokens spread evenly over the experts they reach (``min(experts / ep, tokens x top-k / ep)`` experts,
``ceil(routed / reached)`` rows each: an imbalance factor of 1, the condensed graph's convention), so
both graphs read the same expert weights. Models whose layers differ (dense and MoE layers, windows
per layer) or that use latent attention still use the condensed graph (``supports`` says why).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Mapping

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import execution_model, resolve_mode
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, stage_graph
from perfmodel.llm.metrics import StageGraphs
from perfmodel.workload.ir import Graph, Op, TensorSpec

LAYER_PREFIX = "model.layers.0."
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
CACHE_WRITES = ("aten.index_copy_", "aten.index_copy", "aten.index_put_")


def stage_graphs_for(config: Mapping[str, Any], hardware: Hardware, mode: str | None,
                     condensed: bool = False) -> tuple[StageGraphs, str | None]:
    """The stage-graph builder for a prediction: the captured eager stream when the mode is eager-style
    and the model can be captured, else the condensed graphs; and a note when eager had to fall back."""
    if condensed or execution_model(resolve_mode(hardware, mode)).style != "eager":
        return stage_graph, None
    reason = supports(config)
    if reason:
        return stage_graph, f"eager mode priced with the condensed graph (~12 ops a layer): {reason}"
    return CapturedStream.from_config(config), None


# Config fields that make a layer a mixture of experts (Mixtral, Qwen3-MoE, DeepSeek).
MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")


# Config fields with which some layers of a MoE model are dense (field -> the values with which none is).
MIXED_MOE_FIELDS = {"first_k_dense_replace": (None, 0), "mlp_only_layers": (None, []), "decoder_sparse_step": (None, 1),
                    "interleave_moe_layer_step": (None, 1), "moe_layer_freq": (None, 1)}
# The grouped GEMM of transformers' ``grouped_mm`` experts (its custom fallback op where torch has none).
GROUPED_MATMULS = ("aten._grouped_mm", "transformers.grouped_mm_fallback")
EXPERT_MATMULS = ("layers.moe.experts.gate_up", "layers.moe.experts.down")


def supports(config: Mapping[str, Any]) -> str | None:
    """Why a config cannot be captured as an eager stream, or None when it can."""
    if isinstance(config.get("text_config"), Mapping):
        return "a multimodal config's text model (text_config) is not captured"
    if not all(key in config for key in ("hidden_size", "num_attention_heads", "intermediate_size",
                                         "num_hidden_layers", "vocab_size")):
        return "only decoder configs in the Llama layout (hidden_size, num_attention_heads...) are captured"
    mixed = [key for key, dense in MIXED_MOE_FIELDS.items() if config.get(key) not in dense]
    if any(config.get(key) for key in MOE_FIELDS) and mixed:
        return (f"its layers differ in MLP ({', '.join(mixed)}: dense and mixture-of-experts layers), and one captured "
                "layer would stand for all of them")
    if config.get("kv_lora_rank"):
        return "multi-head latent attention is not captured (the one-layer shard is cut in the Llama layout)"
    types = config.get("layer_types")
    if isinstance(types, list) and len(set(map(str, types))) > 1:
        return "its layers differ in attention (layer_types), and one captured layer would stand for all of them"
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as error:
        return f"{error.name} is not installed"
    if config.get("model_type") not in transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return f"transformers has no causal-LM class for model_type {config.get('model_type')!r}"
    return None


@dataclass(frozen=True)
class CapturedStream:
    """A stage-graph builder (same signature as ``llm.graphs.stage_graph``) from the captured module."""

    config_items: tuple[tuple[str, Any], ...]
    label: str = "captured eager stream (transformers, StaticCache)"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CapturedStream:
        reason = supports(config)
        if reason:
            raise PerfmodelError(f"cannot capture the eager op stream of this model: {reason}")
        return cls(config_items=tuple(sorted((key, _frozen(value)) for key, value in config.items()
                                             if not key.startswith("_"))))

    def __call__(self, architecture: Architecture, scenario: Scenario, parallelism: Parallelism, *, phase: str,
                 context: int) -> Graph:
        if not isinstance(scenario.batch, int) and getattr(scenario.batch, "ndim", False):
            raise PerfmodelError("the captured eager stream takes one batch size at a time")
        layer_ops, end_ops, views = _captured(self.config_items, parallelism.tp, scenario.activation_dtype,
                                              int(scenario.batch), scenario.prompt_tokens if phase == "prefill" else 1,
                                              int(context), phase)
        layers = -(-architecture.layers // parallelism.pp)
        ops = [replace(op, count=layers, inputs=_weights(op.inputs, scenario.weight_dtype))
               for op in layer_ops]
        ops += [replace(op, inputs=_weights(op.inputs, scenario.weight_dtype)) for op in end_ops]
        layer_views, end_views = views
        ops.append(Op(name="layers.views", kind="view", count=max(layer_views, 1) * layers,
                      outputs=(TensorSpec(shape=(1,), dtype=scenario.activation_dtype),)))
        if end_views:
            ops.append(Op(name="ends.views", kind="view", count=end_views,
                          outputs=(TensorSpec(shape=(1,), dtype=scenario.activation_dtype),)))
        grouped = [index for index, op in enumerate(ops) if op.provenance in GROUPED_MATMULS]
        condensed = stage_graph(architecture, scenario, parallelism, phase=phase, context=context) \
            if grouped or parallelism.tp > 1 or parallelism.ep > 1 else None
        if grouped:
            assert condensed is not None
            ops = _expected_load(ops, grouped, condensed, architecture)
        if condensed is not None:  # the shard's all-reduces (and all-to-alls), as the condensed graph prices them
            ops += [op for op in condensed.ops if op.kind == "collective"]
        return Graph(name=f"{architecture.name}.{phase}.eager", ops=ops)


def _expected_load(ops: list[Op], grouped: list[int], condensed: Graph, architecture: Architecture) -> list[Op]:
    """The captured grouped expert GEMMs replaced by the condensed graph's expert matmuls at the expected
    load (see the module docstring), keeping the captured names."""
    if architecture.moe_layer_count != architecture.layers:
        raise PerfmodelError(f"{architecture.name}: {architecture.moe_layer_count} of {architecture.layers} layers "
                             "route to experts; one captured layer cannot stand for both kinds (use --condensed)")
    experts = [op for op in condensed.ops if op.name in EXPERT_MATMULS]
    if len(experts) != len(grouped):
        raise PerfmodelError(f"{architecture.name}: the captured layer has {len(grouped)} grouped expert GEMMs, the "
                             f"condensed graph {len(experts)} expert matmuls; the eager stream cannot price its experts "
                             "(use --condensed)")
    replaced = list(ops)
    for index, expert in zip(grouped, experts, strict=True):
        replaced[index] = replace(expert, name=ops[index].name, provenance=ops[index].provenance)
    return replaced


_DICT, _LIST = "<dict>", "<list>"  # tags that keep a frozen mapping apart from a frozen list of pairs


def _frozen(value: Any) -> Any:
    """A hashable, exactly reversible form of a JSON config value (the capture cache's key): mappings
    and lists are tagged, so that ``id2label`` with integer keys or a list of pairs thaw as they were."""
    if isinstance(value, dict):
        return (_DICT, tuple(sorted(((key, _frozen(item)) for key, item in value.items()), key=lambda pair: repr(pair[0]))))
    if isinstance(value, list):
        return (_LIST, tuple(_frozen(item) for item in value))
    return value


def _thawed(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == _DICT:
        return {key: _thawed(item) for key, item in value[1]}
    if isinstance(value, tuple) and len(value) == 2 and value[0] == _LIST:
        return [_thawed(item) for item in value[1]]
    return value


def _weights(tensors, weight_dtype: str) -> tuple[TensorSpec, ...]:
    """Weights stored in the scenario's weight dtype (the capture ran in the activation dtype)."""
    return tuple(replace(tensor, dtype=weight_dtype) if tensor.role == "weight" else tensor for tensor in tensors)


@lru_cache(maxsize=64)
def _captured(config_items, tp: int, dtype: str, batch: int, seq: int, context: int, phase: str):
    """(per-layer ops, end ops, (per-layer views, end views)) of one shard's forward pass."""
    import torch
    import transformers

    from perfmodel.workload.capture import capture

    if dtype not in TORCH_DTYPES:
        raise PerfmodelError(f"the eager stream runs in bf16, fp16 or fp32 activations, not {dtype}")
    config = {key: _thawed(value) for key, value in config_items}
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    shard = {"num_hidden_layers": 1, "head_dim": head_dim, "num_attention_heads": heads // tp,
             "num_key_value_heads": max((config.get("num_key_value_heads") or heads) // tp, 1),
             "intermediate_size": config["intermediate_size"] // tp, "vocab_size": config["vocab_size"] // tp}
    if isinstance(config.get("layer_types"), list) and config["layer_types"]:  # one layer of the (uniform) kinds
        shard["layer_types"] = config["layer_types"][:1]
    pad = config.get("pad_token_id")
    if isinstance(pad, int) and not isinstance(pad, bool) and pad >= shard["vocab_size"]:
        shard["pad_token_id"] = None  # outside a shard's vocab / tp rows (Phi-4's 100349 at tp 2); it launches nothing
    moe = any(config.get(key) for key in MOE_FIELDS)
    if moe and config.get("moe_intermediate_size"):  # a routed expert's width, split like the dense MLP's
        shard["moe_intermediate_size"] = config["moe_intermediate_size"] // tp
    try:
        hf_config = transformers.AutoConfig.for_model(**{**config, **shard})
    # transformers validates the fields itself (huggingface_hub's strict dataclasses raise their own
    # StrictDataclassError, a plain Exception; older versions TypeError/ValueError): any of them is bad input.
    except Exception as error:
        raise PerfmodelError(f"transformers refuses this {config.get('model_type', 'model')} config for the eager "
                             f"op stream: {error}; fix the field in the config, or use --condensed") from None
    hf_config._attn_implementation = "sdpa"
    if moe:  # static shapes (tokens x top-k rows) instead of a loop over the experts the router hits
        hf_config._experts_implementation = "grouped_mm"
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch_dtype).eval()
    cache = transformers.StaticCache(config=hf_config, max_cache_len=context, device="meta", dtype=torch_dtype,
                                     max_batch_size=batch)
    start = context - seq
    # generate() asks for the last position's logits only (``logits_to_keep=1``), as the condensed graph.
    kwargs = {"past_key_values": cache, "use_cache": True, "logits_to_keep": 1,
              "cache_position": torch.arange(start, context, device="meta")}
    with warnings.catch_warnings():  # transformers' deprecation notices about cache keywords are not ours
        warnings.simplefilter("ignore", FutureWarning)
        result = capture(model, (torch.empty(batch, seq, dtype=torch.long, device="meta"),), forward_kwargs=kwargs,
                         name=f"{config.get('model_type')}.{phase}")
    kv_shape = (batch, shard["num_key_value_heads"], context, head_dim)
    layer_ops: list[Op] = []
    end_ops: list[Op] = []
    for op in result.graph.ops:
        op = _kv_roles(op, kv_shape)
        if op.provenance in CACHE_WRITES and ".experts." not in op.name:
            op = _cache_write(op)
        target = layer_ops if op.name.startswith(LAYER_PREFIX) else end_ops
        target.append(replace(op, name=op.name.removeprefix("model.").replace("layers.0.", "layers.")))
    if not layer_ops:
        raise PerfmodelError(f"the captured {config.get('model_type')} model has no ops under {LAYER_PREFIX!r}: "
                             "its decoder layers are named differently; use --condensed")
    layer_views = sum(count for module, count in result.free_by_module.items() if module.startswith("model.layers.0"))
    return tuple(layer_ops), tuple(end_ops), (layer_views, result.free_ops - layer_views)


def _kv_roles(op: Op, kv_shape: tuple[int, ...]) -> Op:
    def role(tensor: TensorSpec) -> TensorSpec:
        return replace(tensor, role="kv_cache") if tuple(tensor.shape) == kv_shape else tensor

    return replace(op, inputs=tuple(role(t) for t in op.inputs), outputs=tuple(role(t) for t in op.outputs))


def _cache_write(op: Op) -> Op:
    """An in-place cache update writes the new tokens' K or V (its last input) into the cache: it reads
    and writes those, not the whole cache (the capture sees the cache as input and output)."""
    source = op.inputs[-1]
    return replace(op, kind="copy", inputs=(replace(source, role="activation"),),
                   outputs=(replace(source, role="kv_cache"),), attrs={})
