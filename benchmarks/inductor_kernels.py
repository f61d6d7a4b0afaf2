"""perfmodel's fusion groups against the kernels Inductor generates on the CPU (a benchmark, not a test).

Run:  python benchmarks/inductor_kernels.py [--json benchmarks/results/inductor_kernels.json]

For each shipped workload (``perfmodel.workload.builders``) this builds a small ``nn.Module`` that
computes the same thing, and
1. counts perfmodel's view of it: the builder's graph at the same sizes, and the module captured by
   ``perfmodel.workload.capture`` (aten ops on fake tensors), each through ``plan_fusion`` (the fusion
   of the compiled modes ``graph`` and ``static``): ops and fused kernels;
2. compiles the module with ``torch.compile(backend="inductor")`` on the CPU, runs it once on real
   tensors and reads Inductor's output code: the C++ kernels it generated (``cpp_fused_*`` functions,
   each one launch and one parallel region; Inductor's ``generated_kernel_count`` metric is reported
   too, but on the CPU it also counts the loop nests inside an outer-loop-fused kernel) and the calls to
   library kernels it did not generate (``extern_kernels.mm``, convolutions, the CPU flash attention).

Inductor's total (generated + extern) is the kernel count to compare with perfmodel's fused kernels.
The explanation column says where and why the two differ (see also the ``perfmodel_groups`` and
``inductor_kernels`` lists in the JSON output).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from perfmodel import __version__
from perfmodel.costs.fusion import plan_fusion
from perfmodel.hardware.detect import read_cpu_facts
from perfmodel.tables import format_table
from perfmodel.workload import builders
from perfmodel.workload.capture import capture
from perfmodel.workload.ir import Graph
from perfmodel.workload.op_kinds import OP_KIND_TABLE

# Small sizes: the CPU compile (g++) dominates the run time, and kernel counts do not depend on sizes.
CHAIN = {"elements": 1 << 20, "length": 8}
GEMM_SIZES = (64, 128, 256, 512)
ATTENTION = {"batch": 1, "heads": 4, "seq": 128, "head_dim": 32}
BLOCK = {"batch": 1, "seq": 64, "hidden": 256, "heads": 4, "ffn": 688}
CNN_BATCH = 8
ENCODER = {"batch": 1, "seq": 64, "d_model": 256, "nhead": 4, "dim_feedforward": 1024}


# ------------------------------------------------------------------------------------------ modules
class ElementwiseChain(torch.nn.Module):
    """``builders.elementwise_chain``: alternating multiply and add over one vector (mul first)."""

    def __init__(self, length: int = 8):
        super().__init__()
        self.length = length

    def forward(self, x):
        for index in range(self.length):
            x = x + 0.5 if index % 2 else x * 1.5
        return x


class GemmSweep(torch.nn.Module):
    """``builders.gemm_sweep``: independent square GEMMs, activation times weight."""

    def __init__(self, sizes=GEMM_SIZES):
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(size, size) / size) for size in sizes])

    def forward(self, *inputs):
        return tuple(torch.mm(x, w) for x, w in zip(inputs, self.weights, strict=True))


class FlashAttention(torch.nn.Module):
    """``builders.attention(implementation="flash")``: one causal ``scaled_dot_product_attention``."""

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class NaiveAttention(torch.nn.Module):
    """``builders.attention(implementation="naive")``: QK^T, scale, causal mask, softmax, PV, op by op."""

    def __init__(self, seq: int):
        super().__init__()
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1))

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        scores = scores.masked_fill(self.mask, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class LlamaBlock(torch.nn.Module):
    """``builders.transformer_block`` (prefill): RMS norm, q/k/v projections, the builder's rope stand-in
    (one multiply of q by a position table), causal SDPA, o projection, residual, RMS norm, SiLU-gated
    MLP, residual; linears without bias."""

    def __init__(self, seq: int, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads

        def linear(fan_in, fan_out):
            return torch.nn.Linear(fan_in, fan_out, bias=False)

        self.input_norm, self.post_norm = torch.nn.RMSNorm(hidden), torch.nn.RMSNorm(hidden)
        self.q_proj, self.k_proj, self.v_proj = linear(hidden, hidden), linear(hidden, hidden), linear(hidden, hidden)
        self.o_proj = linear(hidden, hidden)
        self.gate_proj, self.up_proj, self.down_proj = linear(hidden, ffn), linear(hidden, ffn), linear(ffn, hidden)
        self.register_buffer("rope", torch.rand(seq, hidden))

    def forward(self, x):
        batch, seq, hidden = x.shape

        def heads(t):
            return t.view(batch, seq, self.heads, hidden // self.heads).transpose(1, 2)

        y = self.input_norm(x)
        q = self.q_proj(y) * self.rope
        attention = F.scaled_dot_product_attention(heads(q), heads(self.k_proj(y)), heads(self.v_proj(y)),
                                                   is_causal=True)
        x = x + self.o_proj(attention.transpose(1, 2).reshape(batch, seq, hidden))
        y = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class SmallCNN(torch.nn.Module):
    """``builders.small_cnn``: two 3x3 convolutions with ReLU, global average pooling, a classifier."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, 3, padding=1, bias=False)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.classifier = torch.nn.Linear(64, 10, bias=False)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.classifier(x.mean(dim=(2, 3)))


def encoder_layer() -> torch.nn.Module:
    return torch.nn.TransformerEncoderLayer(ENCODER["d_model"], ENCODER["nhead"], ENCODER["dim_feedforward"],
                                            dropout=0.0, batch_first=True)


# ---------------------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class Workload:
    name: str
    make: Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]  # module and real example inputs
    builder: Callable[[], Graph] | None  # the shipped builder at the same sizes (None: not a shipped workload)
    explanation: str


def _qkv():
    shape = (ATTENTION["batch"], ATTENTION["heads"], ATTENTION["seq"], ATTENTION["head_dim"])
    return tuple(torch.randn(shape) for _ in range(3))


def _attention_builder(implementation: str) -> Callable[[], Graph]:
    return lambda: builders.attention(implementation=implementation, dtype="fp32", **ATTENTION)


WORKLOADS = (
    Workload(
        "elementwise_chain",
        lambda: (ElementwiseChain(CHAIN["length"]), (torch.randn(CHAIN["elements"]),)),
        lambda: builders.elementwise_chain(dtype="fp32", **CHAIN),
        "agree in every setting: Inductor inlines the 8 point-wise ops into one loop nest (one C++ kernel); "
        "perfmodel chains each op into its predecessor's group"),
    Workload(
        "gemm_sweep",
        lambda: (GemmSweep(), tuple(torch.randn(size, size) for size in GEMM_SIZES)),
        lambda: builders.gemm_sweep(sizes=GEMM_SIZES, dtype="fp32"),
        "agree: one kernel per GEMM, a library call (extern_kernels.mm; MKL linear when frozen) or, with GEMM "
        "templates, one generated C++ GEMM; nothing to fuse"),
    Workload(
        "attention_flash",
        lambda: (FlashAttention(), _qkv()),
        _attention_builder("flash"),
        "agree: Inductor does not generate CPU attention; it calls ATen's CPU flash kernel "
        "(aten._scaled_dot_product_flash_attention_for_cpu) as a fallback: one extern call, one perfmodel op"),
    Workload(
        "attention_naive",
        lambda: (NaiveAttention(ATTENTION["seq"]), _qkv()),
        _attention_builder("naive"),
        "the builder has one attention op (naive only changes its cost); the capture has bmm, mul, masked_fill, "
        "softmax, bmm. perfmodel puts scale + mask into the QK^T bmm's kernel and the softmax in its own (3: a "
        "softmax is no GEMM epilogue); Inductor keeps both "
        "bmm as library calls and fuses scale + mask + softmax (its max, sum and normalize loops under one outer "
        "loop) into one C++ kernel between them (3); with GEMM templates it generates the bmms too, still keeps "
        "the softmax out of the GEMM epilogue and adds a transposed copy of K (4); it does not rewrite this "
        "form into SDPA"),
    Workload(
        "transformer_block",
        lambda: (LlamaBlock(BLOCK["seq"], BLOCK["hidden"], BLOCK["heads"], BLOCK["ffn"]),
                 (torch.randn(BLOCK["batch"], BLOCK["seq"], BLOCK["hidden"]),)),
        lambda: builders.transformer_block(dtype="fp32", **BLOCK),
        "builder and capture both 10: the builder lists rope after v_proj, the capture right after "
        "q_proj; fusion follows the dataflow graph, so rope joins q_proj either way. perfmodel puts only "
        "point-wise ops after a GEMM into "
        "its kernel (rope into q_proj, the residual and the norm's square into o_proj, SiLU into gate_proj, "
        "the gate multiply into up_proj, the residual into down_proj); norms start their own kernel, as in "
        "Inductor: it equals Inductor with GEMM templates (10). Inductor (default, freezing) runs the 7 "
        "linears as library GEMMs without epilogues and SDPA as a fallback call, and generates 5 kernels "
        "around them: RMS norm, rope multiply (writing SDPA's input), residual + RMS norm, SiLU x up, "
        "residual (13). With GEMM templates, rope, SiLU x up and both residuals become GEMM epilogues, but "
        "residual + RMS norm stays its own kernel: a row reduction is not a GEMM epilogue (10)"),
    Workload(
        "small_cnn",
        lambda: (SmallCNN(), (torch.randn(CNN_BATCH, 3, 32, 32),)),
        lambda: builders.small_cnn(batch=CNN_BATCH, dtype="fp32"),
        "perfmodel: conv1 + ReLU | conv2 + ReLU | mean | linear (4). Default Inductor: library convolutions "
        "without epilogues, plus generated channels-last copies of the input and conv1's weight, ReLU + a copy "
        "of conv2's weight, and ReLU + mean (6). Freezing: oneDNN convolutions fuse the ReLU and the weights "
        "are converted once, leaving the input's channels-last copy and the mean (5): the global mean is "
        "never a convolution epilogue, and layout copies are not ops in perfmodel"),
    Workload(
        "torch TransformerEncoderLayer",
        lambda: (encoder_layer(), (torch.randn(ENCODER["batch"], ENCODER["seq"], ENCODER["d_model"]),)),
        None,
        "perfmodel: in_proj | q/k/v copy | SDPA | out_proj + residual | layer norm | linear1 + ReLU | linear2 + "
        "residual | layer norm (8). Default Inductor: 4 addmm (bias inside the library GEMM) and the SDPA "
        "fallback, plus generated kernels for the q/k/v split copy, residual + layer norm (twice) and ReLU (9). "
        "GEMM templates fuse the ReLU into linear1, but the layer norms stay separate kernels (8)"),
)


# ----------------------------------------------------------------------------------------- counting
def perfmodel_view(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> dict:
    """Ops and fused kernels of the captured module, with each kernel's ops (aten names), and how many
    fusible ops perfmodel puts into the kernel of a matrix op (GEMM, convolution, attention) as epilogues."""
    graph = capture(module, example_inputs=inputs).graph
    plan = plan_fusion(graph)
    groups: dict[int, list[str]] = {}
    for position, anchor in enumerate(plan.group_of):
        groups.setdefault(anchor, []).append(graph.ops[position].provenance.removeprefix("aten."))
    matrix_anchored = [anchor for anchor in groups if OP_KIND_TABLE[graph.ops[anchor].kind].engine == "matrix"]
    epilogue_ops = sum(len(groups[anchor]) - 1 for anchor in matrix_anchored)
    return {"ops": len(graph.ops), "kernels": plan.kernels, "epilogue_ops": epilogue_ops,
            "groups": [" + ".join(ops) for ops in groups.values()]}


KERNEL_DEFINITION = re.compile(r"^(\w+) = async_compile\.(?:cpp_pybinding|cpp|triton)\(", re.MULTILINE)
# Library calls in the wrapper: extern_kernels.mm(...), torch.ops.aten.<fallback>.default(...), aten.<op>(...).
EXTERN_CALL = re.compile(r"(?:extern_kernels|torch\.ops\.\w+|\baten)\.(\w+)(?:\.\w+)?\(")
NOT_KERNELS = {"empty_strided", "empty", "as_strided", "reinterpret_tensor", "_alloc_from_pool", "view"}


def count_output_code(codes: list[str]) -> dict:
    """Generated kernels (defined and called) and library calls in Inductor's output code."""
    generated, extern = [], []
    for code in codes:
        wrapper = code.split("def call(", 1)[1] if "def call(" in code else code
        wrapper = wrapper.split("def get_args(", 1)[0].split("def benchmark_compiled_module(", 1)[0]
        for name in KERNEL_DEFINITION.findall(code):
            generated.extend([name] * len(re.findall(rf"\b{re.escape(name)}\(", wrapper)))
        for line in wrapper.splitlines():
            stripped = line.strip()
            if stripped.startswith(("assert_", "#")):
                continue
            extern.extend(name for name in EXTERN_CALL.findall(stripped) if name not in NOT_KERNELS)
    return {"generated": generated, "extern": extern}


# Inductor settings compared: the default, ``freezing`` (weights become constants: the CPU inference setting,
# with oneDNN convolutions that fuse a ReLU and prepacked linears) and Inductor's own C++ GEMM templates
# (``max_autotune`` with only the CPP backend), which fuse point-wise epilogues into the GEMM kernel.
INDUCTOR_SETTINGS = {
    "default": {},
    "freezing": {"freezing": True},
    "gemm_templates": {"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "CPP"},
}


def inductor_view(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], setting: str = "default") -> dict:
    """Compile with Inductor on the CPU (``INDUCTOR_SETTINGS[setting]``), run once, check the result
    against eager, and count the kernels in the output code."""
    from torch._inductor import metrics
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    metrics.reset()
    start = time.perf_counter()
    # No FX-graph cache: count what this compile generates.
    with torch._inductor.config.patch(fx_graph_cache=False, **INDUCTOR_SETTINGS[setting]), torch.no_grad():
        result, codes = run_and_get_code(torch.compile(module, backend="inductor"), *inputs)
        expected = module(*inputs)
    seconds = time.perf_counter() - start
    torch._dynamo.reset()
    for got, want in zip(_flat(result), _flat(expected), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    counts = count_output_code(codes)
    return {"graphs": len(codes), "generated": len(counts["generated"]), "extern": len(counts["extern"]),
            "total": len(counts["generated"]) + len(counts["extern"]),
            "generated_kernel_count_metric": metrics.generated_kernel_count,
            "ir_nodes_pre_fusion": metrics.ir_nodes_pre_fusion, "compile_and_run_s": seconds,
            "kernels": counts["generated"], "extern_calls": counts["extern"]}


def _flat(value) -> list[torch.Tensor]:
    return [value] if isinstance(value, torch.Tensor) else [t for item in value for t in _flat(item)]


def measure(workload: Workload, settings=tuple(INDUCTOR_SETTINGS)) -> dict:
    torch.manual_seed(0)
    module, inputs = workload.make()
    module = module.eval()
    pm = perfmodel_view(module, inputs)
    row = {"workload": workload.name, "perfmodel_ops": pm["ops"], "perfmodel_kernels": pm["kernels"],
           "perfmodel_epilogue_ops": pm["epilogue_ops"], "perfmodel_groups": pm["groups"]}
    if workload.builder is not None:
        graph = workload.builder()
        row.update(builder_ops=len(graph.ops), builder_kernels=plan_fusion(graph).kernels)
    row["inductor"] = {}
    for setting in settings:
        try:
            row["inductor"][setting] = inductor_view(module, inputs, setting)
        except Exception as error:  # a setting this CPU or torch build cannot compile: reported, not fatal
            row["inductor"][setting] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    default = row["inductor"]["default"]
    row.update(inductor_generated=default["generated"], inductor_extern=default["extern"],
               inductor_total=default["total"], ratio_perfmodel_to_inductor=pm["kernels"] / default["total"],
               explanation=workload.explanation)
    return row


def run(names: list[str] | None = None) -> list[dict]:
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # TransformerEncoderLayer's eager fused kernel: off for both
    try:
        return [measure(workload) for workload in WORKLOADS if names is None or workload.name in names]
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def cpu_name() -> str:
    return read_cpu_facts().model_name


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/inductor_kernels.json"))
    parser.add_argument("--workload", action="append", help="only this workload (repeatable)")
    args = parser.parse_args(argv)
    rows = run(args.workload)
    headers = ["workload", "builder ops/kernels", "captured ops", "perfmodel kernels", "Inductor generated",
               "Inductor extern", "Inductor total", "perfmodel / Inductor", "total, freezing", "total, GEMM templates"]

    def total(row, setting):
        result = row["inductor"][setting]
        return result["total"] if "total" in result else "error"

    table = [[row["workload"], f"{row['builder_ops']}/{row['builder_kernels']}" if "builder_ops" in row else "-",
              row["perfmodel_ops"], row["perfmodel_kernels"], row["inductor_generated"], row["inductor_extern"],
              row["inductor_total"], round(row["ratio_perfmodel_to_inductor"], 2), total(row, "freezing"),
              total(row, "gemm_templates")] for row in rows]
    print(f"Kernels per forward pass: perfmodel's fusion plan against Inductor on {cpu_name()} (torch {torch.__version__})")
    print(format_table(headers, table))
    print()
    for row in rows:
        print(f"{row['workload']}: {row['explanation']}")
        print(f"  perfmodel kernels: {' | '.join(row['perfmodel_groups'])}")
        for setting, result in row["inductor"].items():
            if "error" in result:
                print(f"  Inductor {setting}: {result['error']}")
                continue
            print(f"  Inductor {setting}: {' | '.join(result['kernels']) or '-'}; "
                  f"extern: {', '.join(result['extern_calls']) or '-'}")
    meta = {"perfmodel": __version__, "torch": torch.__version__, "cpu": cpu_name(), "inductor_settings": INDUCTOR_SETTINGS,
            "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(), "dtype": "fp32",
            "sizes": {"elementwise_chain": CHAIN, "gemm_sweep": list(GEMM_SIZES), "attention": ATTENTION,
                      "transformer_block": BLOCK, "small_cnn": {"batch": CNN_BATCH}, "encoder_layer": ENCODER}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.json.with_name(args.json.name + ".tmp")
    temporary.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    temporary.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
