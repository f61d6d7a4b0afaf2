"""The hardware spec schema, strict, in pydantic v2 (edge module).

Every quantity is a string with a unit (``"3.35 TB/s"``); a bare number on a dimensional field is
an error. Every object that carries numbers names its ``source`` (an id of the top-level
``sources`` table), and may name other sources for single fields in ``field_sources`` (a key names
one numeric field, ``peak.fp8``, or a group of them, ``kernels``; the most specific key wins).
Unknown keys are errors. Rules that span objects (an inner memory level is not slower than the
level behind it) are in :func:`memory_order_problems`. See ``hardware_specs/README.md`` for a
commented example.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, ClassVar, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from perfmodel.dtypes import DTYPES
from perfmodel.hardware.execution_models import EXECUTION_MODELS
from perfmodel.hardware.model import (
    ALL_REDUCE_POLICY_NAMES,
    FIT_SECTIONS,
    EngineKind,
    Family,
    LevelKind,
    LinkKind,
    Management,
    SourceKind,
    Topology,
)
from perfmodel.units import format_quantity, parse_quantity

SCHEMA_VERSION = 1


# The plausible range of each spec quantity (SI units), lowest and highest: orders of magnitude beyond
# every device in the catalog either way (the largest shipped figures: 21 PB/s of Cerebras WSE-3
# SRAM bandwidth, 125 PFLOP/s of WSE-3 fp16, 2.4 PB of MemoryX, a 23 kW CS-3), so that only a typo (a
# wrong prefix, an exponent's lost sign) or a corrupt file falls outside.
PLAUSIBLE_RANGES: dict[str, tuple[float, float]] = {
    "bytes": (1.0, 1e18),                # a byte .. an exabyte
    "bytes_per_s": (1e3, 1e19),          # 1 kB/s .. 10 EB/s
    "flops_per_s": (1e3, 1e20),          # 1 kFLOP/s .. 100 EFLOP/s
    "hertz": (1e3, 1e12),                # 1 kHz .. 1 THz
    "watts": (1e-3, 1e8),                # 1 mW .. 100 MW
    "seconds": (0.0, 60.0),              # latencies and per-kernel overheads: up to a minute
    "usd_per_hour": (0.0, 1e6),
}
MAX_COUNT = 10**9  # units, instances, tile sizes, chips: a wafer has 900,000 cores
MAX_EFFICIENCY = 100.0  # a multiplier of a datasheet figure; 100x the datasheet is a unit or fit mistake


def _quantity(dimension: str, *, allow_zero: bool = False):
    low, high = PLAUSIBLE_RANGES[dimension]

    def parse(value: object) -> float:
        return parse_quantity(value, dimension)

    def check_range(value: float) -> float:
        if value < 0 or (value == 0 and not allow_zero):
            allowed = "zero or more" if allow_zero else "more than zero"
            raise ValueError(f"must be {allowed}, got {value!r} (in SI units)")
        if value != 0 and not low <= value <= high:
            raise ValueError(f"{format_quantity(value, dimension)} is outside the plausible range "
                             f"{format_quantity(low, dimension)} .. {format_quantity(high, dimension)} of any device; "
                             "check the unit prefix and the exponent")
        return value + 0.0  # -0 us is 0 us

    return Annotated[float, BeforeValidator(parse), AfterValidator(check_range)]


Bytes = _quantity("bytes")
BytesPerSecond = _quantity("bytes_per_s")
FlopsPerSecond = _quantity("flops_per_s")
Hertz = _quantity("hertz")
Watts = _quantity("watts")
Seconds = _quantity("seconds")
Overhead = _quantity("seconds", allow_zero=True)
UsdPerHour = _quantity("usd_per_hour", allow_zero=True)
Count = Annotated[int, Field(strict=True, gt=0, le=MAX_COUNT)]
Text = Annotated[str, Field(strict=True, min_length=1)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SourceSpec(Strict):
    url: Text
    kind: SourceKind
    note: str = ""

    @field_validator("url")
    @classmethod
    def _url_form(cls, url: str) -> str:
        if not re.match(r"^(https?://\S+|repo:\S+|file://\S+)$", url):
            raise ValueError("must be an http(s):// URL, or 'repo:PATH' for a measurement made by this "
                             "project, or 'file://PATH' for a detected value")
        return url


class Sourced(Strict):
    """An object whose numbers come from ``source``, except fields named in ``field_sources``."""

    source: Text
    field_sources: dict[str, Text] = {}
    # Non-numeric fields that are still a sourced claim (a rule chosen from vendor code) and may be named
    # in field_sources.
    SOURCED_CHOICES: ClassVar[tuple[str, ...]] = ()

    @field_validator("source")
    @classmethod
    def _source_known(cls, source: str, info: ValidationInfo) -> str:
        return _check_source_id(source, info)

    @field_validator("field_sources")
    @classmethod
    def _field_sources_known(cls, field_sources: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for source in field_sources.values():
            _check_source_id(source, info)
        return field_sources

    @model_validator(mode="after")
    def _field_sources_name_fields(self):
        present = list(numeric_field_paths(self)) + [name for name in self.SOURCED_CHOICES
                                                     if getattr(self, name, None) is not None]
        unknown = sorted(key for key in self.field_sources if not any(_within(path, key) for path in present))
        if unknown:
            raise ValueError(f"field_sources names {unknown}, which are not numeric fields (or groups of them) "
                             f"of this object; its numeric fields are {sorted(present)}")
        return self

    def source_of(self, path: str) -> str:
        """The source id of the numeric field ``path``: the most specific ``field_sources`` key that
        names it or a group containing it (``kernels.small_m.m``, ``kernels.small_m``, ``kernels``),
        else ``source``."""
        keys = [key for key in self.field_sources if _within(path, key)]
        return self.field_sources[max(keys, key=len)] if keys else self.source


def _within(path: str, key: str) -> bool:
    return path == key or path.startswith(key + ".")


def _check_source_id(source: str, info: ValidationInfo) -> str:
    known = (info.context or {}).get("source_ids")
    if known is not None and source not in known:
        raise ValueError(f"source {source!r} is not defined in the top-level 'sources' table "
                         f"(defined: {', '.join(sorted(known)) or 'none'})")
    return source


def numeric_field_paths(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted paths of the numeric fields set on ``model`` (nested models, dicts of numbers and dicts of
    models included: ``peak.fp8``, ``tile.m``, ``kernels.small_m.m``)."""
    paths = []
    for name in model.model_fields_set:
        value = getattr(model, name)
        path = f"{prefix}{name}"
        if isinstance(value, bool) or name in ("source", "field_sources"):
            continue
        if isinstance(value, (int, float)):
            paths.append(path)
        elif isinstance(value, dict) and all(isinstance(item, (int, float)) for item in value.values()):
            paths.extend(f"{path}.{key}" for key in value)
        elif isinstance(value, dict) and all(isinstance(item, BaseModel) for item in value.values()):
            for key, item in value.items():
                paths.extend(numeric_field_paths(item, f"{path}.{key}."))
        elif isinstance(value, BaseModel):
            paths.extend(numeric_field_paths(value, f"{path}."))
    return paths


class TileSpec(Strict):
    m: Count
    n: Count
    k: Count


class KernelSpec(Strict):
    """One matmul kernel shape the software stack offers (a CTA tile, a small-M kernel, an MXU pass):
    the ``m x n`` block of the output one unit computes, stepping ``k`` at a time; ``split_k``: the
    kernel may split k across units when there are too few output tiles (split-K / stream-K)."""

    m: Count
    n: Count
    k: Count
    split_k: bool = True


KernelName = Annotated[str, Field(strict=True, pattern=r"^[a-z0-9][a-z0-9_]*$")]
AtenOpName = Annotated[str, Field(strict=True, pattern=r"^[a-z_][a-z0-9_]*$")]  # 'gelu' for aten.gelu


class EngineSpec(Sourced):
    SOURCED_CHOICES: ClassVar[tuple[str, ...]] = ("matmul_epilogue_hidden",)

    kind: EngineKind
    units: Count
    peak: dict[str, FlopsPerSecond]
    clock: Hertz | None = None
    # Dense operations one unit completes per clock, by dtype (the vendor's per-SM/per-CU/per-MXU rate): where a
    # spec gives units, clock and this, peak = units x ops_per_clock x clock (tests/test_datasheet_invariants.py).
    ops_per_clock: dict[str, Annotated[float, Field(strict=False, gt=0)]] = {}
    tile: TileSpec | None = None
    kernels: dict[KernelName, KernelSpec] = {}
    kernel_fixed_time: Overhead | None = None
    # The shortest step of a matmul kernel's k-loop (``model.ComputeEngine.k_step_s``); None: no floor.
    k_step_time: Overhead | None = None
    # Whether a vector kernel's memory traffic proceeds under its arithmetic (the roofline's maximum)
    # or waits for it (their sum): false for a CPU core, whose streaming loops stall on their loads.
    vector_kernels_hide_memory: bool = True
    # The key block a flash-style attention kernel on this engine skips whole (masked blocks only):
    # FlashAttention-2's 128 when not given (costs.conventions.FLASH_ATTENTION_BLOCK).
    attention_kv_block: Count | None = None
    # Whether prefill attention kernels pack a KV head's query heads into one block's rows
    # (``model.ComputeEngine.attention_packs_query_groups``: FlashAttention-3's PackGQA).
    attention_packs_query_groups: bool = False
    # Whether a matmul kernel stores an output tile while it computes the next (``model.ComputeEngine.
    # matmul_epilogue_hidden``): false where the device's GEMM tables show each wave's stores adding up (the A100).
    matmul_epilogue_hidden: bool = True

    @model_validator(mode="after")
    def _kernels_on_matrix_engines(self):
        if self.kernels and self.kind != "matrix":
            raise ValueError(f"kernels are matmul kernel shapes, so only a matrix engine has them (this engine "
                             f"is a {self.kind} engine); move them to the matrix engine or remove them")
        return self

    @model_validator(mode="after")
    def _ops_per_clock_has_peaks(self):
        unknown = sorted(set(self.ops_per_clock) - set(self.peak))
        if unknown:
            raise ValueError(f"ops_per_clock gives {unknown}, which have no peak on this engine; give the peak too "
                             f"(peaks: {', '.join(self.peak)})")
        return self

    @field_validator("peak")
    @classmethod
    def _known_dtypes(cls, peak: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(peak) - set(DTYPES))
        if unknown:
            raise ValueError(f"unknown dtype(s) {unknown}; allowed: {', '.join(DTYPES)}")
        if not peak:
            raise ValueError("give at least one dense peak, for example 'bf16: 989 TFLOP/s'")
        return peak


class LevelSpec(Sourced):
    kind: LevelKind
    managed: Management
    capacity: Bytes
    bandwidth: BytesPerSecond
    instances: Count = 1
    latency: Seconds | None = None
    usable_capacity: Bytes | None = None
    transfer_granule: Bytes | None = None
    off_device: bool = False
    pooled: bool = False
    slower_than_outer: Text | None = None

    @model_validator(mode="after")
    def _usable_within_capacity(self):
        if self.usable_capacity is not None and self.usable_capacity > self.capacity:
            raise ValueError("usable_capacity is larger than capacity")
        return self


class LinkSpec(Sourced):
    kind: LinkKind
    bandwidth_per_direction: BytesPerSecond
    topology: Topology
    links_per_chip: Count = 1
    latency: Seconds | None = None
    max_chips: Count | None = None
    # torus only: an axis of a slice closes into a ring when its length is a multiple of this (hardware.model.Link)
    wraparound: Count | None = None
    wraparound_whole_slice: bool = False
    # The serving engine's all-reduce rule (a name of hardware.model.ALL_REDUCE_POLICY_NAMES) and the step
    # latency of its own kernels; written by the per-engine overlays (calibration.engine_overlays).
    all_reduce: str | None = None
    kernel_latency: Seconds | None = None
    SOURCED_CHOICES: ClassVar[tuple[str, ...]] = ("all_reduce",)

    @field_validator("all_reduce")
    @classmethod
    def _known_policy(cls, value: str | None) -> str | None:
        if value is not None and value not in ALL_REDUCE_POLICY_NAMES:
            raise ValueError(f"unknown all_reduce {value!r}; known: {', '.join(ALL_REDUCE_POLICY_NAMES)}")
        return value

    @model_validator(mode="after")
    def _wraparound_on_a_torus(self):
        if (self.wraparound is not None or self.wraparound_whole_slice) and self.topology not in ("torus2d", "torus3d"):
            raise ValueError(f"wraparound describes the rings of a torus; topology {self.topology!r} has none "
                             "(use torus2d or torus3d, or drop wraparound)")
        if self.wraparound_whole_slice and self.wraparound is None:
            raise ValueError("wraparound_whole_slice needs wraparound: the side of the cubes whose whole slices wrap")
        return self


class EngineStepSpec(Strict):
    """A serving engine's host work per scheduler step (``hardware.model.EngineStep``); written by the
    per-engine overlays (``calibration.engine_overlays``), sourced through the mode's ``field_sources``."""

    host_fixed: Overhead
    host_per_sequence: Overhead
    overlap: bool
    fuses_mixed: bool = True  # prefill chunks and decode tokens in one forward pass (``EngineStep``)


class ModeSpec(Sourced):
    kernel_launch: Overhead | None = None
    host_overlap: bool = True
    program_launch: Overhead | None = None
    per_node: Overhead | None = None
    dma_setup: Overhead | None = None
    sync: Overhead | None = None
    host_op: Overhead | None = None  # every overhead field is in hardware.model.MODE_FIELDS (a test checks)
    fabric_hop: Overhead | None = None
    # Extra host cost of the ops the framework hands to a library call (oneDNN's eltwise for PyTorch's exact
    # gelu on a CPU), by ATen op name: a per-op table, not one of the mode's overheads.
    library_dispatch: dict[AtenOpName, Overhead] = {}
    # A serving engine's host work per scheduler step in this mode: the serving simulator's, not an op's.
    engine_step: EngineStepSpec | None = None


class SchedulingSpec(Strict):
    default_mode: str
    modes: dict[str, ModeSpec]

    @model_validator(mode="after")
    def _default_is_a_mode(self):
        unknown = [name for name in self.modes if name not in EXECUTION_MODELS]
        if unknown:  # names come from the execution-model registry (hardware.execution_models)
            raise ValueError(f"unknown execution mode(s) {', '.join(map(repr, unknown))}; registered modes: "
                             f"{', '.join(EXECUTION_MODELS)}")
        if self.default_mode not in self.modes:
            raise ValueError(f"default_mode {self.default_mode!r} is not one of the modes given "
                             f"({', '.join(self.modes) or 'none'})")
        return self


class PowerSpec(Sourced):
    tdp: Watts
    idle: Watts | None = None


class PriceSpec(Sourced):
    per_hour: UsdPerHour


def _efficiency(value: float) -> float:
    """An efficiency: finite (YAML's .inf and .nan are refused), more than zero, at most MAX_EFFICIENCY."""
    if not (math.isfinite(value) and 0 < value <= MAX_EFFICIENCY):
        raise ValueError(f"an efficiency multiplies a datasheet figure: a finite number more than 0 and at most "
                         f"{MAX_EFFICIENCY:g}, got {value!r}")
    return value


PositiveFloat = Annotated[float, Field(strict=False), AfterValidator(_efficiency)]


COVARIANCE_ROUNDING = 1e-3  # relative to the largest variance: an eigenvalue below -this is not rounding


class FitSpec(Strict):
    """A fit's covariance of the relative changes of the values it wrote (``efficiency.fit``; see
    ``perfmodel.hardware.model.FitCovariance``)."""

    measurements: Annotated[int, Field(gt=0)]
    parameters: list[Text] = Field(min_length=1)
    relative_covariance: list[list[float]] = Field(min_length=1)

    @model_validator(mode="after")
    def _square_symmetric(self) -> FitSpec:
        size = len(self.parameters)
        if len(set(self.parameters)) != size:
            raise ValueError("parameters must not repeat a name")
        if len(self.relative_covariance) != size or any(len(row) != size for row in self.relative_covariance):
            raise ValueError(f"relative_covariance must be a {size} x {size} matrix (one row and column per parameter, "
                             "in the order of 'parameters')")
        for i, row in enumerate(self.relative_covariance):
            if not all(math.isfinite(value) for value in row):
                raise ValueError(f"relative_covariance row {i + 1} ({self.parameters[i]}) has a value that is not finite")
            if row[i] < 0:
                raise ValueError(f"relative_covariance's diagonal entry for {self.parameters[i]} is a variance: at least 0, "
                                 f"got {row[i]!r}")
            for j in range(i):
                if not math.isclose(row[j], self.relative_covariance[j][i], rel_tol=1e-3, abs_tol=1e-12):
                    raise ValueError(f"relative_covariance must be symmetric: entry ({i + 1}, {j + 1}) is {row[j]!r}, "
                                     f"({j + 1}, {i + 1}) is {self.relative_covariance[j][i]!r}")
        smallest = float(np.linalg.eigvalsh(np.asarray(self.relative_covariance, dtype=float)).min())
        largest_variance = max(row[i] for i, row in enumerate(self.relative_covariance))
        # Stored to four significant figures, a semi-definite matrix may round to tiny negative eigenvalues.
        if smallest < -COVARIANCE_ROUNDING * largest_variance:
            raise ValueError(f"relative_covariance must be positive semi-definite (a covariance): its smallest "
                             f"eigenvalue is {smallest:.3g}; write the matrix the fit produced")
        return self


class EfficiencySpec(Sourced):
    """Fitted efficiencies (dimensionless multipliers of the datasheet peaks and bandwidths)."""

    name: Text
    # achievable: fitted to published microbenchmarks of the device; estimated: an achievable overlay
    # taken from a sibling's fit where the device has no data of its own; calibrated: fitted to runs.
    kind: Literal["achievable", "estimated", "calibrated"] = "calibrated"
    compute: dict[str, PositiveFloat] = {}
    memory: dict[str, PositiveFloat] = {}
    scheduling_scale: PositiveFloat | None = None
    compute_latency: dict[str, Overhead] = {}
    memory_latency: dict[str, Overhead] = {}
    link: dict[str, PositiveFloat] = {}
    collective_latency: dict[str, Overhead] = {}
    fit: FitSpec | None = None  # the fit's covariance of the values above, where the fitter stored it

    @model_validator(mode="after")
    def _fit_names_written(self) -> EfficiencySpec:
        """Each of ``fit.parameters`` names a value written above (``section:key``, ``FIT_SECTIONS``)."""
        if self.fit is None:
            return self
        tables = {"compute": self.compute, "memory": self.memory, "latency": self.compute_latency,
                  "memory_latency": self.memory_latency, "link": self.link,
                  "collective_latency": self.collective_latency}
        assert set(tables) == set(FIT_SECTIONS)
        for name in self.fit.parameters:
            section, _, key = name.partition(":")
            if section not in tables or key not in tables[section]:
                raise ValueError(f"fit parameter {name!r} names no value of this efficiency block: expected "
                                 f"SECTION:KEY with SECTION one of {', '.join(tables)} and KEY an entry of it "
                                 "(regenerate the overlay with its fitter)")
        return self


class OtherValue(Strict):
    value: Text
    source: Text

    @field_validator("source")
    @classmethod
    def _source_known(cls, source: str, info: ValidationInfo) -> str:
        return _check_source_id(source, info)


class AlternativeSpec(Strict):
    field: Text
    used: Text
    others: list[OtherValue] = Field(min_length=1)
    reason: Text


class HardwareSpec(Strict):
    schema_version: Literal[1]
    name: Annotated[str, Field(strict=True, pattern=r"^[a-z0-9][a-z0-9._-]*$")]
    family: Family
    vendor: Text
    description: Text
    sources: dict[str, SourceSpec] = Field(min_length=1)
    compute: dict[str, EngineSpec] = Field(min_length=1)
    memory: dict[str, LevelSpec] = Field(min_length=1)
    scheduling: SchedulingSpec
    power: PowerSpec
    links: dict[str, LinkSpec] = {}
    price: PriceSpec | None = None
    alternatives: list[AlternativeSpec] = []
    notes: str = ""
    extends: str | None = None
    efficiency: EfficiencySpec | None = None


def memory_order_problems(spec: HardwareSpec, *, exempt: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """``(dotted field, message)`` for each memory level slower than the on-device level behind it.

    Memory is listed innermost first, and data reaches the compute engines through every inner level,
    so an inner level slower than the next outer on-device level is almost always a mistake in the
    spec. A level that really is slower says why in ``slower_than_outer``; a level that says so but
    is not slower is reported too (a stale exception). Pairs whose bandwidths are in ``exempt``
    (what-if overrides) are not checked: a what-if study may make an inner level the bottleneck.
    """
    problems: list[tuple[str, str]] = []
    on_device = [(name, level) for name, level in spec.memory.items() if not level.off_device]
    for (name, level), (outer_name, outer) in zip(on_device, on_device[1:], strict=False):
        if {f"memory.{name}.bandwidth", f"memory.{outer_name}.bandwidth"} & exempt:
            continue
        inner_rate = format_quantity(level.bandwidth, "bytes_per_s")
        outer_rate = format_quantity(outer.bandwidth, "bytes_per_s")
        if level.bandwidth < outer.bandwidth and level.slower_than_outer is None:
            problems.append((f"memory.{name}.bandwidth", (
                f"{inner_rate} is less than the bandwidth of the level behind it, memory.{outer_name} "
                f"({outer_rate}); memory is listed innermost first and an inner level must not be slower than "
                f"the on-device level behind it. Fix the figure (or the order of the levels), or, if this level "
                f"really is slower, say why with 'slower_than_outer: \"reason\"' on memory.{name}")))
        elif level.bandwidth >= outer.bandwidth and level.slower_than_outer is not None:
            problems.append((f"memory.{name}.slower_than_outer", (
                f"memory.{name} ({inner_rate}) is not slower than memory.{outer_name} ({outer_rate}); "
                "remove slower_than_outer")))
    for name, level in spec.memory.items():
        is_last_on_device = bool(on_device) and name == on_device[-1][0]
        if level.slower_than_outer is not None and (level.off_device or is_last_on_device):
            problems.append((f"memory.{name}.slower_than_outer",
                             "no on-device level is behind this one, so there is nothing to be slower than; "
                             "remove slower_than_outer"))
    return problems
