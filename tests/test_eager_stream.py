"""Eager mode priced with the real op stream of the transformers model class (issue 13, item 1)."""

from __future__ import annotations

import pytest

from perfmodel.cli import main
from perfmodel.hardware.loader import load_for_prediction, load_hardware
from perfmodel.llm import Parallelism, Scenario, llm_predict
from perfmodel.llm.catalog import load_architecture, load_config
from perfmodel.llm.eager import CapturedStream, stage_graphs_for
from perfmodel.llm.graphs import stage_graph
from perfmodel.roofline import evaluate
from perfmodel.workload.ir import Graph, Op, TensorSpec

FP16 = {"weight_dtype": "fp16", "kv_dtype": "fp16", "activation_dtype": "fp16"}


def _flops_and_weights(graph: Graph, hardware) -> tuple[float, float]:
    evaluation = evaluate(graph, hardware, mode="dynamic")
    weights = sum(t.bytes * op.count for op in graph.ops for t in op.inputs if t.role == "weight")
    return evaluation.flops_total, weights


@pytest.mark.parametrize(("phase", "context"), [("decode", 129), ("prefill", 128)])
def test_captured_stream_matches_the_condensed_graph_in_work_and_weights(phase, context):
    """The condensed graph is the fast path: it must do the same work (FLOPs and weight bytes within
    2%) while the captured stream has the real, much larger op count."""
    architecture, hardware = load_architecture("llama-2-7b"), load_hardware("a100-sxm-80gb")
    stream = CapturedStream.from_config(load_config("llama-2-7b"))
    scenario = Scenario(batch=1, prompt_tokens=128, generated_tokens=128, **FP16)
    captured = stream(architecture, scenario, Parallelism(), phase=phase, context=context)
    condensed = stage_graph(architecture, scenario, Parallelism(), phase=phase, context=context)
    (captured_flops, captured_weights), (condensed_flops, condensed_weights) = (
        _flops_and_weights(captured, hardware), _flops_and_weights(condensed, hardware))
    assert captured_flops == pytest.approx(condensed_flops, rel=0.02)
    assert captured_weights == pytest.approx(condensed_weights, rel=0.02)
    # Kernel counts side by side: ~43 kernels a layer eager (norm 8, rotary 10, KV writes 2...), 12 condensed.
    layer_ops = sum(op.count for op in captured.ops if op.name.startswith("layers.") and op.kind != "view") / 32
    condensed_layer_ops = sum(op.count for op in condensed.ops if op.name.startswith("layers.")) / 32
    assert 35 <= layer_ops <= 50 and condensed_layer_ops <= 13
    views = sum(op.count for op in captured.ops if op.kind == "view")
    assert views >= 20 * 32  # views and reshapes launch nothing but cost the host


def test_kv_cache_writes_move_one_token_not_the_cache():
    architecture = load_architecture("llama-2-7b")
    stream = CapturedStream.from_config(load_config("llama-2-7b"))
    scenario = Scenario(batch=1, prompt_tokens=1024, generated_tokens=16, **FP16)
    graph = stream(architecture, scenario, Parallelism(), phase="decode", context=1025)
    writes = [op for op in graph.ops if op.provenance.startswith("aten.index_copy")]
    assert len(writes) == 2  # K and V, each once per layer (count 32)
    for op in writes:
        assert op.count == 32 and op.kind == "copy"
        assert op.input_bytes == 32 * 128 * 2  # one token of 32 heads x 128 fp16 values
    attention = next(op for op in graph.ops if op.kind == "attention")
    assert {t.role for t in attention.inputs[1:]} == {"kv_cache"}


def test_eager_on_an_a100_is_host_bound_several_times_the_graph_time():
    """gpt-fast measured 39.2 ms eager vs 9.5 ms compiled (Llama-2-7B, A100, batch 1): the eager
    stream's ~1,400 kernels and ~1,300 views a token, not HBM, set the eager time."""
    architecture = load_architecture("llama-2-7b")
    hardware = load_for_prediction("a100-sxm-80gb")
    scenario = Scenario(batch=1, prompt_tokens=8, generated_tokens=128, **FP16)
    graphs, note = stage_graphs_for(load_config("llama-2-7b"), hardware, "eager")
    assert note is None and isinstance(graphs, CapturedStream)
    eager = llm_predict(architecture, hardware, scenario, mode="eager", graphs=graphs)
    compiled = llm_predict(architecture, hardware, scenario, mode="graph")
    assert eager.bound_by_phase["decode"] == "scheduling" and compiled.bound_by_phase["decode"] == "memory:hbm"
    assert 3.0 <= eager.tpot_s / compiled.tpot_s <= 5.5
    assert eager.tpot_s == pytest.approx(39.2e-3, rel=0.30)
    assert eager.graph.startswith("captured eager stream")
    assert eager.ops_per_decode_step["per_layer"] == pytest.approx(43, abs=5)


def test_compiled_modes_use_the_condensed_graph_and_mixed_moe_layers_are_captured():
    """Compiled modes use the condensed graph; MoE models whose layers differ (a dense first layer) are captured,
    each kind of layer once (issue 30)."""
    hardware = load_hardware("h100-sxm")
    graphs, note = stage_graphs_for(load_config("llama-2-7b"), hardware, "graph")
    assert graphs is stage_graph and note is None
    graphs, note = stage_graphs_for(load_config("qwen3-235b-a22b"), hardware, "eager")
    assert isinstance(graphs, CapturedStream) and note is None
    config = {**load_config("qwen3-30b-a3b"), "mlp_only_layers": [0]}
    graphs, note = stage_graphs_for(config, hardware, "eager")
    assert isinstance(graphs, CapturedStream) and note is None
    from perfmodel.llm.model_class import architecture_from_class

    architecture = architecture_from_class(config, "qwen3-30b-a3b-dense-first")
    graph = graphs(architecture, Scenario(batch=2, prompt_tokens=8, generated_tokens=2), Parallelism(),
                   phase="decode", context=9)
    assert {op.count for op in graph.ops if op.name.startswith("layers.dense_full.") and op.kind != "view"} == {1}
    assert {op.count for op in graph.ops if op.name.startswith("layers.moe_full.") and op.kind != "view"} == {47}


# A small Qwen3-MoE and Mixtral (transformers' grouped_mm experts): 16 experts, top-4 / top-2.
TINY_MOE = {
    "qwen3_moe": {"model_type": "qwen3_moe", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 64, "intermediate_size": 512, "moe_intermediate_size": 128, "num_experts": 16,
                  "num_experts_per_tok": 4, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096},
    "mixtral": {"model_type": "mixtral", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 128, "num_local_experts": 16, "num_experts_per_tok": 2, "num_hidden_layers": 2,
                "vocab_size": 1000, "max_position_embeddings": 4096},
}


@pytest.mark.parametrize("family", sorted(TINY_MOE))
@pytest.mark.parametrize(("phase", "batch", "tp"), [("decode", 1, 1), ("decode", 3, 1), ("prefill", 2, 1),
                                                     ("decode", 3, 2)])
def test_moe_stream_is_captured_at_the_expected_load(family, phase, batch, tp):
    """The captured MoE layer has the router, top-k, sort, histc/cumsum and gathers as real kernels, and its two
    grouped expert GEMMs are the condensed graph's expert matmuls at the expected load (the experts the routed
    tokens reach, evenly loaded): the same FLOPs and weight bytes as the condensed graph (within 2%)."""
    from perfmodel.llm.model_class import architecture_from_class

    config = TINY_MOE[family]
    architecture, hardware = architecture_from_class(config, family), load_hardware("h100-sxm")
    scenario = Scenario(batch=batch, prompt_tokens=16, generated_tokens=4)
    context = 16 if phase == "prefill" else 17
    captured = CapturedStream.from_config(config)(architecture, scenario, Parallelism(tp=tp), phase=phase,
                                                  context=context)
    condensed = stage_graph(architecture, scenario, Parallelism(tp=tp), phase=phase, context=context)
    provenances = {op.provenance for op in captured.ops}
    assert {"aten.topk", "aten.sort", "aten.histc", "aten.cumsum"} <= provenances
    def dims(op):
        return tuple(op.attrs[key] for key in ("batch", "m", "k", "n"))
    experts = [dims(op) for op in captured.ops if op.provenance == "aten._grouped_mm"]
    expected = [dims(op) for op in condensed.ops if op.name.startswith("layers.moe.experts.") and op.kind == "matmul"]
    assert experts == expected and len(experts) == 2
    routed = batch * (16 if phase == "prefill" else 1) * architecture.experts_per_token
    assert {reached for reached, *_ in experts} == {min(16, routed)}
    (captured_flops, _), (condensed_flops, _) = (_flops_and_weights(captured, hardware),
                                                 _flops_and_weights(condensed, hardware))
    assert captured_flops == pytest.approx(condensed_flops, rel=0.02)

    def weights(graph):  # the embedding apart: a shard's table is vocab / tp rows captured, the whole table condensed
        return sum(t.bytes * op.count for op in graph.ops if op.kind != "embedding" for t in op.inputs
                   if t.role == "weight")
    assert weights(captured) == pytest.approx(weights(condensed), rel=0.02)
    kernels = sum(op.count for op in captured.ops if op.kind != "view" and op.name.startswith("layers."))
    assert kernels > 2 * sum(op.count for op in condensed.ops if op.name.startswith("layers."))


def test_view_ops_cost_the_eager_host_only():
    hardware = load_hardware("h100-sxm")
    view = Op(name="views", kind="view", count=100, outputs=(TensorSpec(shape=(1,), dtype="bf16"),))
    eager = evaluate(Graph(name="v", ops=[view]), hardware, mode="dynamic")
    compiled = evaluate(Graph(name="v", ops=[view]), hardware, mode="graph")
    host_op = hardware.scheduling.modes["dynamic"].host_op_s
    assert host_op > 0 and eager.ops[0].scheduling_s == pytest.approx(100 * host_op)
    assert eager.ops[0].flops == 0 and sum(eager.ops[0].bytes.values()) == 0
    assert compiled.ops[0].scheduling_s == 0 and compiled.ops[0].launches == 0


def test_llm_eager_prints_the_op_count_per_layer(capsys):
    assert main(["llm", "--model", "llama-2-7b", "--on", "h100-sxm", "--batch", "1", "--prompt", "32", "--gen", "8",
                 "--mode", "eager"]) == 0
    out = capsys.readouterr().out
    assert "a layer)" in out and "host-only views" in out and "captured eager stream" in out
    assert main(["llm", "--model", "llama-2-7b", "--on", "h100-sxm", "--batch", "1", "--prompt", "32", "--gen", "8",
                 "--mode", "eager", "--condensed"]) == 0
    assert "condensed LLM graph" in capsys.readouterr().out


def test_llm_graph_out_feeds_predict(tmp_path, capsys):
    """The stage graph llm priced can be written and predicted again with the same result."""
    out = tmp_path / "decode.yaml"
    argv = ["llm", "--model", "llama-2-7b", "--on", "h100-sxm", "--batch", "1", "--prompt", "32", "--gen", "8",
            "--mode", "graph", "--json"]
    assert main([*argv, "--graph-out", str(out), "--phase", "decode"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["tpot_s"] > 0 and out.is_file()
    assert main(["predict", str(out), "--on", "h100-sxm", "--mode", "graph", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["total_s"]
    graph = stage_graph(load_architecture("llama-2-7b"), Scenario(batch=1, prompt_tokens=32, generated_tokens=8),
                        Parallelism(), phase="decode", context=36)
    assert predicted == pytest.approx(evaluate(graph, load_for_prediction("h100-sxm"), mode="graph").total_s)
    assert main([*argv, "--graph-out", str(tmp_path / "decode.txt")]) == 2
    assert "expected a .yaml, .yml or .json" in capsys.readouterr().err


def test_a_config_with_integer_label_keys_and_lists_of_pairs_is_captured_as_written():
    """transformers writes ``id2label`` with integer keys; the capture cache's frozen form thaws it back
    exactly (it used to come back as a list of pairs, which transformers refused)."""
    from perfmodel.llm.eager import _frozen, _thawed

    value = {"id2label": {0: "LABEL_0", 1: "LABEL_1"}, "pairs": [["a", 1], ["b", 2]], "nested": {"factor": 8.0}}
    assert _thawed(_frozen(value)) == value
    config = {**load_config("llama-2-7b"), "id2label": {0: "LABEL_0", 1: "LABEL_1"},
              "label2id": {"LABEL_0": 0, "LABEL_1": 1}}
    stream = CapturedStream.from_config(config)
    graph = stream(load_architecture("llama-2-7b"), Scenario(batch=1, prompt_tokens=16, generated_tokens=4),
                   Parallelism(), phase="decode", context=17)
    assert sum(op.count for op in graph.ops if op.kind == "matmul") > 0


def test_a_pad_token_outside_the_shards_vocabulary_is_captured():
    """Phi-4's pad_token_id (100349) lies beyond one tp-2 shard's 50,176 rows: the shard is still captured."""
    architecture = load_architecture("phi-4")
    stream = CapturedStream.from_config(load_config("phi-4"))
    graph = stream(architecture, Scenario(batch=1, prompt_tokens=8, generated_tokens=1), Parallelism(tp=2),
                   phase="decode", context=9)
    assert any(op.kind == "matmul" for op in graph.ops)


# The families whose layers differ (issue 30): DeepSeek-V3 (MLA, 3 dense then 58 MoE layers with a shared expert),
# gpt-oss (sliding and full attention alternating, sinks, every layer MoE, the class's eager attention), Gemma 3
# (5 sliding : 1 full, a multimodal wrapper), Llama 4 (chunked and full attention, a multimodal wrapper; Maverick's
# MoE every other layer). (model, tp).
FAMILIES = [("deepseek-v3", 8), ("gpt-oss-20b", 1), ("gemma-3-27b", 2), ("llama-4-scout", 1), ("llama-4-maverick", 8)]


def _layer_weight_bytes(graph: Graph) -> float:
    return sum(t.bytes * op.count for op in graph.ops if op.name.startswith("layers.") for t in op.inputs
               if t.role == "weight")


@pytest.mark.parametrize(("name", "tp"), FAMILIES)
def test_layers_of_every_kind_are_captured_once_and_counted_as_the_model_has_them(name, tp):
    """Each kind of layer (experts or dense MLP, attention window) is captured once and counted as many times as
    the model has it; the stream does the condensed graph's work with the real, several times larger kernel count,
    and takes between 1x and 8x its time on an H200 (host-bound eager, batch 4)."""
    from perfmodel.llm.eager import _kind_tag, layer_kinds

    architecture, config, hardware = load_architecture(name), load_config(name), load_for_prediction("h200-sxm")
    graphs, note = stage_graphs_for(config, hardware, "eager")
    assert note is None and isinstance(graphs, CapturedStream)
    kinds = layer_kinds(architecture)
    assert len(set(kinds)) > 1
    scenario = Scenario(batch=4, prompt_tokens=512, generated_tokens=64)
    for phase, context in (("decode", 1025), ("prefill", 512)):
        captured = graphs(architecture, scenario, Parallelism(tp=tp), phase=phase, context=context)
        condensed = stage_graph(architecture, scenario, Parallelism(tp=tp), phase=phase, context=context)
        for kind in set(kinds):
            counts = {op.count for op in captured.ops if op.name.startswith(f"layers.{_kind_tag(kind)}.")
                      and op.kind != "view"}
            assert counts == {kinds.count(kind)}, kind
        kernels = sum(op.count for op in captured.ops if op.kind != "view") / architecture.layers
        condensed_kernels = sum(op.count for op in condensed.ops) / architecture.layers
        assert 2.5 * condensed_kernels <= kernels <= 200
        (captured_flops, _), (condensed_flops, _) = (_flops_and_weights(captured, hardware),
                                                     _flops_and_weights(condensed, hardware))
        if not (name == "deepseek-v3" and phase == "decode"):  # the class materializes MLA's keys in decode (below)
            assert captured_flops == pytest.approx(condensed_flops, rel=0.03)
        assert _layer_weight_bytes(captured) == pytest.approx(_layer_weight_bytes(condensed), rel=0.02)
        eager, compiled = (evaluate(graph, hardware, mode="dynamic").total_s for graph in (captured, condensed))
        assert 1.0 <= eager / compiled <= 8.0


@pytest.mark.parametrize("name", [name for name, _ in FAMILIES])
def test_captured_layers_hold_exactly_the_models_parameters(name):
    """One shard (tp 1) prefilling 2,048 tokens reaches every expert: the captured layers' weights, each kind
    counted as often as the model has it, are the architecture's layer parameters (bf16) within 0.1%."""
    architecture = load_architecture(name)
    scenario = Scenario(batch=4, prompt_tokens=512, generated_tokens=64)
    graph = CapturedStream.from_config(load_config(name))(architecture, scenario, Parallelism(), phase="prefill",
                                                          context=512)
    parameters = sum(architecture.parameters_of_layer(layer) for layer in range(architecture.layers))
    assert _layer_weight_bytes(graph) == pytest.approx(2 * parameters, rel=1e-3)


def test_deepseek_v3_eager_caches_the_latent_and_expands_it_every_decode_step():
    """transformers' DeepseekV3Attention caches the compressed latent (512) and rotary key (64) of each token, as
    the KV bytes per token say, and re-expands the whole cached latent through kv_b_proj at every decode step
    (materialized, not absorbed): its rows are batch x context, so eager decode does ~20x the condensed FLOPs.
    In fp16 activations, which torch's grouped GEMM does not take."""
    architecture = load_architecture("deepseek-v3")
    graph = CapturedStream.from_config(load_config("deepseek-v3"))(
        architecture, Scenario(batch=4, prompt_tokens=512, generated_tokens=64, **FP16), Parallelism(tp=8),
        phase="decode", context=1025)
    # torch's grouped GEMM is bf16-only: the fp16 stream is the bf16 capture relabelled (same kernels, same widths)
    assert "bf16" not in {tensor.dtype for op in graph.ops for tensor in (*op.inputs, *op.outputs)}
    writes = [op for op in graph.ops if op.kind == "copy" and op.provenance.startswith("aten.index_copy")
              and op.name.startswith("layers.moe_full.")]
    assert sum(op.input_bytes for op in writes) == 4 * architecture.kv_elements_per_token() * 2
    expand = next(op for op in graph.ops if op.name.startswith("layers.moe_full.self_attn.kv_b_proj"))
    assert expand.attrs["m"] == 4 * 1025 and expand.attrs["k"] == architecture.latent.kv_lora_rank


@pytest.mark.parametrize("name", ["deepseek-v3", "gemma-3-27b", "llama-4-maverick"])
def test_a_pipeline_stage_counts_its_own_layers_of_each_kind(name):
    """With pp 4 each kind counts the layers of the heaviest stage, as the condensed graph groups them (DeepSeek-V3's
    dense first layers are in the first stage, which is not the heaviest)."""
    from perfmodel.llm.eager import _kind_tag, layer_kinds
    from perfmodel.llm.graphs import layer_groups

    architecture = load_architecture(name)
    graph = CapturedStream.from_config(load_config(name))(
        architecture, Scenario(batch=2, prompt_tokens=64, generated_tokens=4), Parallelism(pp=4), phase="decode",
        context=65)
    kinds = layer_kinds(architecture)
    stage = [kinds[layer] for layer in architecture.stage_layers(4)]
    counted = {}
    for kind in set(kinds):
        counts = {op.count for op in graph.ops if op.name.startswith(f"layers.{_kind_tag(kind)}.") and op.kind != "view"}
        assert len(counts) <= 1
        counted[kind] = counts.pop() if counts else 0
        assert counted[kind] == stage.count(kind)
    groups = layer_groups(architecture, 4)
    assert sum(counted.values()) == groups.layers
    assert sum(count for (moe, _), count in counted.items() if moe) == groups.moe


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_llama4_routed_path_runs_at_the_expected_load(phase):
    """transformers' Llama4TextMoe runs every expert over every token (repeat x experts, batched GEMMs, sum): the
    captured routed path, its element-wise ops too, is priced on the expected load's rows (the experts the routed
    tokens reach x tokens each), as its GEMMs and the condensed graph are; the shared expert keeps every token."""
    architecture = load_architecture("llama-4-scout")
    scenario = Scenario(batch=4, prompt_tokens=64, generated_tokens=4)
    context = 64 if phase == "prefill" else 65
    graph = CapturedStream.from_config(load_config("llama-4-scout"))(architecture, scenario, Parallelism(),
                                                                     phase=phase, context=context)
    condensed = stage_graph(architecture, scenario, Parallelism(), phase=phase, context=context)
    expert = next(op for op in condensed.ops if op.name == "layers.moe.experts.gate_up")
    rows = expert.attrs["batch"] * expert.attrs["m"]
    tokens = 4 * (64 if phase == "prefill" else 1)
    assert rows < architecture.experts * tokens
    prefix = "layers.moe_full.feed_forward."
    repeat = next(op for op in graph.ops if op.name == prefix + "repeat")
    assert repeat.outputs[0].shape == (rows, architecture.hidden)
    routed = [op for op in graph.ops if op.name.startswith(prefix) and ".shared_expert." not in op.name
              and ".router." not in op.name]
    assert all(tensor.shape[0] != architecture.experts * tokens and tuple(tensor.shape[:2]) != (architecture.experts, tokens)
               for op in routed for tensor in (*op.inputs, *op.outputs))
    shared = next(op for op in graph.ops if op.name == prefix + "shared_expert.gate_proj.mm")
    assert shared.inputs[0].shape == (tokens, architecture.hidden)
