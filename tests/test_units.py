"""Units: hand-computed conversions, clear errors, pint as an independent oracle, round trips."""

import math

import pint
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.errors import UnitError
from perfmodel.units import DIMENSIONS, format_quantity, parse_quantity

HAND_COMPUTED = [
    ("3.35 TB/s", "bytes_per_s", 3.35e12),
    ("80 GB", "bytes", 80e9),
    ("80 GiB", "bytes", 80 * 1024**3),
    ("50 MiB", "bytes", 50 * 1048576),
    ("48 kB", "bytes", 48_000),
    ("128 B", "bytes", 128),
    ("989 TFLOP/s", "flops_per_s", 989e12),
    ("1979 TOP/s", "flops_per_s", 1979e12),
    ("750 TOPS", "flops_per_s", 750e12),
    ("15.8 PFLOP/s", "flops_per_s", 15.8e15),
    ("1.98 GHz", "hertz", 1.98e9),
    ("900 MHz", "hertz", 9e8),
    ("700 W", "watts", 700),
    ("23 kW", "watts", 23_000),
    ("4 us", "seconds", 4e-6),
    ("4 µs", "seconds", 4e-6),
    ("3 ms", "seconds", 3e-3),
    ("0.58 us", "seconds", 0.58e-6),
    ("100 Gb/s", "bytes_per_s", 12.5e9),   # bits: 100e9 / 8
    ("1.2 Tbps", "bytes_per_s", 150e9),    # 1.2e12 bits / 8
    ("800 GiB/s", "bytes_per_s", 800 * 2**30),
    ("819 GBps", "bytes_per_s", 819e9),
    ("8 bit", "bytes", 1.0),
    ("2.50 USD/h", "usd_per_hour", 2.5),
    ("1e3 GB/s", "bytes_per_s", 1e12),
]


@pytest.mark.parametrize("text, dimension, expected", HAND_COMPUTED)
def test_hand_computed(text, dimension, expected):
    assert parse_quantity(text, dimension) == pytest.approx(expected, rel=1e-12)


def test_gb_is_not_gib():
    assert parse_quantity("1 GB", "bytes") == 1e9
    assert parse_quantity("1 GiB", "bytes") == 1073741824
    assert parse_quantity("1 GiB", "bytes") / parse_quantity("1 GB", "bytes") == pytest.approx(1.073741824)


@pytest.mark.parametrize("value", [3.35, 80, "3.35", "  42 "])
def test_bare_number_is_an_error_with_an_example(value):
    with pytest.raises(UnitError, match=r"no unit: expected a bandwidth with a unit, for example '3.35 TB/s'"):
        parse_quantity(value, "bytes_per_s")


def test_wrong_dimension_says_what_was_expected():
    with pytest.raises(UnitError) as error:
        parse_quantity("80 GB", "bytes_per_s")
    assert str(error.value) == ("'80 GB' is a data size, but a bandwidth with a unit, for example '3.35 TB/s' "
                                "is expected")


@pytest.mark.parametrize("text, hint", [("48 KB", "kB"), ("10 TFLOPs", "TFLOP/s")])
def test_ambiguous_units_are_refused(text, hint):
    with pytest.raises(UnitError, match="ambiguous") as error:
        parse_quantity(text, "bytes" if "B" in text else "flops_per_s")
    assert hint in str(error.value)


@pytest.mark.parametrize("text", ["3 parsecs", "fast", "1.2.3 GB", "GB 3", "", "nan GB"])
def test_unreadable_quantities(text):
    with pytest.raises(UnitError):
        parse_quantity(text, "bytes")


def test_non_string_types_are_refused():
    for value in (None, True, [1], {"a": 1}):
        with pytest.raises(UnitError, match="expected a data size"):
            parse_quantity(value, "bytes")


# pint spells units its own way: (our text, pint text, dimension, pint's SI unit for that dimension).
PINT_CASES = [
    ("3.35 TB/s", "3.35 terabyte/second", "bytes_per_s", "byte/second"),
    ("50 MiB", "50 mebibyte", "bytes", "byte"),
    ("7 GiB/s", "7 gibibyte/second", "bytes_per_s", "byte/second"),
    ("100 Gb/s", "100 gigabit/second", "bytes_per_s", "byte/second"),
    ("1.98 GHz", "1.98 gigahertz", "hertz", "hertz"),
    ("4 us", "4 microsecond", "seconds", "second"),
    ("12 ns", "12 nanosecond", "seconds", "second"),
    ("700 W", "700 watt", "watts", "watt"),
    ("23 kW", "23 kilowatt", "watts", "watt"),
    ("2 TiB", "2 tebibyte", "bytes", "byte"),
    ("256 kB", "256 kilobyte", "bytes", "byte"),
    ("64 Kib", "64 kibibit", "bytes", "byte"),
    ("1.2 Tbps", "1.2 terabit/second", "bytes_per_s", "byte/second"),
]


@pytest.mark.parametrize("ours, theirs, dimension, si_unit", PINT_CASES)
def test_agrees_with_pint(ours, theirs, dimension, si_unit):
    expected = pint.UnitRegistry().Quantity(theirs).to(si_unit).magnitude
    assert parse_quantity(ours, dimension) == pytest.approx(expected, rel=1e-12)


@given(value=st.floats(min_value=1e-12, max_value=1e20, allow_nan=False, allow_infinity=False),
       dimension=st.sampled_from(sorted(DIMENSIONS)), binary=st.booleans())
def test_format_then_parse_round_trips(value, dimension, binary):
    text = format_quantity(value, dimension, digits=17, binary=binary)
    assert math.isclose(parse_quantity(text, dimension), value, rel_tol=1e-14)


@given(value=st.floats(min_value=1e-9, max_value=1e18, allow_nan=False, allow_infinity=False))
def test_display_format_is_close(value):
    text = format_quantity(value, "bytes_per_s")
    assert math.isclose(parse_quantity(text, "bytes_per_s"), value, rel_tol=1e-3)


def test_format_examples():
    assert format_quantity(3.35e12, "bytes_per_s") == "3.35 TB/s"
    assert format_quantity(50 * 2**20, "bytes", binary=True) == "50 MiB"
    assert format_quantity(4e-6, "seconds") == "4 us"
    assert format_quantity(0.0, "seconds") == "0 s"
