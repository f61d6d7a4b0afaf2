"""Results as frozen records: ``OpTiming`` per op and ``Evaluation`` for a workload on a device.

``evaluate(graph, hardware)`` is the public verb. Times are seconds, bytes bytes, FLOPs FLOPs;
each ``OpTiming`` already includes its op's ``count``. ``Evaluation`` sums, groups by bound and by
module, lists ops that had no cost rule (``unsupported``), and exports to pandas, CSV and JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import Hardware
from perfmodel.jsonable import to_jsonable
from perfmodel.roofline.arrays import (
    DATASHEET,
    PROGRAM_LAUNCH_NAME,
    ArrayEvaluation,
    Overlap,
    Parameters,
    bound_labels,
    evaluate_arrays,
)
from perfmodel.workload.ir import Graph


@dataclass(frozen=True, kw_only=True)
class OpTiming:
    """One op's prediction. ``bytes`` and ``memory_s`` map level name -> value."""

    name: str
    kind: str
    module: str
    count: int
    engine: str
    dtype: str
    flops: float
    executed_flops: float
    bytes: Mapping[str, float]
    compute_s: float
    memory_s: Mapping[str, float]
    link_s: float
    scheduling_s: float
    total_s: float
    bound: str
    kernel: str
    launches: float
    estimated: bool = False
    fixed_s: float = 0.0          # device-side fixed time of the kernel (start-up and tail)
    kernel_shape: str = ""        # the matmul kernel the engine chose among its candidates

    def __post_init__(self) -> None:
        for name in ("bytes", "memory_s"):
            value = getattr(self, name)
            if type(value) is not MappingProxyType:  # to_evaluation passes its own read-only copies
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    @property
    def padding_ratio(self) -> float:
        """FLOPs executed (padded to the engine's tile, quantized into waves) over useful FLOPs."""
        return self.executed_flops / self.flops if self.flops else 1.0


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """A workload's prediction on one device in one execution mode."""

    workload: str
    hardware: str
    mode: str
    overlap: str
    parameters: str
    ops: tuple[OpTiming, ...]
    weights_resident: bool
    weight_bytes: float = 0.0
    on_device_bytes: float = 0.0
    has_external_store: bool = False

    @property
    def total_s(self) -> float:
        return float(sum(op.total_s for op in self.ops))

    @property
    def flops_total(self) -> float:
        return float(sum(op.flops for op in self.ops))

    def _grouped(self, key: Callable[[OpTiming], str]) -> dict[str, float]:
        groups: dict[str, float] = {}
        for op in self.ops:
            groups[key(op)] = groups.get(key(op), 0.0) + op.total_s
        return dict(sorted(groups.items(), key=lambda item: -item[1]))

    @property
    def time_by_bound(self) -> dict[str, float]:
        return self._grouped(lambda op: op.bound)

    @property
    def time_by_module(self) -> dict[str, float]:
        return self._grouped(lambda op: op.module)

    @property
    def time_by_kind(self) -> dict[str, float]:
        return self._grouped(lambda op: op.kind)

    @property
    def unsupported(self) -> dict[str, int]:
        """Ops estimated without a cost rule: kind/provenance -> count."""
        result: dict[str, int] = {}
        for op in self.ops:
            if op.estimated:
                key = op.kind if op.kind != "other" else f"other:{op.name}"
                result[key] = result.get(key, 0) + op.count
        return result

    @property
    def fits(self) -> bool:
        """Whether the weights fit on the device, or can be streamed from an external store
        (``costs.residency``: a graph alone keeps nothing else on the device)."""
        return self.weights_resident or self.has_external_store

    @property
    def bound(self) -> str:
        """The bound that accounts for most of the time."""
        return next(iter(self.time_by_bound))

    @property
    def kernels(self) -> int:
        return len({op.kernel for op in self.ops if op.kind != "launch"})

    def to_dict(self) -> dict[str, Any]:  # JSON-ready values of every kind
        """The ``perfmodel predict --json`` contract."""
        # perfmodel.jsonable is outside the typed core (to_jsonable is unannotated), hence its ignores here.
        return {
            "workload": self.workload, "hardware": self.hardware, "mode": self.mode, "overlap": self.overlap,
            "parameters": self.parameters, "total_s": self.total_s, "flops_total": self.flops_total,
            "time_by_bound": self.time_by_bound, "time_by_module": self.time_by_module,
            "unsupported": self.unsupported, "weights_resident": self.weights_resident, "fits": self.fits,
            "weight_bytes": self.weight_bytes, "on_device_bytes": self.on_device_bytes,
            "ops": [to_jsonable(op) for op in self.ops],  # type: ignore[no-untyped-call]
        }

    def rows(self) -> list[dict[str, Any]]:
        """One flat record per op, ready for ``pandas.DataFrame(evaluation.rows())``; levels become
        ``bytes:<level>`` and ``memory_s:<level>`` columns (the pure core does not import pandas)."""
        rows = []
        for op in self.ops:
            record = to_jsonable(op)  # type: ignore[no-untyped-call]  # unannotated, as in to_dict()
            row = {key: value for key, value in record.items() if key not in ("bytes", "memory_s")}
            row.update({f"bytes:{level}": value for level, value in op.bytes.items()})
            row.update({f"memory_s:{level}": value for level, value in op.memory_s.items()})
            rows.append(row)
        return rows


def evaluate(graph: Graph, hardware: Hardware, *, mode: str | None = None, overlap: Overlap = "max",
             parameters: Parameters = DATASHEET, fuse: bool | None = None) -> Evaluation:
    """Predict ``graph`` on ``hardware`` (scalar workloads; use ``sweep`` for array-valued ones)."""
    arrays = evaluate_arrays(graph, hardware, mode=mode, overlap=overlap, parameters=parameters, fuse=fuse)
    if arrays.total_s.ndim != 1:
        raise PerfmodelError("this workload has array-valued dimensions: use perfmodel.sweep for it")
    return to_evaluation(graph, arrays, arrays.parameters.label)


def to_evaluation(graph: Graph, arrays: ArrayEvaluation, parameters_name: str) -> Evaluation:
    levels = arrays.level_names
    labels = bound_labels(levels)
    timings = []
    # Python floats for every op at once (one conversion per array, not one per value).
    flops, executed, compute_s, link_s, scheduling_s, total_s, fixed_s, bound_index = (
        values.tolist() for values in (arrays.flops, arrays.executed_flops, arrays.compute_s, arrays.link_s,
                                       arrays.scheduling_s, arrays.total_s, arrays.fixed_s, arrays.bound_index))
    bytes_by_op = [MappingProxyType(dict(zip(levels, values, strict=True))) for values in arrays.bytes_by_level.T.tolist()]
    memory_by_op = [MappingProxyType(dict(zip(levels, values, strict=True))) for values in arrays.memory_s.T.tolist()]
    for position, (op, cost) in enumerate(zip(graph.ops, arrays.costs, strict=True)):
        label = labels[int(bound_index[position])]
        if label == "link":
            label = f"link:{cost.link}"
        anchor = graph.ops[arrays.fusion.group_of[position]].name
        timings.append(OpTiming(
            name=op.name, kind=op.kind, module=op.module, count=op.count, engine=cost.engine, dtype=cost.peak_dtype,
            flops=flops[position], executed_flops=executed[position], bytes=bytes_by_op[position],
            compute_s=compute_s[position], memory_s=memory_by_op[position], link_s=link_s[position],
            scheduling_s=scheduling_s[position], total_s=total_s[position], bound=label, kernel=anchor,
            launches=float(cost.launches * op.count * (anchor == op.name)), estimated=cost.estimated,
            fixed_s=fixed_s[position], kernel_shape=str(cost.kernel or "")))
    program_s = float(np.asarray(arrays.program_s))
    if program_s > 0:
        timings.append(OpTiming(
            name=PROGRAM_LAUNCH_NAME, kind="launch", module=PROGRAM_LAUNCH_NAME, count=1, engine="host", dtype="",
            flops=0.0, executed_flops=0.0, bytes={level: 0.0 for level in levels}, compute_s=0.0,
            memory_s={level: 0.0 for level in levels}, link_s=0.0, scheduling_s=program_s, total_s=program_s,
            bound="scheduling", kernel=PROGRAM_LAUNCH_NAME, launches=1.0))
    return Evaluation(workload=graph.name, hardware=arrays.hardware.name, mode=arrays.mode, overlap=arrays.overlap,
                      parameters=parameters_name, ops=tuple(timings), weights_resident=arrays.weights_resident,
                      weight_bytes=float(arrays.weight_bytes), on_device_bytes=float(arrays.on_device_bytes),
                      has_external_store=any(level.off_device for level in arrays.hardware.memory))
