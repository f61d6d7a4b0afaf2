"""torch.profiler Chrome traces (Kineto JSON, ``.json`` or ``.json.gz``).

GPU runs: each ``kernel`` (and ``gpu_memcpy``/``gpu_memset``) event becomes a record, linked to the
CPU op that launched it through ``args["External id"]`` (falling back to the runtime call's
``correlation``). CPU-only runs: each leaf ``cpu_op`` (one that encloses no other op on its thread)
becomes a record. ``ts`` and ``dur`` are microseconds. The trace carries no FLOPs (``with_flops``
only feeds ``key_averages()``), so FLOPs are computed from ``Input Dims`` for matmul-like ops and
scaled-dot-product attention, and left NaN otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path

from calibration.readers.common import ReaderError, event_args, event_id, fail, json_count, load_json, positive_duration
from calibration.records import MeasurementRecord
from perfmodel.workload.op_kinds import matmul_flops

US = 1e-6
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def flops_from_dims(name: str, dims) -> float:
    """2 x multiply-adds of matmul-like ATen ops, from ``Input Dims``; NaN when unknown."""
    try:
        short = name.removeprefix("aten::")
        if short == "mm":
            (m, k), (_, n) = dims[0], dims[1]
            return float(matmul_flops(m, n, k))
        if short == "addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return float(matmul_flops(m, n, k))
        if short in ("bmm", "baddbmm"):
            a, b = (dims[0], dims[1]) if short == "bmm" else (dims[1], dims[2])
            return float(matmul_flops(a[1], b[2], a[2], a[0]))
        if short == "linear":
            x, w = dims[0], dims[1]
            tokens = math.prod(x[:-1])
            return 2.0 * tokens * w[0] * w[1]
        if short in ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu"):
            q, k = dims[0], dims[1]
            return 4.0 * math.prod(q[:-2]) * q[-2] * k[-2] * q[-1]
    except (IndexError, TypeError, ValueError):
        return math.nan
    return math.nan


def trace_events(path: Path, data=None) -> list[dict]:
    data = load_json(path) if data is None else data
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ReaderError(f"{path}: no 'traceEvents' list: not a torch.profiler Chrome trace")
    return events


def _duration(event: dict, path, index: int) -> float:
    value = event.get("dur")
    try:
        if isinstance(value, bool):
            raise TypeError
        seconds = float(value) * US
    except (TypeError, ValueError):
        raise fail(path, f"event {index}", "dur", f"missing or non-numeric duration in {event.get('name')!r}: "
                                                  f"expected a number of microseconds, got {value!r}") from None
    return positive_duration(seconds, path, f"event {index}", "dur")


def read_torch_trace(path: str | Path, *, tool_version: str = "") -> list[MeasurementRecord]:
    path = Path(path)
    events = trace_events(path)
    cpu_ops = [(index, event) for index, event in enumerate(events)
               if isinstance(event, dict) and event.get("ph") == "X" and event.get("cat") == "cpu_op"]
    device = [(index, event) for index, event in enumerate(events)
              if isinstance(event, dict) and event.get("ph") == "X" and event.get("cat") in DEVICE_CATEGORIES]
    by_external = {}
    for index, event in cpu_ops:
        external = event_id(event_args(event, path, index), "External id", path, index)
        if external is not None:
            by_external[external] = (index, event)
    runtime_external = {}
    for index, event in enumerate(events):
        if isinstance(event, dict) and event.get("cat") in ("cuda_runtime", "privateuse1_runtime"):
            args = event_args(event, path, index)
            correlation, external = event_id(args, "correlation", path, index), event_id(args, "External id", path,
                                                                                          index)
            if correlation is not None and external is not None:
                runtime_external[correlation] = external
    records = []
    if device:
        for index, event in device:
            args = event_args(event, path, index)
            external = event_id(args, "External id", path, index)
            if external is None:
                external = runtime_external.get(event_id(args, "correlation", path, index))
            op_index, op = by_external.get(external, (index, {}))
            op_args = event_args(op, path, op_index)
            op_name = op.get("name", "")
            records.append(MeasurementRecord(
                name=f"{op_name}/{event.get('name', '')}" if op_name else str(event.get("name", "")),
                op_class=event["cat"], duration_s=_duration(event, path, index),
                flops=flops_from_dims(op_name, op_args.get("Input Dims")) if op_name else math.nan,
                bytes_by_level={"dram": json_count(args["bytes"], path, f"event {index}", "bytes")} if "bytes" in args
                else {},
                device=str(args.get("device", "")), tool="torch.profiler", tool_version=tool_version,
                flops_source="analytic_shapes", bytes_source="hw_counter" if "bytes" in args else "unknown",
                source_file=str(path), source_row=index))
        return records
    for index, event in _leaf_ops(cpu_ops, path):
        args = event_args(event, path, index)
        records.append(MeasurementRecord(
            name=str(event.get("name", "")), op_class="cpu_op", duration_s=_duration(event, path, index),
            flops=flops_from_dims(str(event.get("name", "")), args.get("Input Dims")), tool="torch.profiler",
            tool_version=tool_version, flops_source="analytic_shapes", source_file=str(path), source_row=index))
    if not records:
        raise ReaderError(f"{path}: the trace has no cpu_op or kernel events")
    return records


def _start_us(event: dict, path, index: int) -> float:
    """An event's ``ts`` (microseconds; 0 when absent): a finite number."""
    value = event.get("ts", 0)
    try:
        if isinstance(value, bool):
            raise TypeError
        start = float(value)
    except (TypeError, ValueError):
        raise fail(path, f"event {index}", "ts", f"expected a start time in microseconds in {event.get('name')!r}, "
                                                 f"got {value!r}") from None
    if not math.isfinite(start):
        raise fail(path, f"event {index}", "ts", f"start time {value!r} in {event.get('name')!r} is not finite")
    return start


def _leaf_ops(cpu_ops, path):
    """Ops that contain no other op on the same thread (the ones that did the work)."""
    by_thread: dict = {}
    for index, event in cpu_ops:
        # Each op's span, checked first: a duration that is not a number cannot be ordered or nested.
        span = (_start_us(event, path, index), _duration(event, path, index) / US)
        by_thread.setdefault((event.get("pid"), event.get("tid")), []).append((span, index, event))
    leaves = []
    for ops in by_thread.values():
        ops.sort(key=lambda item: (item[0][0], -item[0][1]))
        for position, ((start, duration), index, event) in enumerate(ops):
            following = ops[position + 1] if position + 1 < len(ops) else None
            if following is None or following[0][0] >= start + duration:
                leaves.append((index, event))
    return sorted(leaves)
