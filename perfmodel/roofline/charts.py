"""Chart data for rooflines, computed by pure functions (drawing lives in ``perfmodel.plotting``).

* **Classic roofline** of a device, dtype and memory level: attainable FLOP/s =
  ``min(peak, intensity x bandwidth)``; the ridge point is ``peak / bandwidth`` FLOP/byte.
* **Hierarchical roofline** (as Nsight Compute draws it): one bandwidth roof per memory level; each op
  is plotted once per level at its intensity for that level (FLOPs / bytes moved at that level),
  always at the same achieved FLOP/s.
* **Scheduling-aware roofline**: the third ceiling. An op launched as ``launches`` kernels, each
  costing ``t`` seconds of launch/dispatch/orchestration, cannot exceed ``FLOPs / (launches x t)``
  FLOP/s. Plotted against *granularity* (FLOPs per launch, x axis), that ceiling is the diagonal
  ``granularity / t``, and it meets the compute roof at ``peak x t`` FLOPs per launch: ops left of
  that ridge are scheduling-bound however fast the device. ``t`` is the spec's per-kernel cost in the
  evaluated mode (kernel launch in dynamic mode, per-node cost in graph mode, the program launch for
  static programs, whose one launch covers every op). A second, device-side ceiling comes from the
  kernel's fixed time ``t0`` (start-up and tail, spec ``kernel_fixed_time``): ``F / (F/peak + t0)``,
  which binds even when the host is not the limit (CUDA graphs, static programs).

Every op point carries its achieved FLOP/s = useful FLOPs / predicted time, its share of the total
time (marker size) and its bound (colour). Points never lie above the roofs they are drawn under.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import SIValue, execution_model
from perfmodel.hardware.model import Hardware, MemoryLevel
from perfmodel.roofline.results import Evaluation

DTYPE_FALLBACKS = ("bf16", "fp16", "fp32")


@dataclass(frozen=True, kw_only=True)
class Roof:
    label: str
    bandwidth_bytes_per_s: SIValue  # spec values: SIValues (see hardware.model)
    ridge_flop_per_byte: SIValue


@dataclass(frozen=True, kw_only=True)
class OpPoint:
    name: str
    kind: str
    bound: str
    level: str
    intensity_flop_per_byte: float
    achieved_flops_per_s: float
    time_share: float
    granularity_flops_per_launch: float = 0.0


@dataclass(frozen=True, kw_only=True)
class RooflineData:
    hardware: str
    dtype: str
    peak_flops_per_s: SIValue
    roofs: tuple[Roof, ...]
    points: tuple[OpPoint, ...] = ()
    launch_s: float = 0.0
    kernel_fixed_s: float = 0.0   # device-side fixed time per kernel: a second, device-side ceiling

    @property
    def ridge_flop_per_byte(self) -> SIValue:
        """Ridge of the outermost roof (the first roof is the outermost level)."""
        return self.roofs[0].ridge_flop_per_byte

    def attainable_flops_per_s(self, intensity_flop_per_byte: float, roof: int = 0) -> SIValue:
        return min(self.peak_flops_per_s, intensity_flop_per_byte * self.roofs[roof].bandwidth_bytes_per_s)

    @property
    def scheduling_ridge_flops_per_launch(self) -> SIValue:
        return self.peak_flops_per_s * self.launch_s

    def kernel_ceiling_flops_per_s(self, granularity_flops: ArrayLike) -> SIValue:
        """The device-side ceiling: a kernel of F FLOPs takes at least ``F / peak + kernel_fixed_s``,
        so it reaches at most ``F / (F / peak + t0)``, half the peak at ``F = peak x t0``."""
        granularity_flops = np.asarray(granularity_flops, dtype=float)
        return granularity_flops / (granularity_flops / self.peak_flops_per_s + self.kernel_fixed_s)


def chart_dtype(hardware: Hardware, dtype: str | None, evaluation: Evaluation | None = None) -> str:
    """The dtype whose peak is the compute roof: asked for, else the most common in the evaluation."""
    candidates = [dtype] if dtype else []
    if evaluation is not None:
        counts: dict[str, float] = {}
        for op in evaluation.ops:
            if op.flops:
                counts[op.dtype] = counts.get(op.dtype, 0.0) + op.total_s
        candidates += sorted(counts, key=lambda name: -counts[name])
    for candidate in [*candidates, *DTYPE_FALLBACKS]:
        if hardware.peak_flops_per_s(candidate) > 0:
            return candidate
    raise PerfmodelError(f"{hardware.name} has no peak for {dtype or 'any of ' + ', '.join(DTYPE_FALLBACKS)}")


def _level(hardware: Hardware, level: str | None) -> MemoryLevel:
    if level is None:
        return hardware.outermost_on_device
    return hardware.level(level)


def launch_cost_s(hardware: Hardware, mode: str) -> float:
    """The launch ceiling of a mode: per kernel where the mode pays per kernel, else per program."""
    return float(execution_model(mode).launch_ceiling_s(hardware.scheduling.modes[mode]))


def _points(evaluation: Evaluation, levels: list[str]) -> tuple[OpPoint, ...]:
    """One point per op and level it moves bytes at. An op with FLOPs that moves nothing at any of
    ``levels`` (its data stays in an inner cache, or it is fused away from the outer level) still
    takes time: it gets one point at infinite intensity on the innermost of ``levels``, which the
    charts draw at their right edge, so that no op's time goes missing from a chart."""
    total = evaluation.total_s or 1.0
    points = []
    for op in evaluation.ops:
        if op.flops <= 0 or op.total_s <= 0:
            continue
        achieved = op.flops / op.total_s
        granularity = op.flops / op.launches if op.launches else 0.0
        moved_levels = [level for level in levels if op.bytes.get(level, 0.0) > 0]
        for level in moved_levels or levels[-1:]:
            moved = op.bytes.get(level, 0.0)
            points.append(OpPoint(name=op.name, kind=op.kind, bound=op.bound, level=level,
                                  intensity_flop_per_byte=op.flops / moved if moved > 0 else math.inf,
                                  achieved_flops_per_s=achieved, time_share=op.total_s / total,
                                  granularity_flops_per_launch=granularity))
    return tuple(points)


def classic_roofline(hardware: Hardware, evaluation: Evaluation | None = None, *, dtype: str | None = None,
                     level: str | None = None) -> RooflineData:
    dtype = chart_dtype(hardware, dtype, evaluation)
    peak = hardware.peak_flops_per_s(dtype)
    memory = _level(hardware, level)
    roof = Roof(label=memory.name, bandwidth_bytes_per_s=memory.bandwidth_bytes_per_s,
                ridge_flop_per_byte=peak / memory.bandwidth_bytes_per_s)
    points = () if evaluation is None else _points(evaluation, [memory.name])
    return RooflineData(hardware=hardware.name, dtype=dtype, peak_flops_per_s=peak, roofs=(roof,), points=points)


def hierarchical_roofline(hardware: Hardware, evaluation: Evaluation | None = None, *,
                          dtype: str | None = None) -> RooflineData:
    """One roof per level, outermost first (the lowest roof is the outermost, slowest level)."""
    dtype = chart_dtype(hardware, dtype, evaluation)
    peak = hardware.peak_flops_per_s(dtype)
    levels = [level for level in reversed(hardware.memory)]
    roofs = tuple(Roof(label=level.name, bandwidth_bytes_per_s=level.bandwidth_bytes_per_s,
                       ridge_flop_per_byte=peak / level.bandwidth_bytes_per_s) for level in levels)
    points = () if evaluation is None else _points(evaluation, [level.name for level in levels])
    return RooflineData(hardware=hardware.name, dtype=dtype, peak_flops_per_s=peak, roofs=roofs, points=points)


def scheduling_roofline(hardware: Hardware, evaluation: Evaluation, *, dtype: str | None = None) -> RooflineData:
    """Compute roof plus the scheduling ceiling ``granularity / launch_s`` (see the module docstring)."""
    data = classic_roofline(hardware, evaluation, dtype=dtype)
    points = data.points
    if execution_model(evaluation.mode).fuses and evaluation.flops_total > 0 and evaluation.total_s > 0:
        # One program launch covers every op: the whole program is the point that meets that ceiling
        # (a program without FLOPs or time has no point on a FLOP/s chart, as an op has none: _points).
        flops = evaluation.flops_total
        points = (*points, OpPoint(name="<whole program>", kind="program", bound=evaluation.bound,
                                   level=data.roofs[0].label, intensity_flop_per_byte=0.0,
                                   achieved_flops_per_s=flops / evaluation.total_s, time_share=1.0,
                                   granularity_flops_per_launch=flops))
    launch = launch_cost_s(hardware, evaluation.mode)
    engines = [engine for engine in hardware.compute.values() if engine.peak_flops_per_s.get(data.dtype, 0) > 0]
    fixed = max((engine.kernel_fixed_s for engine in engines), default=0.0)
    return RooflineData(hardware=data.hardware, dtype=data.dtype, peak_flops_per_s=data.peak_flops_per_s,
                        roofs=data.roofs, points=points, launch_s=launch, kernel_fixed_s=fixed)


class _MeasuredRequired(TypedDict):
    name: str
    flops: float
    bytes: float
    duration_s: float


class MeasuredRecord(_MeasuredRequired, total=False):
    """One measured op (SI units), as ``perfmodel roofline --measured`` reads it from a CSV row."""

    kind: str


def measured_points(records: Sequence[MeasuredRecord], level: str) -> tuple[OpPoint, ...]:
    """Points from measurement records with ``name``, ``flops``, ``bytes`` and ``duration_s``."""
    total = sum(record["duration_s"] for record in records) or 1.0
    return tuple(OpPoint(name=record["name"], kind=record.get("kind", "measured"), bound="measured", level=level,
                         intensity_flop_per_byte=record["flops"] / record["bytes"],
                         achieved_flops_per_s=record["flops"] / record["duration_s"],
                         time_share=record["duration_s"] / total)
                 for record in records if record["flops"] > 0 and record["bytes"] > 0 and record["duration_s"] > 0)
