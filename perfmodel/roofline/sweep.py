"""Design-space sweeps evaluated as numpy arrays, not a Python loop per point.

A sweep is a grid over scenario axes (arguments of a graph builder, e.g. ``batch`` and ``seq`` of
``transformer_block``) and spec axes (dotted spec fields in SI units, e.g.
``memory.hbm.bandwidth``, ``memory.lx.capacity``, ``compute.tensor_cores.peak.bf16``,
``scheduling.modes.dynamic.kernel_launch``). The grid is flattened into arrays; the builder makes
one graph whose dimensions are arrays, the spec fields become arrays, and one evaluation computes
every point. Large grids run in chunks (``chunk_points``) so memory stays bounded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import SIValue
from perfmodel.hardware.model import MODE_FIELDS, Hardware
from perfmodel.roofline.arrays import DATASHEET, Overlap, Parameters, bound_labels, evaluate_arrays
from perfmodel.units import DIMENSIONS
from perfmodel.workload.ir import Graph

# The spec fields a sweep varies: YAML field name -> record attribute. Only fields some cost rule reads
# are offered (a memory level's ``latency`` is documentation: no rule reads it, so sweeping it would
# change nothing). Each value is checked by the spec schema as ``--set`` would check it
# (``sweep_value_problems``), and ``tests/test_registries.py`` checks that ``--set`` and ``--grid``
# give the same result for every field.
LEVEL_FIELDS = {"bandwidth": "bandwidth_bytes_per_s", "capacity": "capacity_bytes"}
# The values of one grid axis: numbers, as a sequence or a numpy array.
AxisValues = Sequence[float] | np.ndarray
SPEC_AXIS_DIMENSIONS = {"bandwidth": "bytes_per_s", "capacity": "bytes", "peak": "flops_per_s",
                        **{field: "seconds" for field in MODE_FIELDS}}


def spec_axis_dimension(path: str) -> str:
    """The unit dimension of a dotted spec field that sweeps accept."""
    parts = path.split(".")
    key = "peak" if len(parts) >= 3 and parts[0] == "compute" and parts[2] == "peak" else parts[-1]
    if key not in SPEC_AXIS_DIMENSIONS or (parts[0] == "memory" and key not in LEVEL_FIELDS):
        raise PerfmodelError(f"cannot sweep {path!r}; sweepable fields: memory.<level>.bandwidth|capacity, "
                             "compute.<engine>.peak.<dtype>, scheduling.modes.<mode>.<overhead>")
    return SPEC_AXIS_DIMENSIONS[key]


def as_override(path: str, value: float) -> str:
    """An SI value of a sweepable field as the text ``--set`` takes (exact: ``repr`` keeps every digit)."""
    return f"{value!r} {DIMENSIONS[spec_axis_dimension(path)].unit}"


def hardware_with(hardware: Hardware, values: Mapping[str, SIValue]) -> Hardware:
    """A copy of ``hardware`` with dotted fields set to SI values (scalars or arrays)."""
    for path, value in values.items():
        parts = path.split(".")
        try:
            if parts[0] == "memory" and len(parts) == 3 and parts[2] in LEVEL_FIELDS:
                levels = list(hardware.memory)
                index = [level.name for level in levels].index(parts[1])
                level = levels[index]
                changes = {LEVEL_FIELDS[parts[2]]: value}
                if parts[2] == "capacity" and level.usable_capacity_bytes is not None:
                    changes["usable_capacity_bytes"] = value * (level.usable_capacity_bytes / level.capacity_bytes)
                # The field is named at run time (LEVEL_FIELDS), so mypy checks the value against every
                # field of MemoryLevel; the named ones are all SIValues.
                levels[index] = dataclasses.replace(level, **changes)  # type: ignore[arg-type]
                hardware = dataclasses.replace(hardware, memory=tuple(levels))
            elif parts[0] == "compute" and len(parts) == 4 and parts[2] == "peak":
                engine = hardware.compute[parts[1]]
                peaks = {**engine.peak_flops_per_s, parts[3]: value}
                compute = {**hardware.compute, parts[1]: dataclasses.replace(engine, peak_flops_per_s=peaks)}
                hardware = dataclasses.replace(hardware, compute=compute)
            elif parts[:2] == ["scheduling", "modes"] and len(parts) == 4 and parts[3] in MODE_FIELDS:
                # As above: MODE_FIELDS names the field at run time; every one it names is an SIValue.
                mode = dataclasses.replace(hardware.scheduling.modes[parts[2]],
                                           **{MODE_FIELDS[parts[3]]: value})  # type: ignore[arg-type]
                scheduling = dataclasses.replace(hardware.scheduling, modes={**hardware.scheduling.modes, parts[2]: mode})
                hardware = dataclasses.replace(hardware, scheduling=scheduling)
            else:
                raise KeyError(path)
        except (KeyError, ValueError):
            spec_axis_dimension(path)
            raise PerfmodelError(f"{hardware.name} has no field {path!r} (see 'perfmodel specs show "
                                 f"{hardware.name}')") from None
    return hardware


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """Flattened grid: ``points`` (axis -> values), total time and time per bound at every point."""

    points: dict[str, np.ndarray]
    total_s: np.ndarray
    time_by_bound: dict[str, np.ndarray]

    @property
    def size(self) -> int:
        return int(self.total_s.size)

    @property
    def bound(self) -> np.ndarray:
        names = list(self.time_by_bound)
        bounds: np.ndarray = np.asarray(names)[np.argmax(np.stack([self.time_by_bound[name] for name in names]), axis=0)]
        return bounds

    def to_columns(self) -> dict[str, np.ndarray]:
        """Column name -> array, ready for ``pandas.DataFrame(result.to_columns())``."""
        columns = {**self.points, "total_s": self.total_s}
        columns.update({f"time_s:{name}": values for name, values in self.time_by_bound.items()})
        columns["bound"] = self.bound
        return columns


def sweep(build: Callable[..., Graph], hardware: Hardware, scenario: Mapping[str, AxisValues] | None = None,
          spec: Mapping[str, AxisValues] | None = None, *, mode: str | None = None, overlap: Overlap = "max",
          parameters: Parameters = DATASHEET, chunk_points: int = 250_000,
          progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Evaluate ``build(**scenario point)`` on ``hardware`` with ``spec`` fields, over the full grid."""
    scenario, spec = dict(scenario or {}), dict(spec or {})
    axes = {**scenario, **spec}
    if not axes:
        raise PerfmodelError("a sweep needs at least one axis")
    grids = np.meshgrid(*[np.asarray(values) for values in axes.values()], indexing="ij")
    flat = {name: grid.ravel() for name, grid in zip(axes, grids, strict=True)}
    size = next(iter(flat.values())).size
    totals: list[np.ndarray] = []
    by_bound: dict[str, list[np.ndarray]] = {}
    labels = None
    for start in range(0, size, chunk_points):
        stop = min(start + chunk_points, size)
        chunk = {name: values[start:stop] for name, values in flat.items()}
        graph = build(**{name: chunk[name] for name in scenario})
        variant = hardware_with(hardware, {name: chunk[name] for name in spec})
        arrays = evaluate_arrays(graph, variant, mode=mode, overlap=overlap, parameters=parameters)
        total = arrays.total_s.sum(axis=0) + arrays.program_s
        totals.append(np.broadcast_to(total, (stop - start,)))
        labels = bound_labels(arrays.level_names)
        for index, label in enumerate(labels):
            share = np.where(arrays.bound_index == index, arrays.total_s, 0.0).sum(axis=0)
            if label == "scheduling":
                share = share + arrays.program_s
            by_bound.setdefault(label, []).append(np.broadcast_to(share, (stop - start,)))
        if progress is not None:
            progress(stop, size)
    return SweepResult(points=flat, total_s=np.concatenate(totals),
                       time_by_bound={label: np.concatenate(parts) for label, parts in by_bound.items()})


def grid_size(axes: Mapping[str, AxisValues]) -> int:
    return int(np.prod([len(values) for values in axes.values()])) if axes else 0


__all__ = ["SweepResult", "as_override", "grid_size", "hardware_with", "spec_axis_dimension", "sweep"]
