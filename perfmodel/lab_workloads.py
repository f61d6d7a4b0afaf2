"""The labs' headline workloads as perfmodel graphs, and where each one sits on a system's roofline (edge module).

Lab 1 draws the six systems' rooflines (this CPU and the five of :data:`perfmodel.landscape`'s table) with one
point per lab: the workload that lab is about, predicted by perfmodel on each system. A point is the whole
workload's arithmetic intensity at the system's outermost on-device memory (its FLOPs over the bytes it moves
there) against its predicted FLOP/s (its FLOPs over its predicted time): where the workload would sit on that
system's roofline. ``notebooks/export_figures.py five_systems`` writes the same chart to
``notebooks/figures/five_systems.png``.

Each workload mirrors the lab's own code (the shapes its cells build or capture; ``tests/test_lab_workloads.py``
checks that each lab still uses them) and is built in the system's comparison format
(:func:`perfmodel.landscape.landscape_dtype`: fp32 on a CPU, else bf16, else fp16), so that no point is priced
against the roof of another format. Built from :mod:`perfmodel.workload.builders` and :mod:`perfmodel.llm`: no
torch needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfmodel.hardware.loader import load_hardware
from perfmodel.hardware.model import Hardware
from perfmodel.landscape import landscape_dtype, landscape_ops
from perfmodel.llm import Parallelism, Scenario
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import stage_graph
from perfmodel.roofline.charts import OpPoint, RooflineData, classic_roofline
from perfmodel.roofline.results import Evaluation, evaluate
from perfmodel.workload import builders
from perfmodel.workload.ir import Graph, Op, TensorSpec
from perfmodel.workload.op_kinds import activation_flops_per_element

LLAMA = "llama-3.1-8b"  # the model of labs 4 and 6


@dataclass(frozen=True)
class LabWorkload:
    """One lab's headline workload: ``build(dtype)`` gives its graph; ``fuse`` True evaluates it compiled (fused
    chains, as ``torch.compile`` runs it), None as the system runs a graph by default (eager on a GPU or CPU,
    compiled by XLA or a dataflow compiler elsewhere: :func:`perfmodel.evaluate`)."""

    lab: int
    label: str
    build: Callable[[str], Graph]
    fuse: bool | None = None


def _spec(dtype: str, *shape: int) -> TensorSpec:
    return TensorSpec(shape=shape, dtype=dtype)


def _elementwise(name: str, dtype: str, shape: tuple[int, ...], inputs: int = 1, flops_per_element: float = 1) -> Op:
    return Op(name=name, kind="elementwise", inputs=tuple(_spec(dtype, *shape) for _ in range(inputs)),
              outputs=(_spec(dtype, *shape),), attrs={"flops_per_element": flops_per_element})


def _norm(name: str, dtype: str, tokens: int, width: int) -> Op:
    return Op(name=name, kind="norm", inputs=(_spec(dtype, tokens, width),), outputs=(_spec(dtype, tokens, width),),
              attrs={"norm": "layer"})


def lab1_matmul(dtype: str) -> Graph:
    """Lab 1: the landscape table's 4096 x 4096 by 4096 x 4096 matmul."""
    return Graph(name="lab 1 matmul", ops=[landscape_ops(dtype)[0]])


def lab2_attention_block(dtype: str, batch: int = 1, seq: int = 128, width: int = 256, heads: int = 4) -> Graph:
    """Lab 2's ``AttentionBlock``: q/k/v projections, causal attention, output projection, residual, layer norm."""
    tokens = batch * seq
    attention = builders.attention(batch=batch, heads=heads, seq=seq, head_dim=width // heads, dtype=dtype).ops[0]
    ops = [builders.linear(f"block.{name}_proj", tokens, width, width, dtype) for name in "qkv"]
    ops += [attention, builders.linear("block.o_proj", tokens, width, width, dtype),
            _elementwise("block.residual", dtype, (tokens, width), inputs=2), _norm("block.norm", dtype, tokens, width)]
    return Graph(name="lab 2 attention block", ops=ops)


def lab3_mlp_block(dtype: str, tokens: int = 8 * 128, width: int = 1024) -> Graph:
    """Lab 3's ``MLPBlock(1024)`` on 8 x 128 tokens: layer norm, up (4x), GELU, scale and shift, down, residual."""
    hidden = 4 * width
    ops = [_norm("mlp.norm", dtype, tokens, width), builders.linear("mlp.up", tokens, width, hidden, dtype),
           _elementwise("mlp.gelu", dtype, (tokens, hidden),
                        flops_per_element=activation_flops_per_element("gelu", gated=False)),
           _elementwise("mlp.scale", dtype, (tokens, hidden)), _elementwise("mlp.shift", dtype, (tokens, hidden)),
           builders.linear("mlp.down", tokens, hidden, width, dtype),
           _elementwise("mlp.residual", dtype, (tokens, width), inputs=2)]
    names = [op.name for op in ops]
    return Graph(name="lab 3 MLP block", ops=ops, edges=list(zip(names[:-1], names[1:], strict=True)))


def lab4_kv_stream(dtype: str) -> Graph:
    """Lab 4's KV stream: one decode token's attention over one layer of Llama-3.1-8B's KV cache at the model's
    longest context (the lab's GPU path; its CPU path sizes the cache from the detected last-level cache)."""
    arch = load_architecture(LLAMA)
    block = builders.transformer_block(batch=1, seq=1, hidden=arch.heads * arch.head_dim, heads=arch.heads,
                                       kv_heads=arch.kv_heads, kv_len=arch.max_positions, dtype=dtype)
    return Graph(name="lab 4 KV stream", ops=[op for op in block.ops if op.kind == "attention"])


def lab5_decode_step(dtype: str) -> Graph:
    """Lab 5's worked example: a 32-layer transformer's decode step at a 2048-token context."""
    return builders.transformer_block(batch=1, seq=1, kv_len=2048, layers=32, dtype=dtype)


def lab6_llama_decode(dtype: str) -> Graph:
    """Lab 6: one Llama-3.1-8B decode step, batch 1, 1024 tokens of context (perfmodel's LLM graph)."""
    scenario = Scenario(batch=1, prompt_tokens=1024, generated_tokens=128, weight_dtype=dtype, kv_dtype=dtype,
                        activation_dtype=dtype)
    return stage_graph(load_architecture(LLAMA), scenario, Parallelism(), phase="decode", context=1024)


def lab7_spyre_mlp(dtype: str, tokens: int = 2048, width: int = 4096, hidden: int = 12800) -> Graph:
    """Lab 7's SwiGLU ``MLP`` on 2048 tokens: gate and up projections, SiLU x up, down projection."""
    ops = [builders.linear("mlp.gate", tokens, width, hidden, dtype),
           builders.linear("mlp.up", tokens, width, hidden, dtype),
           _elementwise("mlp.silu_mul", dtype, (tokens, hidden), inputs=2,
                        flops_per_element=activation_flops_per_element("silu", gated=True)),
           builders.linear("mlp.down", tokens, hidden, width, dtype)]
    return Graph(name="lab 7 MLP", ops=ops, edges=[("mlp.gate", "mlp.silu_mul"), ("mlp.up", "mlp.silu_mul"),
                                                    ("mlp.silu_mul", "mlp.down")])


LAB_WORKLOADS = (
    LabWorkload(1, "lab 1: matmul 4096 x 4096", lab1_matmul),
    LabWorkload(2, "lab 2: attention block, 128 tokens x 256", lab2_attention_block),
    LabWorkload(3, "lab 3: MLP block, 1024 tokens x 1024, compiled", lab3_mlp_block, fuse=True),
    LabWorkload(4, "lab 4: decode attention over a 128K-token KV cache (1 layer)", lab4_kv_stream),
    LabWorkload(5, "lab 5: decode step, 32 layers, 2048-token context", lab5_decode_step),
    LabWorkload(6, "lab 6: Llama-3.1-8B decode step, batch 1", lab6_llama_decode),
    LabWorkload(7, "lab 7: SwiGLU MLP, 2048 tokens x 4096", lab7_spyre_mlp),
)


def workload_point(label: str, evaluation: Evaluation, level: str) -> OpPoint:
    """The whole workload as one roofline point: its FLOPs over the bytes it moves at ``level`` (infinite when it
    moves none there), against its FLOPs over its predicted time; ``bound`` is what bounds most of its time."""
    moved = sum(op.bytes.get(level, 0.0) for op in evaluation.ops)
    flops, seconds = evaluation.flops_total, evaluation.total_s
    return OpPoint(name=label, kind="workload", bound=evaluation.bound, level=level,
                   intensity_flop_per_byte=flops / moved if moved > 0 else math.inf,
                   achieved_flops_per_s=flops / seconds if seconds > 0 else 0.0, time_share=1.0)


def labs_roofline(hardware: Hardware, workloads: Sequence[LabWorkload] = LAB_WORKLOADS) -> RooflineData:
    """``hardware``'s classic roofline (its outermost on-device memory, in its comparison format) with one point
    per lab: the lab's workload predicted on it (:func:`workload_point`)."""
    dtype = landscape_dtype(hardware)
    data = classic_roofline(hardware, dtype=dtype)
    level = data.roofs[0].label
    points = tuple(workload_point(workload.label, evaluate(workload.build(dtype), hardware, fuse=workload.fuse), level)
                   for workload in workloads)
    return RooflineData(hardware=data.hardware, dtype=dtype, peak_flops_per_s=data.peak_flops_per_s,
                        roofs=data.roofs, points=points)


FIVE_SYSTEMS = ("h100-sxm", "tpu-v5e", "cerebras-wse-3", "groq-lpu-v1", "ibm-spyre")  # the labs' five systems
# The CPU of the committed figure (notebooks/figures/five_systems.png): the project's fitted spec of its development
# machine, so that the command that writes the figure gives the same figure everywhere; Lab 1 uses its detected CPU.
FIGURE_CPU = "epyc-zen4-2vcpu-fitted"


def six_systems_rooflines(cpu: Hardware | None = None) -> list[RooflineData]:
    """:func:`labs_roofline` of ``cpu`` (default: :data:`FIGURE_CPU`) and of the five systems, in that order."""
    systems = [cpu if cpu is not None else load_hardware(FIGURE_CPU)] + [load_hardware(name) for name in FIVE_SYSTEMS]
    return [labs_roofline(hardware) for hardware in systems]
