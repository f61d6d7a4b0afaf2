"""Fusion as a compiler does it (XLA, torch.compile/Inductor, Spyre's and Groq's compilers).

Fusible ops (the op-kind table's ``fusible``: element-wise, normalization, softmax, reduction and
copy) that consume the output of the previous op of their group join that group (chains); after a
matrix op (matmul, conv, attention) only point-wise ops join, as its epilogue (``epilogue``): no
compiler fuses a norm, softmax or reduction into a GEMM (``benchmarks/inductor_kernels.py``
measured Inductor's CPU kernels). Any other op starts a group.
A group is one kernel: one launch, and its intermediates stay on chip, so at every level but the
innermost it moves only its external inputs and outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.hardware.execution_models import SIValue
from perfmodel.workload.ir import Graph
from perfmodel.workload.op_kinds import OP_KIND_TABLE


@dataclass(frozen=True, kw_only=True)
class FusionPlan:
    """``group_of[i]`` is the index of the op that anchors op i's kernel; the internal bytes are
    traffic that fusion keeps on chip (inputs read from, or outputs consumed only inside, the group)."""

    group_of: tuple[int, ...]
    internal_input_bytes: tuple[SIValue, ...]  # floats, or arrays for sweeps
    internal_output_bytes: tuple[SIValue, ...]

    @property
    def kernels(self) -> int:
        return len(set(self.group_of))


def no_fusion(graph: Graph) -> FusionPlan:
    count = len(graph.ops)
    return FusionPlan(group_of=tuple(range(count)), internal_input_bytes=(0.0,) * count,
                      internal_output_bytes=(0.0,) * count)


def plan_fusion(graph: Graph) -> FusionPlan:
    index = graph.index
    producers: dict[int, list[int]] = {i: [] for i in range(len(graph.ops))}
    consumers: dict[int, list[int]] = {i: [] for i in range(len(graph.ops))}
    for producer, consumer in graph.edges:
        producers[index[consumer]].append(index[producer])
        consumers[index[producer]].append(index[consumer])
    group_of: list[int] = []
    for position, op in enumerate(graph.ops):
        previous = position - 1
        kind = OP_KIND_TABLE[op.kind]
        anchor = graph.ops[group_of[previous]] if position > 0 else op
        after_matrix_op = OP_KIND_TABLE[anchor.kind].engine == "matrix"
        joins = (position > 0 and kind.fusible and (kind.epilogue or not after_matrix_op)
                 and previous in producers[position] and op.count == graph.ops[previous].count)
        group_of.append(group_of[previous] if joins else position)
    internal_in: list[SIValue] = []
    internal_out: list[SIValue] = []
    for position, op in enumerate(graph.ops):
        group = group_of[position]
        inside = [p for p in producers[position] if group_of[p] == group]
        # An input produced inside the group never leaves the chip: count the producer's output size.
        internal_in.append(sum((graph.ops[p].output_bytes for p in inside), 0.0))
        outside_consumers = [c for c in consumers[position] if group_of[c] != group]
        only_inside = consumers[position] and not outside_consumers
        internal_out.append(op.output_bytes if only_inside else 0.0)
    return FusionPlan(group_of=tuple(group_of), internal_input_bytes=tuple(internal_in),
                      internal_output_bytes=tuple(internal_out))
