"""One measurement record per kernel or op (or per measured group of ops), and its CSV form.

Units are SI: seconds, FLOPs, bytes. ``flops_source`` and ``bytes_source`` say where each number
came from: ``hw_counter`` (Nsight Compute), ``compiler_estimate`` (XProf, Spyre ideal cycles),
``analytic_shapes`` (formulas from the op's shapes) or ``model_derived`` (perfmodel's traffic model).
``workload_json`` optionally carries the perfmodel graph of what was measured, so that a fit can
re-evaluate it under candidate parameters.

Fields of the measurement conditions (defaults keep older CSVs readable):

* ``clock``: ``host`` when the time is the wall time of a call on the host (``perfmodel bench``, a
  CPU op of a profiler trace): it includes the host's dispatch of the kernels; ``device`` when it
  is the kernel's own time on the device (Nsight Compute, kernel events of a GPU or Spyre trace): it
  excludes the launch, so a fit must not charge launches to it.
* ``threads``: CPU threads the harness ran with (``perfmodel bench --threads``); None: not recorded.
* ``allocator``: the allocator regime of the outputs: ``reused`` (freed blocks stay in the process,
  so a fresh output of an eager op is not page-faulted: glibc ``mallopt``, what ``bench`` does by
  default), ``page-faulted`` (large blocks go back to the OS on free, so every large output is mapped
  and faulted in again: ``bench --allocator page-faulted``); empty: unknown.
* ``page_faults_per_call``: minor page faults per timed call, measured (``getrusage``) while timing.
* ``flops_by_engine``: FLOPs split by ``"<engine kind>:<dtype>"`` (``matrix:bf16``, ``vector:fp32``) where
  the counters say which units did them (Nsight Compute); the counter route prices each share on
  the matching engine.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from perfmodel.errors import PerfmodelError
from perfmodel.yaml_source import csv_failures, open_for_reading

SOURCES = ("hw_counter", "compiler_estimate", "analytic_shapes", "model_derived", "unknown")
CLOCKS = ("host", "device")
ALLOCATOR_REGIMES = ("reused", "page-faulted")
JSON_COLUMNS = ("bytes_by_level", "flops_by_engine")


@dataclass(frozen=True, kw_only=True)
class MeasurementRecord:
    name: str
    op_class: str
    duration_s: float
    spread_s: float = 0.0
    count: int = 1
    flops: float = math.nan
    bytes_by_level: dict[str, float] = field(default_factory=dict)
    launches: int = 1
    device: str = ""
    tool: str = ""
    tool_version: str = ""
    flops_source: str = "unknown"
    bytes_source: str = "unknown"
    source_file: str = ""
    source_row: int | None = None
    workload_json: str = ""
    clock: str = "host"
    threads: int | None = None
    allocator: str = ""
    page_faults_per_call: float | None = None
    flops_by_engine: dict[str, float] = field(default_factory=dict)

    @property
    def bytes(self) -> float:
        """Bytes at the outermost level recorded (DRAM when present)."""
        for level in ("dram", "hbm", "lpddr5", "memory"):
            if level in self.bytes_by_level:
                return self.bytes_by_level[level]
        return next(iter(self.bytes_by_level.values()), math.nan)

    def graph(self):
        from perfmodel.workload.io import graph_from_document
        from perfmodel.yaml_source import parse_yaml

        if not self.workload_json:
            raise PerfmodelError(f"measurement {self.name!r} carries no workload graph to re-evaluate")
        return graph_from_document(parse_yaml(self.workload_json, f"<{self.name}>"))


COLUMNS = [f.name for f in fields(MeasurementRecord) if f.name not in JSON_COLUMNS] + ["bytes", *JSON_COLUMNS]


@dataclass(frozen=True, kw_only=True)
class Unmapped:
    """Measured time the fit cannot explain: a kernel or op that no model op describes, and why."""

    name: str
    reason: str
    time_s: float
    count: int = 1


@dataclass(frozen=True, kw_only=True)
class Measurements:
    """What one measurements file gives a fit: records ready for it, and the time it cannot use.

    ``route``: ``counter`` (measured FLOPs and bytes price each kernel: Nsight Compute) or ``shape``
    (each record carries the graph of its op: traces, generic CSV with shapes, ``perfmodel bench``).
    ``total_s``: the file's measured time (each record's ``duration_s x count``, plus what is not a
    record: unmapped kernels and ops, time of enclosing ops outside their children)."""

    source_file: str
    format: str
    route: str
    records: tuple[MeasurementRecord, ...]
    unmapped: tuple[Unmapped, ...] = ()
    total_s: float = 0.0

    @property
    def mapped_s(self) -> float:
        return sum(record.duration_s * record.count for record in self.records)

    @property
    def explained_share(self) -> float:
        """The share of the measured time that the records (hence the fit) explain."""
        return self.mapped_s / self.total_s if self.total_s > 0 else 0.0


def group_unmapped(items) -> list[Unmapped]:
    """One entry per (name, reason), times and counts summed, largest first."""
    groups: dict[tuple[str, str], list[float]] = {}
    for item in items:
        entry = groups.setdefault((item.name, item.reason), [0.0, 0])
        entry[0] += item.time_s
        entry[1] += item.count
    merged = [Unmapped(name=name, reason=reason, time_s=time_s, count=int(count))
              for (name, reason), (time_s, count) in groups.items()]
    return sorted(merged, key=lambda item: (-item.time_s, item.name))


def write_records(records, path: str | Path) -> None:
    """CSV with one row per record; ``bytes`` (outermost level) beside the JSON per-level map, so the
    file also serves ``perfmodel roofline --measured``."""
    import io

    from perfmodel.yaml_source import write_text_atomically

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    for record in records:
        row = asdict(record)
        for column in JSON_COLUMNS:
            row[column] = json.dumps(getattr(record, column), sort_keys=True)
        row["bytes"] = record.bytes
        writer.writerow(row)
    write_text_atomically(path, buffer.getvalue())


def _number(value: str, path, row: int, column: str, *, positive: bool = False, missing: bool = False) -> float:
    """A finite number of at least 0 (more than 0 when ``positive``); NaN (empty, ``nan``: not measured)
    only when ``missing``. Durations, spreads, FLOPs and bytes are never negative or infinite."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PerfmodelError(f"{path}:{row}: column {column!r}: {value!r} is not a number") from None
    if math.isnan(number):
        if missing:
            return number
        raise PerfmodelError(f"{path}:{row}: column {column!r} is NaN; a measurement needs a value")
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "more than zero" if positive else "zero or more"
        raise PerfmodelError(f"{path}:{row}: column {column!r} must be {bound} and finite, got {value!r}; fix or "
                             "delete the row")
    return number


def _integer(value, path, row: int, column: str, default: int | None, minimum: int = 0) -> int | None:
    if value in (None, ""):
        return default
    number = _number(value, path, row, column)
    if not number.is_integer() or number < minimum:
        raise PerfmodelError(f"{path}:{row}: column {column!r}: {value!r} is not a whole number of at least {minimum}")
    return int(number)


def _json_map(value, path, row: int, column: str) -> dict[str, float]:
    if not value:
        return {}
    try:
        data = json.loads(value, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, _NonFinite, RecursionError) as error:
        reason = error.msg if isinstance(error, json.JSONDecodeError) else f"{error} is not a JSON number"
        raise PerfmodelError(f"{path}:{row}: column {column!r}: not a JSON object ({reason}); expected "
                             'for example {"dram": 1024.0}') from None
    if not isinstance(data, dict) or not all(isinstance(number, (int, float)) and not isinstance(number, bool)
                                             and math.isfinite(number) and number >= 0 for number in data.values()):
        raise PerfmodelError(f"{path}:{row}: column {column!r}: expected a JSON object of finite numbers of at least 0, "
                             f"got {value[:80]!r}")
    return {str(key): float(number) for key, number in data.items()}


class _NonFinite(ValueError):
    pass


def _refuse_constant(constant: str):
    raise _NonFinite(constant)


def _choice(value, path, row: int, column: str, allowed, default: str) -> str:
    value = value or default
    if value not in allowed:
        raise PerfmodelError(f"{path}:{row}: column {column!r}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _record_from_row(row: dict, path, number: int) -> MeasurementRecord:
    levels = _json_map(row.get("bytes_by_level"), path, number, "bytes_by_level")
    if not row.get("bytes_by_level") and row.get("bytes"):  # a CSV with only the outermost level's bytes
        outermost = _number(row["bytes"], path, number, "bytes", missing=True)
        levels = {} if math.isnan(outermost) else {"dram": outermost}
    faults = row.get("page_faults_per_call")
    return MeasurementRecord(
        name=row["name"], op_class=row["op_class"],
        duration_s=_number(row["duration_s"], path, number, "duration_s", positive=True),
        spread_s=_number(row.get("spread_s") or 0, path, number, "spread_s"),
        count=_integer(row.get("count"), path, number, "count", 1, minimum=1),
        flops=_number(row.get("flops") or "nan", path, number, "flops", missing=True),
        bytes_by_level=levels, launches=_integer(row.get("launches"), path, number, "launches", 1),
        device=row.get("device") or "", tool=row.get("tool") or "", tool_version=row.get("tool_version") or "",
        flops_source=row.get("flops_source") or "unknown", bytes_source=row.get("bytes_source") or "unknown",
        source_file=row.get("source_file") or "",
        source_row=_integer(row.get("source_row"), path, number, "source_row", None),
        workload_json=row.get("workload_json") or "",
        clock=_choice(row.get("clock"), path, number, "clock", CLOCKS, "host"),
        threads=_integer(row.get("threads"), path, number, "threads", None, minimum=1),
        allocator=_choice(row.get("allocator"), path, number, "allocator", ("", *ALLOCATOR_REGIMES), ""),
        page_faults_per_call=_number(faults, path, number, "page_faults_per_call") if faults else None,
        flops_by_engine=_json_map(row.get("flops_by_engine"), path, number, "flops_by_engine"))


def read_records(path: str | Path) -> list[MeasurementRecord]:
    """The records of a CSV written by :func:`write_records` (``perfmodel bench``); columns added since
    (``clock``, ``threads``, ``allocator``...) may be missing and take their defaults."""
    path = Path(path)
    records = []
    with open_for_reading(path) as stream:
        reader = csv.DictReader(stream)
        with csv_failures(path, reader):
            missing = [c for c in ("name", "op_class", "duration_s") if c not in (reader.fieldnames or [])]
            if missing:
                raise PerfmodelError(f"{path}: missing column(s) {missing}; a measurements CSV has at least "
                                     "name, op_class, duration_s")
            for number, row in enumerate(reader, start=2):
                if None in row.values() or None in row:
                    raise PerfmodelError(f"{path}:{number}: the row has "
                                         f"{'too few' if None in row.values() else 'too many'} "
                                         "fields (truncated or malformed file?)")
                records.append(_record_from_row(row, path, number))
    if not records:
        raise PerfmodelError(f"{path}: no measurements")
    return records


def kernel_label(name: str, width: int = 60) -> str:
    """A short display name of a demangled kernel: no ``void``, namespaces or argument list, nested
    template arguments elided (``reduce_kernel<512, 1, ReduceOp<...>>``), at most ``width`` characters."""
    import re

    text = re.sub(r"\(anonymous namespace\)::|\b\w+::", "", name.removeprefix("void ")).strip()
    depth, kept = 0, []
    for character in text:
        if character == "(" and depth == 0 and kept and not kept[-1].isspace():  # a C++ argument list
            break
        if character == "<":
            depth += 1
            if depth == 2:
                kept.append("<...")
                continue
        elif character == ">":
            depth -= 1
            if depth == 1:
                kept.append(">")
                continue
        if depth < 2:
            kept.append(character)
    label = "".join(kept).strip() or text
    return label if len(label) <= width else label[:width - 3] + "..."
