"""Fusion as a compiler does it (XLA, torch.compile/Inductor, Spyre's and Groq's compilers).

Fusible ops (the op-kind table's ``fusible``: element-wise, normalization, softmax, reduction and
copy) that consume the output of the last op of a group join that group (chains; ops listed in
between that they do not read from do not matter); after a
matrix op (matmul, conv, attention) only point-wise ops join, as its epilogue (``epilogue``): no
compiler fuses a norm, softmax or reduction into a GEMM (``benchmarks/inductor_kernels.py``
measured Inductor's CPU kernels). Any other op starts a group.
A group is one kernel: one launch, and its intermediates stay on chip, so at every level but the
innermost it moves only its external inputs and outputs.

What stays on chip is the rule of Inductor's and XLA's fusion: a consumer inside the kernel takes
its producer's values from registers, so its read of them leaves the outer levels; but the
producer's output is materialized (written whole) unless every consumer of it is inside the kernel
and together they read all of it. The IR names no graph outputs: an output with no consumer, or
a part of one that no op reads, is one, and an op outside the group needs what it reads from memory.
So a 1-element consumer of a 512 MB output removes its own 2-byte read, not the 512 MB write.

Graph inputs and outputs follow from the edges, so adding a connected op can rightly save time: a
fused consumer that reads all of an output makes it an intermediate, and a consumer whose inputs
exceed what its kernel's producers wrote (the rest is a graph input) reads more from registers once
an added op in its kernel writes that rest. Shapes are not required to match along an edge (the
project's own graphs read a fused projection's output as two halves, and backward graphs chain ops
in order); where every op reads what its producer wrote, an added op that reads its producer's whole
output and writes the same shape never makes a graph faster (tests/test_hardening_ii.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfmodel.hardware.execution_models import SIValue
from perfmodel.tracing import at_least, is_traced, minimum, where
from perfmodel.workload.ir import Graph
from perfmodel.workload.op_kinds import OP_KIND_TABLE


@dataclass(frozen=True, kw_only=True)
class FusionPlan:
    """``group_of[i]`` is the index of the op that anchors op i's kernel; the internal bytes are
    traffic that fusion keeps on chip (inputs read from the group, outputs read whole and only inside it)."""

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
    last_of_group: dict[int, int] = {}  # anchor -> the group's latest member (a group is a chain)
    for position, op in enumerate(graph.ops):
        kind = OP_KIND_TABLE[op.kind]
        # An op continues the chain of its latest producer when that producer still ends its group: ops
        # listed in between that it does not read from do not split the chain (a compiler fuses on the
        # dataflow graph, and an unrelated op added to a graph must not change its kernels).
        latest = max(producers[position], default=None)
        group = group_of[latest] if latest is not None else position
        after_matrix_op = OP_KIND_TABLE[graph.ops[group].kind].engine == "matrix"
        joins = (latest is not None and kind.fusible and (kind.epilogue or not after_matrix_op)
                 and last_of_group[group] == latest and op.count == graph.ops[latest].count)
        group_of.append(group if joins else position)
        last_of_group[group_of[-1]] = position
    # What consumer c can read of producer p's output: at most that output, and at most c's inputs
    # that an op can produce (weights are never another op's output). The graph does not say which of
    # c's tensors p wrote, so this is the most it can be, and what an exact fit (the usual chain) reads.
    produced = [sum((t.bytes for t in op.inputs if t.role != "weight"), 0.0) for op in graph.ops]

    def read(p: int, c: int) -> SIValue:
        return minimum(graph.ops[p].output_bytes, produced[c])

    internal_in: list[SIValue] = []
    internal_out: list[SIValue] = []
    for position, op in enumerate(graph.ops):
        group = group_of[position]
        inside = [p for p in producers[position] if group_of[p] == group]
        # What this op reads from producers in its own kernel comes from registers, not memory.
        internal_in.append(_plain(minimum(sum((read(p, position) for p in inside), 0.0), produced[position]))
                           if inside else 0.0)
        # Its output stays on chip only if no op outside the kernel reads it and the kernel's
        # consumers read all of it (else the rest is a graph output); otherwise it is written whole.
        users = consumers[position]
        if users and all(group_of[c] == group for c in users):
            covered = at_least(sum((read(position, c) for c in users), 0.0), op.output_bytes)
            internal_out.append(_plain(where(covered, op.output_bytes, 0.0)))
        else:
            internal_out.append(0.0)
    return FusionPlan(group_of=tuple(group_of), internal_input_bytes=tuple(internal_in),
                      internal_output_bytes=tuple(internal_out))


def _plain(value: SIValue) -> SIValue:
    """A float for a scalar (the evaluator's fast path), the array itself for a sweep (traced numbers
    as they are)."""
    if is_traced(value):
        return value
    return float(value) if np.ndim(value) == 0 else np.asarray(value, dtype=float)
