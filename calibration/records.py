"""One measurement record per kernel or op (or per measured group of ops), and its CSV form.

Units are SI: seconds, FLOPs, bytes. ``flops_source`` and ``bytes_source`` say where each number
came from: ``hw_counter`` (Nsight Compute), ``compiler_estimate`` (XProf, Spyre ideal cycles),
``analytic_shapes`` (formulas from the op's shapes) or ``model_derived`` (perfmodel's traffic model).
``workload_json`` optionally carries the perfmodel graph of what was measured, so that a fit can
re-evaluate it under candidate parameters.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from perfmodel.errors import PerfmodelError
from perfmodel.yaml_source import open_for_reading

SOURCES = ("hw_counter", "compiler_estimate", "analytic_shapes", "model_derived", "unknown")


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


COLUMNS = [f.name for f in fields(MeasurementRecord) if f.name != "bytes_by_level"] + ["bytes", "bytes_by_level"]


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
        row["bytes_by_level"] = json.dumps(record.bytes_by_level, sort_keys=True)
        row["bytes"] = record.bytes
        writer.writerow(row)
    write_text_atomically(path, buffer.getvalue())


def _number(value: str, path, row: int, column: str, *, positive: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PerfmodelError(f"{path}:{row}: column {column!r}: {value!r} is not a number") from None
    if math.isnan(number) and positive:
        raise PerfmodelError(f"{path}:{row}: column {column!r} is NaN; a measurement needs a value")
    if positive and not number > 0:
        raise PerfmodelError(f"{path}:{row}: column {column!r} must be more than zero, got {number}")
    return number


def read_records(path: str | Path) -> list[MeasurementRecord]:
    path = Path(path)
    with open_for_reading(path) as stream:
        reader = csv.DictReader(stream)
        missing = [c for c in ("name", "op_class", "duration_s") if c not in (reader.fieldnames or [])]
        if missing:
            raise PerfmodelError(f"{path}: missing column(s) {missing}; a measurements CSV has at least "
                                 "name, op_class, duration_s")
        records = []
        for number, row in enumerate(reader, start=2):
            if None in row.values() or None in row:
                raise PerfmodelError(f"{path}:{number}: the row has {'too few' if None in row.values() else 'too many'} "
                                     "fields (truncated or malformed file?)")
            levels = json.loads(row["bytes_by_level"]) if row.get("bytes_by_level") else {}
            if not levels and row.get("bytes"):
                levels = {"dram": _number(row["bytes"], path, number, "bytes")}
            records.append(MeasurementRecord(
                name=row["name"], op_class=row["op_class"],
                duration_s=_number(row["duration_s"], path, number, "duration_s", positive=True),
                spread_s=_number(row.get("spread_s") or 0, path, number, "spread_s"),
                count=int(float(row.get("count") or 1)), flops=_number(row.get("flops") or "nan", path, number, "flops"),
                bytes_by_level=levels, launches=int(float(row.get("launches") or 1)), device=row.get("device", ""),
                tool=row.get("tool", ""), tool_version=row.get("tool_version", ""),
                flops_source=row.get("flops_source") or "unknown", bytes_source=row.get("bytes_source") or "unknown",
                source_file=row.get("source_file", ""), source_row=int(row["source_row"]) if row.get("source_row") else None,
                workload_json=row.get("workload_json", "")))
    if not records:
        raise PerfmodelError(f"{path}: no measurements")
    return records
