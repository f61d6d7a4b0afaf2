"""Per-tensor fp8 (W8A8) LLM graphs quantize each GEMM's bf16 input in the op the engines' GEMM tables time
with the GEMM (``graphs.quantize_activations_op``, one definition for the calibration rows and the graphs),
and carry everything else in bf16."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.aiconfigurator import gemm_ops
from perfmodel.costs.fusion import plan_fusion
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import Parallelism, Scenario, quantize_activations_op, stage_graph

PROMPT = 128


def _graph(weights: str, activations: str, *, batch=1, phase="prefill", tp=2, attention=None, quantized_head=False):
    scenario = Scenario(batch=batch, prompt_tokens=PROMPT, generated_tokens=4, weight_dtype=weights,
                        activation_dtype=activations, kv_dtype=activations if activations == "fp8" else "bf16",
                        attention_dtype=attention, quantized_head=quantized_head)
    context = PROMPT if phase == "prefill" else PROMPT + 1
    return stage_graph(load_architecture("llama-2-7b"), scenario, Parallelism(tp=tp), phase=phase, context=context)


def _quantizes(graph):
    return [op for op in graph.ops if op.name.endswith(".quantize_input")]


def test_an_fp8_graph_quantizes_each_gemm_input_once():
    """q, k and v share the norm's quantization (one fused QKV GEMM in every engine); the fp8 attention kernel
    writes o_proj's fp8 input; gate_up, down and (quantized with the rest, as gpt-fast does) the head each read
    a quantized input."""
    graph = _graph("fp8", "fp8", quantized_head=True)
    a = load_architecture("llama-2-7b")
    quantizes = _quantizes(graph)
    assert [op.name for op in quantizes] == ["layers.attn.q_proj.quantize_input", "layers.mlp.gate_up_proj.quantize_input",
                                             "layers.mlp.down_proj.quantize_input", "lm_head.quantize_input"]
    widths = [a.hidden, a.hidden, a.intermediate // 2, a.hidden]
    rows = [PROMPT, PROMPT, PROMPT, 1]  # the head's logits: each sequence's last token
    for op, width, m in zip(quantizes, widths, rows, strict=True):
        assert op.kind == "elementwise" and op.count == (1 if op.name == "lm_head.quantize_input" else a.layers)
        assert op.input_bytes == 2 * m * width and op.output_bytes == m * width  # bf16 in, fp8 out
        names = [other.name for other in graph.ops]
        gemm = graph.ops[names.index(op.name) + 1]
        assert gemm.kind == "matmul" and gemm.inputs[0].dtype == "fp8" and gemm.inputs[0].shape == op.outputs[0].shape


def test_the_graph_op_is_the_calibration_rows_op():
    """The op a table's fp8 GEMM row holds before its GEMM is the op the graph emits (name and count aside)."""
    row = gemm_ops(PROMPT, 11008, 4096, "fp8")[0]
    graph_op = next(op for op in _graph("fp8", "fp8", tp=1).ops if op.name == "layers.mlp.gate_up_proj.quantize_input")
    assert row == quantize_activations_op(PROMPT, 4096, "fp8")
    assert (graph_op.kind, graph_op.inputs, graph_op.outputs, graph_op.attrs) == (row.kind, row.inputs, row.outputs,
                                                                                   row.attrs)


@pytest.mark.parametrize("weights, activations", [("bf16", "bf16"), ("fp8", "bf16"), ("fp8_block", "fp8"),
                                                  ("int8", "int8")])
def test_graphs_without_per_tensor_fp8_activations_quantize_nothing(weights, activations):
    """bf16, weight-only fp8 (bf16 activations), block-scaled fp8 (its quantization is in its kernel class) and
    int8 SmoothQuant emit no quantize op."""
    assert not _quantizes(_graph(weights, activations))


def test_an_fp8_graph_carries_bf16_between_its_gemms():
    """The residual stream, the norms and the all-reduces of an fp8 graph move bf16, as in a bf16 graph; GEMMs
    write bf16."""
    fp8, bf16 = _graph("fp8", "fp8"), _graph("bf16", "bf16")
    by_name = {op.name: op for op in bf16.ops}
    for op in fp8.ops:
        if op.kind == "collective":
            assert op.attrs["bytes"] == by_name[op.name].attrs["bytes"]
        elif op.kind in ("norm", "matmul") or op.name.endswith("residual"):
            assert all(tensor.dtype == "bf16" for tensor in op.outputs), op.name


def test_a_fusing_mode_folds_the_quantization_into_the_norm_and_the_gemm_epilogue():
    """Under CUDA graphs (fusion) the input norm and its quantization are one kernel (TensorRT-LLM's RMSNorm +
    fp8 quant), and the down projection's quantization joins gate_up's epilogue with the activation."""
    graph = _graph("fp8", "fp8")
    names = [op.name for op in graph.ops]
    group = plan_fusion(graph).group_of
    assert group[names.index("layers.attn.q_proj.quantize_input")] == group[names.index("layers.input_norm")]
    assert group[names.index("layers.mlp.down_proj.quantize_input")] == group[names.index("layers.mlp.gate_up_proj")]


def test_a_swept_decode_graph_shares_the_qkv_quantization():
    """Batch arrays (sizing sweeps): one quantization for q, k and v, sized by each point's batch."""
    batch = np.array([1, 8, 64])
    quantizes = _quantizes(_graph("fp8", "fp8", batch=batch, phase="decode"))
    assert len(quantizes) == 3  # q/k/v, gate_up, down (the head stays bf16: Scenario.quantized_head)
    assert np.array_equal(quantizes[0].output_bytes, batch * 4096)


def test_a_16_bit_attention_makes_the_output_projection_quantize_its_input():
    """An engine without fp8 attention kernels (TensorRT-LLM before FP8 context FMHA) computes attention in fp16
    over the fp8 KV cache; o_proj then reads a quantized copy of its output."""
    graph = _graph("fp8", "fp8", attention="fp16")
    sdpa = next(op for op in graph.ops if op.kind == "attention")
    assert sdpa.attrs["dtype"] == "fp16" and sdpa.inputs[1].dtype == "fp8"  # the fp8 cache, read by an fp16 kernel
    names = [op.name for op in _quantizes(graph)]
    assert "layers.attn.o_proj.quantize_input" in names and len(names) == 4


@pytest.mark.parametrize("batch", [1, np.array([1, 4])])
def test_a_moe_router_and_its_experts_quantize_apart_at_any_batch(batch):
    """At batch 1 the router's input and the experts' routed rows have the same shape but are not one tensor: both
    are quantized, on the scalar path and on a sweep alike (the two must price the same graph)."""
    scenario = Scenario(batch=batch, prompt_tokens=PROMPT, generated_tokens=4, weight_dtype="fp8", activation_dtype="fp8",
                        quantized_head=True)
    graph = stage_graph(load_architecture("mixtral-8x7b"), scenario, Parallelism(tp=2), phase="decode",
                        context=PROMPT + 1)
    names = [op.name for op in _quantizes(graph)]
    assert {"layers.moe.router.quantize_input", "layers.moe.experts.gate_up.quantize_input"} <= set(names)


@pytest.mark.parametrize("weights, activations", [("fp8", "fp8"), ("int4", "bf16"), ("int8", "fp16")])
def test_the_engines_keep_the_head_router_and_embedding_in_16_bits(weights, activations):
    """ModelOpt (TensorRT-LLM, vLLM, SGLang checkpoints) leaves ``*lm_head*`` and the routers unquantized and no
    quantizer touches the embedding table: by default those ops read 16-bit weights and inputs (no quantize op),
    and the memory per chip counts their bytes at 2 a parameter; gpt-fast (``quantized_head``) quantizes the head
    and the router with the rest (the embedding stays 16-bit)."""
    from perfmodel.dtypes import DTYPES
    from perfmodel.llm.metrics import memory_per_chip

    a = load_architecture("mixtral-8x7b")
    default = Scenario(batch=4, prompt_tokens=PROMPT, generated_tokens=4, weight_dtype=weights,
                       activation_dtype=activations)
    every = Scenario(batch=4, prompt_tokens=PROMPT, generated_tokens=4, weight_dtype=weights,
                     activation_dtype=activations, quantized_head=True)
    carrier = "fp16" if activations == "fp16" else "bf16"
    for scenario, head in ((default, carrier), (every, weights)):
        graph = stage_graph(a, scenario, Parallelism(tp=2), phase="decode", context=PROMPT + 1)
        ops = {op.name: op for op in graph.ops}
        assert ops["embed_tokens"].inputs[1].dtype == carrier
        for name in ("lm_head", "layers.moe.router"):
            assert ops[name].inputs[1].dtype == head
            assert (f"{name}.quantize_input" in ops) == (head == "fp8")
        assert ops["layers.mlp.down_proj" if "layers.mlp.down_proj" in ops else "layers.moe.experts.down"].inputs[1].dtype \
            == weights
    saved = memory_per_chip(a, default, Parallelism(tp=2)).weights - memory_per_chip(a, every, Parallelism(tp=2)).weights
    head_params = a.head_parameters + a.moe_layer_count * a.router_parameters
    assert saved == pytest.approx(head_params * (DTYPES[carrier].bytes_per_element - DTYPES[weights].bytes_per_element) / 2)
