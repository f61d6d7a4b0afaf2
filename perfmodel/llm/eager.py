"""Eager PyTorch as it really runs: the op stream of the Hugging Face model class (edge: torch, transformers).

The condensed LLM graphs (``llm.graphs``) have ~10 ops a layer: the work that matters for a compiled
program. Eager PyTorch runs every aten op of the model's Python code: a Llama layer's RMS norms are
eight kernels each (cast, pow, mean, add, rsqrt, mul, cast, mul), rotary embeddings ten, the KV-cache
update two, plus ~30 views and reshapes that launch nothing but still cost the host Python and the
dispatcher. On a GPU at batch 1 that host work, not HBM, sets the decode time (gpt-fast: 39.2 ms a
token eager vs 9.5 ms with CUDA graphs and torch.compile, Llama-2-7B on an A100).

:class:`CapturedStream` builds a stage graph from the real module: the ``transformers`` class of the
shipped config (a multimodal wrapper's text model: Llama 4, Gemma 3), cut to the shortest prefix of
decoder layers that holds every kind of layer the model has (a kind: experts or a dense MLP, and the
keys its attention sees: full, sliding or chunked window), on meta tensors; each kind's first layer
stands for all of its kind in the stage (its ops get ``count`` = those layers; DeepSeek-V3: 3 dense
and 58 MoE layers from a 4-layer prefix; gpt-oss: 2; Gemma 3: 6), with a ``StaticCache`` (an
in-place KV cache of the context's length, as gpt-fast and torch.compile users run;
``DynamicCache`` would copy the whole cache every step).
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
both graphs read the same expert weights. A class without grouped GEMMs (Llama 4's ``Llama4TextMoe``
repeats every token for every expert, scales it by its score, runs a batched GEMM over all experts and
sums the experts back) has its two expert GEMMs replaced the same way, and the element-wise ops on
``experts x tokens`` rows between them (the repeat, the scaling, the activation, the sum) run on the
expected load's rows too, so that the whole routed path is priced at the load a deployment routes.
Attention is SDPA where the class has it, the class's own eager attention otherwise (gpt-oss: the
sinks).

Latent attention (DeepSeek-V3) is captured as ``transformers`` runs it: the cache holds each token's
compressed latent and rotary key (the KV bytes the architecture counts), and every decode step
re-expands the whole cached latent through ``kv_b_proj`` (materialized, not absorbed as FlashMLA
does; the condensed graph prices the absorbed kernel), so its decode FLOPs grow with the context.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Mapping

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import execution_model, resolve_mode
from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import MULTIMODAL_TEXT_MODELS, Architecture, text_model_type
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
# The grouped GEMM of transformers' ``grouped_mm`` experts (its custom fallback op where torch has none).
GROUPED_MATMULS = ("aten._grouped_mm", "transformers.grouped_mm_fallback")
EXPERT_MATMULS = ("layers.moe.experts.gate_up", "layers.moe.experts.down")


# Hybrid families (llm.model_class reads their recurrent mixers); their torch-fallback scans would be captured
# as thousands of small ops no engine runs, so they stay on the condensed graph.
HYBRID_MODEL_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "granitemoehybrid", "bamba", "nemotron_h")


def text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder's config: a multimodal wrapper's (Llama 4, Gemma 3) ``text_config`` under its text model
    type (what serves the tokens, as ``llm.model_class`` reads the architecture), else the config itself."""
    if config.get("model_type") in MULTIMODAL_TEXT_MODELS and isinstance(config.get("text_config"), Mapping):
        return {**config["text_config"], "model_type": text_model_type(config)}
    return dict(config)


def supports(config: Mapping[str, Any]) -> str | None:
    """Why a config cannot be captured as an eager stream, or None when it can."""
    if isinstance(config.get("text_config"), Mapping) and config.get("model_type") not in MULTIMODAL_TEXT_MODELS:
        return "a multimodal config's text model (text_config) is not captured"
    config = text_config(config)
    if config.get("model_type") in HYBRID_MODEL_TYPES:
        return ("a hybrid's linear-attention / Mamba-2 layers are priced on the condensed graph (their state traffic "
                "and chunked scans); the eager capture does not model them")
    # (vocab_size may be the class's default: Gemma 3's text_config leaves it out)
    if not all(key in config for key in ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers")):
        return "only decoder configs in the Llama layout (hidden_size, num_attention_heads...) are captured"
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as error:
        return f"{error.name} is not installed"
    if config.get("model_type") not in transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return f"transformers has no causal-LM class for model_type {config.get('model_type')!r}"
    return None


def layer_kinds(architecture: Architecture) -> tuple[tuple[bool, int | None], ...]:
    """Each layer's kind as the condensed graph prices it: (routes to experts, keys seen; None: all)."""
    return tuple((architecture.is_moe_layer(layer), architecture.window(layer)) for layer in range(architecture.layers))


def _kind_tag(kind: tuple[bool, int | None]) -> str:
    moe, window = kind
    return f"{'moe' if moe else 'dense'}_{f'window{window}' if window else 'full'}"


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
        kinds = layer_kinds(architecture)
        # The shortest prefix of layers holding every kind: captured once, each kind's first layer stands for them all.
        firsts = {kind: kinds.index(kind) for kind in dict.fromkeys(kinds)}
        captured_layers, end_ops, end_views = _captured(
            self.config_items, parallelism.tp, scenario.activation_dtype, int(scenario.batch),
            scenario.prompt_tokens if phase == "prefill" else 1, int(context), phase, max(firsts.values()) + 1)
        # the heaviest pipeline stage's layers, as the condensed graph counts them (``graphs.layer_groups``)
        stage = [kinds[layer] for layer in architecture.stage_layers(parallelism.pp)]
        ops: list[Op] = []
        for kind, first in firsts.items():
            count = stage.count(kind)
            if not count:
                continue
            layer_ops, views = captured_layers[first]
            _check_kind(architecture, first, kind, layer_ops)
            prefix = "layers." if len(firsts) == 1 else f"layers.{_kind_tag(kind)}."
            ops += [replace(op, name=prefix + op.name, count=count, inputs=_weights(op.inputs, scenario.weight_dtype))
                    for op in layer_ops]
            ops.append(Op(name=f"{prefix}views", kind="view", count=max(views, 1) * count,
                          outputs=(TensorSpec(shape=(1,), dtype=scenario.activation_dtype),)))
        ops += [replace(op, inputs=_weights(op.inputs, scenario.weight_dtype)) for op in end_ops]
        if end_views:
            ops.append(Op(name="ends.views", kind="view", count=end_views,
                          outputs=(TensorSpec(shape=(1,), dtype=scenario.activation_dtype),)))
        grouped = [index for index, op in enumerate(ops) if _expert_gemm(op)]
        condensed = stage_graph(architecture, scenario, parallelism, phase=phase, context=context) \
            if grouped or parallelism.tp > 1 or parallelism.ep > 1 else None
        if grouped:
            assert condensed is not None
            ops = _expected_load(ops, grouped, condensed, architecture)
        if condensed is not None:  # the shard's all-reduces (and all-to-alls), as the condensed graph prices them
            ops += [op for op in condensed.ops if op.kind == "collective"]
        return Graph(name=f"{architecture.name}.{phase}.eager", ops=ops)


def _expert_gemm(op: Op) -> bool:
    """A GEMM over the experts' stacked weights: transformers' grouped GEMM, or the batched GEMM over every
    expert of a class without one (Llama 4's ``Llama4TextExperts``: each expert runs its slice of the tokens)."""
    return op.provenance in GROUPED_MATMULS or (op.kind == "matmul" and ".experts." in op.name and any(
        tensor.role == "weight" and len(tensor.shape) == 3 for tensor in op.inputs))


def _check_kind(architecture: Architecture, layer: int, kind: tuple[bool, int | None], ops: tuple[Op, ...]) -> None:
    """The captured layer is of the kind the architecture says (the class and the reading agree)."""
    routes = any(_expert_gemm(op) for op in ops)
    if routes != kind[0]:
        raise PerfmodelError(f"{architecture.name}: layer {layer} is {'a mixture of experts' if kind[0] else 'dense'} "
                             f"in the architecture but the captured class {'routes' if routes else 'does not route'} "
                             "to experts there; the eager stream cannot price it (use --condensed)")


def _expected_load(ops: list[Op], grouped: list[int], condensed: Graph, architecture: Architecture) -> list[Op]:
    """The captured grouped expert GEMMs replaced by the condensed graph's expert matmuls at the expected
    load (see the module docstring), keeping the captured names and counts (one pair per MoE layer kind)."""
    experts = [op for op in condensed.ops if op.name in EXPERT_MATMULS]
    if not experts or len(grouped) % len(experts):
        raise PerfmodelError(f"{architecture.name}: the captured layers have {len(grouped)} grouped expert GEMMs, the "
                             f"condensed graph {len(experts)} expert matmuls a layer; the eager stream cannot price its "
                             "experts (use --condensed)")
    replaced = list(ops)
    dense_over_experts: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {}
    for position, index in enumerate(grouped):
        expert, captured = experts[position % len(experts)], ops[index]
        replaced[index] = replace(expert, name=captured.name, provenance=captured.provenance, count=captured.count)
        if captured.provenance not in GROUPED_MATMULS:  # a batched GEMM of every expert over every token (Llama 4)
            rows = captured.inputs[0].shape  # (experts, tokens, hidden)
            dense_over_experts[captured.name.split(".experts.", 1)[0] + "."] = (
                (int(rows[0]), int(rows[1])), (int(expert.attrs["batch"]), int(expert.attrs["m"])))
    for module, (every, expected) in dense_over_experts.items():
        for index, op in enumerate(replaced):
            if op.name.startswith(module) and index not in grouped and not any(
                    part in op.name for part in (".router.", ".shared_expert.", ".shared_experts.")):
                replaced[index] = _routed_rows(op, every, expected)
    return replaced


def _routed_rows(op: Op, every: tuple[int, int], expected: tuple[int, int]) -> Op:
    """An op of a MoE block that runs every expert over every token (``every``: experts, tokens) on the expected
    load instead (``expected``: the experts reached, tokens each), as its expert GEMMs: the tokens repeated per
    expert, scaled by their scores, activated and summed back. Tensors of ``experts x tokens`` rows (or leading
    ``(experts, tokens)``) shrink to the expected rows; the others (the tokens, their scores) stay."""
    experts, tokens = every
    reached, each = expected

    def shrunk(tensor: TensorSpec) -> TensorSpec:
        shape = tuple(tensor.shape)
        if len(shape) >= 2 and shape[:2] == (experts, tokens):
            return replace(tensor, shape=(reached, each, *shape[2:]))
        if shape and shape[0] == experts * tokens:
            return replace(tensor, shape=(reached * each, *shape[1:]))
        return tensor

    return replace(op, inputs=tuple(map(shrunk, op.inputs)), outputs=tuple(map(shrunk, op.outputs)))


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


# Per-layer list fields (one entry a layer) cut to the captured prefix; index lists keep the indices inside it.
PER_LAYER_LISTS = ("layer_types", "no_rope_layers")
LAYER_INDEX_LISTS = ("mlp_only_layers", "moe_layers")


@lru_cache(maxsize=64)
def _captured(config_items, tp: int, dtype: str, batch: int, seq: int, context: int, phase: str, layers: int):
    """(per captured layer: (its ops, its views), end ops, end views) of one shard's forward pass over the
    model's first ``layers`` layers."""
    import torch
    import transformers

    from perfmodel.workload.capture import capture

    if dtype not in TORCH_DTYPES:
        raise PerfmodelError(f"the eager stream runs in bf16, fp16 or fp32 activations, not {dtype}")
    config = text_config({key: _thawed(value) for key, value in config_items})
    full = _hf_config(transformers, config)  # the class's defaults for the fields the config leaves out (Gemma 3's vocab)
    heads = full.num_attention_heads
    latent = bool(getattr(full, "kv_lora_rank", None))
    shard: dict[str, Any] = {"num_hidden_layers": layers, "num_attention_heads": heads // tp,
                             "num_key_value_heads": max((getattr(full, "num_key_value_heads", None) or heads) // tp, 1),
                             "intermediate_size": full.intermediate_size // tp, "vocab_size": full.vocab_size // tp}
    if not latent:  # MLA's head_dim is its rotary part (the class sets it), not hidden / heads
        shard["head_dim"] = getattr(full, "head_dim", None) or full.hidden_size // heads
    if getattr(full, "intermediate_size_mlp", None):  # Llama 4's dense layers' width (intermediate_size: an expert's)
        shard["intermediate_size_mlp"] = full.intermediate_size_mlp // tp
    total = full.num_hidden_layers
    for key in PER_LAYER_LISTS:
        if isinstance(config.get(key), list) and len(config[key]) == total:
            shard[key] = config[key][:layers]
    for key in LAYER_INDEX_LISTS:
        if isinstance(config.get(key), list):
            shard[key] = [index for index in config[key] if isinstance(index, int) and index < layers]
    pad = config.get("pad_token_id")
    if isinstance(pad, int) and not isinstance(pad, bool) and pad >= shard["vocab_size"]:
        shard["pad_token_id"] = None  # outside a shard's vocab / tp rows (Phi-4's 100349 at tp 2); it launches nothing
    moe = any(config.get(key) for key in MOE_FIELDS)
    if moe and config.get("moe_intermediate_size"):  # a routed expert's width, split like the dense MLP's
        shard["moe_intermediate_size"] = config["moe_intermediate_size"] // tp
    hf_config = _hf_config(transformers, {**config, **shard})
    model_class: Any = transformers.AutoModelForCausalLM._model_mapping[type(hf_config)]
    # SDPA where the class has it; the class's own eager attention otherwise (gpt-oss: its sinks need it)
    hf_config._attn_implementation = "sdpa" if model_class._supports_sdpa else "eager"
    if moe and model_class._can_set_experts_implementation():
        # static shapes (tokens x top-k rows) instead of a loop over the experts the router hits
        hf_config._experts_implementation = "grouped_mm"
    # torch's grouped GEMM takes bf16 only; fp16 runs the same kernels (the same casts around the norms), so an
    # fp16 stream is the bf16 capture relabelled (its grouped GEMMs are replaced at the expected load anyway)
    relabel = dtype == "fp16" and getattr(hf_config, "_experts_implementation", None) == "grouped_mm"
    torch_dtype = getattr(torch, TORCH_DTYPES["bf16" if relabel else dtype])
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
    cached = _cache_tensors(cache)
    per_layer: list[list[Op]] = [[] for _ in range(layers)]
    end_ops: list[Op] = []
    for op in result.graph.ops:
        op = _kv_roles(_relabelled(op, "bf16", dtype) if relabel else op, cached)
        if op.provenance in CACHE_WRITES and ".experts." not in op.name:
            op = _cache_write(op)
        match = _CAPTURED_LAYER.match(op.name)
        if match and int(match.group(1)) < layers:
            per_layer[int(match.group(1))].append(replace(op, name=match.group(2)))
        else:
            end_ops.append(replace(op, name=op.name.removeprefix("model.")))
    if not all(per_layer):
        raise PerfmodelError(f"the captured {config.get('model_type')} model has no ops under 'model.layers.<i>.' for "
                             "some layer: its decoder layers are named differently; use --condensed")
    views = [0] * layers
    for module, count in result.free_by_module.items():
        match = _CAPTURED_MODULE.match(module)
        if match and int(match.group(1)) < layers:
            views[int(match.group(1))] += count
    captured = tuple((tuple(ops), views[layer]) for layer, ops in enumerate(per_layer))
    return captured, tuple(end_ops), result.free_ops - sum(views)


def _hf_config(transformers: Any, config: Mapping[str, Any]) -> Any:
    try:
        return transformers.AutoConfig.for_model(**config)
    # transformers validates the fields itself (huggingface_hub's strict dataclasses raise their own
    # StrictDataclassError, a plain Exception; older versions TypeError/ValueError): any of them is bad input.
    except Exception as error:
        raise PerfmodelError(f"transformers refuses this {config.get('model_type', 'model')} config for the eager "
                             f"op stream: {error}; fix the field in the config, or use --condensed") from None


_CAPTURED_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_CAPTURED_MODULE = re.compile(r"^model\.layers\.(\d+)(?:\.|$)")


def _relabelled(op: Op, captured: str, wanted: str) -> Op:
    """``op`` with its ``captured``-dtype tensors (and compute dtype) in the ``wanted`` dtype of the same width."""
    def tensor(spec: TensorSpec) -> TensorSpec:
        return replace(spec, dtype=wanted) if spec.dtype == captured else spec

    attrs = {**op.attrs, "dtype": wanted} if op.attrs.get("dtype") == captured else op.attrs
    return replace(op, inputs=tuple(map(tensor, op.inputs)), outputs=tuple(map(tensor, op.outputs)), attrs=attrs)


def _cache_tensors(cache: Any) -> set[tuple[int, ...]]:
    """The shapes of the static cache's K and V tensors (full layers: the context; windowed: the window)."""
    shapes = set()
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if tensor is not None and hasattr(tensor, "shape"):
                shapes.add(tuple(tensor.shape))
    return shapes


def _kv_roles(op: Op, kv_shapes: set[tuple[int, ...]]) -> Op:
    def role(tensor: TensorSpec) -> TensorSpec:
        return replace(tensor, role="kv_cache") if tuple(tensor.shape) in kv_shapes else tensor

    return replace(op, inputs=tuple(role(t) for t in op.inputs), outputs=tuple(role(t) for t in op.outputs))


def _cache_write(op: Op) -> Op:
    """An in-place cache update writes the new tokens' K or V (its last input) into the cache: it reads
    and writes those, not the whole cache (the capture sees the cache as input and output)."""
    source = op.inputs[-1]
    return replace(op, kind="copy", inputs=(replace(source, role="activation"),),
                   outputs=(replace(source, role="kv_cache"),), attrs={})
