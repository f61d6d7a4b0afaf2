"""Quantities with units, parsed into SI floats at the edges of perfmodel.

Inside perfmodel every quantity is a plain float in SI base units whose name carries the unit
(``bandwidth_bytes_per_s``). Units appear only in files and on screens, as strings such as
``"3.35 TB/s"``, ``"80 GB"``, ``"50 MiB"``, ``"989 TFLOP/s"``, ``"1979 TOP/s"``, ``"1.98 GHz"``,
``"700 W"`` or ``"4 us"``.

Conventions
-----------
* Decimal prefixes are powers of ten (``GB`` = 1e9 bytes); binary prefixes are powers of two
  (``GiB`` = 2**30 bytes). ``GB != GiB``.
* ``B`` is a byte and ``b`` a bit (``Gb/s`` = 1e9/8 bytes per second). ``KB`` and ``Kb`` are
  rejected as ambiguous: write ``kB`` (1000) or ``KiB`` (1024).
* Compute rates count operations per second: ``FLOP/s``, ``FLOPS``, ``OP/s`` and ``OPS`` are the
  same dimension (integer ``TOPS`` and floating-point ``TFLOP/s`` are both "operations per second").
* A bare number on a dimensional field is an error: the unit must be written.
* A fused multiply-add counts as 2 FLOPs (``FLOPS_PER_FMA``), as in every vendor peak and in
  ``torch.utils.flop_counter``.

The parser is a small table lookup rather than pint so that ``import perfmodel`` stays fast and the
core depends on the standard library only; the test suite checks it against pint.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from perfmodel.errors import UnitError

BITS_PER_BYTE = 8
FLOPS_PER_FMA = 2


@dataclass(frozen=True, kw_only=True)
class Dimension:
    """A physical dimension: its SI unit symbol, a readable name and an example for messages."""

    key: str
    unit: str
    description: str
    example: str


DIMENSIONS: dict[str, Dimension] = {
    dimension.key: dimension
    for dimension in (
        Dimension(key="bytes", unit="B", description="a data size", example="80 GB"),
        Dimension(key="bytes_per_s", unit="B/s", description="a bandwidth", example="3.35 TB/s"),
        Dimension(key="flops_per_s", unit="FLOP/s", description="a compute rate", example="989 TFLOP/s"),
        Dimension(key="hertz", unit="Hz", description="a frequency", example="1.98 GHz"),
        Dimension(key="watts", unit="W", description="a power", example="700 W"),
        Dimension(key="seconds", unit="s", description="a duration", example="4 us"),
        Dimension(key="usd_per_hour", unit="USD/h", description="a price per hour", example="2.50 USD/h"),
    )
}

_DECIMAL_PREFIXES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY_PREFIXES = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
_SUBUNIT_PREFIXES = {"": 1.0, "m": 1e-3, "u": 1e-6, "µ": 1e-6, "μ": 1e-6, "n": 1e-9, "p": 1e-12}


def _build_unit_table() -> dict[str, tuple[str, float]]:
    """Every accepted unit spelling -> (dimension key, factor to the SI unit)."""
    table: dict[str, tuple[str, float]] = {}
    data_prefixes = {**_DECIMAL_PREFIXES, **_BINARY_PREFIXES}
    byte_symbols = {"B": 1.0, "byte": 1.0, "bytes": 1.0, "b": 1 / BITS_PER_BYTE, "bit": 1 / BITS_PER_BYTE,
                    "bits": 1 / BITS_PER_BYTE}
    for prefix, scale in data_prefixes.items():
        for symbol, per_byte in byte_symbols.items():
            table[prefix + symbol] = ("bytes", scale * per_byte)
            table[prefix + symbol + "/s"] = ("bytes_per_s", scale * per_byte)
        table[prefix + "Bps"] = ("bytes_per_s", scale)
        table[prefix + "bps"] = ("bytes_per_s", scale / BITS_PER_BYTE)
    for prefix, scale in _DECIMAL_PREFIXES.items():
        for symbol in ("FLOP/s", "flop/s", "FLOPS", "OP/s", "op/s", "OPS"):
            table[prefix + symbol] = ("flops_per_s", scale)
        table[prefix + "Hz"] = ("hertz", scale)
        table[prefix + "W"] = ("watts", scale)
    table["mW"] = ("watts", 1e-3)
    for prefix, scale in _SUBUNIT_PREFIXES.items():
        table[prefix + "s"] = ("seconds", scale)
    table["min"] = ("seconds", 60.0)
    table["h"] = ("seconds", 3600.0)
    for symbol in ("USD/h", "USD/hour", "USD/hr", "$/h", "$/hour", "$/hr"):
        table[symbol] = ("usd_per_hour", 1.0)
    return table


_UNITS = _build_unit_table()
_AMBIGUOUS = {
    "KB": "write 'kB' (1000 bytes) or 'KiB' (1024 bytes)",
    "Kb": "write 'kb' (1000 bits) or 'Kib' (1024 bits)",
    "KB/s": "write 'kB/s' or 'KiB/s'",
    "TFLOPs": "write 'TFLOP/s' for a rate or 'TFLOP' for a count",
    "GFLOPs": "write 'GFLOP/s' for a rate or 'GFLOP' for a count",
    "PFLOPs": "write 'PFLOP/s' for a rate or 'PFLOP' for a count",
}
_QUANTITY = re.compile(r"^\s*(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>\S.*?)?\s*$")


def _expected(dimension: str) -> str:
    info = DIMENSIONS[dimension]
    return f"{info.description} with a unit, for example '{info.example}'"


def parse_quantity(text: object, dimension: str) -> float:
    """Parse ``text`` (such as ``"3.35 TB/s"``) into an SI float of ``dimension``.

    ``dimension`` is a key of :data:`DIMENSIONS`. Raises :class:`UnitError` on a bare number, an
    unknown or ambiguous unit, or a quantity of another dimension; the message says what was
    expected, with an example.
    """
    if dimension not in DIMENSIONS:
        raise ValueError(f"unknown dimension {dimension!r}; known: {', '.join(DIMENSIONS)}")
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise UnitError(f"expected {_expected(dimension)}; got {type(text).__name__} {text!r}")
    if isinstance(text, (int, float)):
        raise UnitError(f"bare number {text!r} has no unit: expected {_expected(dimension)}")
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitError(f"cannot read {text!r} as a quantity: expected {_expected(dimension)}")
    unit = match.group("unit")
    if unit is None:
        raise UnitError(f"bare number {text!r} has no unit: expected {_expected(dimension)}")
    if unit in _AMBIGUOUS:
        raise UnitError(f"unit {unit!r} in {text!r} is ambiguous: {_AMBIGUOUS[unit]}")
    if unit not in _UNITS:
        raise UnitError(f"unknown unit {unit!r} in {text!r}: expected {_expected(dimension)}")
    found, factor = _UNITS[unit]
    if found != dimension:
        raise UnitError(
            f"{text!r} is {DIMENSIONS[found].description}, but {_expected(dimension)} is expected"
        )
    value = float(match.group("number")) * factor
    if not math.isfinite(value):
        raise UnitError(f"{text!r} is not a finite quantity")
    return value


_DISPLAY_PREFIXES = (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))
_DISPLAY_BINARY = (("Ei", 2.0**60), ("Pi", 2.0**50), ("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20),
                   ("Ki", 2.0**10), ("", 1.0))
_DISPLAY_SECONDS = (("", 1.0), ("m", 1e-3), ("u", 1e-6), ("n", 1e-9), ("p", 1e-12))


def format_quantity(value: float, dimension: str, *, digits: int = 4, binary: bool = False) -> str:
    """Format an SI float as a readable quantity string that :func:`parse_quantity` reads back.

    ``digits`` is the number of significant digits; ``binary=True`` uses KiB/MiB/GiB for sizes.
    """
    info = DIMENSIONS[dimension]
    prefixes: tuple[tuple[str, float], ...]
    if dimension == "seconds":
        prefixes = _DISPLAY_SECONDS
    elif binary and dimension in ("bytes", "bytes_per_s"):
        prefixes = _DISPLAY_BINARY
    elif dimension == "usd_per_hour":
        prefixes = (("", 1.0),)
    else:
        prefixes = _DISPLAY_PREFIXES
    magnitude = abs(value)
    if magnitude == 0:
        return f"0 {info.unit}"
    prefix, scale = prefixes[-1]
    for candidate, candidate_scale in prefixes:
        if magnitude >= candidate_scale:
            prefix, scale = candidate, candidate_scale
            break
    return f"{value / scale:.{digits}g} {prefix}{info.unit}"
