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
    "phi3": {"model_type": "phi3", "num_hidden_layers": 2},
    "granite": {"model_type": "granite", "num_hidden_layers": 2},
    "mixtral": {"model_type": "mixtral", "num_hidden_layers": 2},
    "llama": {"model_type": "llama", "num_hidden_layers": 2},
    "gptj": {"model_type": "gptj", "n_layer": 2},
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
    assert {"deepseek-v3", "deepseek-r1", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-20b",
            "gpt-oss-120b", "llama-4-scout", "llama-4-maverick"} <= set(model_names())


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
                                            ("llama4_text", 128)])
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


def _weight_bytes(graph):
    return sum(op.count * tensor.bytes for op in graph.ops for tensor in op.inputs
               if tensor.role == "weight" and op.kind != "embedding")


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
    layers, plus the shared expert; the step is bound by those weights on the datasheet roofline."""
    a = load_architecture("deepseek-v3")
    scenario = Scenario(batch=8, prompt_tokens=1024, generated_tokens=1, weight_dtype="fp8")
    graph = stage_graph(a, scenario, Parallelism(tp=8), phase="decode", context=1024)
    (routed,) = [op for op in graph.ops if op.name == "layers.moe.experts.gate_up"]
    assert (routed.attrs["batch"], routed.attrs["n"], routed.count) == (64, 2 * 2048 // 8, 58)
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


def test_pipeline_stage_is_the_heaviest_slice():
    a = load_architecture("deepseek-v3")
    stage = a.stage_layers(2)
    assert stage == range(31, 61)  # the second half has no dense layers
    assert a.stage_parameters(2) > a.stage_parameters(1) / 2


@pytest.mark.parametrize("config, needle", [
    ({"model_type": "qwen2_moe", "num_hidden_layers": 2}, "shared_expert_gate"),
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
    memory = {name: memory_per_chip(model, scenario, Parallelism()).weights for name, scenario in scenarios.items()}
    assert memory[dtype] == pytest.approx(model.stage_parameters(1) * bits / 8, rel=1e-12)
    assert memory[dtype] / memory[plain] == pytest.approx(bits / int(bits), rel=1e-12)
    reads = {name: _weight_bytes(stage_graph(model, scenario, Parallelism(), phase="decode", context=64))
             for name, scenario in scenarios.items()}
    assert reads[dtype] / reads[plain] == pytest.approx(bits / int(bits), rel=1e-12)


@pytest.mark.parametrize(("device", "activation", "weight", "side"), [
    ("h200-sxm", "bf16", "mxfp4", "8 per weight"), ("h200-sxm", "bf16", "nvfp4", "8 per weight"),
    ("h200-sxm", "bf16", "fp8_block", "4 per weight"), ("h200-sxm", "fp8", "fp8_block", "2 per output per 128 of k"),
    ("b200", "fp4", "nvfp4", "none"), ("b200", "fp8", "mxfp8", "none"), ("h200-sxm", "bf16", "bf16", "none")])
def test_block_scaled_weights_are_dequantized_or_run_natively_as_defined(device, activation, weight, side):
    """Under bf16 activations block-scaled weights are dequantized in the kernel on the vector engine (convert and
    scale: 4 per 8-bit element, unpack too: 8 per 4-bit one, as int8/int4); under activations of their element
    width the MMA runs them at that rate, Blackwell's block-scaled MMA applying the scales itself, while fp8_block
    on Hopper multiplies the fp32 partial sums by the block scales every 128 of k (DeepSeek-V3, section 3.3.2)."""
    from perfmodel.costs.rules import CostContext, op_cost

    m, k, n = 16, 7168, 4096
    op = Op(name="mm", kind="matmul", inputs=(TensorSpec(shape=(m, k), dtype=activation),
                                              TensorSpec(shape=(k, n), dtype=weight, role="weight")),
            outputs=(TensorSpec(shape=(m, n), dtype=activation),),
            attrs={"m": m, "n": n, "k": k, "batch": 1, "dtype": activation})
    cost = op_cost(op, CostContext(hardware=load_hardware(device)))
    expected = {"8 per weight": 8 * k * n, "4 per weight": 4 * k * n, "2 per output per 128 of k": 2 * m * n * (k // 128),
                "none": 0}[side]
    assert float(cost.side_flops or 0) == expected
    assert cost.peak_dtype == {"bf16": "bf16", "fp8": "fp8", "fp4": "fp4"}[activation]
    assert (cost.side_engine is not None) == (expected > 0)


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
MORE_FAMILIES = ("qwen2", "granitemoe", "deepseek_v2", "glm4_moe", "glm", "phimoe", "cohere", "cohere2", "gemma2",
                 "gemma3", "ernie4_5", "ernie4_5_moe", "smollm3", "exaone4", "seed_oss", "helium", "stablelm")


@pytest.mark.parametrize("family", MORE_FAMILIES)
def test_more_families_count_exactly(family):
    config = {"model_type": family, "num_hidden_layers": 2}
    total, by_kind = _meta_counts(config)
    architecture = architecture_from_class(config, family)
    assert architecture.parameter_count() == total and architecture.parameters_by_kind() == by_kind


@pytest.mark.parametrize("family, needle", [
    ("olmo2", "attention: the class has"),  # its QK norms span the whole projection, not a head
    ("qwen3_next", "linear_attn"),  # gated delta net layers: state instead of a KV cache, not modelled
    ("jamba", "mamba"),
    ("starcoder2", "c_fc"),
])
def test_other_families_are_refused_naming_what_does_not_fit(family, needle):
    with pytest.raises(PerfmodelError, match=needle):
        architecture_from_class({"model_type": family, "num_hidden_layers": 2}, family)


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
