"""A generic counters CSV for systems without a public per-op format (Groq, Cerebras, TPU exports).

Required columns: ``name`` and a duration, either ``duration`` with a ``duration_unit`` column or a
column named ``duration_s``, ``duration_ms``, ``duration_us`` or ``duration_ns``. Optional: ``op_class``,
``flops``, ``bytes`` (or ``bytes_<level>``), ``device``, ``count``. Every problem names the row and
the column.
"""

from __future__ import annotations

import csv
from pathlib import Path

from calibration.readers.common import TIME_UNITS, ReaderError, fail, positive_duration, tool_number, unit_factor
from calibration.records import MeasurementRecord
from perfmodel.yaml_source import open_for_reading

SUFFIX_UNITS = {"duration_s": 1.0, "duration_ms": 1e-3, "duration_us": 1e-6, "duration_ns": 1e-9}


def read_generic_csv(path: str | Path, *, tool: str = "user_csv") -> list[MeasurementRecord]:
    path = Path(path)
    with open_for_reading(path, encoding="utf-8-sig", error_class=ReaderError) as stream:
        reader = csv.DictReader(stream)
        header = reader.fieldnames or []
        if "name" not in header:
            raise fail(path, 1, "name", "missing column")
        duration_column = next((name for name in SUFFIX_UNITS if name in header), None)
        if duration_column is None and "duration" not in header:
            raise fail(path, 1, "duration", "missing column: give duration (+ duration_unit) or duration_s/_ms/_us/_ns")
        if duration_column is None and "duration_unit" not in header:
            raise fail(path, 1, "duration_unit", "missing column: the unit of 'duration' (s, ms, us, ns)")
        records = []
        for line, row in enumerate(reader, start=2):
            if None in row or None in row.values():
                raise fail(path, line, None, "wrong number of fields (truncated file?)")
            if duration_column:
                seconds = tool_number(row[duration_column], path, line, duration_column, allow_missing=False)
                seconds *= SUFFIX_UNITS[duration_column]
            else:
                unit = row["duration_unit"].strip()
                if unit.lower() not in TIME_UNITS:
                    raise fail(path, line, "duration_unit", f"unknown time unit {unit!r}; use s, ms, us or ns")
                seconds = tool_number(row["duration"], path, line, "duration", allow_missing=False)
                seconds *= unit_factor(unit, path, line, "duration_unit")
            positive_duration(seconds, path, line, duration_column or "duration")
            levels = {key.removeprefix("bytes_"): tool_number(value, path, line, key)
                      for key, value in row.items() if key.startswith("bytes_") and value}
            if row.get("bytes"):
                levels.setdefault("dram", tool_number(row["bytes"], path, line, "bytes"))
            records.append(MeasurementRecord(
                name=row["name"], op_class=row.get("op_class") or "op", duration_s=seconds,
                count=int(tool_number(row.get("count") or "1", path, line, "count")),
                flops=tool_number(row.get("flops", ""), path, line, "flops"), bytes_by_level=levels,
                device=row.get("device", ""), tool=tool, flops_source="unknown",
                bytes_source="unknown", source_file=str(path), source_row=line))
    if not records:
        raise ReaderError(f"{path}: no rows")
    return records
