"""Architectures read off the models' own transformers classes (issue 30): parameter counts by module
kind against the meta-device model, KV bytes against the cache the class allocates, the stored records
of the shipped configs, refusals, and the new families priced by hand."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from perfmodel.errors import PerfmodelError  # noqa: E402
from perfmodel.hardware.loader import load_hardware  # noqa: E402
from perfmodel.llm import Parallelism, Scenario, from_hf_config, llm_predict  # noqa: E402
from perfmodel.llm.architecture import architecture_record, is_native_block  # noqa: E402
from perfmodel.llm.catalog import derived_records, load_architecture, load_config, model_names  # noqa: E402
from perfmodel.llm.graphs import stage_graph  # noqa: E402
from perfmodel.llm.metrics import memory_per_chip  # noqa: E402
from perfmodel.llm.model_class import (  # noqa: E402
    MODULE_KINDS,
    architecture_from_class,
    class_parameters_by_kind,
    meta_model,
    parameter_shapes,
)
from perfmodel.workload.ir import Op, TensorSpec  # noqa: E402

# Each family's config class with its default values (a few layers fewer where the default is a full
# model, to keep the test fast; the layer pattern fields stay consistent with the count).
FAMILY_CONFIGS = {
    "deepseek_v3": {"model_type": "deepseek_v3", "num_hidden_layers": 6, "first_k_dense_replace": 2},
    "deepseek_v3 (no q_lora)": {"model_type": "deepseek_v3", "num_hidden_layers": 3, "first_k_dense_replace": 1,
                                "q_lora_rank": None},
    "qwen3": {"model_type": "qwen3", "num_hidden_layers": 4},
    "qwen3_moe": {"model_type": "qwen3_moe", "num_hidden_layers": 4},
    "qwen3_moe (dense layers)": {"model_type": "qwen3_moe", "num_hidden_layers": 4, "mlp_only_layers": [0, 2]},
    "gpt_oss": {"model_type": "gpt_oss", "num_hidden_layers": 4},
    "llama4_text": {"model_type": "llama4_text", "num_hidden_layers": 8, "interleave_moe_layer_step": 2},
    "llama4_text (every layer MoE)": {"model_type": "llama4_text", "num_hidden_layers": 4},
    "gemma3_text": {"model_type": "gemma3_text", "num_hidden_layers": 12},
    "mistral": {"model_type": "mistral", "num_hidden_layers": 2},
    "mistral (window 32)": {"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 32},
    "qwen2 (window from layer 1)": {"model_type": "qwen2", "num_hidden_layers": 2, "use_sliding_window": True,
                                    "sliding_window": 32, "max_window_layers": 1},
    "gemma2 (window 32)": {"model_type": "gemma2", "num_hidden_layers": 2, "sliding_window": 32},
    "phi3": {"model_type": "phi3", "num_hidden_layers": 2},
    "granite": {"model_type": "granite", "num_hidden_layers": 2},
    "granitemoe": {"model_type": "granitemoe", "num_hidden_layers": 2},
    "mixtral": {"model_type": "mixtral", "num_hidden_layers": 2},
    "llama": {"model_type": "llama", "num_hidden_layers": 2},
    "gptj": {"model_type": "gptj", "n_layer": 2},
    # hybrids: gated delta net (fused and split projections) or Mamba-2 layers beside attention layers
    "qwen3_next": {"model_type": "qwen3_next", "num_hidden_layers": 4},
    "qwen3_5_moe_text": {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 4},
    "qwen3_5_text": {"model_type": "qwen3_5_text", "num_hidden_layers": 4},
    "granitemoehybrid": {"model_type": "granitemoehybrid", "num_hidden_layers": 4,
                         "layer_types": ["mamba", "mamba", "mamba", "attention"]},
    "granitemoehybrid (dense)": {"model_type": "granitemoehybrid", "num_hidden_layers": 2,
                                 "layer_types": ["mamba", "attention"], "num_local_experts": 0},
    "bamba": {"model_type": "bamba", "num_hidden_layers": 4, "attn_layer_indices": [3]},
    "nemotron_h": {"model_type": "nemotron_h", "num_hidden_layers": 6, "hybrid_override_pattern": "MEM*E-"},
}
SHIPPED_CLASS_MODELS = [name for name in model_names() if not is_native_block(load_config(name))]


def _meta_counts(config):
    """Total and per-kind parameters of the meta-device model itself (the oracle)."""
    _, model = meta_model(config)
    shapes = parameter_shapes(model)
    return sum(parameter.numel() for parameter in model.parameters()), class_parameters_by_kind(shapes)


@pytest.mark.parametrize("label", sorted(FAMILY_CONFIGS))
def test_family_parameter_count_equals_the_meta_model_by_module_kind(label):
    config = FAMILY_CONFIGS[label]
    total, by_kind = _meta_counts(config)
    architecture = architecture_from_class(config, label)
    assert architecture.parameter_count() == total
    assert architecture.parameters_by_kind() == by_kind
    assert set(by_kind) == set(MODULE_KINDS)


# The issue's families as their config classes define them by default (every field its default value, the whole
# depth): the class each serves tokens with, a multimodal wrapper's text model included (llama4, gemma3).
DEFAULT_FAMILIES = ("deepseek_v3", "qwen3", "qwen3_moe", "gpt_oss", "llama4", "llama4_text", "gemma3", "gemma3_text",
                    "mistral", "phi3", "granite", "granitemoe", "mixtral", "llama", "qwen3_next", "qwen3_5_text",
                    "qwen3_5_moe_text", "nemotron_h")


@pytest.mark.parametrize("model_type", DEFAULT_FAMILIES)
def test_family_defaults_count_exactly_by_module_kind(model_type):
    config = {"model_type": model_type}
    total, by_kind = _meta_counts(config)
    architecture = architecture_from_class(config, model_type)
    assert architecture.parameter_count() == total and architecture.parameters_by_kind() == by_kind


@pytest.mark.parametrize("model_type", ["granitemoehybrid", "bamba"])
def test_state_space_defaults_are_refused_as_pure_state_space_models(model_type):
    """Granite-4.0-H's and Bamba's config classes default to Mamba-2 in every layer (no attention): refused, named."""
    with pytest.raises(PerfmodelError, match="every layer is a linear-attention"):
        architecture_from_class({"model_type": model_type}, model_type)


@pytest.mark.parametrize("name", SHIPPED_CLASS_MODELS)
def test_shipped_record_is_what_the_class_gives(name):
    """The stored record (read at run time without torch) is the class reading, and counts the meta model."""
    config = load_config(name)
    fresh = architecture_from_class(config, name)
    assert derived_records()["models"][name] == architecture_record(fresh)
    assert load_architecture(name) == fresh
    total, by_kind = _meta_counts(config)
    assert fresh.parameter_count() == total and fresh.parameters_by_kind() == by_kind


def test_the_families_of_the_issue_ship():
    """Every model the issue's catalog names, each config naming its source."""
    issue = {"deepseek-v3", "deepseek-r1", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b",
             "gpt-oss-120b", "llama-4-scout", "llama-4-maverick", "gemma-3-27b", "mistral-small-3-24b",
             "mistral-large-2", "phi-4", "granite-3.1-8b", "granite-4.0-h-small"}
    assert issue <= set(model_names())
    assert all(str(load_config(name).get("_source", "")).startswith("https://") for name in issue)


def test_issue_figures():
    """The counts the issue quotes: DeepSeek-V3's class has 671,026,404,352 parameters (3 dense + 58 MoE layers),
    Llama 4 Scout's text model 107.8 B, and Qwen3-MoE experts are 768/1536 wide, not intermediate_size."""
    deepseek = load_architecture("deepseek-v3")
    assert deepseek.parameter_count() == 671_026_404_352
    assert (deepseek.moe_layer_count, deepseek.layers) == (58, 61)
    assert load_architecture("llama-4-scout").parameter_count() == pytest.approx(107.8e9, rel=1e-3)
    qwen = load_architecture("qwen3-30b-a3b")
    assert qwen.expert_width == 768 and load_config("qwen3-30b-a3b")["intermediate_size"] == 6144
    assert load_architecture("qwen3-235b-a22b").expert_width == 1536


def _static_cache_bytes_per_token(config, context):
    """Bytes per token of KV the class's StaticCache holds after a forward over ``context`` tokens (meta)."""
    hf_config, model = meta_model(config)
    cache = transformers.StaticCache(config=hf_config, max_cache_len=context)
    ids = torch.zeros((1, context), dtype=torch.long, device="meta")
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    held = sum(layer.keys.numel() + layer.values.numel() for layer in cache.layers)
    return held * model.dtype.itemsize / context


@pytest.mark.parametrize("label, context", [("llama", 64), ("qwen3", 64), ("gpt_oss", 512), ("gemma3_text", 2048),
                                            ("mistral", 64), ("deepseek_v3", 64), ("qwen3_moe", 64),
                                            ("llama4_text", 128), ("mistral (window 32)", 64), ("phi3", 64),
                                            ("granite", 64), ("mixtral", 64), ("qwen2 (window from layer 1)", 64),
                                            ("gemma2 (window 32)", 64), ("granitemoe", 64)])
def test_kv_bytes_equal_what_the_cache_class_allocates(label, context):
    """Per family, the KV bytes a token keeps are what the class's StaticCache allocates: windowed layers capped
    at their window (gpt-oss 128, Gemma 3 1024, Llama 4's chunks: 32 here), MLA's compressed latent and rotary key
    (transformers' DeepseekV3Attention caches those, 576 elements a layer)."""
    config = {**FAMILY_CONFIGS[label], "dtype": "bfloat16"}
    if label == "llama4_text":  # a chunk shorter than the context, so that the cap shows
        config["attention_chunk_size"] = 32
    architecture = architecture_from_class(config, label)
    expected = _static_cache_bytes_per_token(config, context)
    assert architecture.kv_cache_bytes(context, 2) / context == pytest.approx(expected, rel=1e-12)


def test_windowed_layers_are_capped_at_their_window():
    gpt_oss = load_architecture("gpt-oss-20b")
    per_layer = gpt_oss.kv_elements_per_token() * 2  # bf16
    # 12 sliding layers keep 128 tokens, 12 full layers keep everything.
    assert gpt_oss.kv_cache_bytes(4096, 2) == 12 * per_layer * 128 + 12 * per_layer * 4096
    assert gpt_oss.kv_cache_bytes(100, 2) == 24 * per_layer * 100


def test_mla_caches_the_compressed_latent():
    """DeepSeek-V3: 512 latent + 64 rotary key elements a layer (arXiv 2412.19437, section 2.1.1): 70,272 bytes
    a token in bf16, replicated on every tensor-parallel chip."""
    deepseek = load_architecture("deepseek-v3")
    assert deepseek.kv_bytes_per_token(2) == 61 * 576 * 2 == 70_272
    memory = memory_per_chip(deepseek, Scenario(batch=4, prompt_tokens=1000, generated_tokens=24), Parallelism(tp=8))
    assert memory.kv_cache == 4 * 1024 * 70_272


def test_mla_decode_reads_the_cache_once():
    """The absorbed decode kernel is multi-query over the 576-wide cache and reads it once (values are its first
    512 elements): the attention op's compulsory cache bytes are batch x context x 576 x 2."""
    deepseek = load_architecture("deepseek-v3")
    graph = stage_graph(deepseek, Scenario(batch=2, prompt_tokens=100, generated_tokens=1), Parallelism(tp=8),
                        phase="decode", context=1000)
    (sdpa,) = [op for op in graph.ops if op.kind == "attention"]
    assert (sdpa.attrs["kv_heads"], sdpa.attrs["head_dim"], sdpa.attrs["v_head_dim"]) == (1, 576, 512)
    assert [tensor.bytes for tensor in sdpa.inputs[1:]] == [2 * 1000 * 576 * 2]
    assert sdpa.count == 61


def _bound_by_the_weights(result, floor):
    """The decode step's largest share is HBM, and that share is the weights' time (within 10%: the KV cache and
    activations add to it, and the few weight-reading ops bound by something else count there); the step takes at
    least the weights' time."""
    hbm_s = result.time_by_bound_by_phase["decode"]["memory:hbm"]
    assert result.bound_by_phase["decode"] == "memory:hbm"
    assert 0.9 * floor < hbm_s < 1.1 * floor
    assert result.tpot_s >= floor


def _weight_bytes(graph, excluded=()):
    return sum(op.count * tensor.bytes for op in graph.ops for tensor in op.inputs
               if tensor.role == "weight" and op.kind != "embedding" and op.name not in excluded)


def test_qwen3_235b_decode_streams_the_active_experts_by_hand():
    """Qwen3-235B-A22B on 8 H100s, batch 8 (64 routed tokens a layer, top-8 of 128): each layer reads its tp
    shard of attention (64 query heads; the 4 KV heads replicated once tp > 4), the router, and the 64 experts
    the tokens reach, 1536/8 wide; plus the LM head's shard. On the datasheet roofline the step is bound by
    those weights in HBM. (With the achievable overlay its per-kernel fixed costs dominate: issue 29.)"""
    a = load_architecture("qwen3-235b-a22b")
    scenario, layout = Scenario(batch=8, prompt_tokens=512, generated_tokens=1), Parallelism(tp=8)
    graph = stage_graph(a, scenario, layout, phase="decode", context=512)
    attention = 4096 * (8 * 128) * 2 + 4096 * 128 * 2
    experts = 64 * 3 * 4096 * (1536 // 8)
    per_layer = attention + 4096 * 128 + experts
    assert _weight_bytes(graph) == (94 * per_layer + 4096 * 151936 // 8) * 2
    h100 = load_hardware("h100-sxm")
    result = llm_predict(a, h100, scenario, layout, mode="graph")
    floor = _weight_bytes(graph) / h100.memory[-1].bandwidth_bytes_per_s
    _bound_by_the_weights(result, floor)


def test_deepseek_v3_decode_is_bound_by_weights_on_h200():
    """DeepSeek-V3 in fp8 on 8 H200s at batch 8: 64 routed tokens reach 64 of 256 experts in each of the 58 MoE
    layers, plus the shared expert; the step is bound by those weights on the datasheet roofline. By hand, one byte a
    weight: each of the 61 layers reads the replicated down-projections of latent attention (q_a 7168 -> 1536,
    kv_a_proj_with_mqa 7168 -> 512 + 64, as vLLM's ReplicatedLinear), its tp shard of q_b (1536 -> 16 heads x 192),
    of kv_b (absorbed into W_UK and W_UV: 512 x 16 x (128 + 128)) and of o_proj (16 x 128 -> 7168); each MoE layer
    the replicated router (bf16, two bytes a weight: the engines' quantizers and DeepSeek-V3's own checkpoint leave
    the gate and the head in bf16, ``Scenario.quantized_head``), the 64 reached experts' 1/8 slices (3 x 7168 x 256)
    and the shared expert's; each of the 3 dense layers its MLP's shard (3 x 7168 x 18432 / 8); then the LM head's
    shard (129280 / 8 rows, bf16)."""
    a = load_architecture("deepseek-v3")
    scenario = Scenario(batch=8, prompt_tokens=1024, generated_tokens=1, weight_dtype="fp8")
    graph = stage_graph(a, scenario, Parallelism(tp=8), phase="decode", context=1024)
    (routed,) = [op for op in graph.ops if op.name == "layers.moe.experts.gate_up"]
    assert (routed.attrs["batch"], routed.attrs["n"], routed.count) == (64, 2 * 2048 // 8, 58)
    attention = 7168 * 1536 + 1536 * 16 * 192 + 7168 * 576 + 512 * 16 * 256 + 16 * 128 * 7168
    moe = 2 * 7168 * 256 + 64 * 3 * 7168 * 256 + 3 * 7168 * 256
    assert _weight_bytes(graph) == 61 * attention + 58 * moe + 3 * 3 * 7168 * 18432 // 8 + 2 * 7168 * 129280 // 8
    h200 = load_hardware("h200-sxm")
    result = llm_predict(a, h200, scenario, Parallelism(tp=8), mode="graph")
    floor = _weight_bytes(graph) / h200.memory[-1].bandwidth_bytes_per_s
    _bound_by_the_weights(result, floor)


def test_uniform_models_keep_their_graph():
    """Reading from the class changed nothing for the families read before: Llama's decode graph has one
    attention op over all layers and a dense MLP."""
    graph = stage_graph(load_architecture("llama-3.1-8b"), Scenario(batch=1, prompt_tokens=8, generated_tokens=1),
                        Parallelism(), phase="decode", context=8)
    assert [op.count for op in graph.ops if op.kind == "attention"] == [32]
    assert "layers.mlp.gate_up_proj" in [op.name for op in graph.ops]


def test_mixed_layers_are_grouped():
    """gpt-oss: half the layers slide over 128 keys; Llama 4 Maverick: every other layer is MoE; DeepSeek: 3 dense
    layers, then shared and routed experts."""
    scenario = Scenario(batch=1, prompt_tokens=8, generated_tokens=1)
    gpt = stage_graph(load_architecture("gpt-oss-20b"), scenario, Parallelism(), phase="decode", context=4096)
    windows = {op.attrs.get("window"): op.count for op in gpt.ops if op.kind == "attention"}
    assert windows == {128: 12, None: 12}
    maverick = stage_graph(load_architecture("llama-4-maverick"), scenario, Parallelism(), phase="decode", context=8)
    counts = {op.name: op.count for op in maverick.ops}
    assert counts["layers.mlp.gate_up_proj"] == 24 and counts["layers.moe.experts.gate_up"] == 24
    assert counts["layers.moe.shared_experts.gate_up_proj"] == 24
    deepseek = stage_graph(load_architecture("deepseek-v3"), scenario, Parallelism(), phase="prefill", context=8)
    counts = {op.name: op.count for op in deepseek.ops}
    assert counts["layers.mlp.gate_up_proj"] == 3 and counts["layers.moe.router"] == 58
    assert counts["layers.attn.kv_b_proj"] == 61


def test_chunked_attention_pairs_by_hand():
    """Chunked local attention (chunks of 4): a causal query at position p sees (p mod 4) + 1 keys; a query without a
    mask (decode) the keys of the last position's chunk; a sliding window of 4 sees up to 4 keys whatever the chunk."""
    from perfmodel.costs.traffic import attended_pairs

    assert attended_pairs(10, 10, True, 4, chunked=True) == (1 + 2 + 3 + 4) * 2 + 1 + 2
    assert attended_pairs(3, 10, True, 4, chunked=True) == 4 + 1 + 2  # positions 7, 8, 9
    assert attended_pairs(10, 10, True, 4) == 1 + 2 + 3 + 4 * 7
    assert attended_pairs(1, 9, False, 4, chunked=True) == 1 and attended_pairs(1, 8, False, 4, chunked=True) == 4
    assert attended_pairs(1, 9, False, 4) == 4


def test_llama4_chunked_layers_see_their_chunk_only():
    """Llama 4 Maverick's 36 chunked layers (8,192-token chunks; every fourth layer is global): at a context of
    10,000 a decode query (position 9,999) sees the 1,808 keys of its chunk and reads only those; a 32,768-token
    prefill scores 4 chunks of 8,192 x 8,193 / 2 pairs, where a sliding window of 8,192 would score 1.75x that."""
    from perfmodel.costs.rules import CostContext, op_cost

    a, h200 = load_architecture("llama-4-maverick"), load_hardware("h200-sxm")
    assert a.chunked_attention and a.layer_windows.count(8192) == 36 and a.layer_windows.count(0) == 12
    assert not load_architecture("gpt-oss-20b").chunked_attention
    per_pair = 40 // 8 * (4 * 128 + 5)  # 5 query heads a chip: q.k and p.v (2 x 2 x 128) and the softmax (5)

    def attention(phase, context):
        scenario = Scenario(batch=1, prompt_tokens=context, generated_tokens=1)
        graph = stage_graph(a, scenario, Parallelism(tp=8), phase=phase, context=context)
        return {op.attrs.get("chunked", False): (op, op_cost(op, CostContext(hardware=h200)))
                for op in graph.ops if op.kind == "attention"}

    decode = attention("decode", 10_000)
    assert decode[True][0].count == 36 and decode[False][0].count == 12
    assert float(decode[True][1].flops) == 1808 * per_pair and float(decode[False][1].flops) == 10_000 * per_pair
    kv_read = 1808 * 2 * 128 * 2  # one KV head a chip, K and V of 128, bf16
    assert float(decode[True][1].bytes_by_level[-1]) == kv_read + 5 * 2 * 128 * 2  # + the query in, the output out
    prefill = attention("prefill", 32_768)
    assert float(prefill[True][1].flops) == 4 * 8192 * 8193 // 2 * per_pair


def test_sliding_and_chunked_layers_in_one_model_are_refused():
    config = {"model_type": "llama4_text", "num_hidden_layers": 2, "layer_types": ["sliding_attention",
                                                                                  "chunked_attention"],
              "sliding_window": 16}
    with pytest.raises(PerfmodelError, match="mixes sliding_attention and chunked_attention"):
        architecture_from_class(config, "mixed")


def test_pipeline_stage_is_the_heaviest_slice():
    a = load_architecture("deepseek-v3")
    stage = a.stage_layers(2)
    assert stage == range(31, 61)  # the second half has no dense layers
    assert a.stage_parameters(2) > a.stage_parameters(1) / 2


@pytest.mark.parametrize("config, needle", [
    ({"model_type": "lfm2", "num_hidden_layers": 2}, "feed_forward.w1"),
    ({"model_type": "no_such_model"}, "not a model class the installed transformers"),
    ({"model_type": "mamba2", "num_hidden_layers": 2}, "does not price"),
])
def test_unpriceable_models_are_refused_naming_the_module(config, needle):
    with pytest.raises(PerfmodelError, match=needle):
        architecture_from_class(config, "x")


@pytest.mark.parametrize("config", [
    {"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
     "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 64, "moe_intermediate_size": 16},
    {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
     "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 64, "attention_bias": True},
])
def test_hand_reader_refuses_what_it_cannot_price(config):
    """The silent 8x expert weights of issue 30: the hand reader no longer accepts a family it does not price."""
    with pytest.raises(PerfmodelError, match="transformers class|changes the structure"):
        from_hf_config(config)


def test_a_user_config_goes_through_its_class(tmp_path):
    import json

    path = tmp_path / "tiny_qwen3_moe.json"
    config = {"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "intermediate_size": 128, "moe_intermediate_size": 16, "num_experts": 8,
              "num_experts_per_tok": 2, "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 64}
    path.write_text(json.dumps(config))
    architecture = load_architecture(path)
    assert architecture.expert_width == 16 and architecture.experts == 8
    assert architecture.parameter_count() == _meta_counts(config)[0]


# Configs written from the published config.json values (issue 30's catalog): each names its source and the
# published parameter count, which the class's count must match (the published figures are rounded).
WRITTEN_CONFIGS = ("gemma-3-27b", "mistral-small-3-24b", "mistral-nemo-12b", "mistral-large-2", "phi-4")


@pytest.mark.parametrize("name", WRITTEN_CONFIGS)
def test_written_configs_match_their_published_counts(name):
    config = load_config(name)
    assert config["_source"].startswith("https://huggingface.co/") and config["_parameters_source"]
    count = load_architecture(name).parameter_count()
    assert count == pytest.approx(config["_published_parameters"], rel=0.005)


def test_gemma3_27b_is_its_text_model_with_five_sliding_layers_to_one_full():
    """Gemma 3 27B (multimodal config): the text model, 62 layers of which every sixth is global (10) and the rest
    slide over 1,024 keys (52); QK norms, four norms a layer, tied embeddings; the vision encoder is not counted."""
    gemma = load_architecture("gemma-3-27b")
    assert gemma.layer_windows is not None
    assert (gemma.layer_windows.count(1024), gemma.layer_windows.count(0)) == (52, 10)
    assert gemma.qk_norm and gemma.norms_per_layer == 4 and gemma.tied_embeddings
    per_layer = 2 * 16 * 128 * 2  # K and V of 16 KV heads, bf16
    assert gemma.kv_cache_bytes(8192, 2) == per_layer * (52 * 1024 + 10 * 8192)


@pytest.mark.parametrize("text_type", ["mistral", "ministral3", None])
def test_mistral3_configs_are_read_as_their_text_model(tmp_path, text_type):
    """Mistral Small 3.1/3.2 (and Ministral 3) ship as Mistral3ForConditionalGeneration: the text model named by
    text_config's model_type (the class's default, mistral, when it names none) serves the tokens, counted exactly;
    the eager capture takes the same text model."""
    import json

    from perfmodel.llm.eager import supports, text_config

    text = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 64,
            **({"model_type": text_type} if text_type else {})}
    config = {"model_type": "mistral3", "text_config": text, "vision_config": {"hidden_size": 32}}
    path = tmp_path / "mistral3.json"
    path.write_text(json.dumps(config))
    architecture = load_architecture(path)
    assert architecture.parameter_count() == _meta_counts({**text, "model_type": text_type or "mistral"})[0]
    assert supports(config) is None and text_config(config)["model_type"] == (text_type or "mistral")


def test_phi4_fused_projections_are_read():
    """Phi-4 (Phi3ForCausalLM) fuses q/k/v and gate/up: read as 40 query and 10 KV heads of 128 and a 17,920-wide
    gated MLP."""
    phi = load_architecture("phi-4")
    assert (phi.heads, phi.kv_heads, phi.head_dim, phi.intermediate, phi.gated_mlp) == (40, 10, 128, 17920, True)


# -- block-scaled weight formats: the scales' bytes are part of every byte the weights take ----------------------
@pytest.mark.parametrize("dtype, bits", [("fp8_block", 8 + 32 / (128 * 128)), ("mxfp8", 8 + 8 / 32),
                                         ("mxfp4", 4 + 8 / 32), ("nvfp4", 4 + 8 / 16)])
def test_block_scaled_weights_carry_their_scales_in_memory_and_traffic(dtype, bits):
    """Weights per chip and the decode step's weight reads are the elements and their block scales: fp8 with one
    fp32 per 128 x 128 block (DeepSeek-V3), OCP MX (one E8M0 per 32), NVFP4 (one E4M3 per 16)."""
    from perfmodel.dtypes import get_dtype

    assert get_dtype(dtype).bytes_per_element == bits / 8
    model = load_architecture("gpt-oss-20b")
    plain = "fp8" if bits > 8 else "fp4"
    scenarios = {name: Scenario(batch=1, prompt_tokens=64, generated_tokens=1, weight_dtype=name)
                 for name in (dtype, plain)}
    # the embedding, the LM head and the routers stay bf16 (``Scenario.quantized_head``): two bytes a weight
    routers = model.moe_layer_count * model.router_parameters
    sixteen_bit = model.stage_end_parameters(1) + routers
    memory = {name: memory_per_chip(model, scenario, Parallelism()).weights for name, scenario in scenarios.items()}
    assert memory[dtype] == pytest.approx((model.stage_parameters(1) - sixteen_bit) * bits / 8 + 2 * sixteen_bit,
                                          rel=1e-12)
    assert (memory[dtype] - 2 * sixteen_bit) / (memory[plain] - 2 * sixteen_bit) == pytest.approx(bits / int(bits),
                                                                                                  rel=1e-12)
    reads = {name: _weight_bytes(stage_graph(model, scenario, Parallelism(), phase="decode", context=64),
                                 excluded=("lm_head", "layers.moe.router"))
             for name, scenario in scenarios.items()}
    assert reads[dtype] / reads[plain] == pytest.approx(bits / int(bits), rel=1e-12)


@pytest.mark.parametrize(("device", "activation", "weight", "side"), [
    ("h200-sxm", "bf16", "mxfp4", "8 per weight"), ("h200-sxm", "bf16", "nvfp4", "8 per weight"),
    ("h200-sxm", "bf16", "fp8_block", "4 per weight"), ("h200-sxm", "fp8", "fp8_block", "2 per output per 128 of k"),
    ("b200", "fp4", "nvfp4", "none"), ("b200", "fp8", "mxfp8", "none"), ("h200-sxm", "bf16", "bf16", "none"),
    ("b200", "fp8", "mxfp4", "none"), ("rtx-pro-6000", "fp4", "mxfp4", "none"),
    ("h200-sxm", "fp8", "mxfp4", "8 per weight"), ("h200-sxm", "fp8", "nvfp4", "8 per weight"),
    ("mi300x", "fp8", "mxfp4", "8 per weight"), ("h200-sxm", "fp8", "mxfp8", "2 per output per 32 of k"),
    ("l40s", "fp8", "mxfp8", "2 per output per 32 of k")])
def test_block_scaled_weights_are_dequantized_or_run_natively_as_defined(device, activation, weight, side):
    """Under bf16 activations block-scaled weights are dequantized in the kernel on the vector engine (convert and
    scale: 4 per 8-bit element, unpack too: 8 per 4-bit one, as int8/int4); under activations of their element
    width the MMA runs them at that rate, Blackwell's block-scaled MMA applying the scales itself, while fp8_block
    on Hopper multiplies the fp32 partial sums by the block scales every 128 of k (DeepSeek-V3, section 3.3.2).
    Without block-scaled MMA (Hopper, Ada, MI300X) fp4 elements under fp8 activations are converted one by one (no
    fp4 MMA), and mxfp8's per-32 scales are applied to the partial sums every 32 of k."""
    from perfmodel.costs.rules import CostContext, op_cost

    m, k, n = 16, 7168, 4096
    op = Op(name="mm", kind="matmul", inputs=(TensorSpec(shape=(m, k), dtype=activation),
                                              TensorSpec(shape=(k, n), dtype=weight, role="weight")),
            outputs=(TensorSpec(shape=(m, n), dtype=activation),),
            attrs={"m": m, "n": n, "k": k, "batch": 1, "dtype": activation})
    cost = op_cost(op, CostContext(hardware=load_hardware(device)))
    expected = {"8 per weight": 8 * k * n, "4 per weight": 4 * k * n, "2 per output per 128 of k": 2 * m * n * (k // 128),
                "2 per output per 32 of k": 2 * m * n * (k // 32), "none": 0}[side]
    assert float(cost.side_flops or 0) == expected
    assert cost.peak_dtype == {"bf16": "bf16", "fp8": "fp8", "fp4": "fp4"}[activation]
    assert (cost.side_engine is not None) == (expected > 0)


def test_block_scaled_mma_is_blackwells():
    """Native MX/NVFP4 MMA where the tensor cores run fp4 (Blackwell: B200, B300, GB200, GB300, RTX PRO 6000), not on
    Hopper, Ada, Ampere or MI300X, nor on TPUs."""
    from perfmodel.costs.rules import has_block_scaled_mma

    native = {name: has_block_scaled_mma(load_hardware(name)) for name in
              ("b200", "b300", "gb200", "gb300", "rtx-pro-6000", "h100-sxm", "h200-sxm", "l40s", "a100-sxm-80gb",
               "mi300x", "tpu-v6e")}
    assert {name for name, flag in native.items() if flag} == {"b200", "b300", "gb200", "gb300", "rtx-pro-6000"}


def test_block_scaled_formats_are_weight_formats_only():
    with pytest.raises(PerfmodelError, match="block-scaled weight format"):
        memory = Scenario(batch=1, prompt_tokens=8, generated_tokens=1, kv_dtype="mxfp4")
        llm_predict(load_architecture("llama-3.1-8b"), load_hardware("b200"), memory)


# -- multi-token prediction (DeepSeek-V3's MTP module: not in the transformers class) -----------------------------
def test_deepseek_v3_mtp_module_is_counted_beside_the_class():
    """num_nextn_predict_layers = 1: one module of hnorm + enorm + shared_head.norm (3 x 7168), eh_proj (2 x 7168 ->
    7168) and a decoder layer like the last one (the meta model's layer 60, the oracle); with the embedding and head
    copies the checkpoint stores, the published 685 B (671 B main model + 14 B MTP, DeepSeek-V3's model card)."""
    deepseek = load_architecture("deepseek-v3")
    _, model = meta_model(load_config("deepseek-v3"))
    last_layer = sum(parameter.numel() for name, parameter in model.named_parameters()
                     if name.startswith("model.layers.60."))
    assert deepseek.mtp_modules == 1
    assert deepseek.mtp_parameters == 3 * 7168 + 2 * 7168 * 7168 + last_layer
    assert deepseek.parameter_count() == sum(parameter.numel() for parameter in model.parameters())  # the class's
    stored_copies = 2 * 129280 * 7168
    assert deepseek.parameter_count() + deepseek.mtp_parameters + stored_copies == pytest.approx(685e9, rel=1e-3)
    assert load_architecture("qwen3-235b-a22b").mtp_modules == 0


def test_speculative_mtp_holds_the_mtp_weights():
    """serve --speculative mtp: the KV budget per chip shrinks by the MTP module's weights, fp8, over tp 8."""
    from perfmodel.serving.speculation import Speculation, drafter
    from perfmodel.serving.steps import kv_capacity

    deepseek, h200 = load_architecture("deepseek-v3"), load_hardware("h200-sxm")
    scenario = Scenario(batch=1, prompt_tokens=1, generated_tokens=1, weight_dtype="fp8_block", kv_dtype="bf16",
                        activation_dtype="fp8")
    layout = Parallelism(tp=8)
    speculation = Speculation(method="mtp", tokens=1, acceptance=0.85)
    settings = dict(block_size=64, max_batch=64, max_tokens_per_step=8192, memory_utilization=0.9)
    plain = kv_capacity(deepseek, h200, scenario, layout, **settings)
    with_mtp = kv_capacity(deepseek, h200, scenario, layout, drafter=drafter(deepseek, speculation, scenario, layout),
                           **settings)
    eh_proj = 2 * 7168 * 7168  # replicated on every chip (vLLM's DeepSeekMTP); the rest split over tp 8
    held = ((deepseek.mtp_parameters - eh_proj) / 8 + eh_proj) * (1 + 4 / (128 * 128))
    assert plain.budget_bytes - with_mtp.budget_bytes == pytest.approx(held, rel=1e-9)


def test_the_mtp_drafter_adds_its_norms_and_projection():
    """The MTP drafter's decode graph is the decoder layer and shared head plus hnorm/enorm and eh_proj (2 x 7168 ->
    7168 on every chip); a draft model's graph is its own."""
    from perfmodel.serving.speculation import Speculation, drafter, drafter_graph

    deepseek = load_architecture("deepseek-v3")
    scenario = Scenario(batch=4, prompt_tokens=100, generated_tokens=1, weight_dtype="fp8", activation_dtype="fp8")
    draft = drafter(deepseek, Speculation(method="mtp", tokens=1, acceptance=0.85), scenario, Parallelism(tp=8))
    graph = drafter_graph(deepseek, draft, scenario, phase="decode", context=128)
    layer = stage_graph(draft[0], scenario, draft[1], phase="decode", context=128)
    added = {op.name: op for op in graph.ops[len(layer.ops):]}
    assert [op.name for op in graph.ops[:len(layer.ops)]] == [op.name for op in layer.ops]
    assert set(added) == {"mtp.enorm_hnorm", "mtp.eh_proj"}
    assert (added["mtp.eh_proj"].attrs["m"], added["mtp.eh_proj"].attrs["k"]) == (4, 2 * 7168)
    assert added["mtp.eh_proj"].inputs[1].bytes == 2 * 7168 * 7168
    small = drafter(load_architecture("llama-3.1-70b"), Speculation(method="mtp", tokens=1, acceptance=0.85),
                    scenario, Parallelism(tp=8))
    assert "mtp.eh_proj" not in [op.name for op in drafter_graph(load_architecture("llama-3.1-70b"), small, scenario,
                                                                 phase="decode", context=128).ops]


@pytest.mark.parametrize("name, checkpoint_gib", [("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)])
def test_gpt_oss_as_published_mxfp4_experts_bf16_elsewhere(name, checkpoint_gib):
    """gpt-oss ships its routed experts in MXFP4 and everything else in bf16 (quantization_config's
    modules_to_not_convert): weights per chip in that layout are the checkpoint sizes of OpenAI's gpt-oss model card
    (arXiv 2508.10925, Table 1: 60.8 GiB and 12.8 GiB; the experts' biases, bf16 there, are MXFP4 here: < 0.1%)."""
    model = load_architecture(name)
    scenario = Scenario(batch=1, prompt_tokens=64, generated_tokens=1, weight_dtype="bf16", expert_weight_dtype="mxfp4")
    weights = memory_per_chip(model, scenario, Parallelism()).weights
    experts = model.moe_layer_count * model.experts * model.expert_parameters
    assert weights == pytest.approx((model.parameter_count() - experts) * 2 + experts * 4.25 / 8, rel=1e-12)
    assert weights / 2**30 == pytest.approx(checkpoint_gib, rel=5e-3)
    graph = stage_graph(model, scenario, Parallelism(), phase="decode", context=64)
    dtypes = {op.name: op.inputs[1].dtype for op in graph.ops if op.kind == "matmul"}
    assert dtypes["layers.moe.experts.gate_up"] == dtypes["layers.moe.experts.down"] == "mxfp4"
    assert dtypes["layers.moe.router"] == dtypes["lm_head"] == "bf16"
    with pytest.raises(PerfmodelError, match="has none"):
        llm_predict(load_architecture("llama-3.1-8b"), load_hardware("h100-sxm"), scenario)


# More families of the installed transformers, each with its config class's defaults (2 layers): read exactly (the
# meta model's count, kind by kind) or refused naming the module or kind that does not fit.
MORE_FAMILIES = ("qwen2", "qwen2_moe", "granitemoe", "deepseek_v2 (top-6)", "glm4_moe", "glm", "phimoe", "cohere", "cohere2",
                 "gemma2",
                 "gemma3", "ernie4_5", "ernie4_5_moe", "smollm3", "exaone4", "seed_oss", "helium", "stablelm")


@pytest.mark.parametrize("family", MORE_FAMILIES)
def test_more_families_count_exactly(family):
    config = {"model_type": family.split(" ")[0], "num_hidden_layers": 2}
    if family == "deepseek_v2 (top-6)":  # (its config class gives no top-k: DeepSeek-V2's config.json routes to 6)
        config["num_experts_per_tok"] = 6
    total, by_kind = _meta_counts(config)
    architecture = architecture_from_class(config, family)
    assert architecture.parameter_count() == total and architecture.parameters_by_kind() == by_kind


@pytest.mark.parametrize("family, needle", [
    ("olmo2", "attention: the class has"),  # its QK norms span the whole projection, not a head
    ("falcon_h1", "side by side"),  # attention and Mamba-2 in parallel in every layer
    ("olmo_hybrid", "linear-attention layer with"),  # a gated delta net with separate q/k/v/a/b/g projections
    ("starcoder2", "c_fc"),
    ("emu3", "num_attention_heads is None"),  # a multimodal config whose heads are in its text_config (was a crash)
])
def test_other_families_are_refused_naming_what_does_not_fit(family, needle):
    with pytest.raises(PerfmodelError, match=needle):
        architecture_from_class({"model_type": family, "num_hidden_layers": 2}, family)


@pytest.mark.parametrize("top_k, needle", [(None, "gives no num_experts_per_tok"), (0, "'num_experts_per_tok'"),
                                           (65, "from 1 to the 64 experts")])
def test_a_moe_without_a_valid_top_k_is_refused(top_k, needle):
    """The router's top-k is read by hand: DeepSeek-V2's config class leaves it None (transformers' router could not
    run); it is refused naming the field, not priced as top-1."""
    config = {"model_type": "deepseek_v2", "num_hidden_layers": 2, "num_experts_per_tok": top_k}
    with pytest.raises(PerfmodelError, match=needle):
        architecture_from_class(config, "deepseek_v2")


def test_the_hand_read_top_k_is_the_class_routers():
    """The router's top-k read by hand from the config is what the class's routers hold (their ``top_k``); a reading
    the class contradicts is refused naming the module."""
    from perfmodel.llm.model_class import architecture_from_shapes, router_top_k

    config = FAMILY_CONFIGS["qwen3_moe"]
    hf_config, model = meta_model(config)
    held = router_top_k(model)
    assert set(held.values()) == {architecture_from_class(config, "q").experts_per_token} and len(held) == 4
    with pytest.raises(PerfmodelError, match="model.layers.0.mlp.gate routes each token to 3 experts"):
        architecture_from_shapes(hf_config, parameter_shapes(model), "q", {"model.layers.0.mlp.gate": 3})


def test_mamba1_hybrids_and_pure_state_space_models_are_refused():
    """Jamba's Mamba-1 mixer (x_proj, dt_proj) is not Mamba-2's; a model with no attention layer is not a hybrid."""
    with pytest.raises(PerfmodelError, match="x_proj"):
        architecture_from_class({"model_type": "jamba", "num_hidden_layers": 8}, "jamba")
    with pytest.raises(PerfmodelError, match="every layer is a linear-attention"):
        architecture_from_class({"model_type": "granitemoehybrid", "num_hidden_layers": 2}, "granite")


@pytest.mark.parametrize("flags, needle", [(["--expert-weights", "bogus"], "expert_weight_dtype 'bogus' is unknown"),
                                           (["--weights", "bogus"], "weight_dtype 'bogus' is unknown"),
                                           (["--kv", "mxfp4"], "block-scaled weight format")])
def test_serve_refuses_bad_weight_formats_with_exit_2(flags, needle, capsys):
    from perfmodel.cli import main

    assert main(["serve", "--model", "gpt-oss-20b", "--on", "h100-sxm", "--rate", "2/s", "--requests", "5",
                 *flags]) == 2
    assert needle in capsys.readouterr().err


def test_serve_holds_gpt_oss_as_published():
    """serve --expert-weights: the KV budget grows by what MXFP4 experts save against bf16 ones."""
    from perfmodel.serving import Server

    model, h100 = load_architecture("gpt-oss-120b"), load_hardware("h100-sxm")
    bf16 = Server(model, h100, Parallelism(tp=4), weight_dtype="bf16")
    published = Server(model, h100, Parallelism(tp=4), weight_dtype="bf16", expert_weight_dtype="mxfp4")
    experts = model.moe_layer_count * model.experts * model.expert_parameters
    assert published.kv.budget_bytes - bf16.kv.budget_bytes == pytest.approx(experts * (2 - 4.25 / 8) / 4, rel=1e-9)


# -- the issue's two deployments through every command ------------------------------------------------------------
@pytest.mark.parametrize("model, device", [("deepseek-v3", "h200-sxm"), ("qwen3-235b-a22b", "h100-sxm")])
def test_the_issues_deployments_run_through_llm_serve_size_and_train(model, device, capsys):
    """DeepSeek-V3 on 8 H200s and Qwen3-235B-A22B on 8 H100s (fp8 weights) through llm, serve, size and train, each
    answering for the model and device asked (the decode steps' weight-bound roofline is checked by hand above)."""
    import json

    from perfmodel.cli import main

    common = ["--model", model, "--on", device]
    runs = {
        "llm": ["llm", *common, "--tp", "8", "--weights", "fp8", "--batch", "8", "--prompt", "1024", "--gen", "64"],
        "serve": ["serve", *common, "--tp", "8", "--weights", "fp8", "--rate", "1/s", "--requests", "30"],
        "size": ["size", *common, "--weights", "fp8", "--rate", "1/s", "--tpot-p50", "100ms", "--requests", "30"],
        "train": ["train", *common, "--chips", "8", "--global-batch", "8", "--seq", "4096", "--tp", "8", "--ep", "8",
                  "--recompute", "full"],
    }
    for command, argv in runs.items():
        assert main([*argv, "--json"]) == 0, command
        result = json.loads(capsys.readouterr().out)
        if command == "size":
            assert result[device]["best"]["chips"] >= 1
            continue
        assert result["model"] == model and result["hardware"].startswith(device), command
        assert (result.get("chips") or 8) == 8
        if command == "llm":
            assert result["tpot_s"] > 0 and result["memory_bytes"]["weights"] > 0
        elif command == "serve":
            assert result["tpot_s"]["p50"] > 0
        else:
            assert result["step_s"] > 0


# -- hybrids: linear-attention / Mamba-2 layers keep a state instead of a KV cache --------------------------------
HYBRID_CACHE_CONFIGS = {
    "qwen3_next": {"model_type": "qwen3_next", "num_hidden_layers": 4, "hidden_size": 64, "num_experts": 4,
                   "num_experts_per_tok": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16,
                   "vocab_size": 128, "head_dim": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
                   "linear_value_head_dim": 16},
    "qwen3_5_moe_text": {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 4, "hidden_size": 64,
                         "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                         "shared_expert_intermediate_size": 16, "vocab_size": 128, "head_dim": 16,
                         "num_attention_heads": 4, "num_key_value_heads": 2, "linear_num_key_heads": 2,
                         "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 16,
                         "mamba_ssm_dtype": "float32"},
    "granitemoehybrid": {"model_type": "granitemoehybrid", "num_hidden_layers": 4, "hidden_size": 64,
                         "layer_types": ["mamba", "mamba", "mamba", "attention"], "num_local_experts": 4,
                         "num_experts_per_tok": 2, "intermediate_size": 16, "shared_intermediate_size": 32,
                         "vocab_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "mamba_n_heads": 8,
                         "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 2, "mamba_expand": 2},
    "nemotron_h": {"model_type": "nemotron_h", "num_hidden_layers": 6, "hybrid_override_pattern": "M*MEM-",
                   "hidden_size": 64, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                   "moe_shared_expert_intermediate_size": 32, "intermediate_size": 48, "vocab_size": 128,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "mamba_num_heads": 8,
                   "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 2, "mamba_ssm_cache_dtype": "float32"},
    # a gated delta net layer and a sliding-window attention layer (its defaults)
    "lara_mini": {"model_type": "lara_mini", "num_hidden_layers": 2},
    "bamba": {"model_type": "bamba", "num_hidden_layers": 4, "attn_layer_indices": [3], "hidden_size": 64,
              "intermediate_size": 32, "vocab_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 2, "mamba_expand": 2},
}


def _dynamic_cache_holdings(config, batch, context):
    """(recurrent + conv state elements per sequence, their bytes per sequence, KV elements per token) the
    class's DynamicCache allocates after a forward over ``context`` tokens of ``batch`` sequences (meta)."""
    hf_config, model = meta_model({**config, "dtype": "bfloat16"})
    cache = transformers.DynamicCache(config=hf_config)
    with torch.no_grad():
        model(input_ids=torch.zeros((batch, context), dtype=torch.long, device="meta"), cache=cache, use_cache=True)
    states = [tensor for layer in cache.layers for held in (getattr(layer, "conv_states", {}),
                                                            getattr(layer, "recurrent_states", {}))
              for tensor in held.values() if tensor is not None]
    keys = [tensor for layer in cache.layers for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None))
            if tensor is not None and tensor.numel()]
    return (sum(t.numel() for t in states) / batch, sum(t.numel() * t.element_size() for t in states) / batch,
            sum(t.numel() for t in keys) / batch / context)


@pytest.mark.parametrize("label", sorted(HYBRID_CACHE_CONFIGS))
def test_hybrid_state_and_kv_equal_what_the_cache_class_allocates(label):
    """Per hybrid family: the recurrent and conv state a sequence keeps is what transformers' cache allocates
    (GDN: heads x key_dim x value_dim, Mamba-2: heads x head_dim x d_state, plus conv_kernel inputs of every conv
    channel), whatever the context; only the attention layers keep KV. Bytes too where the config fixes the
    state's dtype (Qwen3.5: float32; transformers' torch path keeps the state in float32 for every family)."""
    config = HYBRID_CACHE_CONFIGS[label]
    architecture = architecture_from_class(config, label)
    for context in (8, 24):
        elements, state_bytes, kv_per_token = _dynamic_cache_holdings(config, batch=2, context=context)
        assert architecture.state_elements_per_sequence() == elements
        assert architecture.kv_cache_bytes(context, 1) / context == kv_per_token
        if architecture.state_dtype is not None:
            assert architecture.state_bytes(2) == state_bytes
    assert architecture.attention_layer_count == 1 and architecture.kv_bytes_per_token(2) == \
        architecture.kv_elements_per_token() * 2


QWEN3_NEXT = "qwen3-next-80b-a3b"


def test_qwen3_next_state_and_kv_by_hand():
    """Qwen3-Next-80B-A3B: 36 gated delta net layers of 32 value heads x 128 x 128 state and a 4-tap conv over
    2 x 16 x 128 + 32 x 128 = 8192 channels; 12 gated-attention layers of 2 KV heads x 256."""
    a = load_architecture(QWEN3_NEXT)
    assert (a.layers, a.attention_layer_count, a.mixer.kind) == (48, 12, "gated_delta_net")
    assert a.linear_layers == (True, True, True, False) * 12 and a.attention_gate and a.shared_expert_gate
    assert a.state_elements_per_sequence() == 36 * (32 * 128 * 128 + 8192 * 4)
    assert a.kv_bytes_per_token(2) == 12 * 2 * 2 * 256 * 2
    assert a.kv_cache_bytes(1000, 2) == 12 * 2 * 2 * 256 * 2 * 1000


def test_hybrid_memory_per_chip_holds_the_state_beside_the_kv():
    """memory_per_chip's KV cache of a hybrid: the attention layers' KV (tp 8 over 2 KV heads: each chip holds one)
    plus each sequence's state split over tp, by hand."""
    a = load_architecture(QWEN3_NEXT)
    scenario = Scenario(batch=16, prompt_tokens=4000, generated_tokens=96)
    memory = memory_per_chip(a, scenario, Parallelism(tp=8))
    kv = 12 * 2 * 2 * 256 * 2 * 4096 / 2  # K and V of 2 KV heads x 256, bf16, 4096 tokens; one KV head a chip
    state = 36 * (32 * 128 * 128 + 8192 * 4) * 2 / 8
    assert memory.kv_cache == pytest.approx(16 * (kv + state), rel=1e-12)


def test_hybrid_decode_reads_and_writes_each_state_once_by_hand():
    """A decode step's recurrent op moves every sequence's state of this chip's heads in and out once (bf16: 2
    bytes), plus its q/k/v in and output out: 2 x batch x 4 heads x 128 x 128 x 2 bytes x 36 layers on tp 8."""
    from perfmodel.roofline.arrays import evaluate_arrays

    a, h100 = load_architecture(QWEN3_NEXT), load_hardware("h100-sxm")
    batch = 64
    graph = stage_graph(a, Scenario(batch=batch, prompt_tokens=4096, generated_tokens=8), Parallelism(tp=8),
                        phase="decode", context=4100)
    index = next(i for i, op in enumerate(graph.ops) if op.name == "layers.linear_attn.recurrent_step")
    op = graph.ops[index]
    assert op.count == 36
    state = batch * 4 * 128 * 128 * 2
    activations = batch * (1024 + 512) * 2  # the conv's q/k/v channels in (2 x 2 x 128 + 4 x 128), 4 x 128 out
    hbm = evaluate_arrays(graph, h100).bytes_by_level[0, index]
    assert hbm == pytest.approx(36 * (2 * state + activations), rel=1e-12)
    assert op.attrs["elements"] * op.attrs["flops_per_element"] == batch * 4 * 128 * 128 * 7
    # the attention op sees only the 12 attention layers
    assert next(op for op in graph.ops if op.name == "layers.attn.sdpa").count == 12


def test_hybrid_prefill_prices_the_chunked_scan_as_defined():
    """Prefill's gated delta net is the chunked scan (chunks of 64): per chunk and value head K K^T and Q K^T
    (64 x 64 x 128 each), the triangular solve (64 x 64 x 22), W and U (64 x 256 x 64), W S and Q S (64 x 128 x 128
    each), the chunk state (128 x 128 x 64) and the intra-chunk output (64 x 128 x 64): FLOPs by hand."""
    a = load_architecture(QWEN3_NEXT)
    batch, prompt = 2, 1000
    graph = stage_graph(a, Scenario(batch=batch, prompt_tokens=prompt, generated_tokens=1), Parallelism(tp=8),
                        phase="prefill", context=prompt)
    chunks, heads = 16, 4  # ceil(1000 / 64); 32 value heads over 8 chips
    per_chunk = 2 * (2 * 64 * 64 * 128 + 64 * 64 * 22 + 64 * 256 * 64 + 2 * 64 * 128 * 128 + 128 * 128 * 64
                     + 64 * 128 * 64)
    scan = sum(2 * op.attrs["m"] * op.attrs["n"] * op.attrs["k"] * op.attrs["batch"] * op.count for op in graph.ops
               if op.name.startswith("layers.linear_attn.chunk_"))
    assert scan == 36 * batch * heads * chunks * per_chunk


@pytest.mark.parametrize("name, published", [(QWEN3_NEXT, 80e9), ("granite-4.0-h-small", 32e9),
                                             ("qwen3.5-35b-a3b", 35e9), ("nemotron-3-nano-30b-a3b", 31.6e9)])
def test_shipped_hybrids_match_their_published_size(name, published):
    """The class's count against the model cards' rounded totals (to half their last digit); the configs name their
    source. Qwen3.5-35B-A3B's 35 B includes its vision encoder, which is not priced; Nemotron-3-Nano's model card
    gives 31.6 B in all."""
    config = load_config(name)
    assert config["_source"].startswith("https://huggingface.co/")
    count = load_architecture(name).parameter_count()
    if published >= 50e9:
        assert count == pytest.approx(published, rel=0.005)
    else:
        assert abs(count - published) <= (0.05e9 if published % 1e9 else 0.5e9)


def test_qwen3_next_runs_through_llm_and_size_on_8_h100(capsys):
    """Qwen3-Next-80B-A3B on 8 H100s: llm answers with the state in its memory; size finds a system."""
    import json

    from perfmodel.cli import main

    assert main(["llm", "--model", QWEN3_NEXT, "--on", "h100-sxm", "--tp", "8", "--batch", "64", "--prompt", "4096",
                 "--gen", "256", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == QWEN3_NEXT and result["tpot_s"] > 0
    a = load_architecture(QWEN3_NEXT)
    expected = 64 * (a.kv_cache_bytes(4352, 2) / 2 + a.state_bytes(2) / 8)
    assert result["memory_bytes"]["kv_cache"] == pytest.approx(expected, rel=1e-12)
    assert main(["size", "--model", QWEN3_NEXT, "--on", "h100-sxm", "--rate", "1/s", "--tpot-p50", "100ms",
                 "--requests", "30", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["h100-sxm"]["best"]["chips"] >= 1


def test_models_list_shows_the_layer_mix_and_state(capsys):
    import json

    from perfmodel.cli import main

    assert main(["models", "list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    qwen = rows[QWEN3_NEXT]
    assert (qwen["attention_layers"], qwen["linear_layers"], qwen["linear_mixer"]) == (12, 36, "gated_delta_net")
    assert qwen["state_bytes_per_sequence_bf16"] == 36 * (32 * 128 * 128 + 8192 * 4) * 2
    assert rows["granite-4.0-h-small"]["linear_mixer"] == "mamba2" and rows["llama-3.1-8b"]["linear_layers"] == 0
    assert main(["models", "list"]) == 0
    assert "48 (12 attention + 36 gated delta net)" in capsys.readouterr().out


def test_models_list_shows_the_issues_columns(capsys):
    """models list: attention kind, experts (routed, shared, active), KV bytes per token and parameters (total,
    active) of the issue's families, by hand. DeepSeek-V3: MLA caching 576 elements a layer, 8 of 256 routed experts
    + a 2,048-wide shared one in 58 of 61 layers, so 58 x 248 experts of 3 x 7168 x 2048 are idle per token."""
    import json

    from perfmodel.cli import main

    assert main(["models", "list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    deepseek = rows["deepseek-v3"]
    assert (deepseek["attention"], deepseek["experts"], deepseek["experts_per_token"], deepseek["shared_experts_width"],
            deepseek["moe_layers"]) == ("MLA", 256, 8, 2048, 58)
    assert deepseek["kv_bytes_per_token_bf16"] == 61 * 576 * 2
    assert deepseek["parameters"] == 671_026_404_352
    assert deepseek["active_parameters"] == 671_026_404_352 - 58 * 248 * 3 * 7168 * 2048
    qwen = rows["qwen3-235b-a22b"]
    assert (qwen["attention"], qwen["experts"], qwen["experts_per_token"], qwen["shared_experts_width"]) == \
        ("GQA", 128, 8, 0)
    assert qwen["kv_bytes_per_token_bf16"] == 94 * 2 * 4 * 128 * 2
    assert qwen["active_parameters"] == qwen["parameters"] - 94 * 120 * 3 * 4096 * 1536
    assert rows["gpt-oss-120b"]["attention"] == "GQA, full/window 128"
    assert rows["gemma-3-27b"]["attention"] == "GQA, full/window 1024"
    assert rows["llama-4-maverick"]["attention"] == "GQA, full/chunk 8192"
    assert (rows["llama-4-maverick"]["experts"], rows["llama-4-maverick"]["shared_experts_width"]) == (128, 8192)
    assert rows["granite-3.1-8b"]["attention"] == "GQA" and rows["granite-3.1-8b"]["experts"] == 1
    assert main(["models", "list"]) == 0
    text = capsys.readouterr().out
    assert "MLA" in text and "8 of 256 + shared (2048 wide), 58 of 61 layers" in text and "68.6 KiB" in text
    assert "671.03 B (37.55 B)" in text


def test_eager_capture_refuses_hybrids():
    from perfmodel.llm.eager import supports

    assert "condensed graph" in supports(load_config(QWEN3_NEXT))


def test_mamba2_groups_fewer_than_tp_are_replicated():
    """Granite-4.0-H-Small's Mamba-2 layers have one group (B and C shared by 128 heads of 64 x 128 state): on 8
    chips each holds 16 heads' state and its own copy of the group's B and C conv channels (vLLM's MambaMixer2)."""
    a = load_architecture("granite-4.0-h-small")
    assert (a.mixer.kind, a.mixer.heads, a.mixer.key_heads, a.mixer.key_dim, a.mixer.value_dim) == \
        ("mamba2", 128, 1, 128, 64)
    per_chip = 36 * (128 * 64 * 128 // 8 * 2 + (2 * 1 * 128 + 8192 // 8) * 4 * 2)
    assert a.state_bytes(2, tp=8) == per_chip
    memory = memory_per_chip(a, Scenario(batch=4, prompt_tokens=1000, generated_tokens=24), Parallelism(tp=8))
    assert memory.kv_cache == 4 * (4 * 2 * 8 // 8 * 128 * 2 * 1024 + per_chip)  # 4 attention layers, 1 KV head a chip


def test_disaggregated_transfer_carries_the_state():
    """A prefill worker hands the decode worker the attention layers' KV and the linear layers' state."""
    from perfmodel.serving.disaggregated import kv_transfer_bytes

    expected = 12 * 2 * 2 * 256 * 2 * 1000 + 36 * (32 * 128 * 128 + 8192 * 4) * 2
    assert float(kv_transfer_bytes(load_architecture(QWEN3_NEXT), 1000, "bf16")) == expected


def test_nemotron_h_blocks_hold_one_part_each():
    """Nemotron-3-Nano's 52 blocks (pattern MEMEM*E...): 23 Mamba-2 mixers, 6 attentions and 23 MoEs, each block one
    norm and one residual; the decode graph counts each part on its own blocks, and a block without an MLP has no
    MLP norm, residual or all-reduce."""
    a = load_architecture("nemotron-3-nano-30b-a3b")
    assert (a.layers, a.linear_layers_in(range(a.layers)), a.attention_layer_count, a.moe_layer_count) == \
        (52, 23, 6, 23)
    assert (a.activation, a.gated_mlp, a.experts, a.experts_per_token, a.state_dtype) == ("relu2", False, 128, 6, "fp32")
    graph = stage_graph(a, Scenario(batch=4, prompt_tokens=100, generated_tokens=4), Parallelism(tp=2),
                        phase="decode", context=104)
    counts = {op.name: op.count for op in graph.ops}
    assert counts["layers.input_norm"] == counts["layers.attn.all_reduce"] == counts["layers.attn.residual"] == 29
    assert counts["layers.post_norm"] == counts["layers.mlp.all_reduce"] == counts["layers.mlp.residual"] == 23
    assert (counts["layers.attn.sdpa"], counts["layers.linear_attn.recurrent_step"], counts["layers.moe.router"]) == \
        (6, 23, 23)
    assert "layers.mlp.down_proj" not in counts  # no dense MLP block in this pattern
    # state per sequence: 64 heads x 64 x 128 in float32 and a 4-tap conv over 2 x 8 x 128 + 64 x 64 channels
    assert a.state_bytes(2) == 23 * (64 * 64 * 128 * 4 + (2 * 8 * 128 + 64 * 64) * 4 * 2)
