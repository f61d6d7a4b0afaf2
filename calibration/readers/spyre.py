"""IBM Spyre traces: the torch.profiler trace of torch-spyre (kernel events with ``cycles_ts``) and
the older "Flex" JSON traces (``B``/``E`` event pairs with ``TS1``..``TS5`` device cycle counters).

Flex counters are 32-bit (hex or decimal strings) and wrap; phases come from the name suffix
(`` DmaI`` TS1->TS2, `` Cmpt Prep`` TS2->TS3, `` Cmpt Exec`` TS3->TS4, `` DmaO`` TS4->TS5).
Durations from cycles use ``clock_hz`` (the SoC clock; a calibration parameter in itself: the
trace analyzer warns when the effective frequency drifts).
"""

from __future__ import annotations

from pathlib import Path

from calibration.readers.common import ReaderError, event_args, fail, json_count, positive_duration
from calibration.readers.torch_trace import US, trace_events
from calibration.records import MeasurementRecord

COUNTER_BITS = 32
DEFAULT_SOC_CLOCK_HZ = 1.0e9  # aiu-trace-analyzer's default --freq SoC value (1000 MHz)
PHASES = {" DmaI": ("TS1", "TS2", "dma_in"), " Cmpt Prep": ("TS2", "TS3", "prep"),
          " Cmpt Exec": ("TS3", "TS4", "compute"), " DmaO": ("TS4", "TS5", "dma_out")}


def trace_counter(value, path, row, column) -> int:
    """A 32-bit device cycle counter: an integer or a hex or decimal string, from 0 to 2**32 - 1."""
    text = str(value).strip()
    try:
        if isinstance(value, (bool, float)) or not isinstance(value, (int, str)):
            raise ValueError
        count = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise fail(path, row, column, f"{value!r} is not a cycle counter (hex or decimal)") from None
    if not 0 <= count < 1 << COUNTER_BITS:
        raise fail(path, row, column, f"{value!r} is not a {COUNTER_BITS}-bit cycle counter (0 to "
                                      f"{(1 << COUNTER_BITS) - 1})")
    return count


def cycles_between(start: int, end: int) -> int:
    """Cycles from ``start`` to ``end`` on a counter that wraps at 2**32."""
    return (end - start) % (1 << COUNTER_BITS)


def read_flex_trace(path: str | Path, *, clock_hz: float = DEFAULT_SOC_CLOCK_HZ) -> list[MeasurementRecord]:
    path = Path(path)
    records = []
    for index, event in enumerate(trace_events(path)):
        if not isinstance(event, dict) or event.get("ph") != "B":
            continue
        name = str(event.get("name", ""))
        phase = next((suffix for suffix in PHASES if name.endswith(suffix)), None)
        if phase is None:
            continue
        counters = event_args(event, path, index, "attr" if event.get("attr") is not None else "args")
        first, last, op_class = PHASES[phase]
        if first not in counters or last not in counters:
            raise fail(path, f"event {index}", last if first in counters else first,
                       f"missing cycle counter in {name!r}")
        cycles = cycles_between(trace_counter(counters[first], path, f"event {index}", first),
                                trace_counter(counters[last], path, f"event {index}", last))
        levels = {"pcie": json_count(counters["Bytes"], path, f"event {index}", "Bytes")} if "Bytes" in counters else {}
        seconds = positive_duration(cycles / clock_hz, path, f"event {index}", f"{first}..{last}")
        records.append(MeasurementRecord(
            name=name.removesuffix(phase), op_class=op_class, duration_s=seconds, bytes_by_level=levels,
            device="spyre", tool="spyre-flex-trace", flops_source="unknown",
            bytes_source="hw_counter" if levels else "unknown", source_file=str(path), source_row=index))
    if not records:
        raise ReaderError(f"{path}: no Flex phase events (names ending in DmaI, Cmpt Prep, Cmpt Exec or DmaO)")
    return records


def read_spyre_torch_trace(path: str | Path, *, clock_hz: float = DEFAULT_SOC_CLOCK_HZ,
                           tool_version: str = "") -> list[MeasurementRecord]:
    """Kernel events of a torch-spyre profile; device time from ``cycles_ts`` (TS3->TS4) when the
    counters are valid, else the event's ``dur``. Memcpy/memset events become transfer records."""
    path = Path(path)
    records = []
    for index, event in enumerate(trace_events(path)):
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        category = event.get("cat")
        if category not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        args = event_args(event, path, index)
        cycles = args.get("cycles_ts")
        duration = None
        if category == "kernel" and isinstance(cycles, list) and len(cycles) == 5 and any(cycles):
            counts = [trace_counter(value, path, f"event {index}", "cycles_ts") for value in cycles]
            duration = cycles_between(counts[2], counts[3]) / clock_hz
        if duration is None:
            try:
                duration = float(event["dur"]) * US
            except (KeyError, TypeError, ValueError):
                raise fail(path, f"event {index}", "dur", "missing duration") from None
        positive_duration(duration, path, f"event {index}", "dur")
        name = str(event.get("name") or "") or f"spyre_kernel#{index}"  # some images leave names blank
        levels = {"pcie": json_count(args["bytes"], path, f"event {index}", "bytes")} if "bytes" in args else {}
        records.append(MeasurementRecord(
            name=name, op_class="spyre_kernel" if category == "kernel" else "transfer", duration_s=duration,
            bytes_by_level=levels, device="spyre", tool="torch.profiler (torch-spyre)", tool_version=tool_version,
            bytes_source="hw_counter" if levels else "unknown", source_file=str(path), source_row=index))
    if not records:
        raise ReaderError(f"{path}: no kernel, memcpy or memset events")
    return records
