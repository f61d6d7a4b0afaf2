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
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.fanout import Mapper, serial_map
from perfmodel.hardware.execution_models import SIValue
from perfmodel.hardware.model import MODE_FIELDS, Hardware
from perfmodel.roofline.arrays import DATASHEET, ArrayEvaluation, Overlap, Parameters, bound_labels, evaluate_arrays
from perfmodel.uncertainty import parameter_bands
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
SPREAD_NAMES = ("parameter_spread_low", "parameter_spread_high")  # a kept chunk's spread arrays
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
    """Flattened grid: ``points`` (axis -> values), total time and time per bound at every point; with
    parameter sets (``SweepPlan.parameter_sets``), each point's ``parameter_spread``: the (low, high)
    central quantiles at ``SweepPlan.confidence`` of ``log(total at a set / total)`` over the sets
    (``uncertainty.parameter_bands``)."""

    points: dict[str, np.ndarray]
    total_s: np.ndarray
    time_by_bound: dict[str, np.ndarray]
    parameter_spread: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def size(self) -> int:
        return int(self.total_s.size)

    @property
    def bound(self) -> np.ndarray:
        names = list(self.time_by_bound)
        bounds: np.ndarray = np.asarray(names)[np.argmax(np.stack([self.time_by_bound[name] for name in names]), axis=0)]
        return bounds

    def computed(self) -> dict[str, np.ndarray]:
        """What evaluating the points computed: ``total_s`` and ``time_s:<bound>`` arrays (the points and
        each point's bound follow from the plan and these: ``SweepPlan.restore``), e.g. to keep on disk."""
        spread = {} if self.parameter_spread is None else dict(zip(SPREAD_NAMES, self.parameter_spread, strict=True))
        return {"total_s": self.total_s, **{f"time_s:{name}": values for name, values in self.time_by_bound.items()},
                **spread}

    def to_columns(self) -> dict[str, np.ndarray]:
        """Column name -> array, ready for ``pandas.DataFrame(result.to_columns())``."""
        columns = {**self.points, "total_s": self.total_s}
        columns.update({f"time_s:{name}": values for name, values in self.time_by_bound.items()})
        columns["bound"] = self.bound
        return columns


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    """A grid to evaluate in chunks of ``chunk_points`` points: ``evaluate((start, stop))`` computes the
    points ``start:stop`` of the flattened grid (C order over ``scenario`` then ``spec`` axes) from the
    axis values alone, so a chunk is a self-contained piece of work (for another process or machine)
    and no chunk holds more than its own points."""

    build: Callable[..., Graph]
    hardware: Hardware
    scenario: dict[str, np.ndarray]
    spec: dict[str, np.ndarray]
    mode: str | None = None
    overlap: Overlap = "max"
    # None: the spec's own parameters (``DATASHEET``, a sentinel compared by identity, does not survive
    # the pickling that ships a plan to another process, so the plan does not hold it).
    parameters: Parameters | None = None
    chunk_points: int = 250_000
    # Parameter uncertainty: every chunk is evaluated again at each of these sets (drawn from a fit's
    # covariance: ``uncertainty.fit_samples``) and keeps each point's spread at ``confidence``.
    parameter_sets: tuple[Parameters, ...] = ()
    confidence: float = 0.8

    @property
    def axes(self) -> dict[str, np.ndarray]:
        return {**self.scenario, **self.spec}

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(values) for values in self.axes.values())

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def spans(self) -> list[tuple[int, int]]:
        """The chunks, as (start, stop) of the flattened grid."""
        return [(start, min(start + self.chunk_points, self.size)) for start in range(0, self.size, self.chunk_points)]

    def points(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Axis -> value at every point ``start:stop`` of the flattened grid."""
        indices = np.unravel_index(np.arange(start, stop), self.shape)
        return {name: values[index] for (name, values), index in zip(self.axes.items(), indices, strict=True)}

    def evaluate(self, span: tuple[int, int]) -> SweepResult:
        start, stop = span
        chunk = self.points(start, stop)
        graph = self.build(**{name: chunk[name] for name in self.scenario})
        variant = hardware_with(self.hardware, {name: chunk[name] for name in self.spec})
        arrays = evaluate_arrays(graph, variant, mode=self.mode, overlap=self.overlap,
                                 parameters=DATASHEET if self.parameters is None else self.parameters)
        total = np.broadcast_to(_total_s(arrays), (stop - start,))
        by_bound: dict[str, np.ndarray] = {}
        for index, label in enumerate(bound_labels(arrays.level_names)):
            share = np.where(arrays.bound_index == index, arrays.total_s, 0.0).sum(axis=0)
            if label == "scheduling":
                share = share + arrays.program_s
            by_bound[label] = np.broadcast_to(share, (stop - start,))
        spread = None
        if self.parameter_sets:  # the same graph (every point at once) at each set
            sampled = np.stack([np.broadcast_to(_total_s(evaluate_arrays(graph, variant, mode=self.mode,
                                                                         overlap=self.overlap, parameters=parameters)),
                                                (stop - start,)) for parameters in self.parameter_sets])
            spread = parameter_bands(total, sampled, self.confidence)
        return SweepResult(points=chunk, total_s=total, time_by_bound=by_bound, parameter_spread=spread)


    def restore(self, span: tuple[int, int], computed: Mapping[str, np.ndarray]) -> SweepResult:
        """The result ``evaluate(span)`` gave, from its ``SweepResult.computed()`` arrays: the same
        arrays, so the same table to the last bit."""
        start, stop = span
        sizes = {int(np.shape(values)[0]) if np.ndim(values) == 1 else -1 for values in computed.values()}
        if "total_s" not in computed or sizes != {stop - start}:
            raise PerfmodelError(f"the kept chunk of points {start}:{stop} holds {sorted(computed)} of lengths "
                                 f"{sorted(sizes)}, not the total_s and time_s:* arrays of {stop - start} points")
        spread = tuple(np.asarray(computed[name]) for name in SPREAD_NAMES) if SPREAD_NAMES[0] in computed else None
        if (spread is None) != (not self.parameter_sets):
            raise PerfmodelError(f"the kept chunk of points {start}:{stop} was computed "
                                 f"{'without' if spread is None else 'with'} parameter sets, this plan "
                                 f"{'has' if self.parameter_sets else 'has none'}")
        return SweepResult(points=self.points(start, stop), total_s=np.asarray(computed["total_s"]),
                           time_by_bound={name.removeprefix("time_s:"): np.asarray(values)
                                          for name, values in computed.items() if name.startswith("time_s:")},
                           parameter_spread=spread)  # type: ignore[arg-type]


def _total_s(arrays: ArrayEvaluation) -> np.ndarray:
    """An evaluation's total time at every point: its ops and its program launch."""
    total: np.ndarray = arrays.total_s.sum(axis=0) + arrays.program_s
    return total


def sweep_plan(build: Callable[..., Graph], hardware: Hardware, scenario: Mapping[str, AxisValues] | None = None,
               spec: Mapping[str, AxisValues] | None = None, *, mode: str | None = None, overlap: Overlap = "max",
               parameters: Parameters = DATASHEET, chunk_points: int = 250_000,
               parameter_sets: Sequence[Parameters] = (), confidence: float = 0.8) -> SweepPlan:
    scenario, spec = dict(scenario or {}), dict(spec or {})
    if not scenario and not spec:
        raise PerfmodelError("a sweep needs at least one axis")
    if chunk_points < 1:
        raise PerfmodelError(f"chunk_points must be at least 1, got {chunk_points}")
    return SweepPlan(build=build, hardware=hardware, scenario={k: np.asarray(v) for k, v in scenario.items()},
                     spec={k: np.asarray(v) for k, v in spec.items()}, mode=mode, overlap=overlap,
                     parameters=None if parameters is DATASHEET else parameters, chunk_points=chunk_points,
                     parameter_sets=tuple(parameter_sets), confidence=confidence)


def sweep_chunks(plan: SweepPlan, mapper: Mapper = serial_map) -> Iterator[SweepResult]:
    """Every chunk's result, in order (``mapper`` decides where they are computed: ``perfmodel.fanout``)."""
    return mapper(plan.evaluate, plan.spans())


def concatenate(parts: Sequence[SweepResult]) -> SweepResult:
    """Chunks' results as one."""
    if not parts:
        raise PerfmodelError("no sweep chunk to join")
    spreads = [part.parameter_spread for part in parts]
    spread = None if any(item is None for item in spreads) else (
        np.concatenate([item[0] for item in spreads]), np.concatenate([item[1] for item in spreads]))  # type: ignore[index]
    return SweepResult(points={name: np.concatenate([part.points[name] for part in parts]) for name in parts[0].points},
                       total_s=np.concatenate([part.total_s for part in parts]),
                       time_by_bound={label: np.concatenate([part.time_by_bound[label] for part in parts])
                                      for label in parts[0].time_by_bound}, parameter_spread=spread)


def sweep(build: Callable[..., Graph], hardware: Hardware, scenario: Mapping[str, AxisValues] | None = None,
          spec: Mapping[str, AxisValues] | None = None, *, mode: str | None = None, overlap: Overlap = "max",
          parameters: Parameters = DATASHEET, chunk_points: int = 250_000,
          progress: Callable[[int, int], None] | None = None, mapper: Mapper = serial_map,
          parameter_sets: Sequence[Parameters] = (), confidence: float = 0.8) -> SweepResult:
    """Evaluate ``build(**scenario point)`` on ``hardware`` with ``spec`` fields, over the full grid
    (with ``parameter_sets``: each point's spread over them too, ``SweepResult.parameter_spread``)."""
    plan = sweep_plan(build, hardware, scenario, spec, mode=mode, overlap=overlap, parameters=parameters,
                      chunk_points=chunk_points, parameter_sets=parameter_sets, confidence=confidence)
    parts = []
    for part in sweep_chunks(plan, mapper):
        parts.append(part)
        if progress is not None:
            progress(sum(p.size for p in parts), plan.size)
    return concatenate(parts)


def grid_size(axes: Mapping[str, AxisValues]) -> int:
    return math.prod(len(values) for values in axes.values()) if axes else 0


__all__ = ["SweepPlan", "SweepResult", "as_override", "concatenate", "grid_size", "hardware_with", "spec_axis_dimension",
           "sweep", "sweep_chunks", "sweep_plan"]
