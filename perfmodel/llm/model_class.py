"""An :class:`Architecture` read off the model's own ``transformers`` class (edge: torch, transformers).

The class is built from the config on the meta device (no weights, no download). Every parameter is
classified by its place in the module tree into one module kind (embedding, attention, mlp, experts,
shared_experts, router, norms, lm_head); the shapes give the widths (query and KV projections, MLA's
ranks, the dense MLP's, a routed expert's, the shared experts'), which layers route to experts, and
the biases, sinks and norms there are. Read by hand from the config, because no shape holds them:
the number of attention heads (a projection's width is heads x head_dim), the router's top-k, each
layer's attention window (``layer_types`` with ``sliding_window`` / ``attention_chunk_size``), the
activation and the positions. The derived record must then count exactly the class's parameters,
kind by kind; a model it cannot price exactly (a module it does not know, layers that differ in a way
it does not model) is refused with the module named, never guessed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Mapping

from perfmodel.errors import PerfmodelError
from perfmodel.llm.architecture import (
    MULTIMODAL_TEXT_MODELS,
    WHOLE_CONTEXT,
    Architecture,
    LatentAttention,
    RecurrentMixer,
    _activation,
    text_model_type,
)

MODULE_KINDS = ("embedding", "attention", "linear_attention", "mlp", "experts", "shared_experts", "router", "norms",
                "lm_head")
_LAYER = re.compile(r"^(?:model\.layers|transformer\.h|model\.language_model\.layers)\.(\d+)\.(.+)$")
_ATTENTION = ("self_attn.", "attn.")
_LINEAR = ("linear_attn.", "mamba.")  # a hybrid's recurrent mixer: gated delta net (Qwen3-Next), Mamba-2
_MLP = ("mlp.", "feed_forward.", "block_sparse_moe.")
# Granite-4.0's MLP beside its routed experts (GraniteMoeHybridMLP: input_linear makes gate and up, output_linear
# is down): the shared expert of a MoE layer, the dense MLP of a layer without experts.
_SHARED_MLP = "shared_mlp."
_LAYER_NORMS = re.compile(r"^(input_layernorm|post_attention_layernorm|pre_feedforward_layernorm|"
                          r"post_feedforward_layernorm|pre_ff_layernorm|ln_1|ln_2)\.(weight|bias)$")
_OUTSIDE = {"model.embed_tokens.weight": "embedding", "transformer.wte.weight": "embedding",
            "lm_head.weight": "lm_head", "lm_head.bias": "lm_head", "model.norm.weight": "norms",
            "model.norm.bias": "norms", "model.final_layernorm.weight": "norms", "transformer.ln_f.weight": "norms",
            "transformer.ln_f.bias": "norms"}
# Windows each attention kind of ``layer_types`` sees. Chunked attention (Llama 4: each query sees the
# keys of its own chunk, at most attention_chunk_size) keeps the chunk as its window (the most a layer
# caches) with ``Architecture.chunked_attention`` set: the attention kernel prices a query's own chunk.
_WINDOW_FIELD = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}


def meta_model(config: Mapping) -> tuple[Any, Any]:
    """The ``transformers`` config object and causal-LM model built from ``config`` on the meta device."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as error:
        raise PerfmodelError(f"reading a model config needs torch and transformers ({error.name} is not installed): "
                             "pip install 'perfmodel[torch]'") from None
    fields = {key: value for key, value in config.items() if not key.startswith("_")}
    model_type = fields.pop("model_type", None)
    if model_type in MULTIMODAL_TEXT_MODELS:  # a multimodal config: its text model is what serves tokens
        fields, model_type = dict(fields.get("text_config") or {}), text_model_type(config)
        fields.pop("model_type", None)
    fields.pop("architectures", None)
    fields.pop("auto_map", None)
    fields.pop("quantization_config", None)  # the weight format is the scenario's --dtype, not the config's
    if not isinstance(model_type, str):
        raise PerfmodelError("config lacks 'model_type': perfmodel builds the model's own transformers class from it "
                             "(llama, qwen3_moe, deepseek_v3, ...)")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise PerfmodelError(f"model_type {model_type!r} is not a model class the installed transformers "
                             f"{transformers_version()} knows; perfmodel reads architectures from their classes and "
                             "does not guess")
    # transformers validates the fields itself (huggingface_hub's strict dataclasses raise their own
    # StrictDataclassError, a plain Exception; others TypeError/ValueError): any of them is bad input.
    try:
        hf_config = AutoConfig.for_model(model_type, **fields)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except Exception as error:
        raise PerfmodelError(f"transformers cannot build a {model_type} causal LM from this config: "
                             f"{type(error).__name__}: {error}") from None
    return hf_config, model


def transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def parameter_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    """Every distinct parameter (a tied head appears once, as the embedding) and its shape, under the names
    of the common layout (``_common_names``)."""
    return _common_names({name: tuple(parameter.shape) for name, parameter in model.named_parameters()})


_BLOCK = re.compile(r"^model\.layers\.(\d+)\.(mixer\.|norm\.weight$)")
_BLOCK_OUTSIDE = {"model.embeddings.weight": "model.embed_tokens.weight", "model.norm_f.weight": "model.norm.weight"}


def _common_names(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Nemotron-H's blocks (``model.layers.N.mixer.*`` and one ``norm``: a block is a Mamba-2 mixer, an
    attention, a MoE or an MLP alone) renamed into the common layout by what the mixer holds (A_log: a
    Mamba-2 mixer; q_proj: attention; anything else: the MLP or MoE), its norm as the pre-norm of that
    part; every other model's names unchanged. Only names change: each parameter keeps its shape."""
    if not any(_BLOCK.match(name) for name in shapes):
        return shapes
    mixers: dict[str, list[str]] = defaultdict(list)
    for name in shapes:
        match = _BLOCK.match(name)
        if match and match.group(2) == "mixer.":
            mixers[match.group(1)].append(name.split(".mixer.", 1)[1])
    renamed = {}
    for name, shape in shapes.items():
        match = _BLOCK.match(name)
        if not match:
            renamed[_BLOCK_OUTSIDE.get(name, name)] = shape
            continue
        layer, inner = match.group(1), mixers[match.group(1)]
        part = "mamba" if "A_log" in inner else "self_attn" if "q_proj.weight" in inner else "mlp"
        if match.group(2) == "mixer.":
            renamed[f"model.layers.{layer}.{part}.{name.split('.mixer.', 1)[1]}"] = shape
        else:
            norm = "post_attention_layernorm" if part == "mlp" else "input_layernorm"
            renamed[f"model.layers.{layer}.{norm}.weight"] = shape
    return renamed


def kind_of(name: str) -> tuple[int | None, str]:
    """(layer index or None, module kind) of a parameter name; a name no rule knows is an error."""
    if name in _OUTSIDE:
        return None, _OUTSIDE[name]
    match = _LAYER.match(name)
    if match:
        layer, rest = int(match.group(1)), match.group(2)
        if rest.startswith(_LINEAR):
            return layer, "linear_attention"
        if rest.startswith(_SHARED_MLP) and rest.split(".")[1] in ("input_linear", "output_linear"):
            return layer, "shared_experts"  # (the dense MLP of a layer without experts: class_parameters_by_kind)
        if rest.startswith(_ATTENTION):
            return layer, "attention"
        if _LAYER_NORMS.match(rest):
            return layer, "norms"
        if rest.startswith(_MLP):
            inner = rest.split(".", 1)[1]
            if inner.startswith("experts."):
                return layer, "experts"
            if inner.startswith(("shared_experts.", "shared_expert.", "shared_expert_gate.")):
                return layer, "shared_experts"
            if inner.startswith(("gate.", "router.")):
                return layer, "router"
            if inner.split(".")[0] in ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "fc_in", "fc_out"):
                return layer, "mlp"
    raise PerfmodelError(f"parameter {name!r} belongs to a module perfmodel does not price; the model cannot be "
                         "priced exactly, so it is refused")


def class_parameters_by_kind(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    counts = dict.fromkeys(MODULE_KINDS, 0)
    moe_layers = {kind_of(name)[0] for name in shapes if ".experts." in name}
    for name, shape in shapes.items():
        numel = 1
        for size in shape:
            numel *= size
        layer, kind = kind_of(name)
        counts["mlp" if kind == "shared_experts" and _SHARED_MLP in name and layer not in moe_layers else kind] += numel
    return counts


def _layers(shapes: Mapping[str, tuple[int, ...]]) -> dict[int, dict[str, tuple[int, ...]]]:
    """Each layer's parameters by their name inside the layer."""
    layers: dict[int, dict[str, tuple[int, ...]]] = defaultdict(dict)
    for name, shape in shapes.items():
        match = _LAYER.match(name)
        if match:
            layers[int(match.group(1))][match.group(2)] = shape
    return dict(sorted(layers.items()))


def _find(params: Mapping[str, tuple[int, ...]], *suffixes: str) -> tuple[int, ...] | None:
    for suffix in suffixes:
        for name, shape in params.items():
            if name.endswith(suffix):
                return shape
    return None


def _has(params: Mapping[str, tuple[int, ...]], pattern: str) -> bool:
    return any(re.search(pattern, name) for name in params)


def _attention_fields(params: Mapping[str, tuple[int, ...]], heads: int, hidden: int) -> dict[str, Any]:
    attention = {name: shape for name, shape in params.items() if name.startswith(_ATTENTION)}
    common = {"qk_norm": _has(attention, r"\.(q_norm|k_norm)\.weight$"),
              "attention_sinks": _has(attention, r"\.sinks$"),
              "output_bias": _has(attention, r"\.(o_proj|out_proj)\.bias$")}
    kv_a = _find(attention, "kv_a_proj_with_mqa.weight")
    if kv_a is not None:  # multi-head latent attention
        kv_lora = _find(attention, "kv_a_layernorm.weight")
        kv_b, out = _find(attention, "kv_b_proj.weight"), _find(attention, "o_proj.weight")
        q_a, q = _find(attention, "q_a_proj.weight"), _find(attention, "q_b_proj.weight", "q_proj.weight")
        if kv_lora is None or kv_b is None or out is None or q is None:
            raise PerfmodelError(f"latent attention without kv_a_layernorm, kv_b_proj, o_proj or a query projection "
                                 f"({', '.join(attention)}): not a structure perfmodel prices")
        rope = kv_a[0] - kv_lora[0]
        qk_head = q[0] // heads
        v_head = out[1] // heads
        latent = LatentAttention(q_lora_rank=None if q_a is None else q_a[0], kv_lora_rank=kv_lora[0],
                                 qk_nope_head_dim=qk_head - rope, qk_rope_head_dim=rope, v_head_dim=v_head)
        return {**common, "latent": latent, "head_dim": qk_head, "kv_heads": heads}
    q, k = _find(attention, "q_proj.weight"), _find(attention, "k_proj.weight")
    fused = _find(attention, "qkv_proj.weight")
    if q is None and fused is None:
        raise PerfmodelError(f"attention without q_proj or qkv_proj ({', '.join(attention) or 'no parameters'}): "
                             "not a structure perfmodel prices (linear attention and state-space layers are not modeled)")
    out = _find(attention, "o_proj.weight")
    gate = q is not None and out is not None and q[0] == 2 * out[1]  # the query and its output gate, interleaved
    if q is not None and k is not None:
        q_width, kv_width = (q[0] // 2 if gate else q[0]), k[0]
    else:
        assert fused is not None
        out = _find(attention, "o_proj.weight")
        q_width = out[1] if out is not None else hidden
        kv_width = (fused[0] - q_width) // 2
    head_dim = q_width // heads
    if q_width % heads or kv_width % head_dim:
        raise PerfmodelError(f"query width {q_width} and KV width {kv_width} are not whole heads of "
                             f"{heads} heads (num_attention_heads)")
    return {**common, "head_dim": head_dim, "kv_heads": kv_width // head_dim, "attention_gate": gate,
            "qkv_bias": _has(attention, r"\.(q_proj|qkv_proj)\.bias$")}


def _config_size(hf_config: Any, *names: str) -> int:
    """A width the class's shapes hold only as a product (heads x head dim): read by hand from the config."""
    for field_name in names:
        value = getattr(hf_config, field_name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise PerfmodelError(f"the config gives no {' / '.join(names)}: the recurrent mixer's heads cannot be read")


def _state_dtype(hf_config: Any) -> str | None:
    """The recurrent state's dtype when the config fixes it (``mamba_ssm_dtype`` / ``mamba_ssm_cache_dtype``,
    read by hand: no parameter holds it); None: the KV cache's."""
    from perfmodel.dtypes import ALIASES, DTYPES

    for field_name in ("mamba_ssm_dtype", "mamba_ssm_cache_dtype"):
        value = getattr(hf_config, field_name, None)
        if value is None or value == "auto":
            continue
        name = ALIASES.get(str(value).removeprefix("torch."), str(value))
        if name not in DTYPES:
            raise PerfmodelError(f"config field {field_name!r}: {value!r} is not a dtype perfmodel knows (float32, "
                                 "bfloat16, float16)")
        return name
    return None


def _mixer_fields(params: Mapping[str, tuple[int, ...]], hf_config: Any) -> RecurrentMixer:
    """The recurrent mixer of one linear layer, from its shapes (heads from A_log, the value width from
    out_proj, the conv's channels and taps from conv1d); the key heads (GDN) or groups (Mamba-2) by hand."""
    mixer = {name.split(".", 1)[1]: shape for name, shape in params.items() if name.startswith(_LINEAR)}
    a_log, out, conv = mixer.get("A_log"), mixer.get("out_proj.weight"), mixer.get("conv1d.weight")
    if a_log is None or out is None or conv is None:
        raise PerfmodelError(f"a linear-attention layer with {', '.join(mixer)}: perfmodel prices gated delta net "
                             "(in_proj_qkvz, in_proj_ba, conv1d, A_log, norm, out_proj) and Mamba-2 (in_proj, conv1d, "
                             "A_log, D, norm, out_proj) mixers")
    heads, value_width, (channels, _, taps) = a_log[0], out[1], conv
    if "in_proj_qkvz.weight" in mixer or "in_proj_qkv.weight" in mixer:  # fused (Qwen3-Next) or split (Qwen3.5)
        kind, key_heads = "gated_delta_net", _config_size(hf_config, "linear_num_key_heads")
    elif "in_proj.weight" in mixer and "D" in mixer and "x_proj.weight" not in mixer:  # (Mamba-1 has x_proj, dt_proj)
        kind, key_heads = "mamba2", _config_size(hf_config, "mamba_n_groups", "n_groups")
    else:
        raise PerfmodelError(f"a linear-attention layer with {', '.join(mixer)}: neither a gated delta net nor a "
                             "Mamba-2 mixer; refused rather than guessed")
    key_width = (channels - value_width) // 2
    if value_width % heads or key_width % key_heads:
        raise PerfmodelError(f"the {kind} mixer's widths ({value_width} values, {key_width} keys) are not whole heads "
                             f"of {heads} value heads and {key_heads} key heads")
    return RecurrentMixer(kind=kind, heads=heads, key_heads=key_heads, key_dim=key_width // key_heads,
                          value_dim=value_width // heads, conv_kernel=taps, conv_bias="conv1d.bias" in mixer)


def _mlp_width(params: Mapping[str, tuple[int, ...]], prefix: str) -> tuple[int, bool]:
    """(width, gated) of a dense MLP whose parameters start with ``prefix``."""
    part = {name[len(prefix):]: shape for name, shape in params.items() if name.startswith(prefix)}
    if "gate_proj.weight" in part:
        return part["gate_proj.weight"][0], True
    if "gate_up_proj.weight" in part:
        return part["gate_up_proj.weight"][0] // 2, True
    if "input_linear.weight" in part:
        return part["input_linear.weight"][0] // 2, True
    if "up_proj.weight" in part:  # a plain MLP named up/down (Nemotron-H's relu2 MLP)
        return part["up_proj.weight"][0], False
    if "fc_in.weight" in part:
        return part["fc_in.weight"][0], False
    raise PerfmodelError(f"MLP {prefix.rstrip('.')} has {', '.join(part) or 'no parameters'}: not a gated "
                         "(gate/up/down) or plain (fc_in/fc_out) MLP perfmodel prices")


def _expert_fields(params: Mapping[str, tuple[int, ...]], hidden: int) -> dict[str, Any]:
    experts = {name.split("experts.", 1)[1]: shape for name, shape in params.items()
               if ".experts." in name and "shared_expert" not in name}
    gate_up, down = experts.get("gate_up_proj", experts.get("up_proj")), experts.get("down_proj")
    if gate_up is None or down is None or len(gate_up) != 3 or len(down) != 3:
        raise PerfmodelError(f"experts with {', '.join(experts)}: perfmodel prices fused gate_up_proj/down_proj "
                             "expert tensors (transformers' MoE layers)")
    width = down[2] if down[1] == hidden else down[1]
    shared = _find(params, "shared_experts.gate_proj.weight", "shared_expert.gate_proj.weight")
    if shared is None and "gate_up_proj" not in experts:  # plain (ungated) experts, a plain shared expert (Nemotron-H)
        shared = _find(params, "shared_experts.up_proj.weight")
    granite_shared = _find(params, _SHARED_MLP + "input_linear.weight")
    shared_width = shared[0] if shared is not None else granite_shared[0] // 2 if granite_shared is not None else 0
    shared_gate = _find(params, "shared_expert_gate.weight")
    router = {name: shape for name, shape in params.items() if re.search(r"\.(gate|router)\.", name)}
    return {"experts": gate_up[0], "expert_intermediate": width, "shared_intermediate": shared_width,
            "router_bias": any(name.endswith("bias") for name in router),
            "expert_bias": "gate_up_proj_bias" in experts, "shared_expert_gate": shared_gate is not None,
            "expert_gated": "gate_up_proj" in experts}


def _one(values: list[Any], label: str) -> Any:
    distinct = {repr(value) for value in values}
    if len(distinct) > 1:
        raise PerfmodelError(f"layers differ in {label} ({', '.join(sorted(distinct))}): perfmodel prices layers "
                             "that differ only in their MLP (dense or experts) and their attention window")
    return values[0]


def _windows(hf_config: Any, layers: int) -> tuple[int, ...] | None:
    types = getattr(hf_config, "layer_types", None)
    if not types:
        window = getattr(hf_config, "sliding_window", None)
        if not window or getattr(hf_config, "use_sliding_window", True) is False:
            return None
        return (int(window),) * layers
    windows = []
    for kind in types:
        if kind in ("full_attention", "linear_attention", "moe", "mlp"):  # (a state, or no attention: no window)
            windows.append(WHOLE_CONTEXT)
        elif kind in _WINDOW_FIELD and getattr(hf_config, _WINDOW_FIELD[kind], None):
            windows.append(int(getattr(hf_config, _WINDOW_FIELD[kind])))
        else:
            raise PerfmodelError(f"layer_types has {kind!r}: perfmodel prices full, sliding and chunked attention "
                                 "layers, not this kind")
    return tuple(windows)


def _chunked(hf_config: Any) -> bool:
    """Whether the windowed layers are chunked (``layer_types``' ``chunked_attention``, Llama 4) rather than sliding;
    a model with both kinds is refused (one window kind per model is priced)."""
    types = set(getattr(hf_config, "layer_types", None) or ())
    if {"sliding_attention", "chunked_attention"} <= types:
        raise PerfmodelError("layer_types mixes sliding_attention and chunked_attention layers: perfmodel prices one "
                             "window kind per model")
    return "chunked_attention" in types


def _experts_per_token(hf_config: Any, experts: int) -> int:
    """The router's top-k, read by hand (no shape holds it): a model with experts must give it (DeepSeek-V2's
    config class leaves ``num_experts_per_tok`` None, which its router cannot run with), never taken as 1."""
    for field_name in ("num_experts_per_tok", "experts_per_token"):
        value = getattr(hf_config, field_name, None)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= experts:
            raise PerfmodelError(f"config field {field_name!r}: expected the experts each token is routed to, a whole "
                                 f"number from 1 to the {experts} experts, got {value!r}")
        return value
    raise PerfmodelError(f"the model has {experts} routed experts but the config gives no num_experts_per_tok: the "
                         "router's top-k prices every MoE layer; give it")


def _mtp_modules(hf_config: Any) -> int:
    """DeepSeek-V3's multi-token-prediction modules (``num_nextn_predict_layers``), read by hand: the
    transformers class does not build them (its checkpoint loader drops ``model.layers.61.*``). Each is one
    more decoder layer of the last layer's kind with its own norms and projection
    (``Architecture.mtp_module_parameters``)."""
    value = getattr(hf_config, "num_nextn_predict_layers", None) or 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PerfmodelError(f"config field 'num_nextn_predict_layers': expected a whole number of multi-token-"
                             f"prediction modules (DeepSeek-V3: 1), got {value!r}")
    return value


def architecture_from_class(config: Mapping, name: str) -> Architecture:
    """The :class:`Architecture` of ``config``'s model class, checked to count the class's parameters
    exactly by module kind (a :class:`PerfmodelError` naming the kind otherwise)."""
    hf_config, model = meta_model(config)
    shapes = parameter_shapes(model)
    return architecture_from_shapes(hf_config, shapes, name, router_top_k(model))


_ROUTER_MODULE = re.compile(r"(?:^|\.)layers\.\d+\.(?:mlp|block_sparse_moe|feed_forward|mixer)(?:\.(?:gate|router))?$")


def router_top_k(model: Any) -> dict[str, int]:
    """The top-k each MoE block or router module of the class holds (``top_k``), by module name: the class's own
    reading of the config, to check the hand-read one against."""
    return {name: module.top_k for name, module in model.named_modules()
            if _ROUTER_MODULE.search(name) and isinstance(getattr(module, "top_k", None), int)}


def architecture_from_shapes(hf_config: Any, shapes: Mapping[str, tuple[int, ...]], name: str,
                             class_top_k: Mapping[str, int] | None = None) -> Architecture:
    class_counts = class_parameters_by_kind(shapes)
    embedding = _find(shapes, "embed_tokens.weight", "wte.weight")
    if embedding is None:
        raise PerfmodelError("the model has no token embedding (embed_tokens / wte): not a decoder perfmodel prices")
    vocab, hidden = embedding
    layers = _layers(shapes)
    heads = getattr(hf_config, "num_attention_heads", None) or getattr(hf_config, "n_head", None)
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise PerfmodelError(f"the config's num_attention_heads is {heads!r} (a multimodal wrapper keeps it in its "
                             "text_config?): the attention's heads are read by hand from it; give the text model's "
                             "config")
    linear = tuple(any(key.startswith(_LINEAR) for key in params) for params in layers.values())
    both = [index for index, params in layers.items()
            if any(key.startswith(_LINEAR) for key in params) and any(key.startswith(_ATTENTION) for key in params)]
    if both:
        raise PerfmodelError(f"layer {both[0]} has both attention and a recurrent mixer side by side (a parallel hybrid, "
                             "Falcon-H1): perfmodel prices hybrids whose layers use one or the other")
    if all(linear):
        raise PerfmodelError("every layer is a linear-attention / state-space layer: perfmodel prices hybrids whose "
                             "other layers are attention, not pure state-space models")
    mixers = [params for params, flag in zip(layers.values(), linear, strict=True) if flag]
    # Nemotron-H's blocks hold one part each: a layer may have no token mixer, or no MLP.
    mixerless = tuple(not any(key.startswith((*_LINEAR, *_ATTENTION)) for key in params) for params in layers.values())
    mlpless = tuple(not any(key.startswith((*_MLP, _SHARED_MLP)) for key in params) for params in layers.values())
    attention = _one([_attention_fields(params, heads, hidden) for params, flag, none in
                      zip(layers.values(), linear, mixerless, strict=True) if not flag and not none], "attention")
    hybrid: dict[str, Any] = {}
    if mixers:
        hybrid = {"state_dtype": _state_dtype(hf_config), "linear_layers": linear,
                  "mixer": _one([_mixer_fields(params, hf_config) for params in mixers], "linear-attention mixer")}
    moe_flags = tuple(any(".experts." in key for key in params) for params in layers.values())
    experts: dict[str, Any] = {}
    if any(moe_flags):
        experts = _one([_expert_fields(params, hidden) for params, moe in zip(layers.values(), moe_flags, strict=True)
                        if moe], "experts")
    dense = [_mlp_width(params, next(p for p in (*_MLP, _SHARED_MLP) if any(k.startswith(p) for k in params)))
             for params, moe, none in zip(layers.values(), moe_flags, mlpless, strict=True) if not moe and not none]
    expert_gated = experts.pop("expert_gated", True)
    intermediate, gated = _one(dense, "dense MLP") if dense else (experts["expert_intermediate"], expert_gated)
    if experts and gated != expert_gated:
        raise PerfmodelError("the dense MLPs and the experts differ in gating (gate/up/down vs up/down): perfmodel "
                             "prices one MLP form per model")
    if experts.get("expert_intermediate") == intermediate:  # one width for every MLP (Mixtral): no second field
        experts["expert_intermediate"] = None
    norm_names = [[key for key in params if _LAYER_NORMS.match(key)] for params in layers.values()]
    norms = _one([sum(key.endswith(".weight") for key in keys) for keys in norm_names], "norms")
    expert_bias = experts.pop("expert_bias", False)
    mlp_bias = any(_has({k: v for k, v in params.items() if k.startswith(_MLP)}, r"(proj|fc_in|fc_out)\.bias$")
                   for params in layers.values()) or expert_bias
    windows = _windows(hf_config, len(layers))
    chunked = _chunked(hf_config)
    uniform = windows is None or len(set(windows)) == 1
    top_k = _experts_per_token(hf_config, experts["experts"]) if experts else 1
    disagree = {module: value for module, value in (class_top_k or {}).items() if experts and value != top_k}
    if disagree:
        module, value = next(iter(disagree.items()))
        raise PerfmodelError(f"the class's {module} routes each token to {value} experts, the config's "
                             f"num_experts_per_tok says {top_k}: refused rather than guessed")
    positions = getattr(hf_config, "max_position_embeddings", None) or getattr(hf_config, "n_positions", None)
    if not isinstance(positions, int) or positions < 1:
        raise PerfmodelError(f"the config's max_position_embeddings is {positions!r}: perfmodel checks every scenario's "
                             "length against it; give the model's context length")
    act_config = {"hidden_act": getattr(hf_config, "mlp_hidden_act", None) or getattr(hf_config, "hidden_act", None)
                  or getattr(hf_config, "activation_function", None)}
    architecture = Architecture(
        name=name, hidden=hidden, layers=len(layers), heads=heads, intermediate=intermediate, vocab=vocab,
        max_positions=int(positions), tied_embeddings="lm_head.weight" not in shapes, gated_mlp=gated,
        mlp_bias=mlp_bias, layer_norm_bias=any(key.endswith(".bias") for key in norm_names[0]),
        norms_per_layer=norms, experts_per_token=top_k, lm_head_bias="lm_head.bias" in shapes,
        sliding_window=(windows[0] or None) if windows and uniform else None,
        layer_windows=None if uniform else windows, chunked_attention=chunked,
        moe_layers=None if all(moe_flags) or not any(moe_flags) else moe_flags,
        activation=_activation(act_config, "silu"), mtp_modules=_mtp_modules(hf_config),
        mixerless_layers=mixerless if any(mixerless) else None, mlpless_layers=mlpless if any(mlpless) else None,
        **attention, **experts, **hybrid)
    derived = architecture.parameters_by_kind()
    wrong = [f"{kind}: the class has {class_counts[kind]:,}, perfmodel's reading {derived[kind]:,}"
             for kind in MODULE_KINDS if class_counts[kind] != derived[kind]]
    if wrong:
        raise PerfmodelError(f"{name}: perfmodel cannot price this model exactly ({'; '.join(wrong)}); refused "
                             "rather than guessed")
    return architecture


def derive_shipped() -> dict:
    """Derived records of every shipped Hugging Face config (the native blocks are read by hand)."""
    import transformers

    from perfmodel.llm.architecture import architecture_record, is_native_block
    from perfmodel.llm.catalog import load_config, model_names

    models = {}
    for name in model_names():
        config = load_config(name)
        if not is_native_block(config):
            models[name] = architecture_record(architecture_from_class(config, name))
    return {"_derived_by": "python -m perfmodel.llm.model_class --write (each config's transformers class on the "
                           "meta device)", "_transformers": transformers.__version__, "models": models}


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from perfmodel.llm.catalog import DERIVED_FILE
    from perfmodel.paths import data_directory
    from perfmodel.yaml_source import write_text_atomically

    parser = argparse.ArgumentParser(description="Derive the shipped models' architectures from their classes")
    parser.add_argument("--write", action="store_true", help=f"write workloads/llm/{DERIVED_FILE}")
    arguments = parser.parse_args(argv)
    text = json.dumps(derive_shipped(), indent=1) + "\n"
    if not arguments.write:
        print(text)
        return 0
    target = data_directory("workloads") / "llm" / DERIVED_FILE
    write_text_atomically(target, text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
