"""Published kernel-level microbenchmarks: the sourced CSVs in ``calibration/data/published/``.

They calibrate the *achievable* overlays of devices nobody here can run (DESIGN.md section 7): matmul
TFLOP/s by shape, bandwidth by working-set size and memory level, collective bandwidth by message
size, attention TFLOP/s by sequence length, decode attention time by batch and KV length. Every row
carries its URL, the commit or version it was read at, the tool and the conditions;
``calibration/data/published/README.md`` describes the sources.

``load_published(kind)`` reads one file with the standard library, checks every row (required
columns, positive finite numbers, known devices and enumerations, a URL and a version) and returns a
list of dicts with typed values (``None`` for an empty optional cell) plus the row's ``line``. A bad
row raises :class:`PublishedDataError` naming the file, the line, the column and what was expected.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path

from calibration.readers.common import ReaderError, fail
from perfmodel.yaml_source import open_for_reading

DATA_DIRECTORY = Path(__file__).resolve().parent / "data" / "published"

#: Catalog spec names the rows may name (tests check that each one loads as a spec).
DEVICES = ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "mi300x", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e")
DTYPES = ("bf16", "fp16", "fp8", "fp32", "tf32")
LEVELS = ("hbm", "l2", "l1")
PATTERNS = ("read", "write", "copy", "init", "scale", "triad", "stencil3pt", "stencil5pt")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
DIRECTIONS = ("fwd", "bwd", "fwd_bwd")
ROW_KINDS = ("measured",)


class PublishedDataError(ReaderError):
    """A published-data CSV is malformed; the message names the file, the line and the column."""


# A column: (name, parser, required). Parsers take the stripped text and return the value or raise
# ValueError with what was expected.
Parser = Callable[[str], object]


def _text(value: str) -> str:
    return value


def _url(value: str) -> str:
    if not value.startswith("https://"):
        raise ValueError(f"expected an https:// URL, got {value!r}")
    return value


def _choice(options: tuple[str, ...]) -> Parser:
    def parse(value: str) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}; got {value!r}")
        return value

    return parse


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"expected a positive integer, got {value!r}") from None
    if number <= 0:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return number


def _gpu_count(value: str) -> int:
    number = _positive_int(value)
    if number < 2:
        raise ValueError(f"expected at least 2 GPUs in a collective, got {value!r}")
    return number


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a positive number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"expected a positive finite number, got {value!r}")
    return number


def _boolean(value: str) -> bool:
    if value not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return value == "true"


COMMON = [("source", _text, True), ("device", _choice(DEVICES), True), ("url", _url, True), ("tool", _text, True),
          ("version", _text, True), ("conditions", _text, True), ("kind", _choice(ROW_KINDS), True)]

SCHEMAS: dict[str, list[tuple[str, Parser, bool]]] = {
    "matmul": [("dtype", _choice(DTYPES), True), ("batch", _positive_int, True), ("m", _positive_int, True),
               ("n", _positive_int, True), ("k", _positive_int, True), ("measured_tflops", _positive_float, False),
               ("time_s", _positive_float, False)],
    "memory_bandwidth": [("level", _choice(LEVELS), True), ("pattern", _choice(PATTERNS), True),
                         ("bytes", _positive_int, True), ("measured_bytes_per_s", _positive_float, True)],
    "collectives": [("collective", _choice(COLLECTIVES), True), ("gpus", _gpu_count, True),
                    ("message_bytes", _positive_int, True), ("dtype", _choice(DTYPES), True),
                    ("algorithm", _text, False), ("time_s", _positive_float, False),
                    ("alg_bytes_per_s", _positive_float, False), ("bus_bytes_per_s", _positive_float, False)],
    "attention": [("dtype", _choice(DTYPES), True), ("batch", _positive_int, True), ("heads", _positive_int, True),
                  ("seq_len", _positive_int, True), ("head_dim", _positive_int, True), ("causal", _boolean, True),
                  # window: keys each query attends, its own included (sliding-window masks); block: the
                  # kernel's key block where the source sets it (masked blocks are skipped whole)
                  ("window", _positive_int, False), ("block", _positive_int, False),
                  ("direction", _choice(DIRECTIONS), True), ("implementation", _text, True),
                  ("measured_tflops", _positive_float, False), ("time_s", _positive_float, False)],
    # One new query token per sequence attending to a KV cache of seq_kv tokens (LLM decode kernels).
    "decode_attention": [("dtype", _choice(DTYPES), True), ("batch", _positive_int, True),
                         ("heads", _positive_int, True), ("kv_heads", _positive_int, True),
                         ("seq_kv", _positive_int, True), ("head_dim", _positive_int, True),
                         ("implementation", _text, True), ("time_us", _positive_float, True)],
}

#: Per kind, the measured-value columns of which each row must fill at least one.
MEASURED_VALUES = {"matmul": ("measured_tflops", "time_s"), "memory_bandwidth": ("measured_bytes_per_s",),
                   "collectives": ("time_s", "alg_bytes_per_s", "bus_bytes_per_s"),
                   "attention": ("measured_tflops", "time_s"),
                   "decode_attention": ("time_us",)}

KINDS = tuple(SCHEMAS)


def published_path(kind: str) -> Path:
    """The shipped CSV of ``kind`` (one of :data:`KINDS`)."""
    if kind not in SCHEMAS:
        raise PublishedDataError(f"unknown kind of published data {kind!r}; expected one of {', '.join(KINDS)}")
    return DATA_DIRECTORY / f"{kind}.csv"


def load_published(kind: str, path: str | Path | None = None) -> list[dict]:
    """Read and validate the published rows of ``kind`` (from ``path`` instead of the shipped file if given)."""
    shipped = published_path(kind)  # also rejects an unknown kind
    path = shipped if path is None else Path(path)
    columns = COMMON + SCHEMAS[kind]
    names = [name for name, _parse, _required in columns]
    rows = []
    with open_for_reading(path, encoding="utf-8-sig", error_class=PublishedDataError) as stream:
        reader = csv.DictReader(stream)
        try:
            header = reader.fieldnames
            if not header:
                raise fail_published(path, 1, None, f"empty file; expected a header with {', '.join(names)}")
            missing = [name for name in names if name not in header]
            if missing:
                raise fail_published(path, 1, missing[0], f"missing column; a {kind} file needs {', '.join(names)}")
            unknown = [name for name in header if name not in names]
            if unknown:
                raise fail_published(path, 1, unknown[0], f"unknown column; a {kind} file has {', '.join(names)}")
            duplicated = [name for name in names if header.count(name) > 1]
            if duplicated:
                raise fail_published(path, 1, duplicated[0], "column appears twice")
            for record in reader:
                rows.append(_row(kind, columns, record, path, reader.line_num, len(header)))
        except UnicodeDecodeError as error:
            raise PublishedDataError(f"{path}: not UTF-8 text ({error})") from None
        except csv.Error as error:
            raise fail_published(path, reader.line_num, None, f"not valid CSV ({error})") from None
    if not rows:
        raise fail_published(path, None, None, "no data rows")
    return rows


def load_all_published() -> dict[str, list[dict]]:
    """Every shipped file, by kind."""
    return {kind: load_published(kind) for kind in KINDS}


def _row(kind: str, columns, record: dict, path: Path, line: int, width: int) -> dict:
    if None in record:
        raise fail_published(path, line, None, f"{width + len(record[None])} fields; the header has {width}")
    if None in record.values():
        count = sum(value is not None for value in record.values())
        raise fail_published(path, line, None, f"{count} fields; the header has {width} (truncated row?)")
    row: dict = {"line": line}
    for name, parse, required in columns:
        text = record[name].strip()
        if not text:
            if required:
                raise fail_published(path, line, name, "empty; this column is required")
            row[name] = None
            continue
        try:
            row[name] = parse(text)
        except ValueError as error:
            raise fail_published(path, line, name, str(error)) from None
    measured = MEASURED_VALUES[kind]
    if all(row[name] is None for name in measured):
        raise fail_published(path, line, measured[0], f"no measured value; give at least one of {', '.join(measured)}")
    return row


def fail_published(path, line, column, message: str) -> PublishedDataError:
    """:func:`calibration.readers.common.fail`'s message, as a :class:`PublishedDataError`."""
    return PublishedDataError(str(fail(path, line, column, message)))
