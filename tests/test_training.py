"""Training: backward rules, step composition, memory, layouts, search and the train command."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from perfmodel.cli import main
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm.catalog import load_architecture
from perfmodel.roofline.arrays import evaluate_arrays
from perfmodel.training import Layout, TrainingSetup, train_predict
from perfmodel.training.backward import backward_graph, backward_with_recompute, saved_activation_bytes
from perfmodel.training.search import search
from perfmodel.training.step import forward_graph, group_collective, model_flops_per_sequence

SEQ = 2048


@pytest.fixture(scope="module")
def llama():
    return load_architecture("llama-2-7b")


@pytest.fixture(scope="module")
def h100():
    return load_for_prediction("h100-sxm", ideal=True)


def _flops_by_kind(graph, hardware):
    arrays = evaluate_arrays(graph, hardware)
    totals: dict[str, float] = {}
    for op, flops in zip(graph.ops, arrays.flops, strict=True):
        totals[op.kind] = totals.get(op.kind, 0.0) + float(flops)
    return totals


def test_backward_matmuls_are_twice_the_forward_and_attention_gradient_is_twice_useful(llama, h100):
    forward = forward_graph(llama, TrainingSetup(global_batch=8, seq_len=SEQ), Layout(micro_batch=2))
    backward = backward_graph(forward)
    f, b = _flops_by_kind(forward, h100), _flops_by_kind(backward, h100)
    assert b["matmul"] == pytest.approx(2 * f["matmul"], rel=1e-12)
    assert b["attention"] == pytest.approx(2 * f["attention"], rel=1e-12)
    executed_f = evaluate_arrays(forward, h100).executed_flops
    executed_b = evaluate_arrays(backward, h100).executed_flops
    attention_f = sum(float(x) for op, x in zip(forward.ops, executed_f, strict=True) if op.kind == "attention")
    attention_b = sum(float(x) for op, x in zip(backward.ops, executed_b, strict=True) if op.kind == "attention")
    assert attention_b == pytest.approx(2.5 * attention_f, rel=1e-12)
    # Tensor-parallel all-reduces have all-reduces as their conjugates; the embedding's gradient is a scatter.
    assert {op.attrs.get("collective") for op in backward.ops if op.kind == "collective"} <= {"all_reduce"}
    assert any(op.provenance == "aten.embedding_dense_backward" for op in backward.ops)


def test_model_flops_are_six_n_t_plus_causal_attention(llama, h100):
    """The textbook count (Kaplan et al. 2020; Narayanan et al. 2021): 6 x non-embedding parameters x
    tokens for the matmuls (the LM head included), plus the causal attention's two matmuls."""
    setup = TrainingSetup(global_batch=1, seq_len=SEQ)
    a = llama
    matmul_parameters = a.parameter_count() - a.embedding_parameters - (a.layers * 2 + 1) * a.hidden
    attention = a.layers * a.heads * SEQ * (SEQ + 1) / 2 * 4 * a.head_dim  # QK^T and PV, 2 FLOPs per FMA
    expected = 3 * (2 * matmul_parameters * SEQ + attention)
    # Norms, activations, residuals and softmax add well under 1%.
    assert model_flops_per_sequence(a, h100, setup) == pytest.approx(expected, rel=0.01)
    assert model_flops_per_sequence(a, h100, setup) > expected


def test_step_phases_add_up_and_bubble_follows_1f1b(llama, h100):
    setup = TrainingSetup(global_batch=64, seq_len=SEQ)
    flat = train_predict(llama, h100, setup, Layout(dp=8, micro_batch=1))
    assert flat.step_s == pytest.approx(sum(flat.time_by_phase.values()))
    assert flat.time_by_phase["pipeline_bubble"] == 0
    piped = train_predict(llama, h100, setup, Layout(dp=2, pp=4, micro_batch=1))
    per_micro = (piped.time_by_phase["forward"] + piped.time_by_phase["backward"]) / (64 // 2)
    assert piped.time_by_phase["pipeline_bubble"] == pytest.approx(3 * per_micro, rel=1e-9)
    interleaved = train_predict(llama, h100, setup, Layout(dp=2, pp=4, virtual_stages=2, micro_batch=1))
    assert interleaved.time_by_phase["pipeline_bubble"] == pytest.approx(1.5 * per_micro, rel=1e-9)
    assert interleaved.time_by_phase["pipeline_sends"] > 0


def test_recompute_trades_memory_for_time(llama, h100):
    layout = Layout(fsdp=8, micro_batch=2)
    results = {policy: train_predict(llama, h100, TrainingSetup(global_batch=64, seq_len=SEQ, recompute=policy), layout)
               for policy in ("none", "selective", "full")}
    none, selective, full = results["none"], results["selective"], results["full"]
    assert none.memory.activations > selective.memory.activations > full.memory.activations
    assert none.step_s < selective.step_s < full.step_s
    assert none.time_by_phase["recompute"] == 0 and full.time_by_phase["recompute"] > selective.time_by_phase["recompute"]
    # Model FLOPs do not change; the hardware's do: MFU < HFU with recompute, equal without.
    assert none.mfu == pytest.approx(none.hfu)
    assert full.hfu > full.mfu
    assert full.model_flops_per_step == none.model_flops_per_step
    # Full recomputation keeps one tensor per layer: the layer's input.
    forward = forward_graph(llama, TrainingSetup(global_batch=64, seq_len=SEQ), layout)
    assert saved_activation_bytes(forward, "full") == 2 * SEQ * llama.hidden * 2 * llama.layers


def test_recompute_graph_reruns_the_layers(llama, h100):
    forward = forward_graph(llama, TrainingSetup(global_batch=8, seq_len=SEQ), Layout())
    full = backward_with_recompute(forward, "full")
    recomputed = [op for op in full.ops if op.name.startswith("recompute.")]
    assert len(recomputed) == sum(1 for op in forward.ops if op.name.startswith("layers."))
    selective = backward_with_recompute(forward, "selective")
    assert not any(op.kind == "matmul" for op in selective.ops if op.name.startswith("recompute."))


def test_sharding_divides_optimizer_state_and_weights(llama, h100):
    setup = TrainingSetup(global_batch=64, seq_len=SEQ)
    replicated = train_predict(llama, h100, setup, Layout(dp=8))
    zero1 = train_predict(llama, h100, setup, Layout(dp=8, zero=1))
    zero2 = train_predict(llama, h100, setup, Layout(dp=8, zero=2))
    fsdp = train_predict(llama, h100, setup, Layout(fsdp=8))
    assert zero1.memory.optimizer == pytest.approx(replicated.memory.optimizer / 8)
    assert zero1.memory.gradients == replicated.memory.gradients
    assert zero2.memory.gradients == pytest.approx(replicated.memory.gradients / 8)
    assert fsdp.memory.optimizer == pytest.approx(replicated.memory.optimizer / 8)
    assert fsdp.memory.weights < replicated.memory.weights
    # 7B parameters x (2 bf16 + 4 fp32 gradient + 12 fp32 master and moments) bytes do not fit one 80 GB H100.
    assert not replicated.fits and fsdp.fits
    assert replicated.memory.weights + replicated.memory.gradients + replicated.memory.optimizer == pytest.approx(
        llama.parameter_count() * 18, rel=1e-9)


def test_collectives_cross_domains_hierarchically(h100):
    inside = group_collective(h100, "g", "all_reduce", 1e9, 8, 1, 8, "bf16")
    assert [(op.attrs["link"], op.attrs["group_size"]) for op in inside] == [("nvlink", 8)]
    across = group_collective(h100, "g", "all_reduce", 1e9, 64, 1, 8, "bf16")
    assert [(op.attrs["link"], op.attrs["group_size"], op.attrs["bytes"]) for op in across] == [
        ("nvlink", 8, 1e9), ("network", 8, 1e9 / 8)]
    strided = group_collective(h100, "g", "all_reduce", 1e9, 4, 8, 8, "bf16")  # one chip per node
    assert [(op.attrs["link"], op.attrs["group_size"]) for op in strided] == [("network", 4)]
    assert group_collective(h100, "g", "all_reduce", 1e9, 1, 1, 8, "bf16") == []
    l4 = load_for_prediction("l4")
    with pytest.raises(PerfmodelError, match="no chip-to-chip link"):
        group_collective(l4, "g", "all_reduce", 1e9, 2, 1, 2, "bf16")
    v4 = load_for_prediction("tpu-v4")
    with pytest.raises(PerfmodelError, match="no network link"):
        group_collective(v4, "g", "all_reduce", 1e9, 4, 64, 64, "bf16")


def test_tensor_parallel_collectives_drive_one_torus_ring_of_a_tpu_slice():
    # MaxText 32B on one v5p-128 (4x4x4): tensor 4 lies along one axis (JAX's mesh assignment), so its
    # all-gathers cross the 2 links of that ring, and FSDP's 16 chips (4 apart) the 4 links of the other two.
    v5p, model = load_for_prediction("tpu-v5p", ideal=True), load_architecture("maxtext-32b")
    layout = Layout(tp=4, fsdp=16, micro_batch=32)
    forward = forward_graph(model, TrainingSetup(global_batch=512, seq_len=SEQ), layout, domain_chips=64)
    gather = next(op for op in forward.ops if op.name == "layers.attn.all_gather")
    assert (gather.attrs["stride"], gather.attrs["slice_chips"]) == (1, 64)
    link_s = float(evaluate_arrays(type(forward)(name="g", ops=[gather]), v5p, fuse=False).link_s[0])
    tokens, hidden = 32 * SEQ, 10240
    wire = 3 / 4 * tokens * hidden * 2 / 2  # (p-1)/p of the bf16 residual, over 2 links
    assert link_s == pytest.approx(model.layers * (wire / 100e9 + 3 * 1e-6), rel=1e-9)  # 3 steps of 1 us
    fsdp = group_collective(v5p, "fsdp", "all_gather", 1e9, 16, 4, 64, "bf16")
    assert (fsdp[0].attrs["stride"], fsdp[0].attrs["slice_chips"]) == (4, 64)
    fsdp_s = float(evaluate_arrays(type(forward)(name="g", ops=fsdp), v5p, fuse=False).link_s[0])
    assert fsdp_s == pytest.approx(15 / 16 * 1e9 / 4 / 100e9 + 6 * 1e-6, rel=1e-9)


def test_data_parallel_communication_is_hidden_unless_told(llama, h100):
    setup = TrainingSetup(global_batch=64, seq_len=SEQ)
    overlapped = train_predict(llama, h100, setup, Layout(fsdp=16), domain_chips=8)
    charged = train_predict(llama, h100, setup, Layout(fsdp=16), domain_chips=8, overlap=False)
    assert charged.time_by_phase["exposed_communication"] > overlapped.time_by_phase["exposed_communication"]
    steps = 64 // 16
    assert charged.time_by_phase["exposed_communication"] == pytest.approx(
        steps * charged.communication_s["fsdp_per_micro_batch"])
    assert overlapped.step_s < charged.step_s


@pytest.mark.parametrize(("layout", "message"), [
    (Layout(tp=3, dp=1), "does not divide .* 32 attention heads"),
    (Layout(pp=5), "does not divide .* 32 layers"),
    (Layout(dp=3), "global batch 64 is not a multiple"),
    (Layout(pp=4, dp=8, micro_batch=4), "cannot fill 4 pipeline stages"),
    (Layout(cp=3), "does not divide the sequence length"),
    (Layout(zero=3, dp=2), "ZeRO-3 is the fsdp axis"),
    (Layout(virtual_stages=2), "need pp > 1"),
])
def test_bad_layouts_name_the_constraint(llama, h100, layout, message):
    with pytest.raises(PerfmodelError, match=message):
        train_predict(llama, h100, TrainingSetup(global_batch=64, seq_len=SEQ), layout)


def test_tensor_parallel_beyond_one_node_is_refused(llama, h100):
    with pytest.raises(PerfmodelError, match="exceed one fast-link domain"):
        train_predict(llama, h100, TrainingSetup(global_batch=64, seq_len=SEQ), Layout(tp=16))


def test_search_finds_the_fastest_fitting_layout(llama, h100):
    setup = TrainingSetup(global_batch=64, seq_len=SEQ)
    found = search(llama, h100, setup, 16, recompute=("none", "full"))
    assert found.best is not None and found.tried > 20
    times = [result.step_s for result in found.ranked]
    assert times == sorted(times) and all(result.fits for result in found.ranked)
    assert found.best.chips == 16
    # The search's costs (shared across layouts, vectorized over micro-batches) equal a direct prediction.
    direct = train_predict(llama, h100, replace(setup, recompute=found.best.setup.recompute), found.best.layout)
    assert direct.step_s == pytest.approx(found.best.step_s, rel=1e-9)
    assert direct.mfu == pytest.approx(found.best.mfu, rel=1e-9)


def test_search_reports_nothing_fits(h100):
    big = load_architecture("llama-3.1-405b")
    assert search(big, h100, TrainingSetup(global_batch=8, seq_len=SEQ), 8).best is None


def test_train_command_prints_and_writes_json(tmp_path, capsys):
    code = main(["train", "--model", "llama-2-7b", "--on", "h100-sxm", "--chips", "8", "--global-batch", "32",
                 "--seq", "2048", "--recompute", "selective", "--json", "--chart", str(tmp_path / "step.png")])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layout"]["fsdp"] == 8 and data["fits"] is True
    assert 0.2 < data["mfu"] < 1.0
    assert math.isclose(sum(data["time_by_phase"].values()), data["step_s"], rel_tol=1e-9)
    assert data["parameters"].startswith("achievable")
    assert (tmp_path / "step.png").stat().st_size > 1000
    assert main(["train", "--model", "llama-2-7b", "--on", "h100-sxm", "--chips", "16", "--global-batch", "64",
                 "--seq", "2048", "--search", "--recompute", "none"]) == 0
    table = capsys.readouterr().out
    assert "layouts tried" in table and "MFU" in table


@pytest.mark.parametrize(("arguments", "message"), [
    (["--chips", "8", "--tp", "2"], "--chips 8 must equal"),
    (["--chips", "8", "--tp", "3", "--dp", "1", "--fsdp", "1", "--pp", "1", "--cp", "1"], "must equal"),
    (["--chips", "0"], "must be at least 1"),
    (["--chips", "8", "--search", "--tp", "2"], "--search chooses the layout"),
])
def test_train_command_errors_exit_2(capsys, arguments, message):
    code = main(["train", "--model", "llama-2-7b", "--on", "h100-sxm", "--global-batch", "64", "--seq", "2048",
                 *arguments])
    assert code == 2
    assert message in capsys.readouterr().err


def test_micro_batch_arrays_match_scalars(llama, h100):
    from perfmodel.training.step import micro_batch_costs

    setup = TrainingSetup(global_batch=64, seq_len=SEQ, recompute="selective")
    swept = micro_batch_costs(llama, h100, setup, Layout(tp=2), "dynamic", micro_batch=np.array([1, 4]))
    single = micro_batch_costs(llama, h100, setup, Layout(tp=2, micro_batch=4), "dynamic")
    assert swept.point(1).forward_layer == pytest.approx(single.forward_layer, rel=1e-12)
    assert swept.point(1).saved_layer == pytest.approx(single.saved_layer, rel=1e-12)


def test_condensed_training_graph_matches_the_captured_module(h100):
    """The condensed forward + backward (the layer definition shared with inference, gradients derived
    op by op) against a real transformers Llama's training step captured on fake tensors: matmul
    FLOPs within 2%, and weight and attention work in the same ratio (issue 15)."""
    import torch
    import transformers

    from perfmodel.llm.architecture import from_hf_config
    from perfmodel.workload.capture import capture_training

    config = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 256}
    batch, seq = 2, 128
    with torch.device("meta"):
        module = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config, attn_implementation="sdpa"))
    captured = capture_training(module, input_shapes=[(batch, seq)], input_dtypes=[torch.int64],
                                forward_kwargs={"use_cache": False}, optimizer=None).graph
    architecture = from_hf_config(config, name="tiny")
    forward = forward_graph(architecture, TrainingSetup(global_batch=batch, seq_len=seq, compute_dtype="fp32"),
                            Layout(micro_batch=batch))
    condensed = _flops_by_kind(forward, h100)
    backward = _flops_by_kind(backward_graph(forward), h100)
    by_phase: dict[str, dict[str, float]] = {}
    arrays = evaluate_arrays(captured, h100)
    for op, flops in zip(captured.ops, arrays.flops, strict=True):
        kinds = by_phase.setdefault(op.name.split(".")[0], {})
        kinds[op.kind] = kinds.get(op.kind, 0.0) + float(flops)
    assert condensed["matmul"] == pytest.approx(by_phase["forward"]["matmul"], rel=0.02)
    assert backward["matmul"] == pytest.approx(by_phase["backward"]["matmul"], rel=0.02)
    # transformers hands SDPA an explicit causal mask, which the capture records as full attention
    # (masks ignored, flop_counter's convention); the condensed graph counts only the attended pairs.
    causal_share = (seq + 1) / (2 * seq)
    assert condensed["attention"] == pytest.approx(causal_share * by_phase["forward"]["attention"], rel=0.02)
    assert backward["attention"] == pytest.approx(causal_share * by_phase["backward"]["attention"], rel=0.02)
    assert by_phase["backward"]["matmul"] == pytest.approx(2 * by_phase["forward"]["matmul"], rel=0.01)


def test_published_flop_conventions_reproduce_their_sources():
    """PaLM's Appendix B: 6N + 12LHQT = 3.28 TFLOPs a token (Table 22), and 238.3k tokens/s on 6144
    TPU v4 chips at 275 TFLOP/s is the paper's 46.2% MFU; MaxText's pre-#1988 count reproduces the
    tiering table's Llama-3.1-8B MFU on v6e (45.46% at 7207 tokens/s per chip, 918 TFLOP/s)."""
    from perfmodel.training.published_flops import flops_per_sequence

    palm = load_architecture("palm-540b")
    per_token = flops_per_sequence(palm, 2048, "palm") / 2048
    assert per_token == pytest.approx(3.28e12, rel=0.005)
    assert 238.3e3 * per_token / (6144 * 275e12) == pytest.approx(0.462, abs=0.001)
    llama = load_architecture("llama-3.1-8b")
    per_token = flops_per_sequence(llama, 8192, "maxtext") / 8192
    assert 7207 * per_token / 918e12 == pytest.approx(0.4546, abs=0.001)
    causal = flops_per_sequence(llama, 8192, "maxtext-causal")
    assert causal < flops_per_sequence(llama, 8192, "maxtext")
    with pytest.raises(PerfmodelError, match="unknown FLOP convention"):
        flops_per_sequence(llama, 8192, "megatron")


def test_sequence_parallel_shards_the_residual_stream_with_the_same_wire_bytes(llama, h100):
    setup = TrainingSetup(global_batch=8, seq_len=SEQ)
    plain = forward_graph(llama, setup, Layout(tp=4, sequence_parallel=False))
    sharded = forward_graph(llama, setup, Layout(tp=4))
    def wire(graph):
        return sum(float(cost) for cost, op in zip(evaluate_arrays(graph, h100).link_s, graph.ops, strict=True)
                   if op.kind == "collective")
    kinds = sorted(op.attrs["collective"] for op in sharded.ops if op.kind == "collective")
    assert kinds == ["all_gather", "all_gather", "reduce_scatter", "reduce_scatter"]
    assert sharded.op("layers.input_norm").inputs[0].shape[0] == SEQ // 4
    # The same bytes on the wire (an all-reduce is a reduce-scatter and an all-gather), twice the latency steps.
    assert wire(sharded) == pytest.approx(wire(plain), rel=0.05)
    assert saved_activation_bytes(sharded, "none") < saved_activation_bytes(plain, "none")


def test_kept_matmuls_and_offload(llama, h100):
    layout = Layout(fsdp=8, micro_batch=2)
    every = TrainingSetup(global_batch=64, seq_len=SEQ, recompute="selective")
    attention_only = replace(every, kept=("q_proj", "k_proj", "v_proj", "o_proj"))
    offloaded = replace(attention_only, offload=True)
    r_every, r_attention, r_offload = (train_predict(llama, h100, s, layout) for s in (every, attention_only, offloaded))
    # Keeping fewer matmuls recomputes the MLP's: less memory, more recompute time.
    assert r_attention.memory.activations < r_every.memory.activations
    assert r_attention.time_by_phase["recompute"] > r_every.time_by_phase["recompute"]
    # Offloading leaves two layers' worth on the device; the copies cost time only beyond the compute.
    assert r_offload.memory.activations == pytest.approx(2 * r_attention.memory.activations / llama.layers)
    assert r_offload.time_by_phase["activation_offload"] >= 0
    assert r_offload.step_s >= r_attention.step_s
    forward = forward_graph(llama, attention_only, layout)
    recomputed = {op.name for op in backward_with_recompute(forward, "selective", attention_only.kept).ops
                  if op.name.startswith("recompute.")}
    assert "recompute.layers.mlp.gate_up_proj" in recomputed and "recompute.layers.attn.q_proj" not in recomputed


def test_training_rows_are_validated_with_their_published_recipes():
    from perfmodel.validation import validate

    rows = [row for row in validate() if row.group == "B" and "training" in row.workload.lower()]
    predicted = [row for row in rows if row.predicted is not None]
    assert len(predicted) >= 17
    assert all(row.family == "tpu" and "recompute" in row.how for row in predicted)
    skipped = {row.skipped for row in rows if row.skipped}
    assert any("network link" in reason for reason in skipped)  # multi-pod rows without a sourced DCN figure


def test_train_runs_or_explains_on_every_bundled_spec(capsys):
    """Every family trains or says why not (exit 0 or 2, never an internal error)."""
    from perfmodel.hardware.loader import catalog_index

    for name in catalog_index():
        code = main(["train", "--model", "llama-2-7b", "--on", name, "--chips", "2", "--global-batch", "4",
                     "--seq", "1024", "--json"])
        captured = capsys.readouterr()
        assert code in (0, 2), (name, captured.err)
        if code == 0:
            data = json.loads(captured.out)
            assert data["step_s"] > 0 and 0 < data["mfu"] <= 1, name
        else:
            assert name in captured.err or "--" in captured.err, captured.err


# ---------------------------------------------------------------------------- token-dropping MoE
def test_expert_capacity_is_maxtexts():
    """``generate_masks``: int(max(ceil(seq * top_k / experts) * capacity_factor, capacity_factor))."""
    from perfmodel.llm.graphs import expert_capacity

    mixtral = load_architecture("mixtral-8x7b")  # 8 experts, top 2
    assert expert_capacity(mixtral, 4096, 1.25) == 1280
    assert expert_capacity(mixtral, 4095, 1.25) == 1280  # ceil(1023.75) = 1024
    assert expert_capacity(mixtral, 1, 1.25) == 1  # ceil(0.25) * 1.25 = 1.25 -> 1
    assert expert_capacity(mixtral, 3, 2.0) == 2
    assert list(expert_capacity(mixtral, np.array([4096, 8]), 1.0)) == [1024, 2]


def test_a_token_dropping_moe_prices_dispatch_combine_and_whole_buffers(h100):
    """Per layer and sequence: router, dispatch and combine einsums of 2 x S x E x C x M FLOPs each, and
    the experts' three matmuls over E x C rows (empty slots included) instead of the k x S routed
    tokens. Its backward skips the boolean dispatch mask's gradient (1x) and keeps both of combine's."""
    mixtral = load_architecture("mixtral-8x7b")
    seq, batch, factor = 1024, 2, 1.25
    setup = TrainingSetup(global_batch=batch, seq_len=seq, moe_capacity_factor=factor)
    layout = Layout(micro_batch=batch)
    graph = forward_graph(mixtral, setup, layout)
    flops = dict(zip((op.name for op in graph.ops), evaluate_arrays(graph, h100).flops.tolist(), strict=True))
    e, k, m, f, layers = mixtral.experts, mixtral.experts_per_token, mixtral.hidden, mixtral.intermediate, mixtral.layers
    capacity = math.ceil(seq * k / e) * factor  # 320 slots per expert
    einsum = 2 * batch * seq * e * capacity * m * layers
    assert flops["layers.moe.dispatch_einsum"] == pytest.approx(einsum)
    assert flops["layers.moe.combine_einsum"] == pytest.approx(einsum)
    experts = flops["layers.moe.experts.gate_up"] + flops["layers.moe.experts.down"]
    assert experts == pytest.approx(2 * batch * e * capacity * 3 * m * f * layers)
    dropless = forward_graph(mixtral, replace(setup, moe_capacity_factor=None), layout)
    routed = evaluate_arrays(dropless, h100).flops
    routed_experts = sum(float(value) for op, value in zip(dropless.ops, routed, strict=True) if ".experts." in op.name
                         and op.kind == "matmul")
    assert experts == pytest.approx(routed_experts * factor)  # the padding: capacity factor x the routed work
    backward = {op.name: op for op in backward_graph(graph).ops}
    assert "backward.layers.moe.dispatch_einsum.wgrad" in backward
    assert "backward.layers.moe.dispatch_einsum.dgrad" not in backward
    assert {"backward.layers.moe.combine_einsum.dgrad", "backward.layers.moe.combine_einsum.wgrad"} <= set(backward)
    # MFU counts the routed tokens' work only: the same model FLOPs either way.
    assert model_flops_per_sequence(mixtral, h100, setup) == model_flops_per_sequence(
        mixtral, h100, replace(setup, moe_capacity_factor=None))
    slower = train_predict(mixtral, h100, setup, layout).step_s
    assert slower > train_predict(mixtral, h100, replace(setup, moe_capacity_factor=None), layout).step_s


@pytest.mark.parametrize("model, factor, layout, expected", [
    ("llama-2-7b", 1.25, Layout(), "needs a MoE model"),
    ("mixtral-8x7b", 0.0, Layout(), "must be a number more than 0"),
    ("mixtral-8x7b", float("inf"), Layout(), "must be a number more than 0"),
    ("mixtral-8x7b", 1.25, Layout(tp=8, ep=2), "with expert parallelism (ep > 1) is not modeled"),
])
def test_a_moe_capacity_factor_is_checked(model, factor, layout, expected, h100):
    setup = TrainingSetup(global_batch=8, seq_len=512, moe_capacity_factor=factor)
    with pytest.raises(PerfmodelError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        train_predict(load_architecture(model), h100, setup, replace(layout, micro_batch=8))


def test_the_train_command_reproduces_a_validation_row(capsys):
    """Row 78 (v6e Mixtral-8x7B, the tpu-recipes configuration): the command with the recipe's flags
    prints what ``perfmodel validate`` predicts for it."""
    import csv

    from perfmodel.validation import default_csv, validate_row

    with default_csv().open(newline="", encoding="utf-8") as stream:
        row = next(row for line, row in enumerate(csv.DictReader(stream), start=2) if line == 78)
    expected = validate_row(78, row)
    assert expected.predicted is not None and "token-dropping MoE" in expected.how
    argv = ["train", "--model", "mixtral-8x7b", "--on", "tpu-v6e", "--chips", "256", "--fsdp", "256", "--micro-batch",
            "12", "--global-batch", "3072", "--seq", "4096", "--recompute", "selective", "--keep",
            "q_proj,k_proj,v_proj,o_proj", "--offload", "--moe-capacity-factor", "1.25", "--attention-block", "2048",
            "--attention-kernel", "splash",
            "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["tokens_per_s_per_chip"] == pytest.approx(expected.predicted, rel=1e-9)


@pytest.mark.parametrize("extra, expected", [
    (["--keep", "q_proj,bogus", "--recompute", "selective"], "kept 'bogus': not a matmul of a mixtral-8x7b layer"),
    (["--keep", "q_proj"], "--keep narrows selective recomputation"),
    (["--keep", ","], "give at least one name"),
])
def test_kept_matmul_names_are_checked(extra, expected, capsys):
    argv = ["train", "--model", "mixtral-8x7b", "--on", "tpu-v6e", "--chips", "8", "--global-batch", "8", "--seq", "256"]
    assert main(argv + extra) == 2
    assert expected in capsys.readouterr().err


def test_deepseek_v3_mtp_training_is_slower_and_larger_by_the_module():
    """train --mtp: the MTP module's forward/backward and extra head pass are priced, and its weights get
    gradients and AdamW state (arXiv 2412.19437 section 2.2)."""
    v3, h200 = load_architecture("deepseek-v3"), load_for_prediction("h200-sxm")
    setup, layout = TrainingSetup(global_batch=64, seq_len=4096, recompute="full"), Layout(tp=8, fsdp=8, ep=8)
    plain, mtp = (train_predict(v3, h200, replace(setup, mtp=flag), layout) for flag in (False, True))
    share = (v3.stage_parameters(1) + v3.mtp_parameters) / v3.stage_parameters(1)  # 682.6 B / 671.0 B
    for part in ("gradients", "optimizer"):
        assert getattr(mtp.memory, part) / getattr(plain.memory, part) == pytest.approx(share, rel=1e-9)
    assert mtp.memory.activations > plain.memory.activations and mtp.memory.total > plain.memory.total
    assert mtp.step_s > plain.step_s
    for phase in ("forward", "backward"):
        assert mtp.time_by_phase[phase] > plain.time_by_phase[phase]
    # the extra model FLOPs per token: at least eh_proj (2h -> h) and the second head pass (h -> vocab),
    # forward and backward (x3), by hand; and less than a tenth of the model's
    extra = (mtp.model_flops_per_step - plain.model_flops_per_step) / (setup.global_batch * setup.seq_len)
    by_hand = 3 * 2 * (2 * v3.hidden * v3.hidden + v3.hidden * v3.vocab)
    assert by_hand < extra < plain.model_flops_per_step / (setup.global_batch * setup.seq_len) / 10
    assert any("multi-token-prediction" in note for note in mtp.notes)


@pytest.mark.parametrize("recompute", ["full", "selective", "none"])
def test_deepseek_v3_mtp_activations_are_the_modules_own(recompute):
    """The MTP module's kept activations come from its definition (hnorm/enorm, eh_proj on their concatenation,
    one MoE decoder layer), under the run's recompute policy: with full recomputation exactly its two inputs (the
    main model's last hidden state and the next tokens' embeddings, bf16), by hand; with less recomputation more,
    and at most the module's every output (policy 'none') plus those inputs."""
    from perfmodel.training.step import mtp_saved_activation_bytes

    v3, h200 = load_architecture("deepseek-v3"), load_for_prediction("h200-sxm")
    layout = Layout(tp=8, fsdp=8, ep=8, micro_batch=1)
    setup = TrainingSetup(global_batch=64, seq_len=4096, recompute=recompute, mtp=True)
    saved = {policy: mtp_saved_activation_bytes(v3, replace(setup, recompute=policy), layout)
             for policy in ("full", "selective", "none")}
    assert saved["full"] == 2 * (4096 // 8) * v3.hidden * 2  # sequence parallel: each chip keeps 1/8 of the tokens
    assert saved["full"] < saved["selective"] < saved["none"]
    assert mtp_saved_activation_bytes(v3, replace(setup, mtp=False), layout) == 0.0
    plain, mtp = (train_predict(v3, h200, replace(setup, mtp=flag), layout) for flag in (False, True))
    in_flight = 1  # no pipeline: one micro-batch's activations at a time
    assert mtp.memory.activations - plain.memory.activations == pytest.approx(saved[recompute] * in_flight, rel=1e-9)


@pytest.mark.parametrize("model, extra, message", [
    ("llama-2-7b", ["--dp", "2"], "has none"),
    ("deepseek-v3", ["--cp", "2"], "context parallelism"),
])
def test_train_mtp_refuses_what_it_cannot_price(model, extra, message, capsys):
    assert main(["train", "--model", model, "--on", "h200-sxm", "--global-batch", "64", "--seq", "4096",
                 "--chips", "16", "--tp", "8", "--mtp", *extra]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_attention_block_computes_the_masked_pairs_of_the_diagonal_blocks():
    """A causal flash kernel with square blocks of B keys skips only whole masked blocks: at seq 8192
    and B = 2048 it computes 10 of the 4 x 4 blocks (MaxText's sa_block_* 2048 recipes), against
    s (s + 1) / 2 attended pairs; the step takes longer, and a bad block is refused."""
    architecture, hardware = load_architecture("llama-3.1-8b"), load_for_prediction("tpu-v6e")
    seq, block = 8192, 2048
    layout = Layout(fsdp=8, micro_batch=1)

    def attention_flops(setup: TrainingSetup) -> tuple[float, float]:
        graph = forward_graph(architecture, setup, layout)
        arrays = evaluate_arrays(graph, hardware)
        row = next(i for i, op in enumerate(graph.ops) if op.kind == "attention")
        return float(arrays.flops[row]), float(arrays.executed_flops[row])

    base = TrainingSetup(global_batch=8, seq_len=seq, recompute="full")
    blocked = replace(base, attention_block=block)
    useful, executed = attention_flops(blocked)
    assert executed / useful == pytest.approx(10 * block**2 / (seq * (seq + 1) / 2), rel=1e-12)
    assert attention_flops(base)[0] == pytest.approx(useful, rel=1e-12)  # model FLOPs do not change
    assert train_predict(architecture, hardware, blocked, layout).step_s > \
        train_predict(architecture, hardware, base, layout).step_s
    with pytest.raises(PerfmodelError, match="attention block"):
        train_predict(architecture, hardware, replace(base, attention_block=0), layout)


def _backward_attention(architecture, hardware, setup: TrainingSetup, layout: Layout):
    """The forward attention op and the backward's ops that price its gradient (attention and reduction rows
    of the backward graph), evaluated on ``hardware``."""
    forward = forward_graph(architecture, setup, layout)
    backward = backward_graph(forward)
    rows = [i for i, op in enumerate(backward.ops) if op.name.startswith("backward.") and
            (op.kind == "attention" or op.name.endswith(".dq_sum"))]
    arrays = evaluate_arrays(backward, hardware)
    return [backward.ops[i] for i in rows], arrays.executed_flops[rows], arrays.total_s[rows]


def test_each_attention_kernel_prices_its_own_backward():
    """pallas-flash: a dK/dV and a dQ kernel, 3.5x the forward's executed FLOPs (FlashAttention-2's one kernel:
    2.5x); splash: the same on one TensorCore, which on a megacore v5p takes the chip-time of twice its FLOPs and
    on a one-core v6e does not; splash-fused: one kernel on one core, then the sum of one partial dQ per key
    block. The model FLOPs never change."""
    architecture = load_architecture("llama-3.1-8b")
    layout = Layout(fsdp=8, micro_batch=1)
    base = TrainingSetup(global_batch=8, seq_len=4096, recompute="full", attention_block=512)
    forward_op = next(op for op in forward_graph(architecture, base, layout).ops if op.kind == "attention")
    for device, cores in (("tpu-v5p", 2), ("tpu-v6e", 1)):
        hardware = load_for_prediction(device, ideal=True)
        forward = float(evaluate_arrays(forward_graph(architecture, base, layout), hardware).executed_flops[
            next(i for i, op in enumerate(forward_graph(architecture, base, layout).ops) if op.kind == "attention")])
        executed = {}
        for kernel in ("flash", "pallas-flash", "splash", "splash-fused"):
            ops, flops, _ = _backward_attention(architecture, hardware, replace(base, attention_kernel=kernel), layout)
            executed[kernel] = float(flops[0])
            if kernel == "splash-fused":
                assert [op.kind for op in ops] == ["attention", "reduction"]
                assert ops[1].inputs[0].shape == (4096 // 512, *forward_op.inputs[0].shape)
            else:
                assert [op.kind for op in ops] == ["attention"]
        assert executed["flash"] == pytest.approx(2.5 * forward, rel=1e-12)
        assert executed["pallas-flash"] == pytest.approx(3.5 * forward, rel=1e-12)
        assert executed["splash"] == pytest.approx(3.5 * cores * forward, rel=1e-12)
        assert executed["splash-fused"] == pytest.approx(2.5 * cores * forward, rel=1e-12)
    h100 = load_for_prediction("h100-sxm", ideal=True)  # one device, one core: never charged twice
    _, flash, _ = _backward_attention(architecture, h100, replace(base, attention_kernel="flash"), layout)
    _, splash, _ = _backward_attention(architecture, h100, replace(base, attention_kernel="splash"), layout)
    assert float(splash[0]) == pytest.approx(3.5 / 2.5 * float(flash[0]), rel=1e-12)
    assert model_flops_per_sequence(architecture, h100, replace(base, attention_kernel="splash")) == \
        model_flops_per_sequence(architecture, h100, base)


def test_an_attention_kernel_is_checked():
    architecture, hardware = load_architecture("llama-3.1-8b"), load_for_prediction("tpu-v6e")
    setup, layout = TrainingSetup(global_batch=8, seq_len=1024, recompute="full"), Layout(fsdp=8, micro_batch=1)
    with pytest.raises(PerfmodelError, match="attention kernel 'bogus' is unknown"):
        train_predict(architecture, hardware, replace(setup, attention_kernel="bogus"), layout)
    with pytest.raises(PerfmodelError, match="partial dQ per key block"):
        train_predict(architecture, hardware, replace(setup, attention_kernel="splash-fused"), layout)


def test_the_train_command_names_the_attention_kernels_the_model_knows():
    from perfmodel.cli.train_command import ATTENTION_KERNEL_NAMES
    from perfmodel.training.backward import ATTENTION_KERNELS

    assert ATTENTION_KERNEL_NAMES == tuple(ATTENTION_KERNELS)


def test_every_tpu_training_recipe_names_a_known_attention_kernel():
    """MaxText at 76bd53b ran JAX's Pallas flash kernel; later recipes run splash (TRAINING_SOURCES.md)."""
    import csv

    from perfmodel.paths import data_directory
    from perfmodel.training.backward import ATTENTION_KERNELS

    path = data_directory("workloads") / "validation" / "training_recipes.csv"
    with path.open(newline="", encoding="utf-8") as stream:
        recipes = list(csv.DictReader(stream))
    for recipe in recipes:
        assert recipe["attention_kernel"] in ("", *ATTENTION_KERNELS), recipe["system"]
        if "76bd53b" in recipe["source"]:
            assert recipe["attention_kernel"] == "pallas-flash", recipe["workload"]
        elif recipe["model"] and "MaxText" in recipe["system"] and "405B" not in recipe["workload"]:
            assert recipe["attention_kernel"].startswith("splash"), recipe["workload"]


def test_the_train_command_refuses_a_fused_splash_backward_without_its_block(capsys):
    argv = ["train", "--model", "llama-3.1-8b", "--on", "tpu-v6e", "--chips", "8", "--global-batch", "8", "--seq",
            "1024", "--attention-kernel", "splash-fused"]
    assert main(argv) == 2
    assert "partial dQ per key block" in capsys.readouterr().err
    assert main([*argv, "--attention-block", "512"]) == 0


def test_a_tpu_recompute_skips_the_layer_tail_no_gradient_reads(monkeypatch):
    """JAX's remat keeps only the recomputed forward ops the backward reads: a dense layer's down projection,
    the tensor-parallel reduce-scatter after it and the residual add are not rerun (their outputs only make the
    next layer's saved input); a MoE layer's expert matmul is (the router's gradient reads it). GPU stacks keep
    the whole layer (Megatron-LM's full recompute)."""
    from perfmodel.training.backward import dead_layer_tail
    from perfmodel.training.step import micro_batch_costs

    dense, moe = load_architecture("llama-3.1-8b"), load_architecture("mixtral-8x7b")
    setup = TrainingSetup(global_batch=8, seq_len=2048, recompute="full")
    forward = forward_graph(dense, setup, Layout(tp=2, fsdp=4, micro_batch=2))
    layer = [op for op in forward.ops if op.name.startswith("layers.")]
    assert dead_layer_tail(layer) == {"layers.mlp.down_proj", "layers.mlp.reduce_scatter", "layers.mlp.residual"}
    moe_layer = [op for op in forward_graph(moe, setup, Layout(fsdp=8, micro_batch=1)).ops
                 if op.name.startswith("layers.")]
    assert dead_layer_tail(moe_layer) == {"layers.mlp.residual"}
    full = {op.name for op in backward_with_recompute(forward, "full", drop_dead=True).ops}
    assert "recompute.layers.mlp.act" in full and "recompute.layers.mlp.down_proj" not in full
    layout = Layout(fsdp=8, micro_batch=1)
    forward = forward_graph(dense, setup, layout)
    down = next(op for op in forward.ops if op.name == "layers.mlp.down_proj")
    down_flops = 2 * down.attrs["m"] * down.attrs["n"] * down.attrs["k"]
    tpu = load_for_prediction("tpu-v6e", ideal=True)
    kept_tail = micro_batch_costs(dense, tpu, setup, layout, "graph")
    assert float(kept_tail.recompute_flops_layer) > 0
    import perfmodel.training.step as step

    whole = step.backward_with_recompute
    # the same TPU with the whole layer rerun: more recompute FLOPs by the down projection's
    monkeypatch.setattr(step, "backward_with_recompute",
                        lambda forward, policy, kept, drop_dead=False: whole(forward, policy, kept))
    rerun = micro_batch_costs(dense, tpu, setup, layout, "graph")
    assert float(rerun.recompute_flops_layer - kept_tail.recompute_flops_layer) == pytest.approx(
        down_flops + 2048 * dense.hidden, rel=1e-9)  # the down projection and the residual add (1 FLOP an element)
    gpu = micro_batch_costs(dense, load_for_prediction("h100-sxm", ideal=True), setup, layout, "graph")
    assert float(gpu.recompute_flops_layer) == pytest.approx(float(rerun.recompute_flops_layer), rel=1e-9)
