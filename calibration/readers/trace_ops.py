"""The shape route of a profiler trace (torch.profiler with ``record_shapes=True``; torch-spyre):
one fit-ready record per priced aten op, the rest listed as unmapped time.

Which op a time belongs to: CPU ops nest on each thread (``aten::linear`` encloses ``aten::t`` and
``aten::addmm``, which encloses a ``copy_`` of the bias). Walking down from each outermost op, the
first op that the capture's op table prices (:func:`calibration.shapes.trace_op`) owns its whole
subtree; an op it cannot price passes its children on, and keeps only its own time outside them
(listed as unmapped). A view is free in the model, so its time is unmapped too.

* CPU traces (no device events): a record's time is its op's ``dur`` (host wall time, including the
  dispatch: ``clock="host"``); the trace's time is the sum of its outermost ops.
* GPU and Spyre traces: a record's time is the sum of the device events (kernels, device-side
  copies and sets) launched inside its op, linked by ``External id`` (or the runtime call's
  ``correlation``); ``clock="device"``. Events linked to no priced op, and host<->device copies,
  are unmapped; the trace's time is the sum of all device events. A Spyre kernel's time is its whole
  device span ``TS1 -> TS5`` of ``cycles_ts`` (DMA in, prep, compute, DMA out: the model prices the
  op's LPDDR5 traffic with its compute) at ``clock_hz``, or its ``dur`` when the counters are zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from calibration.readers.common import ReaderError, event_args, event_id, fail, load_json
from calibration.readers.spyre import DEFAULT_SOC_CLOCK_HZ, cycles_between, trace_counter
from calibration.readers.torch_trace import DEVICE_CATEGORIES, US, trace_events
from calibration.records import MeasurementRecord, Measurements, Unmapped, group_unmapped, kernel_label
from calibration.shapes import NotMapped, ShapeError, trace_op
from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError

RUNTIME_CATEGORIES = ("cuda_runtime", "privateuse1_runtime", "xpu_runtime")
HOST_TRANSFERS = ("HtoD", "DtoH", "HtoH", "PtoP")
TIME_TOLERANCE_US = 1e-3  # trace timestamps are rounded to the nanosecond


@dataclass
class _Node:
    index: int
    event: dict
    start: float
    end: float
    duration_s: float
    children: list = field(default_factory=list)
    owner: _Node | None = None   # the priced op whose subtree holds this op
    op: object = None            # the IR op, when this node is priced
    reason: str = ""             # why this node is not priced


def _times(event: dict, path, index: int) -> tuple[float, float]:
    for key in ("ts", "dur"):
        value = event.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise fail(path, f"event {index}", key, f"expected a number of microseconds in {event.get('name')!r}, "
                                                    f"got {value!r}")
    if event["dur"] < 0:
        raise fail(path, f"event {index}", "dur", f"negative duration {event['dur']!r} us in {event.get('name')!r}")
    return float(event["ts"]), float(event["dur"])


def _forest(cpu_ops, path) -> list[_Node]:
    """The outermost ops of every thread, each with its nested ops as children."""
    by_thread: dict = {}
    for index, event in cpu_ops:
        start, duration = _times(event, path, index)
        node = _Node(index=index, event=event, start=start, end=start + duration, duration_s=duration * US)
        by_thread.setdefault((str(event.get("pid")), str(event.get("tid"))), []).append(node)
    roots = []
    for nodes in by_thread.values():
        nodes.sort(key=lambda node: (node.start, -node.end, node.index))
        stack: list[_Node] = []
        for node in nodes:
            while stack and node.start >= stack[-1].end - TIME_TOLERANCE_US:
                stack.pop()
            if stack and node.end <= stack[-1].end + TIME_TOLERANCE_US:
                stack[-1].children.append(node)
            else:
                stack.clear()
                roots.append(node)
            stack.append(node)
    return roots


def _price(node: _Node, path, hardware, list_dtype: str | None = None) -> None:
    """Price ``node`` or, failing that, its children (recursively)."""
    args = event_args(node.event, path, node.index)
    name = str(node.event.get("name", ""))
    _check_recorded_lists(args, path, node.index)
    try:
        if "Input Dims" not in args:
            raise NotMapped("no shapes recorded (profile with record_shapes=True)")
        node.op = trace_op(name, args["Input Dims"], args.get("Input type"), args.get("Concrete Inputs"),
                           op_name=_label(name, args), list_dtype=list_dtype)
        if hardware is not None:
            from perfmodel.costs.rules import CostContext, op_cost

            op_cost(node.op, CostContext(hardware=hardware))
    except NotMapped as error:
        node.op, node.reason = None, error.reason
    except ShapeError as error:
        raise fail(path, f"event {node.index}", error.field, str(error).split(": ", 1)[1]) from None
    except PerfmodelError as error:  # the spec cannot run it (no engine for the dtype)
        node.op, node.reason = None, str(error).split(";")[0]
    if node.op is not None:
        _own(node, node)
        return
    for child in node.children:
        _price(child, path, hardware, list_dtype)


def _check_recorded_lists(args: dict, path, index: int) -> None:
    """``Input type`` is a list of type names and ``Concrete Inputs`` a list (one entry per argument), as
    torch.profiler records them with ``record_shapes=True``; ``Input Dims`` is checked by the op table."""
    types = args.get("Input type")
    if types is not None and not (isinstance(types, list) and all(isinstance(name, str) for name in types)):
        raise fail(path, f"event {index}", "Input type", f"expected a list of type names, one per argument "
                                                         f"(e.g. [\"float\", \"float\"]), got {str(types)[:80]}")
    concrete = args.get("Concrete Inputs")
    if concrete is not None and not isinstance(concrete, list):
        raise fail(path, f"event {index}", "Concrete Inputs", f"expected a list, one entry per argument, got "
                                                              f"{str(concrete)[:80]}")


def _own(node: _Node, owner: _Node) -> None:
    node.owner = owner
    for child in node.children:
        _own(child, owner)


def _label(name: str, args) -> str:
    recorded = args.get("Input Dims")
    dims = [dims for dims in (recorded if isinstance(recorded, list) else []) if isinstance(dims, list) and dims
            and all(isinstance(dim, int) for dim in dims)]
    return f"{name}({', '.join('x'.join(str(dim) for dim in shape) for shape in dims)})"


def _walk(roots):
    for root in roots:
        yield root
        yield from _walk(root.children)


def _host_unmapped(roots) -> list[Unmapped]:
    """Time of unpriced ops outside their priced descendants (CPU traces)."""
    items = []
    for node in _walk(roots):
        if node.op is not None or node.owner is not None:
            continue
        own = max(node.duration_s - sum(child.duration_s for child in node.children), 0.0)
        if own > 0:
            items.append(Unmapped(name=str(node.event.get("name", "")), reason=node.reason, time_s=own))
    return items


def _spyre_seconds(event: dict, path, index: int, clock_hz: float) -> float | None:
    cycles = event_args(event, path, index).get("cycles_ts")
    if isinstance(cycles, list) and len(cycles) == 5 and any(cycles):
        counts = [trace_counter(value, path, f"event {index}", "cycles_ts") for value in cycles]
        return cycles_between(counts[0], counts[4]) / clock_hz
    return None


def _record(node: _Node, seconds: float, launches: int, clock: str, path, tool: str, tool_version: str,
            hardware, device: str) -> MeasurementRecord:
    from perfmodel.workload.io import dumps
    from perfmodel.workload.ir import Graph

    graph = Graph(name=node.op.name, ops=(node.op,))
    flops = math.nan
    if hardware is not None:
        from perfmodel.costs.rules import CostContext, op_cost

        flops = float(op_cost(node.op, CostContext(hardware=hardware)).flops)
    return MeasurementRecord(
        name=node.op.name, op_class=node.op.kind, duration_s=seconds, flops=flops, launches=launches,
        device=device, tool=tool, tool_version=tool_version, flops_source="analytic_shapes", source_file=str(path),
        source_row=node.index, workload_json=dumps(graph, "json"), clock=clock)


def read_trace_ops(path: str | Path, *, hardware=None, spyre: bool = False,
                   clock_hz: float = DEFAULT_SOC_CLOCK_HZ, tool_version: str = "",
                   list_dtype: str | None = None) -> Measurements:
    """Shape-route records of a torch.profiler (or torch-spyre) Chrome trace; ``hardware``: the spec
    the ops are priced on (ops it cannot run are unmapped); ``list_dtype``: the dtype of tensor lists whose
    dtype the trace does not record (``aten::cat``'s inputs; a perfmodel dtype name such as ``"fp32"``),
    else such calls stay unmapped."""
    if list_dtype is not None and list_dtype not in DTYPES:
        raise ValueError(f"read_trace_ops: list_dtype {list_dtype!r} is not a perfmodel dtype; expected one of "
                         f"{sorted(DTYPES)}")
    path = Path(path)
    data = load_json(path)
    events = trace_events(path, data)
    properties = data.get("deviceProperties") if isinstance(data, dict) else None
    device_name = next((str(item.get("name")) for item in properties or [] if isinstance(item, dict)
                        and item.get("name")), "spyre" if spyre else "")
    cpu_ops = [(index, event) for index, event in enumerate(events)
               if isinstance(event, dict) and event.get("ph") == "X" and event.get("cat") == "cpu_op"]
    device = [(index, event) for index, event in enumerate(events)
              if isinstance(event, dict) and event.get("ph") == "X" and event.get("cat") in DEVICE_CATEGORIES]
    if not cpu_ops and not device:
        raise ReaderError(f"{path}: the trace has no cpu_op or device (kernel, memcpy, memset) events")
    roots = _forest(cpu_ops, path)
    for root in roots:
        _price(root, path, hardware, list_dtype)
    tool = "torch.profiler (torch-spyre)" if spyre else "torch.profiler"
    format_name = "spyre" if spyre else "torch-trace"
    if not device:
        records = [_record(node, node.duration_s, 1, "host", path, tool, tool_version, hardware, "host CPU")
                   for node in _walk(roots) if node.op is not None and node.duration_s > 0]
        total = sum(root.duration_s for root in roots)
        return Measurements(source_file=str(path), format=format_name, route="shape", records=tuple(records),
                            unmapped=tuple(group_unmapped(_host_unmapped(roots))), total_s=total)
    return _device_measurements(path, events, roots, device, spyre, clock_hz, tool, tool_version, hardware,
                                format_name, device_name)


def _device_measurements(path, events, roots, device, spyre, clock_hz, tool, tool_version, hardware,
                         format_name, device_name) -> Measurements:
    by_external = {}
    for node in _walk(roots):
        external = event_id(event_args(node.event, path, node.index), "External id", path, node.index)
        if external is not None:
            by_external[external] = node
    runtime_external = {}
    for index, event in enumerate(events):
        if isinstance(event, dict) and event.get("cat") in RUNTIME_CATEGORIES:
            args = event_args(event, path, index)
            correlation, external = event_id(args, "correlation", path, index), event_id(args, "External id", path,
                                                                                          index)
            if correlation is not None and external is not None:
                runtime_external[correlation] = external
    spans: dict[int, list] = {}   # owner node index -> [node, seconds, launches]
    unmapped, total = [], 0.0
    for index, event in device:
        start, duration = _times(event, path, index)
        seconds = (_spyre_seconds(event, path, index, clock_hz) if spyre else None) or duration * US
        total += seconds
        args = event_args(event, path, index)
        name = kernel_label(str(event.get("name") or "")) or f"<unnamed {event.get('cat')}>"
        if event.get("cat") == "gpu_memcpy" and any(kind in name for kind in HOST_TRANSFERS):
            unmapped.append(Unmapped(name=name, reason="a host<->device transfer (the model prices device work)",
                                     time_s=seconds))
            continue
        external = event_id(args, "External id", path, index)
        if external is None:
            external = runtime_external.get(event_id(args, "correlation", path, index))
        node = by_external.get(external)
        if node is None:
            unmapped.append(Unmapped(name=name, reason="not linked to a CPU op (no External id or correlation)",
                                     time_s=seconds))
        elif node.owner is None:
            op_name = str(node.event.get("name", ""))
            unmapped.append(Unmapped(name=f"{op_name}/{name}", reason=f"{op_name}: {node.reason}", time_s=seconds))
        else:
            entry = spans.setdefault(node.owner.index, [node.owner, 0.0, 0])
            entry[1] += seconds
            entry[2] += 1
    records = [_record(owner, seconds, launches, "device", path, tool, tool_version, hardware, device_name)
               for owner, seconds, launches in sorted(spans.values(), key=lambda entry: entry[0].index)
               if seconds > 0]
    return Measurements(source_file=str(path), format=format_name, route="shape", records=tuple(records),
                        unmapped=tuple(group_unmapped(unmapped)), total_s=total)
