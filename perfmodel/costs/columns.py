"""Columnar pricing: each cost rule runs once per group of alike ops, over arrays (pure core).

A graph's ops repeat a few shapes of work: every projection of a transformer is a matmul in the same
dtypes that differs from the others only in ``m``, ``n`` and ``k``. The cost rules broadcast over
array-valued dimensions (that is how a sweep is priced), so ops that differ only in numbers are
priced together: their numbers are stacked along a new first axis into one op, the op's rule runs
once, and each op takes its row of the result. The numbers are those of a rule run op by op (the same
formulas on the same float64 values; ``tests/test_columns.py`` checks it over the shipped workloads).

Two ops are alike when they are priced as the same kind (``rules.pricing_kind``), have the same
attribute names with the same non-numeric values (flags, text: they choose branches in the rules),
and tensors of the same dtypes, roles and ranks. Collectives are priced op by op (their group size
picks a topology's step count in Python), as is everything when the device itself is swept
(array-valued spec fields would broadcast against the stacking axis).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from perfmodel.costs.rules import CostContext, OpCost, op_cost, pricing_kind
from perfmodel.workload.ir import Op, TensorSpec

# Kinds whose rules branch in Python on a numeric value, so that alike ops cannot share one run.
PRICED_ONE_BY_ONE = frozenset({"collective"})
EXACT_INTEGER_LIMIT = 2.0**53
MAX_STACKED_POINTS = 4096  # beyond this a sweep's own arrays dominate and stacking only copies them
_COST_FIELDS = tuple(field.name for field in dataclasses.fields(OpCost))
_PLAIN_NUMBERS = frozenset({int, float})


def op_costs(ops: Sequence[Op], context: CostContext) -> tuple[OpCost, ...]:
    """The cost of every op of ``ops`` (one instance each), as ``rules.op_cost`` gives it op by op."""
    if context.hardware.is_swept:
        return tuple(op_cost(op, context) for op in ops)
    groups: dict[Hashable, list[int]] = {}
    for position, op in enumerate(ops):
        groups.setdefault(_likeness(op), []).append(position)
    costs: list[OpCost | None] = [None] * len(ops)
    for key, positions in groups.items():
        stacked = _stacked([ops[position] for position in positions]) if key is not None and len(positions) > 1 else None
        if stacked is None:
            # Alike ops with the very same numbers (a transformer's q, k, v and o projections over one
            # sweep's token counts) cost the same: priced once.
            priced: dict[Hashable, OpCost] = {}
            for position in positions:
                numbers = _numbers(ops[position]) if key is not None else None
                if numbers is None or numbers not in priced:
                    cost = op_cost(ops[position], context)
                    if numbers is not None:
                        priced[numbers] = cost
                costs[position] = cost if numbers is None else priced[numbers]
            continue
        for position, cost in zip(positions, _split(op_cost(stacked, context), len(positions)), strict=True):
            costs[position] = cost
    return tuple(cost for cost in costs if cost is not None)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating, np.ndarray)) and not isinstance(value, (bool, np.bool_))


def _likeness(op: Op) -> Hashable | None:
    """What two ops must share to be priced in one run (None: price this op alone)."""
    if op.kind in PRICED_ONE_BY_ONE:
        return None
    attrs: list[tuple[str, Any]] = []
    for name in sorted(op.attrs):
        value = op.attrs[name]
        if type(value) in _PLAIN_NUMBERS or _is_number(value):  # the common case first (cheap)
            attrs.append((name, "#"))
        elif isinstance(value, (str, bool, np.bool_)) or value is None:
            attrs.append((name, value))
        else:  # anything else (a list, a mapping) is not stacked
            return None
    return (pricing_kind(op), tuple(attrs), tuple([(tensor.dtype, tensor.role, len(tensor.shape)) for tensor in op.inputs]),
            tuple([(tensor.dtype, tensor.role, len(tensor.shape)) for tensor in op.outputs]))


def _numbers(op: Op) -> Hashable | None:
    """The numbers of an op (its numeric attributes and tensor dimensions), for ops of one likeness
    (``_likeness``): equal for ops that the rules price alike. An array stands by its identity (the
    same array object; the ops hold them while they are priced), a plain number by its value."""
    def number(value: Any) -> Hashable:
        if isinstance(value, np.ndarray):
            return ("array", id(value))
        return (type(value).__name__, value) if type(value) in _PLAIN_NUMBERS else ("other", id(value))

    attrs = tuple(number(value) for name, value in sorted(op.attrs.items()) if _is_number(value))
    dims = tuple(number(dim) for tensor in (*op.inputs, *op.outputs) for dim in tensor.shape)
    return (attrs, dims)


class _Unstackable(Exception):
    """Numbers that are not worth stacking or that float64 does not hold exactly: price the ops alone."""


def _as_arrays(values: Sequence[Any]) -> list[np.ndarray]:
    """The stack is float64, exact for integers up to 2**53; beyond that (or int64 wrap-around, which a
    product of sizes in an integer array risks) the ops are priced one by one, in Python integers."""
    arrays = [np.asarray(value) for value in values]
    if any(array.dtype == object or (array.size and np.abs(array).max() > EXACT_INTEGER_LIMIT) for array in arrays):
        raise _Unstackable
    return arrays


def _stacked(ops: Sequence[Op]) -> Op | None:
    """One op carrying ``ops``' numbers as columns (None if they are not stacked, see ``_as_arrays``).
    Every column has the shape (ops, *points), ``points`` the sweep shape all the numbers broadcast to,
    so that products of columns line up; large sweeps are left to the rules' own broadcasting."""
    first = ops[0]
    numbers = [name for name, value in first.attrs.items() if _is_number(value)]
    scalar = _scalar_stack(ops, numbers)
    if scalar is not None:
        return scalar
    sizes = [np.size(op.attrs[name]) for op in ops for name in numbers]
    sizes += [np.size(dim) for op in ops for tensor in (*op.inputs, *op.outputs) for dim in tensor.shape]
    if max(sizes, default=1) > MAX_STACKED_POINTS:  # a large sweep: leave it to the rules (before scanning it)
        return None
    try:
        attrs = {name: _as_arrays([op.attrs[name] for op in ops]) for name in numbers}
        shapes = {group: [[_as_arrays([getattr(op, group)[slot].shape[axis] for op in ops])
                           for axis in range(len(tensor.shape))] for slot, tensor in enumerate(getattr(first, group))]
                  for group in ("inputs", "outputs")}
        every = [array for arrays in attrs.values() for array in arrays]
        every += [array for slots in shapes.values() for axes in slots for arrays in axes for array in arrays]
        points = np.broadcast_shapes(*(array.shape for array in every))
        if math.prod(points) > MAX_STACKED_POINTS:
            raise _Unstackable
    except _Unstackable:
        return None

    def column(arrays: list[np.ndarray]) -> np.ndarray:
        return np.stack([np.broadcast_to(array.astype(float), points) for array in arrays])

    def tensors(group: str) -> tuple[TensorSpec, ...]:
        # float64 columns stand in for integer dimensions: the rules convert dimensions to float anyway.
        return tuple(TensorSpec(shape=tuple(column(arrays) for arrays in shapes[group][slot]),
                                dtype=tensor.dtype, role=tensor.role) for slot, tensor in enumerate(getattr(first, group)))

    merged = {name: column(attrs[name]) if name in attrs else value for name, value in first.attrs.items()}
    return Op(name=first.name, kind=first.kind, inputs=tensors("inputs"), outputs=tensors("outputs"), attrs=merged,
              count=1, provenance=first.provenance)


def _scalar_stack(ops: Sequence[Op], numbers: Sequence[str]) -> Op | None:
    """``_stacked`` for ops whose numbers are all plain scalars (no sweep): columns of shape (ops,),
    built straight from lists (the common case, and ~10x cheaper than broadcasting each value)."""
    first = ops[0]
    values = [[op.attrs[name] for op in ops] for name in numbers]
    for group in ("inputs", "outputs"):
        for slot, tensor in enumerate(getattr(first, group)):
            values += [[getattr(op, group)[slot].shape[axis] for op in ops] for axis in range(len(tensor.shape))]
    columns = []
    for row in values:
        # A sweep's array among the values makes the conversion fail or changes its shape: not scalars.
        try:
            column = np.array(row)
        except (TypeError, ValueError):
            return None
        # Python integers beyond int64 and traced numbers (``tracing``) make an object column.
        if column.shape != (len(ops),) or column.dtype == object or np.abs(column).max() > EXACT_INTEGER_LIMIT:
            return None
        columns.append(column.astype(float))
    attrs = dict(first.attrs)
    attrs.update(zip(numbers, columns[:len(numbers)], strict=True))
    remaining = iter(columns[len(numbers):])

    def tensors(group: str) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(shape=tuple(next(remaining) for _ in tensor.shape), dtype=tensor.dtype,
                                role=tensor.role) for tensor in getattr(first, group))

    inputs = tensors("inputs")
    return Op(name=first.name, kind=first.kind, inputs=inputs, outputs=tensors("outputs"), attrs=attrs, count=1,
              provenance=first.provenance)


def _rows(value: Any, rows: int) -> list[Any] | None:
    """Each row's part of a rule's result for stacked ops, or None where all rows share it. Every array
    a rule returns for stacked ops carries the stacking axis first (the device is not swept, so nothing
    else is array-valued)."""
    if isinstance(value, np.ndarray) and value.ndim and value.shape[0] == rows:
        return value.tolist() if value.ndim == 1 else list(value)
    if isinstance(value, tuple):
        parts = [_rows(item, rows) for item in value]
        if all(part is None for part in parts):
            return None
        columns = [[item] * rows if part is None else part for item, part in zip(value, parts, strict=True)]
        return list(zip(*columns, strict=True))
    return None


def _split(cost: OpCost, rows: int) -> list[OpCost]:
    """The stacked ops' costs, one per op."""
    every = {name: getattr(cost, name) for name in _COST_FIELDS}
    per_row = {name: parts for name in _COST_FIELDS if (parts := _rows(every[name], rows)) is not None}
    costs = []
    for row in range(rows):
        # Every field of the frozen record set at once, as its __init__ would with all of them given
        # (OpCost has no __post_init__): 16 field assignments each through object.__setattr__ cost
        # ~3 us an op, half of a 1,000-op evaluation.
        fields = dict(every)
        fields.update({name: parts[row] for name, parts in per_row.items()})
        split = object.__new__(OpCost)
        split.__dict__.update(fields)
        costs.append(split)
    return costs
