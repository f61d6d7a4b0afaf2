"""A generic counters CSV for systems without a public per-op format (Groq, Cerebras, TPU exports).

Required columns: ``name`` and a duration, either ``duration`` with a ``duration_unit`` column or a
column named ``duration_s``, ``duration_ms``, ``duration_us`` or ``duration_ns``. Optional: ``op_class``,
``flops``, ``bytes`` (or ``bytes_<level>``), ``device``, ``count``. Every problem names the row and
the column.

Shape route (optional columns; a row without them is listed as unmapped time):

* ``aten_op``: the aten op (``aten::mm`` or ``mm``);
* ``input_shapes``: JSON, one entry per argument of the op in its schema order: a shape for a
  tensor (``[64, 128]``), ``null`` for anything else (``[[2048, 4096], [4096, 4096]]``);
* ``dtype``: the tensors' dtype (``fp32``, ``bf16``, ``torch.float16``...);
* ``arguments``: JSON, the non-tensor arguments at the same positions (``[null, null, null, [2, 2], [1, 1],
  [1, 1], 1]`` for a ``conv2d`` with stride 2 and padding 1), where the output shape needs them;
* ``clock``: ``host`` (wall time of the call, the default) or ``device`` (kernel time on the device).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from calibration.readers.common import (
    TIME_UNITS,
    ReaderError,
    counter_value,
    fail,
    positive_duration,
    tool_number,
    unit_factor,
)
from calibration.records import CLOCKS, MeasurementRecord, Measurements, Unmapped, group_unmapped
from perfmodel.yaml_source import csv_failures, open_for_reading

SUFFIX_UNITS = {"duration_s": 1.0, "duration_ms": 1e-3, "duration_us": 1e-6, "duration_ns": 1e-9}
SHAPE_COLUMNS = ("aten_op", "input_shapes")


def _rows(path: Path, tool: str):
    """(record, row, line) for every row of the file."""
    with open_for_reading(path, encoding="utf-8-sig", error_class=ReaderError) as stream:
        reader = csv.DictReader(stream)
        with csv_failures(path, reader, error_class=ReaderError):
            header = reader.fieldnames or []
            if "name" not in header:
                raise fail(path, 1, "name", "missing column")
            duration_column = next((name for name in SUFFIX_UNITS if name in header), None)
            if duration_column is None and "duration" not in header:
                raise fail(path, 1, "duration", "missing column: give duration (+ duration_unit) or "
                                                "duration_s/_ms/_us/_ns")
            if duration_column is None and "duration_unit" not in header:
                raise fail(path, 1, "duration_unit", "missing column: the unit of 'duration' (s, ms, us, ns)")
            rows = []
            for line, row in enumerate(reader, start=2):
                if None in row or None in row.values():
                    raise fail(path, line, None, "wrong number of fields (a truncated file, or a JSON cell such as "
                                                 "input_shapes without double quotes around it?)")
                rows.append((_record(path, row, line, duration_column, tool), row, line))
    if not rows:
        raise ReaderError(f"{path}: no rows")
    return rows


def _record(path, row, line, duration_column, tool) -> MeasurementRecord:
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
    levels = {key.removeprefix("bytes_"): _count(value, path, line, key)
              for key, value in row.items() if key.startswith("bytes_") and value}
    if row.get("bytes"):
        levels.setdefault("dram", _count(row["bytes"], path, line, "bytes"))
    levels = {level: value for level, value in levels.items() if not math.isnan(value)}
    count = tool_number(row.get("count") or "1", path, line, "count")
    if not count.is_integer() or count < 1:
        raise fail(path, line, "count", f"expected a whole number of at least 1, got {row.get('count')!r}")
    clock = (row.get("clock") or "host").strip()
    if clock not in CLOCKS:
        raise fail(path, line, "clock", f"{clock!r} is not one of {', '.join(CLOCKS)}")
    return MeasurementRecord(
        name=row["name"], op_class=row.get("op_class") or "op", duration_s=seconds, count=int(count),
        flops=_count(row.get("flops", ""), path, line, "flops"), bytes_by_level=levels,
        device=row.get("device") or "", tool=tool, flops_source="unknown",
        bytes_source="unknown", source_file=str(path), source_row=line, clock=clock)


def _count(text, path, line, column) -> float:
    """A FLOP or byte count: blank or n/a is NaN (not measured); otherwise finite and at least 0."""
    return counter_value(tool_number(text, path, line, column), path, line, column)


def read_generic_csv(path: str | Path, *, tool: str = "user_csv") -> list[MeasurementRecord]:
    return [record for record, _row, _line in _rows(Path(path), tool)]


def _json_cell(row, line, path, column: str):
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise fail(path, line, column, f"not valid JSON ({error.msg}); expected for example [[64, 128], [128, 256]]") \
            from None


def read_generic_ops(path: str | Path, *, hardware=None, tool: str = "user_csv") -> Measurements:
    """Shape-route records of a generic CSV: rows with ``aten_op`` and ``input_shapes`` carry the graph of
    their op; the others are unmapped time."""
    from dataclasses import replace

    from calibration.shapes import NotMapped, ShapeError, trace_op
    from perfmodel.errors import PerfmodelError
    from perfmodel.workload.io import dumps
    from perfmodel.workload.ir import Graph

    path = Path(path)
    records, unmapped, total = [], [], 0.0
    for record, row, line in _rows(path, tool):
        total += record.duration_s * record.count
        if not all((row.get(column) or "").strip() for column in SHAPE_COLUMNS):
            unmapped.append(Unmapped(name=record.name, reason="no aten_op and input_shapes", time_s=record.duration_s
                                     * record.count, count=record.count))
            continue
        shapes = _json_cell(row, line, path, "input_shapes")
        arguments = _json_cell(row, line, path, "arguments") or []
        if not isinstance(shapes, list) or not isinstance(arguments, list):
            raise fail(path, line, "input_shapes" if not isinstance(shapes, list) else "arguments",
                       "expected a JSON list with one entry per argument")
        dtype = (row.get("dtype") or "fp32").strip()
        types = [dtype if shape is not None else "Scalar" for shape in shapes]
        dims = [shape if shape is not None else [] for shape in shapes]
        try:
            op = trace_op(row["aten_op"].strip(), dims, types, arguments, op_name=record.name)
            if hardware is not None:
                from perfmodel.costs.rules import CostContext, op_cost

                op_cost(op, CostContext(hardware=hardware))
        except ShapeError as error:
            raise fail(path, line, "input_shapes", str(error)) from None
        except NotMapped as error:
            if error.reason.startswith("tensor dtype"):
                raise fail(path, line, "dtype", f"unknown dtype {dtype!r}; use fp32, fp16, bf16, fp8, int8...") \
                    from None
            unmapped.append(Unmapped(name=record.name, reason=error.reason, time_s=record.duration_s * record.count,
                                     count=record.count))
            continue
        except PerfmodelError as error:
            unmapped.append(Unmapped(name=record.name, reason=str(error).split(";")[0],
                                     time_s=record.duration_s * record.count, count=record.count))
            continue
        records.append(replace(record, op_class=row.get("op_class") or op.kind, flops_source="analytic_shapes",
                               workload_json=dumps(Graph(name=record.name, ops=(op,)), "json")))
    return Measurements(source_file=str(path), format="generic", route="shape", records=tuple(records),
                        unmapped=tuple(group_unmapped(unmapped)), total_s=total)
