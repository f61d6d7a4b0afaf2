"""Nsight Compute CSV (``ncu --csv``): the details page (long: one row per launch and metric) and
the raw page (wide: one row per launch, a units row under the header).

Tolerated, as real captures show (see the shared counter-formats notes): ``==PROF==`` lines and
program output before the ``"ID",`` header; ragged rows and a trailing comma; rule rows (empty
metric name); ``n/a`` values (NaN); thousands separators of either locale; kernel names with commas.
Launches are keyed by ``ID``, never by kernel name. The raw page layout was not seen in a real file:
columns are read by name and units from the units row, never by position.

FLOPs follow the NERSC hierarchical-roofline methodology: ``add + 2 fma + mul`` thread instructions
for fp64, fp32 and fp16, plus ``tensor_flops_per_instruction`` x ``sm__inst_executed_pipe_tensor.sum``
when that per-architecture factor is given (512 on V100; it depends on the instruction shape elsewhere).
Tensor-core work per dtype is read from ``sm__ops_path_tensor_src_<dtype>_dst_<dtype>[_sparsity_off].sum``
when collected (the metrics of ncu's roofline sections on Ampere and later; [INFERRED] from public
roofline scripts, not seen in a real CSV here), and then takes the place of the instruction count.

Each record keeps the FLOPs per unit that did them in ``flops_by_engine`` (``vector:fp32`` for CUDA-core
fp32, ``matrix:bf16`` for tensor cores in bf16); the tensor dtype of the instruction count comes from
the kernel name (``bf16``, ``tf32``, ``fp8``, ``i8``...), else :data:`DEFAULT_TENSOR_DTYPE`. Durations
are the kernel's device time (``clock="device"``).
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

from calibration.readers.common import ReaderError, counter_value, fail, positive_duration, tool_number, unit_factor
from calibration.records import MeasurementRecord

DURATION_METRICS = ("gpu__time_duration.sum", "Duration", "gpu__time_duration.avg")
BYTE_METRICS = {"dram": ("dram__bytes.sum",), "l2": ("lts__t_bytes.sum",), "l1": ("l1tex__t_bytes.sum",)}
DRAM_READ_WRITE = ("dram__bytes_read.sum", "dram__bytes_write.sum")
PRECISION_DTYPES = {"d": "fp64", "f": "fp32", "h": "fp16"}
FLOP_TERMS = {f"sm__sass_thread_inst_executed_op_{precision}{op}_pred_on.sum": (2 if op == "fma" else 1, dtype)
              for precision, dtype in PRECISION_DTYPES.items() for op in ("add", "mul", "fma")}
TENSOR_INSTRUCTIONS = "sm__inst_executed_pipe_tensor.sum"
TENSOR_PATH = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9]+)_dst_[a-z0-9]+(_sparsity_off)?\.sum$")
# The dtype of tensor instructions counted without one: the NERSC 512-FLOP factor is V100's fp16 HMMA.
DEFAULT_TENSOR_DTYPE = "fp16"
# Kernel-name fragments that give the tensor-core dtype (cuBLAS/CUTLASS naming), most specific first.
TENSOR_DTYPE_PATTERNS = (("e4m3", "fp8"), ("e5m2", "fp8"), ("fp8", "fp8"), ("f8", "fp8"), ("bf16", "bf16"),
                         ("tf32", "tf32"), ("fp16", "fp16"), ("f16", "fp16"), ("hgemm", "fp16"), ("int8", "int8"),
                         ("i8", "int8"), ("imma", "int8"), ("fp64", "fp64"), ("dgemm", "fp64"))


def tensor_dtype_from_name(kernel_name: str) -> str:
    lowered = kernel_name.lower()
    return next((dtype for fragment, dtype in TENSOR_DTYPE_PATTERNS if fragment in lowered), DEFAULT_TENSOR_DTYPE)


def _lines_from_header(path: Path) -> tuple[list[str], int]:
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as error:
        raise ReaderError(f"cannot read {path}: {error}") from None
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith('"ID",'):
            return lines[number:], number + 1
    raise ReaderError(f"{path}: no Nsight Compute CSV header (a line starting with '\"ID\",') was found; "
                      "run ncu with --csv (and --log-file to keep program output out)")


def read_ncu_csv(path: str | Path, *, tensor_flops_per_instruction: float | None = None,
                 tool_version: str = "") -> list[MeasurementRecord]:
    path = Path(path)
    lines, first_line = _lines_from_header(path)
    reader = csv.reader(io.StringIO("\n".join(lines)))
    try:
        rows = list(reader)
    except csv.Error as error:
        raise fail(path, first_line + reader.line_num - 1, None, f"not a readable CSV row ({error}); a truncated file, "
                                                                 "or a quote left open?") from None
    header = rows[0]
    launches: dict[str, dict] = {}
    if "Metric Name" in header:
        _read_details(path, header, rows[1:], first_line, launches)
    else:
        _read_raw(path, header, rows[1:], first_line, launches)
    if not launches:
        raise ReaderError(f"{path}: no kernel launches in the file")
    return [_record(path, launch, tensor_flops_per_instruction, tool_version) for launch in launches.values()]


def _column(header: list[str], name: str, path) -> int:
    if name not in header:
        raise fail(path, 1, name, f"missing column; the header has {', '.join(header)}")
    return header.index(name)


def _read_details(path, header, rows, first_line, launches) -> None:
    columns = {name: _column(header, name, path) for name in ("ID", "Kernel Name", "Metric Name", "Metric Unit",
                                                                "Metric Value")}
    device_column = header.index("Device") if "Device" in header else None
    for offset, row in enumerate(rows):
        line = first_line + 1 + offset
        if not row or not any(cell.strip() for cell in row):
            continue
        row = row + [""] * (len(header) - len(row))  # ragged rows: missing trailing fields are empty
        metric = row[columns["Metric Name"]].strip()
        if not metric:
            continue  # a rule row (diagnostics), not a metric
        launch_id = row[columns["ID"]].strip()
        if not launch_id:
            raise fail(path, line, "ID", "empty launch ID on a metric row")
        launch = launches.setdefault(launch_id, {"id": launch_id, "name": row[columns["Kernel Name"]], "line": line,
                                                 "device": row[device_column] if device_column is not None else "",
                                                 "metrics": {}})
        unit = row[columns["Metric Unit"]]
        value = tool_number(row[columns["Metric Value"]], path, line, "Metric Value")
        launch["metrics"][metric] = value * unit_factor(unit, path, line, "Metric Unit")


def _read_raw(path, header, rows, first_line, launches) -> None:
    id_column = _column(header, "ID", path)
    name_column = _column(header, "Kernel Name", path)
    units = [""] * len(header)
    skip = 0
    if rows and rows[0] and rows[0][id_column].strip() == "":
        units, skip = rows[0] + [""] * (len(header) - len(rows[0])), 1
    identity = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
                "Grid Size", "Device", "CC", "Kernel Time"}
    for offset, row in enumerate(rows[skip:], start=skip):
        line = first_line + 1 + offset
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise fail(path, line, None, f"the row has {len(row)} fields but the header has {len(header)} "
                                         "(truncated file?)")
        metrics = {}
        for index, name in enumerate(header):
            if name in identity:
                continue
            value = tool_number(row[index], path, line, name)
            metrics[name] = value * unit_factor(units[index], path, 2, name)
        launch_id = row[id_column].strip()
        launches[launch_id] = {"id": launch_id, "name": row[name_column], "line": line,
                               "device": row[header.index("Device")] if "Device" in header else "", "metrics": metrics}


def _record(path, launch, tensor_factor, tool_version) -> MeasurementRecord:
    metrics = launch["metrics"]
    duration = next((metrics[name] for name in DURATION_METRICS if name in metrics and not math.isnan(metrics[name])),
                    None)
    if duration is None and "sm__cycles_elapsed.avg" in metrics and metrics.get("sm__cycles_elapsed.avg.per_second"):
        duration = metrics["sm__cycles_elapsed.avg"] / metrics["sm__cycles_elapsed.avg.per_second"]
    if duration is None:
        raise fail(path, launch["line"], "gpu__time_duration.sum",
                   f"launch {launch['id']} has no duration metric (collect gpu__time_duration.sum)")
    positive_duration(duration, path, launch["line"], "gpu__time_duration.sum")
    levels = {}
    for level, names in BYTE_METRICS.items():
        for name in names:
            if name in metrics and not math.isnan(metrics[name]):
                levels[level] = counter_value(metrics[name], path, launch["line"], name)
    if "dram" not in levels and all(name in metrics for name in DRAM_READ_WRITE):
        levels["dram"] = counter_value(metrics[DRAM_READ_WRITE[0]] + metrics[DRAM_READ_WRITE[1]], path, launch["line"],
                                       " + ".join(DRAM_READ_WRITE))
        if math.isnan(levels["dram"]):
            del levels["dram"]
    by_engine = {engine: counter_value(flops, path, launch["line"], f"FLOPs ({engine})", allow_missing=False)
                 for engine, flops in _flops_by_engine(launch["name"], metrics, tensor_factor).items()}
    flops = sum(by_engine.values()) if by_engine else math.nan
    return MeasurementRecord(
        name=launch["name"], op_class="kernel", duration_s=duration, flops=flops, bytes_by_level=levels,
        device=launch["device"], tool="nsight-compute", tool_version=tool_version,
        flops_source="hw_counter" if by_engine else "unknown", bytes_source="hw_counter" if levels else "unknown",
        source_file=str(path), source_row=launch["line"], clock="device", flops_by_engine=by_engine)


def _flops_by_engine(name: str, metrics: dict, tensor_factor) -> dict[str, float]:
    """FLOPs per ``"<engine kind>:<dtype>"`` from the launch's counters (empty when none was collected)."""
    by_engine: dict[str, float] = {}
    for metric, (weight, dtype) in FLOP_TERMS.items():
        value = metrics.get(metric, math.nan)
        if not math.isnan(value):
            by_engine[f"vector:{dtype}"] = by_engine.get(f"vector:{dtype}", 0.0) + weight * value
    tensor_paths = [(TENSOR_PATH.match(metric), value) for metric, value in metrics.items()]
    tensor_paths = [(match.group(1), value) for match, value in tensor_paths if match and not math.isnan(value)]
    for dtype, value in tensor_paths:
        by_engine[f"matrix:{dtype}"] = by_engine.get(f"matrix:{dtype}", 0.0) + value
    instructions = metrics.get(TENSOR_INSTRUCTIONS, math.nan)
    if not tensor_paths and tensor_factor and not math.isnan(instructions):
        key = f"matrix:{tensor_dtype_from_name(name)}"
        by_engine[key] = by_engine.get(key, 0.0) + tensor_factor * instructions
    return by_engine
