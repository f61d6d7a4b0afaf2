"""Which reader a measurements file needs, from its content, and the file read into what a fit uses.

Formats (``perfmodel calibrate --format``):

* ``ncu``: Nsight Compute CSV, details or raw page (a line starting ``"ID",``, possibly after
  ``==PROF==`` lines and program output) -> counter route;
* ``torch-trace``: a torch.profiler Chrome trace, ``.json`` or ``.json.gz`` (``traceEvents``) ->
  shape route (record it with ``record_shapes=True``);
* ``spyre``: a torch-spyre profiler trace (kernel events with ``cycles_ts``, ``privateuse1_runtime``
  calls, ``spyre_kernel_``/``sdsc_`` kernel names) -> shape route; or a Flex trace (``B`` events with
  ``TS1``..``TS5`` counters), which carries no op shapes: all of its time is listed as unmapped;
* ``generic``: the generic counters CSV (``name`` and a duration column) -> shape route for the rows
  with ``aten_op`` and ``input_shapes``;
* ``bench``: the CSV of ``perfmodel bench`` (``op_class``, ``duration_s``, ``workload_json``) -> shape route.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from dataclasses import replace
from pathlib import Path

from calibration.readers.common import ReaderError, load_json
from calibration.records import Measurements, Unmapped, group_unmapped
from perfmodel.errors import PerfmodelError

FORMATS = ("ncu", "torch-trace", "spyre", "generic", "bench")
# What a record's tool_version says when the file does not name the tool's version.
FORMAT_DESCRIPTIONS = {"ncu": "Nsight Compute CSV", "torch-trace": "torch.profiler Chrome trace",
                       "spyre": "torch-spyre profiler trace", "generic": "generic CSV"}
SNIFF_BYTES = 1 << 16
SPYRE_KERNEL_PREFIXES = ("spyre_kernel", "sdsc_")
GENERIC_DURATIONS = ("duration", "duration_s", "duration_ms", "duration_us", "duration_ns")


def _head(path: Path) -> str:
    try:
        with path.open("rb") as stream:
            raw = stream.read(SNIFF_BYTES)
        if raw[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as stream:
                raw = stream.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as error:
        raise ReaderError(f"cannot read {path}: {error} (a truncated or corrupt gzip file?)") from None
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")


def _arguments(event: dict) -> dict:
    """An event's ``args`` (or a Flex trace's ``attr``) when it is a mapping; {} otherwise (the reader
    reports a malformed one with its event)."""
    args = event.get("args") or event.get("attr")
    return args if isinstance(args, dict) else {}


def is_spyre_trace(events) -> bool:
    for event in events:
        if not isinstance(event, dict):
            continue
        args = _arguments(event)
        if event.get("cat") == "privateuse1_runtime" or "cycles_ts" in args:
            return True
        if event.get("ph") == "B" and "TS1" in args:
            return True
        if event.get("cat") == "kernel" and str(event.get("name", "")).startswith(SPYRE_KERNEL_PREFIXES):
            return True
    return False


def is_flex_trace(events) -> bool:
    return any(isinstance(event, dict) and event.get("ph") == "B" and "TS1" in _arguments(event) for event in events)


def _trace_events(path: Path):
    data = load_json(path)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    return events if isinstance(events, list) else None


def detect_format(path: str | Path) -> str:
    """One of :data:`FORMATS`, from the file's content; a clear error when none fits."""
    path = Path(path)
    if path.is_dir():
        raise ReaderError(f"{path}: is a directory, not a measurements file")
    head = _head(path)
    if head.startswith(("{", "[")):
        events = _trace_events(path)
        if events is None:
            raise ReaderError(f"{path}: JSON without a 'traceEvents' list: not a torch.profiler or Spyre trace "
                              f"(give --format to say what it is: {', '.join(FORMATS)})")
        return "spyre" if is_spyre_trace(events) else "torch-trace"
    lines = head.splitlines()
    if any(line.startswith('"ID",') for line in lines):
        return "ncu"
    try:
        header = next(csv.reader(io.StringIO(lines[0]))) if lines else []
    except csv.Error:
        header = []
    if "workload_json" in header or {"op_class", "duration_s", "bytes_by_level"} <= set(header):
        return "bench"
    if "name" in header and any(column in header for column in GENERIC_DURATIONS):
        return "generic"
    first = lines[0][:80] if lines else "(empty file)"
    raise ReaderError(f"{path}: cannot tell the measurements format from its content (first line: {first!r}); "
                      f"expected an Nsight Compute CSV (a '\"ID\",' header), a torch.profiler or Spyre trace (JSON with "
                      f"'traceEvents'), a generic CSV (columns name and duration...) or a 'perfmodel bench' CSV. Give "
                      f"--format {'|'.join(FORMATS)} if it is one of them.")


def load_measurements(path: str | Path, format_name: str | None, hardware, *, clock_hz: float | None = None,
                      tensor_flops_per_instruction: float | None = None) -> Measurements:
    """Read ``path`` (in ``format_name``, or detected) into records for ``hardware``'s fit."""
    path = Path(path)
    format_name = format_name or detect_format(path)
    if format_name not in FORMATS:
        raise ReaderError(f"{path}: unknown format {format_name!r}; choose one of {', '.join(FORMATS)}")
    try:
        measurements = _load(path, format_name, hardware, clock_hz, tensor_flops_per_instruction)
    except PerfmodelError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as error:
        # A structure no reader check anticipated: still bad input, reported as such.
        raise ReaderError(f"{path}: not a readable {format_name} file ({type(error).__name__}: {error}); check "
                          "--format and the file") from None
    described = FORMAT_DESCRIPTIONS.get(format_name)
    if described is None:
        return measurements
    records = tuple(record if record.tool_version else replace(record, tool_version=f"{described} {path.name}")
                    for record in measurements.records)
    return replace(measurements, records=records)


def _load(path: Path, format_name: str, hardware, clock_hz, tensor_factor) -> Measurements:
    from calibration.readers.spyre import DEFAULT_SOC_CLOCK_HZ, read_flex_trace
    from calibration.readers.trace_ops import read_trace_ops

    if format_name == "ncu":
        from calibration.counters import counter_measurements
        from calibration.readers.ncu import read_ncu_csv

        records = read_ncu_csv(path, tensor_flops_per_instruction=tensor_factor)
        return counter_measurements(records, hardware, str(path))
    if format_name == "torch-trace":
        return read_trace_ops(path, hardware=hardware)
    if format_name == "spyre":
        clock = clock_hz or DEFAULT_SOC_CLOCK_HZ
        events = _trace_events(path)
        if events is not None and is_flex_trace(events):
            records = read_flex_trace(path, clock_hz=clock)
            unmapped = [Unmapped(name=record.name, reason="a Flex trace records no op shapes",
                                 time_s=record.duration_s) for record in records]
            return Measurements(source_file=str(path), format="spyre", route="shape", records=(),
                                unmapped=tuple(group_unmapped(unmapped)),
                                total_s=sum(record.duration_s for record in records))
        return read_trace_ops(path, hardware=hardware, spyre=True, clock_hz=clock)
    if format_name == "generic":
        from calibration.readers.generic import read_generic_ops

        return read_generic_ops(path, hardware=hardware)
    return _bench(path)


def _bench(path: Path) -> Measurements:
    from calibration.records import read_records

    records, unmapped = [], []
    for position, record in enumerate(read_records(path)):
        if not record.workload_json:
            unmapped.append(Unmapped(name=record.name, reason="carries no workload graph",
                                     time_s=record.duration_s * record.count, count=record.count))
            continue
        try:
            record.graph()
        except PerfmodelError as error:
            problem = " ".join(line.strip() for line in str(error).splitlines()[:3])
            raise ReaderError(f"{path}:{position + 2}: column 'workload_json': not a valid graph: {problem}") from None
        records.append(record)
    total = sum(record.duration_s * record.count for record in records) + sum(item.time_s for item in unmapped)
    return Measurements(source_file=str(path), format="bench", route="shape", records=tuple(records),
                        unmapped=tuple(group_unmapped(unmapped)), total_s=total)
