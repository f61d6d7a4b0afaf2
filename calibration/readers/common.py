"""Helpers shared by the readers: numbers as tools print them, units, and clear errors."""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from pathlib import Path

from perfmodel.errors import PerfmodelError

TIME_UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "µs": 1e-6, "msecond": 1e-3, "ms": 1e-3,
              "second": 1.0, "s": 1.0, "psecond": 1e-12, "ps": 1e-12}
BYTE_UNITS = {"byte": 1.0, "bytes": 1.0, "b": 1.0, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9,
              "gb": 1e9, "tbyte": 1e12, "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30}
PLAIN_UNITS = {"": 1.0, "cycle": 1.0, "cycles": 1.0, "inst": 1.0, "warp": 1.0, "sector": 1.0, "%": 1.0,
               "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9, "cycle/second": 1.0, "cycle/nsecond": 1e9,
               "cycle/usecond": 1e6, "inst/cycle": 1.0, "register/thread": 1.0, "block": 1.0, "thread": 1.0,
               "byte/second": 1.0, "kbyte/second": 1e3, "mbyte/second": 1e6, "gbyte/second": 1e9,
               "tbyte/second": 1e12}
ALL_UNITS = {**TIME_UNITS, **BYTE_UNITS, **PLAIN_UNITS}


class ReaderError(PerfmodelError):
    """A measurement file is malformed; the message names the file, the row and the column."""


def fail(path, row, column, message: str) -> ReaderError:
    where = f"{path}" + (f":{row}" if row is not None else "") + (f": column {column!r}" if column else "")
    return ReaderError(f"{where}: {message}")


def unit_factor(unit: str, path, row, column) -> float:
    key = unit.strip().lower()
    if key not in ALL_UNITS:
        raise fail(path, row, column, f"unknown unit {unit!r}; known: {', '.join(sorted(k for k in ALL_UNITS if k))}")
    return ALL_UNITS[key]


_THOUSANDS_COMMA = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
# Periods as thousands separators only where no reading as a decimal point exists: two or more groups
# ("27.595.520") or a decimal comma after them ("1.234,5"); "14.968" is a decimal number.
_THOUSANDS_PERIOD = re.compile(r"^-?\d{1,3}((\.\d{3}){2,}(,\d+)?|\.\d{3},\d+)$")


def tool_number(text: str, path, row, column, *, allow_missing: bool = True) -> float:
    """A number as a profiler prints it: thousands separators of either locale, ``n/a`` -> NaN."""
    value = (text or "").strip().strip('"')
    if value.lower() in ("", "n/a", "na", "nan", "-"):
        if allow_missing:
            return math.nan
        raise fail(path, row, column, f"missing value {text!r}")
    if _THOUSANDS_COMMA.match(value):
        value = value.replace(",", "")
    elif _THOUSANDS_PERIOD.match(value):
        value = value.replace(".", "").replace(",", ".")
    elif re.match(r"^-?\d+,\d+$", value):  # a decimal comma
        value = value.replace(",", ".")
    try:
        number = float(value)
    except ValueError:
        raise fail(path, row, column, f"{text!r} is not a number") from None
    if math.isinf(number):
        raise fail(path, row, column, f"{text!r} is not finite")
    return number


def positive_duration(seconds: float, path, row, column) -> float:
    """A measured duration: finite and more than zero (a kernel or op that took no time, or forever,
    is a broken measurement, not one a fit can use)."""
    if math.isnan(seconds):
        raise fail(path, row, column, "duration is missing (NaN)")
    if seconds < 0:
        raise fail(path, row, column, f"negative duration {seconds!r} s; a measurement takes more than zero seconds")
    if not math.isfinite(seconds) or seconds == 0:
        raise fail(path, row, column, f"{'infinite' if seconds else 'zero'} duration: a measurement takes a finite "
                                      "time of more than zero seconds (fix or delete it)")
    return seconds


def counter_value(value: float, path, row, column, *, allow_missing: bool = True) -> float:
    """A FLOP or byte count: finite and not negative; NaN (not measured) only when ``allow_missing``."""
    if math.isnan(value) and allow_missing:
        return value
    if not math.isfinite(value) or value < 0:
        raise fail(path, row, column, f"{value!r} is not a count: counters are finite and at least 0")
    return value


def json_count(value, path, row, column) -> float:
    """A byte or FLOP count from a JSON trace: a number (or a numeric string), finite, at least 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise fail(path, row, column, f"expected a number of bytes, got {value!r}")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise fail(path, row, column, f"{value!r} is not a number") from None
    return counter_value(number, path, row, column, allow_missing=False)


def event_args(event: dict, path, index: int, key: str = "args") -> dict:
    """The ``args`` mapping of a trace event ({} when absent); anything but a JSON object is an error."""
    args = event.get(key)
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise fail(path, f"event {index}", key, f"expected a JSON object of arguments in {event.get('name')!r}, got "
                                                f"{type(args).__name__} {str(args)[:60]!r}")
    return args


def event_id(args: dict, key: str, path, index: int):
    """An id that links trace events (``External id``, ``correlation``): an integer or a string; None when
    absent."""
    value = args.get(key)
    if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
        return value
    raise fail(path, f"event {index}", key, f"expected an integer id, got {value!r}")


def load_json(path: Path):
    """JSON or gzip-compressed JSON; a truncated or invalid file is reported with its position."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ReaderError(f"cannot read {path}: {error}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except (OSError, EOFError, zlib.error) as error:
        raise ReaderError(f"{path}: not a readable gzip file ({error}); truncated or corrupt?") from None
    except UnicodeDecodeError as error:
        raise ReaderError(f"{path}: not a UTF-8 JSON file ({error.reason} at byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise ReaderError(f"{path}:{error.lineno}: column {error.colno}: not valid JSON ({error.msg}); "
                          "truncated file?") from None
    except RecursionError:
        raise ReaderError(f"{path}: JSON nested too deeply to be a profiler trace") from None
