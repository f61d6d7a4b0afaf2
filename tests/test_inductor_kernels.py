"""perfmodel's fusion groups checked against the kernels Inductor generates on the CPU (issue 13, item 2).

The modules and the counting of Inductor's output code are those of ``benchmarks/inductor_kernels.py``
(which runs all shipped workloads and writes ``benchmarks/results/inductor_kernels.json``); here the
three smallest are compiled with Inductor's default settings, with a temporary cache directory.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

# The test command installs torch (".[dev,torch]"): a missing one fails here, never skips.
import torch

from perfmodel.costs.fusion import plan_fusion
from perfmodel.workload.builders import elementwise_chain

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "inductor_kernels.py"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("inductor_kernels_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


ik = _load_benchmark()


@pytest.fixture
def inductor(monkeypatch, tmp_path):
    """Inductor on the CPU with its caches in a temporary directory; Dynamo's state reset after."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    yield lambda module, inputs: ik.inductor_view(module.eval(), inputs, "default")
    torch._dynamo.reset()


def test_output_code_counting_on_a_known_wrapper():
    code = '''
cpp_fused_add_0 = async_compile.cpp_pybinding(['float*'], r\'\'\'...\'\'\')
def call(self, args):
    extern_kernels.mm(a, b, out=buf0)
    cpp_fused_add_0(buf0)
    assert_size_stride(buf1, (1, 4), (4, 1), 'torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default')
    buf1 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True)
    buf2 = empty_strided_cpu((4, ), (1, ), torch.float32)
    cpp_fused_add_0(buf2)
'''
    counts = ik.count_output_code([code])
    assert counts["generated"] == ["cpp_fused_add_0", "cpp_fused_add_0"]
    assert counts["extern"] == ["mm", "_scaled_dot_product_flash_attention_for_cpu"]


def test_elementwise_chain_is_one_kernel_for_perfmodel_and_for_inductor(inductor):
    """Measured: 8 captured ops, 1 perfmodel kernel; Inductor 1 generated C++ kernel, no library call."""
    module, inputs = ik.ElementwiseChain(8), (torch.randn(4096),)
    perfmodel = ik.perfmodel_view(module, inputs)
    assert (perfmodel["ops"], perfmodel["kernels"]) == (8, 1)
    assert plan_fusion(elementwise_chain(elements=4096, length=8, dtype="fp32")).kernels == 1
    compiled = inductor(module, inputs)
    assert (compiled["generated"], compiled["extern"]) == (1, 0), compiled
    assert compiled["generated_kernel_count_metric"] == 1  # Inductor's own count agrees with the output code


def test_naive_attention_softmax_is_not_a_gemm_epilogue_in_inductor(inductor):
    """Measured: Inductor runs both bmm as library calls and the softmax chain as one C++ kernel (3).
    perfmodel fuses only point-wise epilogues into a GEMM (the scale and the mask), so the softmax is
    its own kernel: bmm+mul+masked_fill | softmax | bmm, 3 kernels (before this measurement it fused
    the softmax into the bmm: 2)."""
    module, inputs = ik.NaiveAttention(64), tuple(torch.randn(1, 2, 64, 16) for _ in range(3))
    perfmodel = ik.perfmodel_view(module, inputs)
    assert perfmodel["groups"] == ["bmm + mul + masked_fill", "_softmax", "bmm"]
    compiled = inductor(module, inputs)
    assert compiled["extern_calls"] == ["bmm", "bmm"]
    assert compiled["generated"] == 1, compiled["kernels"]
    assert compiled["total"] == perfmodel["kernels"] == 3


def test_transformer_block_kernels_within_a_factor_of_inductor(inductor):
    """Measured (torch 2.13, CPU): 25 captured ops, 10 perfmodel kernels; Inductor 5 generated kernels + 8
    library calls (7 mm + the CPU flash attention) = 13 by default, 10 with its C++ GEMM templates (which
    fuse point-wise epilogues into GEMMs as perfmodel's compiled modes assume). Every perfmodel
    matrix-class op is one library call; default Inductor fuses nothing into a library GEMM, so it needs
    more kernels: 10 < 13 <= 1.5 x 10."""
    module = ik.LlamaBlock(seq=32, hidden=128, heads=4, ffn=344)
    inputs = (torch.randn(1, 32, 128),)
    perfmodel = ik.perfmodel_view(module, inputs)
    assert (perfmodel["ops"], perfmodel["kernels"]) == (25, 10)
    compiled = inductor(module, inputs)
    assert sorted(compiled["extern_calls"]) == ["_scaled_dot_product_flash_attention_for_cpu"] + ["mm"] * 7
    matrix_ops = sum(1 for group in perfmodel["groups"]
                     if group.split(" + ")[0] in ("mm", "scaled_dot_product_attention"))
    assert compiled["extern"] == matrix_ops == 8
    assert compiled["generated"] == 5, compiled["kernels"]
    assert perfmodel["kernels"] < compiled["total"] <= 1.5 * perfmodel["kernels"]
