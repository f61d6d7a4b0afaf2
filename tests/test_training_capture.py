"""Capture of a training step on fake tensors (workload.capture.capture_training): the forward, the
backward as autograd runs it and an optimizer step, checked against torch's flop counter and
formulas; op names by phase, optimizer bytes, mixed precision and activation checkpointing."""

import pytest

# The test command installs torch and transformers (".[dev,torch]"): a missing one fails here, never skips.
import torch
import transformers
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode

from perfmodel.costs.conventions import ATTENTION_BACKWARD_USEFUL
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_hardware
from perfmodel.roofline import evaluate
from perfmodel.workload.capture import TRAINING_PHASES, capture_training, matmul_class_flops
from perfmodel.workload.ir import Graph

BATCH, SEQ = 2, 16
NO_CACHE = {"use_cache": False}
# Tiny Llama: per layer q, k, v, o, gate, up, down hold 36864 weights; two layers and the lm_head.
LINEAR_WEIGHTS = 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) + 64 * 256
# One attention product (QK^T or PV) per layer: 2 x batch x heads x seq^2 x head_dim.
ATTENTION_PRODUCT = 2 * BATCH * 4 * SEQ * SEQ * 16


def tiny_llama(attention="sdpa", device="cpu", dtype=torch.float32):
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                      attn_implementation=attention)
    torch.manual_seed(0)
    with torch.device(device):
        return transformers.LlamaForCausalLM(config).to(dtype)


def capture_llama(model, **kwargs):
    return capture_training(model, input_shapes=[(BATCH, SEQ)], input_dtypes=[torch.int64], forward_kwargs=NO_CACHE,
                            **kwargs)


def phase(graph, name) -> Graph:
    return Graph(name=name, ops=[op for op in graph.ops if op.name.split(".")[0] == name])


def flops(graph, name=None) -> float:
    return matmul_class_flops(graph if name is None else phase(graph, name))


def torch_training_flops(model, *inputs, loss=lambda output: output.logits.sum(), kwargs=NO_CACHE) -> int:
    """torch.utils.flop_counter's count of a real forward and backward on small real tensors."""
    with FlopCounterMode(display=False) as counter:
        loss(model(*inputs, **kwargs)).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def test_llama_forward_backward_matches_torch_flop_counter():
    model = tiny_llama("eager")  # eager attention: bmm products, which the counter sees on the CPU
    ids = torch.randint(0, 256, (BATCH, SEQ))
    reference = torch_training_flops(model, ids)
    result = capture_training(model, (ids,), forward_kwargs=NO_CACHE, optimizer=None)
    graph = result.graph
    forward = 2 * BATCH * SEQ * LINEAR_WEIGHTS + 2 * 2 * ATTENTION_PRODUCT
    assert reference == 3 * forward == 18_087_936
    assert flops(graph) == pytest.approx(reference, rel=0.02)
    assert flops(graph, "forward") == forward
    assert flops(graph, "backward") / flops(graph, "forward") == pytest.approx(2.0, abs=0.1)
    assert not result.unsupported and not phase(graph, "optimizer").ops


def test_sdpa_backward_is_one_attention_gradient_kernel_per_layer():
    graph = capture_llama(tiny_llama(device="meta"), optimizer=None).graph
    forward_attention = [op for op in phase(graph, "forward").ops if op.kind == "attention"]
    backward_attention = [op for op in phase(graph, "backward").ops if op.kind == "attention"]
    assert len(forward_attention) == len(backward_attention) == 2
    assert all(op.attrs.get("backward") for op in backward_attention)
    assert backward_attention[0].name == "backward.model.layers.1.self_attn.scaled_dot_product_attention_backward"
    assert [tensor.shape for tensor in backward_attention[0].outputs] == [(BATCH, 4, SEQ, 16)] * 3  # dQ, dK, dV
    attention = Graph(name="attention", ops=backward_attention)
    assert flops(attention) == 2 * 5 * ATTENTION_PRODUCT  # the counter's five products (recompute included)
    # torch's counter has no entry for the CPU fused kernels: everything else matches it exactly.
    reference = torch_training_flops(tiny_llama("sdpa"), torch.randint(0, 256, (BATCH, SEQ)))
    all_attention = Graph(name="all", ops=forward_attention + backward_attention)
    assert flops(graph) - flops(all_attention) == reference
    ratio = flops(graph, "backward") / flops(graph, "forward")
    assert 1.9 < ratio < 2.1 and ratio > 2.0  # linears exactly 2x, attention 2.5x


def test_ops_are_named_by_phase_and_module():
    graph = capture_llama(tiny_llama(device="meta")).graph
    assert {op.name.split(".")[0] for op in graph.ops} == {"forward", "backward", "optimizer"}
    assert TRAINING_PHASES == ("forward", "backward", "recompute", "optimizer")
    forward_mm = [op for op in phase(graph, "forward").ops if op.kind == "matmul"]
    backward_mm = [op for op in phase(graph, "backward").ops if op.kind == "matmul"]
    assert len(forward_mm) == 2 * 7 + 1 and len(backward_mm) == 2 * len(forward_mm)  # dgrad and wgrad
    # Each gradient is named after the module of the forward op it differentiates.
    modules = sorted(op.module.removeprefix("forward.") for op in forward_mm)
    assert sorted({op.module.removeprefix("backward.") for op in backward_mm}) == modules
    assert "backward.model.layers.0.self_attn.q_proj.mm" in [op.name for op in backward_mm]
    # Gradients read what the forward saved: edges join the phases.
    phases = {op.name: op.name.split(".")[0] for op in graph.ops}
    crossing = {(phases[src], phases[dst]) for src, dst in graph.edges}
    assert {("forward", "backward"), ("backward", "optimizer")} <= crossing
    kinds = {op.kind for op in phase(graph, "backward").ops}
    assert {"matmul", "attention", "elementwise", "reduction", "copy"} <= kinds
    # The embedding's gradient is a table-sized scatter-add, priced as a copy (as training.backward does).
    embedding_gradient = next(op for op in phase(graph, "backward").ops if "embedding_dense_backward" in op.provenance)
    assert embedding_gradient.kind == "copy" and embedding_gradient.outputs[0].shape == (256, 64)


def test_optimizer_step_touches_every_parameter_with_parameter_sized_bytes():
    model = tiny_llama(device="meta")
    graph = capture_llama(model).graph
    optimizer_ops = phase(graph, "optimizer").ops
    parameters = dict(model.named_parameters())
    assert {op.module.removeprefix("optimizer.") for op in optimizer_ops} == set(parameters)
    total = 0
    for name, parameter in parameters.items():
        size = parameter.numel() * 4
        ops = [op for op in optimizer_ops if op.module == f"optimizer.{name}"]
        sized = [op for op in ops if op.outputs[0].shape == tuple(parameter.shape)]
        assert len(ops) - len(sized) == 1  # the step counter (one element)
        written = sum(op.output_bytes for op in sized if op.outputs[0].role == "weight")
        # AdamW (foreach=False): p *= 1 - lr wd; m.lerp_; v *= b2; v.addcmul_; sqrt; div; add_ eps; p.addcdiv_
        assert written == 5 * size  # the parameter twice, m once, v twice: all stored with the weights
        assert sum(op.input_bytes + op.output_bytes for op in sized) == 21 * size
        total += size
    assert total == 4 * sum(p.numel() for p in model.parameters()) == 4 * (LINEAR_WEIGHTS + 256 * 64 + 5 * 64)


def test_mixed_precision_bf16_parameters_with_fp32_master_weights():
    model = tiny_llama(device="meta", dtype=torch.bfloat16)
    plain = capture_llama(model).graph
    assert {op.dtype for op in plain.ops if op.kind == "matmul"} == {"bf16"}
    assert {t.dtype for op in phase(plain, "optimizer").ops for t in op.outputs if t.shape != (1,)} == {"bf16"}
    graph = capture_llama(model, master_dtype=torch.float32).graph
    assert {op.dtype for op in graph.ops if op.kind == "matmul"} == {"bf16"}
    weight = dict(model.named_parameters())["model.layers.0.mlp.up_proj.weight"]
    ops = [op for op in phase(graph, "optimizer").ops if op.module == "optimizer.model.layers.0.mlp.up_proj.weight"]
    cast_up, *adamw, cast_down = ops
    elements = weight.numel()
    assert (cast_up.provenance, cast_up.input_bytes, cast_up.output_bytes) == ("aten._to_copy", 2 * elements, 4 * elements)
    assert (cast_down.provenance, cast_down.outputs[0].dtype, cast_down.output_bytes) == ("aten.copy_", "bf16",
                                                                                           2 * elements)
    assert {t.dtype for op in adamw for t in op.inputs + op.outputs if t.shape == tuple(weight.shape)} == {"fp32"}
    assert len(phase(graph, "optimizer").ops) == len(phase(plain, "optimizer").ops) + 2 * 21


class Block(torch.nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Stack(torch.nn.Module):
    def __init__(self, checkpointed):
        super().__init__()
        self.checkpointed = checkpointed
        self.blocks = torch.nn.ModuleList(Block() for _ in range(2))
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.head(x)


def test_activation_checkpointing_recomputes_the_forward_in_the_backward():
    shape = [(4, 8, 32)]
    plain = capture_training(Stack(False), input_shapes=shape).graph
    with set_checkpoint_early_stop(False):
        full = capture_training(Stack(True), input_shapes=shape).graph
    early = capture_training(Stack(True), input_shapes=shape).graph  # torch's default: stop early
    linear = 2 * 32 * 32 * 128  # one block's up or down projection over 32 tokens
    assert flops(plain, "forward") == flops(full, "forward") == 4 * linear + 2 * 32 * 32 * 10
    assert not phase(plain, "recompute").ops
    forward_kind = {name: flops(graph, "forward") + flops(graph, "recompute") for name, graph in
                    (("plain", plain), ("full", full), ("early", early))}
    assert forward_kind["full"] > forward_kind["plain"] and forward_kind["early"] > forward_kind["plain"]
    assert flops(full, "recompute") == 4 * linear  # both blocks' forward again
    # Stopping early skips each block's down projection: its output is not saved for the backward.
    assert flops(early, "recompute") == 2 * linear
    assert {op.module for op in phase(early, "recompute").ops if op.kind == "matmul"} == {
        "recompute.blocks.0.up", "recompute.blocks.1.up"}
    assert flops(full, "backward") == flops(plain, "backward") == 2 * flops(plain, "forward")


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        x = torch.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(torch.flatten(self.pool(x), 1))


def test_cnn_training_matches_torch_flop_counter():
    model = SmallCNN()
    images = torch.randn(2, 3, 16, 16)
    reference = torch_training_flops(model, images, loss=lambda output: output.sum(), kwargs={})
    result = capture_training(model, (images,))
    assert flops(result.graph) == reference and not result.unsupported
    names = [op.name for op in result.graph.ops if op.kind == "conv"]
    # The first convolution's input needs no gradient: its backward is only the weight gradient.
    assert names == ["forward.stem.convolution", "forward.conv.convolution", "backward.conv.convolution_backward.dgrad",
                     "backward.conv.convolution_backward.wgrad", "backward.stem.convolution_backward.wgrad"]
    kinds = {op.kind for op in phase(result.graph, "backward").ops}
    assert {"conv", "norm", "reduction", "elementwise", "matmul"} <= kinds


def test_cross_entropy_loss_and_evaluation_by_phase():
    model = tiny_llama(device="meta")
    labels = torch.zeros(BATCH * SEQ, dtype=torch.int64)

    def cross_entropy(output):
        return torch.nn.functional.cross_entropy(output.logits.view(-1, 256), labels)

    result = capture_llama(model, loss_fn=cross_entropy)
    assert not result.unsupported
    loss_ops = [op for op in result.graph.ops if op.module.startswith("forward.loss")]
    assert [op.kind for op in loss_ops] == ["softmax", "embedding"]  # log_softmax, then the gathered NLL
    evaluation = evaluate(result.graph, load_hardware("h100-sxm"))
    seconds = {name: sum(op.total_s for op in evaluation.ops if op.name.startswith(name + ".")) for name in
               ("forward", "backward", "optimizer")}
    assert all(value > 0 for value in seconds.values()) and seconds["backward"] > seconds["forward"]
    attention = {op.name: op for op in evaluation.ops if op.kind == "attention"}
    backward = attention["backward.model.layers.0.self_attn.scaled_dot_product_attention_backward"]
    forward = attention["forward.model.layers.0.self_attn.scaled_dot_product_attention"]
    assert backward.flops == ATTENTION_BACKWARD_USEFUL * forward.flops > 0  # the rule prices the gradient kernel


def test_the_module_is_left_as_it_was():
    model = tiny_llama().eval()
    capture_llama(model)
    assert not model.training and all(p.grad is None for p in model.parameters())
    assert all(p.device.type == "cpu" and not isinstance(p, torch._subclasses.FakeTensor) for p in model.parameters())


def test_foreach_optimizer_is_one_op_per_update():
    graph = capture_llama(tiny_llama(device="meta"),
                          optimizer=lambda params: torch.optim.AdamW(params, foreach=True)).graph
    ops = phase(graph, "optimizer").ops
    assert all(op.kind == "elementwise" for op in ops) and len(ops) < 12
    update = next(op for op in ops if op.provenance == "aten._foreach_addcdiv_")
    assert update.name == "optimizer._foreach_addcdiv_" and update.output_bytes == 4 * sum(
        p.numel() for p in tiny_llama().parameters())


def test_errors():
    with pytest.raises(PerfmodelError, match="one-element tensor"):
        capture_training(torch.nn.Linear(4, 4), input_shapes=[(2, 4)], loss_fn=lambda output: output)
    with pytest.raises(PerfmodelError, match="optimizer must be 'adamw', None or a callable"):
        capture_training(torch.nn.Linear(4, 4), input_shapes=[(2, 4)], optimizer="lion")
    frozen = torch.nn.Linear(4, 4).requires_grad_(False)
    with pytest.raises(PerfmodelError, match="no parameter of Linear requires grad"):
        capture_training(frozen, input_shapes=[(2, 4)])
    with pytest.raises(PerfmodelError, match="input shapes do not fit"):
        capture_training(torch.nn.Linear(4, 4), input_shapes=[(2, 5)])
    with pytest.raises(PerfmodelError, match="capture_training needs a torch.nn.Module"):
        capture_training("not a module", input_shapes=[(2, 4)])


def test_capture_cli_writes_a_training_step_that_predict_prices(tmp_path, capsys, small_llama_factory):
    import json

    from perfmodel.cli import main

    forward, step = tmp_path / "forward.yaml", tmp_path / "step.yaml"
    assert main(["capture", small_llama_factory, "--input-shape", "2x64", "-o", str(forward)]) == 0
    assert main(["capture", small_llama_factory, "--input-shape", "2x64", "--train", "-o", str(step)]) == 0
    capsys.readouterr()
    assert main(["predict", str(forward), "--on", "h100-sxm", "--json"]) == 0
    inference = json.loads(capsys.readouterr().out)
    assert main(["predict", str(step), "--on", "h100-sxm", "--json"]) == 0
    training = json.loads(capsys.readouterr().out)
    phases = {op["name"].split(".")[0] for op in training["ops"]}
    assert {"forward", "backward", "optimizer"} <= phases
    # Forward, twice its matmuls in the backward, and the optimizer: roughly three times the FLOPs.
    assert 2.8 * inference["flops_total"] < training["flops_total"] < 3.6 * inference["flops_total"]
    assert main(["capture", small_llama_factory, "--input-shape", "2x64", "--no-optimizer", "-o",
                 str(step)]) == 2
