"""Capture of real nn.Modules on fake tensors: op kinds, FLOPs against torch's flop counter and
independent formulas, no weights allocated, clear errors."""

import json
import subprocess
import sys
import textwrap

import pytest

# The test command installs torch and transformers (".[dev,torch]"): a missing one fails here, never skips.
import torch
import transformers
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from perfmodel.cli import main
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_hardware
from perfmodel.roofline import evaluate
from perfmodel.workload.capture import capture, matmul_class_flops


def counted_by_torch(graph) -> float:
    """Our matmul-class FLOPs restricted to ops torch's flop counter knows: it has no entry for the
    CPU flash-attention kernel (aten._scaled_dot_product_flash_attention_for_cpu), so those are left out."""
    from torch.utils.flop_counter import flop_registry

    known = {str(key) for key in flop_registry}
    skipped = [op for op in graph.ops if op.kind == "attention" and op.provenance.startswith("aten._")
               and op.provenance not in known]
    return matmul_class_flops(graph) - sum(4 * op.attrs["batch"] * op.attrs["heads"] * op.attrs["seq_q"]
                                           * op.attrs["seq_kv"] * op.attrs["head_dim"] for op in skipped)


def torch_flops(module, inputs, kwargs=None) -> int:
    """torch.utils.flop_counter's count for one forward pass on fake tensors."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    state = {name: mode.from_tensor(t) for name, t in [*module.named_parameters(), *module.named_buffers()]}
    with mode:
        fake_inputs = tuple(mode.from_tensor(t) for t in inputs)
        with FlopCounterMode(display=False) as counter:
            torch.func.functional_call(module, state, fake_inputs, kwargs or {})
    return counter.get_total_flops()


class BasicBlock(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class ResNetish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = torch.nn.Sequential(BasicBlock(16), BasicBlock(16))
        self.up = torch.nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = self.up(self.blocks(torch.relu(self.stem(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


def llama(layers=2):
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config).eval()


def gpt2():
    config = transformers.GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=500, n_positions=128)
    with torch.device("meta"):
        return transformers.GPT2LMHeadModel(config).eval()


def kinds(graph):
    counts = {}
    for op in graph.ops:
        counts[op.kind] = counts.get(op.kind, 0) + 1
    return counts


def test_transformer_encoder_layer():
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True).eval()
    result = capture(layer, input_shapes=[(2, 10, 64)])
    assert counted_by_torch(result.graph) == torch_flops(layer, [torch.empty(2, 10, 64)])
    assert kinds(result.graph)["norm"] == 2 and kinds(result.graph)["attention"] == 1 and not result.unsupported
    # Independent formula: QKV + out projections + two FFN matmuls + attention's two products.
    tokens, d, ff = 20, 64, 128
    expected = 2 * tokens * (3 * d * d + d * d + 2 * d * ff) + 4 * 2 * 10 * 10 * 64
    assert matmul_class_flops(result.graph) == expected


def test_resnet_style_cnn():
    model = ResNetish().eval()
    result = capture(model, input_shapes=[(2, 3, 16, 16)])
    counts = kinds(result.graph)
    assert counts["conv"] == 6 and counts["norm"] == 4 and counts["matmul"] == 1
    assert counted_by_torch(result.graph) == torch_flops(model, [torch.empty(2, 3, 16, 16)])
    stem = next(op for op in result.graph.ops if op.name.startswith("stem."))
    assert stem.attrs["m"] * stem.attrs["n"] * stem.attrs["k"] == 2 * 16 * 16 * 16 * 3 * 9


@pytest.mark.parametrize("factory", [llama, gpt2])
def test_decoders_from_transformers_configs(factory):
    model = factory()
    ids = torch.zeros(2, 16, dtype=torch.int64)
    result = capture(model, input_shapes=[(2, 16)], input_dtypes=[torch.int64], forward_kwargs={"use_cache": False})
    assert counted_by_torch(result.graph) == torch_flops(model, [ids], {"use_cache": False})
    assert not result.unsupported
    names = [op.name for op in result.graph.ops]
    assert any(".layers.1." in name or ".h.1." in name for name in names)  # hierarchical module names
    assert result.graph.edges and all(src in names and dst in names for src, dst in result.graph.edges)


def test_llama_matmul_count_and_flops_by_formula():
    result = capture(llama(), input_shapes=[(1, 32)], input_dtypes=[torch.int64], forward_kwargs={"use_cache": False})
    matmuls = [op for op in result.graph.ops if op.kind == "matmul"]
    assert len(matmuls) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer + lm_head
    assert kinds(result.graph)["attention"] == 2
    linear_params = 2 * (256 * 256 * 2 + 2 * 256 * 128 + 3 * 256 * 512) + 256 * 1000
    assert sum(2 * op.attrs["m"] * op.attrs["n"] * op.attrs["k"] for op in matmuls) == 2 * 32 * linear_params
    weights = [t for op in matmuls for t in op.inputs if t.role == "weight"]
    assert len(weights) == len(matmuls)


def test_no_weight_is_allocated_for_a_7b_sized_model():
    script = textwrap.dedent("""
        import resource, torch, transformers, json
        from perfmodel.workload.capture import capture
        config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=4,
                                          num_attention_heads=32, num_key_value_heads=32, vocab_size=32000)
        with torch.device("meta"):
            model = transformers.LlamaForCausalLM(config).eval()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = capture(model, input_shapes=[(1, 512)], input_dtypes=[torch.int64], forward_kwargs={"use_cache": False})
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"grown_kib": after - before, "ops": len(result.graph.ops)}))
    """)
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    data = json.loads(output.splitlines()[-1])
    # 4 layers of a 7B model hold 0.8 GB of fp32 weights and 3.3 GB of activations: none may be allocated.
    assert data["ops"] > 50 and data["grown_kib"] < 300 * 1024


def test_module_that_raises():
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise ValueError("bad forward")

    with pytest.raises(PerfmodelError, match="the module raised while capturing.*bad forward"):
        capture(Broken(), input_shapes=[(2, 2)])


def test_data_dependent_control_flow_is_explained():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    with pytest.raises(PerfmodelError, match="depends on tensor values"):
        capture(Branchy(), input_shapes=[(4,)])


def test_shape_that_does_not_fit():
    with pytest.raises(PerfmodelError, match="input shapes do not fit"):
        capture(torch.nn.Linear(8, 4), input_shapes=[(2, 5)])


def test_unsupported_ops_are_listed_and_estimated():
    class Odd(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real + 1

    result = capture(Odd(), input_shapes=[(8, 16)])
    assert any("fft" in name for name in result.unsupported)
    evaluation = evaluate(result.graph, load_hardware("h100-sxm"))
    assert evaluation.unsupported and evaluation.total_s > 0


def test_views_are_free():
    class Views(torch.nn.Module):
        def forward(self, x):
            return x.view(4, 4).t().unsqueeze(0).expand(2, 4, 4) * 2

    result = capture(Views(), input_shapes=[(16,)])
    assert [op.kind for op in result.graph.ops] == ["elementwise"] and result.free_ops >= 4

    class Materialized(torch.nn.Module):
        def forward(self, x):  # reshaping a transposed tensor must copy it
            return x.view(4, 4).t().reshape(16) * 2

    assert [op.kind for op in capture(Materialized(), input_shapes=[(16,)]).graph.ops] == ["copy", "elementwise"]


def test_capture_cli_and_compiled_view(tmp_path, capsys, small_llama_factory):
    target = tmp_path / "captured.yaml"
    assert main(["capture", small_llama_factory, "--input-shape", "1x64", "--dtype", "bf16", "-o", str(target)]) == 0
    assert "captured" in capsys.readouterr().out
    assert main(["predict", str(target), "--on", "h100-sxm", "--json"]) == 0
    eager = json.loads(capsys.readouterr().out)
    assert main(["predict", str(target), "--on", "h100-sxm", "--json", "--compiled"]) == 0
    compiled = json.loads(capsys.readouterr().out)
    assert compiled["total_s"] < eager["total_s"]
    assert len({op["kernel"] for op in compiled["ops"]}) < len({op["kernel"] for op in eager["ops"]})
    missing = small_llama_factory.replace(":small_llama", ":missing")
    assert main(["capture", missing, "--input-shape", "1x64", "-o", str(target)]) == 2
    assert main(["capture", small_llama_factory, "--input-shape", "1xa", "-o", str(target)]) == 2


def test_meta_device_modules_get_meta_inputs():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    result = capture(model, input_shapes=[(4, 64)])
    assert [op.kind for op in result.graph.ops] == ["matmul", "elementwise", "matmul"]
    assert matmul_class_flops(result.graph) == 2 * 4 * (64 * 128 + 128 * 8)
