"""The workload IR: tensors, ops and graphs (pure core).

* ``TensorSpec``: shape, dtype and role (``activation``, ``weight`` or ``kv_cache``: where the data
  lives decides which memory level serves it, e.g. weights streamed from Cerebras MemoryX).
* ``Op``: a stable hierarchical name (``layers.3.attn.q_proj``), a kind, input/output tensors,
  canonical attributes (``m``, ``n``, ``k``, ``batch``, ``causal``...), a provenance (the aten
  target it came from) and a repeat ``count`` (an op with ``count=n`` costs the same as n copies).
* ``Graph``: ops in execution order plus producer->consumer edges between op names. Edges must
  point forward (a producer runs before its consumer); a backward edge is a cycle.

Attribute values may be numpy arrays: the cost rules broadcast, so one graph whose ``m`` is an
array of 10^6 values is a sweep of 10^6 scenarios evaluated at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping, Sequence

import numpy as np

from perfmodel.dtypes import DTYPES, get_dtype
from perfmodel.errors import PerfmodelError, Problem, WorkloadError
from perfmodel.workload.op_kinds import MAX_SIZE, OP_KIND_TABLE

if TYPE_CHECKING:
    from perfmodel.hardware.execution_models import SIValue

TensorRole = Literal["activation", "weight", "kv_cache"]
TENSOR_ROLES: tuple[str, ...] = ("activation", "weight", "kv_cache")
# A tensor dimension: a positive integer (a Python or a numpy one), or an integer array of sweep points.
Dimension = int | np.integer | np.ndarray


@dataclass(frozen=True, kw_only=True)
class TensorSpec:
    """A tensor's shape and dtype (no data)."""

    shape: tuple[Dimension, ...]
    dtype: str
    role: TensorRole = "activation"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def numel(self) -> int | np.ndarray:
        """Element count; an array when a dimension is an array of sweep values."""
        total: int | np.ndarray = 1
        for dim in self.shape:
            total = total * (dim if isinstance(dim, np.ndarray) else int(dim))
        return total

    @property
    def bytes(self) -> SIValue:
        # Asked for many times per evaluation (traffic rules, fusion, residency): a scalar size is
        # computed once per tensor (the spec is frozen); a sweep's array is not kept, so that no
        # caller can change it in place.
        cached: SIValue | None = self.__dict__.get("_bytes")
        if cached is not None:
            return cached
        size = self.numel * get_dtype(self.dtype).bytes_per_element
        if not isinstance(size, np.ndarray):
            object.__setattr__(self, "_bytes", size)
        return size


@dataclass(frozen=True, kw_only=True)
class Op:
    """One operation of a workload (or a group of identical ones, with ``count``)."""

    name: str
    kind: str  # a registered op kind (workload.op_kinds)
    inputs: Sequence[TensorSpec] = ()          # stored as a tuple
    outputs: Sequence[TensorSpec] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)  # numbers, arrays (sweeps), flags, text
    count: int = 1
    provenance: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    @property
    def module(self) -> str:
        """The module path of the op (its name without the last component)."""
        return self.name.rpartition(".")[0] or self.name

    @property
    def dtype(self) -> str:
        """The compute dtype: ``attrs['dtype']`` if given, else the first input's (or output's)."""
        if "dtype" in self.attrs:
            return str(self.attrs["dtype"])
        tensors = self.inputs or self.outputs
        return tensors[0].dtype if tensors else "fp32"

    @property
    def input_bytes(self) -> SIValue:
        return sum(tensor.bytes for tensor in self.inputs)

    @property
    def output_bytes(self) -> SIValue:
        return sum(tensor.bytes for tensor in self.outputs)


@dataclass(frozen=True, kw_only=True)
class Graph:
    """Ops in execution order and producer->consumer edges (pairs of op names)."""

    name: str
    ops: Sequence[Op]                          # stored as a tuple
    edges: Sequence[tuple[str, str]] = ()      # stored as a tuple

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "edges", tuple(tuple(edge) for edge in self.edges))
        problems = graph_problems(self)
        if problems:
            raise WorkloadError(problems)

    @classmethod
    def prechecked(cls, name: str, ops: Sequence[Op], edges: Sequence[tuple[str, str]] = ()) -> Graph:
        """A graph built by the project's own builders from parts they checked already (an LLM stage
        from a validated architecture and scenario): the same object as ``Graph(...)`` without the
        whole-graph checks, which cost more than pricing the graph. Tests run ``graph_problems`` over
        these builders' graphs."""
        graph = object.__new__(cls)
        object.__setattr__(graph, "name", name)
        object.__setattr__(graph, "ops", tuple(ops))
        object.__setattr__(graph, "edges", tuple(tuple(edge) for edge in edges))
        return graph

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)

    @property
    def index(self) -> dict[str, int]:
        return {op.name: position for position, op in enumerate(self.ops)}


def _is_positive_dimension(dim: object) -> bool:
    """A whole number from 1 to ``MAX_SIZE`` (an array of them in a sweep)."""
    if isinstance(dim, np.ndarray):
        return dim.dtype.kind in "iu" and bool(np.all(dim > 0)) and bool(np.all(dim <= MAX_SIZE))
    return isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and bool(0 < dim <= MAX_SIZE)


def _largest_numel(shape: tuple[Dimension, ...]) -> float:
    """The largest element count of a shape of valid dimensions over its sweep points, in float64
    (exact enough against ``MAX_SIZE``, which leaves int64 room to spare; no integer product overflows)."""
    return math.prod(float(np.max(dim)) for dim in shape)


def graph_problems(graph: Graph, file: str = "<graph>") -> list[Problem]:
    """Everything wrong with a graph: bad kinds, dtypes, dimensions, counts, names, edges, cycles."""
    problems: list[Problem] = []

    def add(field_path: str, message: str) -> None:
        problems.append(Problem(file=file, line=None, field=field_path, message=message))

    seen: dict[str, int] = {}
    for position, op in enumerate(graph.ops):
        where = f"ops.{position}({op.name})"
        if not op.name:
            add(f"ops.{position}.name", "every op needs a name")
        elif op.name in seen:
            add(f"{where}.name", f"duplicate op name {op.name!r} (also op {seen[op.name]}); names must be unique")
        seen.setdefault(op.name, position)
        kind = OP_KIND_TABLE.get(op.kind)
        if kind is None:
            add(f"{where}.kind", f"unknown kind {op.kind!r}; allowed: {', '.join(OP_KIND_TABLE)}")
        else:  # typed attributes from the op-kind table, checked here so that a graph is whole when built
            for attr, message in kind.attribute_problems(op):
                add(f"{where}.attrs" if attr == "*" else f"{where}.attrs.{attr}", message)
        if not isinstance(op.count, int) or isinstance(op.count, bool) or not 1 <= op.count <= MAX_SIZE:
            add(f"{where}.count", f"count must be a positive integer of at most 2**62, got {op.count!r}")
        for group, tensors in (("inputs", op.inputs), ("outputs", op.outputs)):
            for slot, tensor in enumerate(tensors):
                path = f"{where}.{group}.{slot}"
                if tensor.dtype not in DTYPES:
                    add(f"{path}.dtype", f"unknown dtype {tensor.dtype!r}; allowed: {', '.join(DTYPES)}")
                if any(not _is_positive_dimension(dim) for dim in tensor.shape):
                    add(f"{path}.shape", "every dimension must be a positive integer of at most 2**62, got "
                                         f"{list(tensor.shape)}")
                elif _largest_numel(tensor.shape) > MAX_SIZE:
                    add(f"{path}.shape", f"{list(tensor.shape)} holds {_largest_numel(tensor.shape):.3g} elements; a "
                                         f"tensor holds at most 2**62 ({MAX_SIZE:.2g}), so that sizes stay exact")
                if tensor.role not in TENSOR_ROLES:
                    add(f"{path}.role", f"unknown role {tensor.role!r}; allowed: {', '.join(TENSOR_ROLES)}")
        if isinstance(op.attrs.get("dtype"), str) and op.attrs["dtype"] not in DTYPES:
            add(f"{where}.attrs.dtype", f"unknown dtype {op.attrs['dtype']!r}; allowed: {', '.join(DTYPES)}")
    for number, edge in enumerate(graph.edges):
        if len(edge) != 2:
            add(f"edges.{number}", f"an edge is [producer, consumer], got {list(edge)}")
            continue
        producer, consumer = edge
        missing = [name for name in edge if name not in seen]
        if missing:
            add(f"edges.{number}", f"edge names unknown op(s) {missing}")
        elif seen[producer] >= seen[consumer]:
            add(f"edges.{number}", f"edge {producer} -> {consumer} points backwards: ops are in execution order, "
                                   "so this makes a cycle (a consumer must come after its producer)")
    return problems


def require(condition: bool, message: str) -> None:
    if not condition:
        raise PerfmodelError(message)


def concatenate(graphs: Iterable[Graph], name: str = "concatenated") -> tuple[Graph, list[int]]:
    """One graph holding every op of ``graphs`` (names prefixed ``g<i>.``), and the index of the graph
    each op came from: lets many small measured workloads be evaluated in one vectorized call."""
    from dataclasses import replace

    ops: list[Op] = []
    edges: list[tuple[str, str]] = []
    owner: list[int] = []
    for index, graph in enumerate(graphs):
        prefix = f"g{index}."
        ops.extend(replace(op, name=prefix + op.name) for op in graph.ops)
        edges.extend((prefix + producer, prefix + consumer) for producer, consumer in graph.edges)
        owner.extend([index] * len(graph.ops))
    return Graph(name=name, ops=ops, edges=edges), owner
