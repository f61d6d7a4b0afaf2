"""The shipped published-microbenchmark CSVs load, are sourced, are physically plausible, and a bad row is
reported by file, line and column."""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import pytest

from calibration.published import (
    DATA_DIRECTORY,
    DEVICES,
    KINDS,
    PublishedDataError,
    load_published,
    published_path,
)
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_hardware

ROOT = Path(__file__).resolve().parent.parent
VALIDATION = ROOT / "workloads" / "validation" / "published_measurements.csv"


@pytest.fixture(scope="module")
def published():
    return {kind: load_published(kind) for kind in KINDS}


def test_every_shipped_file_loads_with_rows(published):
    assert set(KINDS) == {"matmul", "memory_bandwidth", "collectives", "attention", "decode_attention"}
    for kind, rows in published.items():
        assert published_path(kind).is_file()
        assert len(rows) >= (10 if kind == "decode_attention" else 50), kind
    assert (DATA_DIRECTORY / "README.md").is_file()


def test_every_row_names_a_url_a_version_a_tool_and_is_measured(published):
    for kind, rows in published.items():
        for row in rows:
            where = f"{kind}.csv:{row['line']}"
            assert row["url"].startswith("https://"), where
            assert row["version"].strip(), where
            assert row["tool"].strip() and row["conditions"].strip(), where
            assert row["kind"] == "measured", where
            if row["url"].startswith("https://github.com/"):
                assert f"/blob/{row['version']}/" in row["url"], f"{where}: the URL is not pinned to the version"


def test_the_device_names_are_catalog_specs(published):
    for name in DEVICES:
        assert load_hardware(name).name == name
    assert {row["device"] for rows in published.values() for row in rows} <= set(DEVICES)


def test_matmul_rates_stay_under_the_datasheet_dense_peak(published):
    for row in published["matmul"]:
        peak = load_hardware(row["device"]).peak_flops_per_s(row["dtype"])
        assert peak > 0, f"{row['device']} has no {row['dtype']} peak"
        flops = 2 * row["batch"] * row["m"] * row["n"] * row["k"]
        rates = [row["measured_tflops"] * 1e12] if row["measured_tflops"] else []
        rates += [flops / row["time_s"]] if row["time_s"] else []
        for rate in rates:
            assert rate <= peak, f"matmul.csv:{row['line']}: {rate / 1e12:.1f} TFLOP/s > peak {peak / 1e12:.1f}"


def test_h800_rows_stand_in_for_the_h100_only_where_compute_bound(published):
    """H800 SXM5 FP8 GEMMs are filed as h100-sxm (same die, same tensor cores) only where the product is
    compute-bound on the h100-sxm datasheet roofline: an HBM-bound row would measure the H800's memory."""
    path = DATA_DIRECTORY / "extract_sources.py"
    spec = importlib.util.spec_from_file_location("extract_sources", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    hardware = load_hardware("h100-sxm")
    ridge = hardware.peak_flops_per_s("fp8") / hardware.level("hbm").bandwidth_bytes_per_s
    assert float(module.H100_SXM_FP8_RIDGE) == pytest.approx(ridge)
    rows = [row for row in published["matmul"] if "H800" in row["conditions"]]
    assert len(rows) >= 10 and {row["source"] for row in rows} == {"deepgemm-readme", "tilelang-fp8-benchmark"}
    for row in rows:
        b, m, n, k = row["batch"], row["m"], row["n"], row["k"]
        assert row["device"] == "h100-sxm" and row["dtype"] == "fp8", row["line"]
        assert 2 * b * m * n * k / (b * (m * k + k * n + 2 * m * n)) >= ridge, f"matmul.csv:{row['line']}"
        assert module.compute_bound_on_h100(b, m, n, k)


def test_attention_rates_stay_under_the_datasheet_dense_peak(published):
    rated = [row for row in published["attention"] if row["measured_tflops"] is not None]
    assert len(rated) >= 100
    for row in rated:
        peak = load_hardware(row["device"]).peak_flops_per_s(row["dtype"])
        assert 0 < row["measured_tflops"] * 1e12 <= peak, f"attention.csv:{row['line']}"
        assert row["batch"] * row["seq_len"] == 16384 and row["heads"] * row["head_dim"] == 2048


def test_timed_attention_rows_imply_a_rate_under_the_datasheet_peak(published):
    """A row published as a time (axlearn's TPU tables): its attended pairs' FLOPs (4 * head_dim per pair
    forward, 3.5x that forward + backward) over the time stay under the dense peak; the window and the
    kernel block are the source's."""
    from perfmodel.costs.traffic import attended_pairs

    timed = [row for row in published["attention"] if row["time_s"] is not None]
    assert {row["device"] for row in timed} == {"tpu-v5p"} and len(timed) == 26
    for row in timed:
        pairs = float(attended_pairs(row["seq_len"], row["seq_len"], row["causal"], row["window"]))
        flops = 4 * row["head_dim"] * pairs * row["batch"] * row["heads"] * (3.5 if row["direction"] == "fwd_bwd" else 1)
        assert flops / row["time_s"] <= load_hardware(row["device"]).peak_flops_per_s(row["dtype"]), row["line"]
        assert row["block"] == 512 and "host-timed" in row["conditions"], row["line"]


def test_hbm_bandwidth_stays_within_5_percent_of_the_datasheet(published):
    rows = published["memory_bandwidth"]
    assert {row["level"] for row in rows} == {"hbm", "l2", "l1"}
    for row in rows:
        hardware = load_hardware(row["device"])
        if row["level"] == "hbm":
            limit = hardware.level("hbm").bandwidth_bytes_per_s * 1.05
        else:  # on-chip levels: no faster than the fastest level the spec knows
            limit = max(level.bandwidth_bytes_per_s for level in hardware.memory) * 1.05
        assert row["measured_bytes_per_s"] <= limit, f"memory_bandwidth.csv:{row['line']}"


def test_hbm_rows_have_working_sets_beyond_the_l2(published):
    """A GPU's HBM row must not fit its hardware cache; a TPU has none (VMEM is a software-managed scratchpad that a
    jitted copy streams through, so the data comes from HBM on every call)."""
    checked = 0
    for row in published["memory_bandwidth"]:
        if row["level"] == "hbm":
            hardware = load_hardware(row["device"])
            caches = [level.capacity_bytes for level in hardware.memory if level.kind == "cache"]
            if caches:
                checked += 1
                assert row["bytes"] > max(caches), f"memory_bandwidth.csv:{row['line']}"
            else:
                assert hardware.family == "tpu", f"memory_bandwidth.csv:{row['line']}: no cache level"
    assert checked >= 50


BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def test_collective_rates_respect_the_link_bandwidth(published):
    """Each rank must at least send its share: algbw <= link for all-reduce (even with in-switch reduction),
    algbw <= link * n / (n - 1) for the others."""
    for row in published["collectives"]:
        hardware = load_hardware(row["device"])
        link = max(link.bandwidth_bytes_per_s_per_direction * link.links_per_chip
                   for link in hardware.links.values() if link.kind == "chip_to_chip")
        n = row["gpus"]
        assert n <= max(link.max_chips or 8 for link in hardware.links.values() if link.kind == "chip_to_chip")
        bound = link if row["collective"] == "all_reduce" else link * n / (n - 1)
        rates = []
        if row["alg_bytes_per_s"]:
            rates.append(row["alg_bytes_per_s"])
        if row["bus_bytes_per_s"]:
            rates.append(row["bus_bytes_per_s"] / BUS_FACTOR[row["collective"]](n))
        if row["time_s"]:
            rates.append(row["message_bytes"] / row["time_s"])
        for rate in rates:
            assert rate <= bound * 1.05, f"collectives.csv:{row['line']}: {rate / 1e9:.1f} GB/s > {bound / 1e9:.1f}"


def test_published_time_and_bandwidths_agree_where_a_row_gives_several(published):
    """nccl-tests prints time, algbw and busbw rounded; they must agree to that rounding."""
    for row in published["collectives"]:
        if row["time_s"] and row["alg_bytes_per_s"]:
            assert math.isclose(row["message_bytes"] / row["time_s"], row["alg_bytes_per_s"], rel_tol=0.02)
        if row["alg_bytes_per_s"] and row["bus_bytes_per_s"]:
            expected = row["alg_bytes_per_s"] * BUS_FACTOR[row["collective"]](row["gpus"])
            assert math.isclose(expected, row["bus_bytes_per_s"], rel_tol=0.02), row["line"]


def test_rates_grow_with_size_at_the_ends_of_each_sweep(published):
    """A coarse sanity check of the units: the largest message of a sweep is faster than the smallest."""
    sweeps: dict[tuple, list[dict]] = {}
    for row in published["collectives"]:
        key = (row["source"], row["device"], row["collective"], row["gpus"], row["algorithm"], row["tool"])
        sweeps.setdefault(key, []).append(row)
    checked = 0
    for rows in sweeps.values():
        if len(rows) < 5:
            continue
        checked += 1
        rows.sort(key=lambda row: row["message_bytes"])
        rate = "alg_bytes_per_s" if rows[0]["alg_bytes_per_s"] else "bus_bytes_per_s"
        assert rows[-1][rate] > 10 * rows[0][rate]
    assert checked >= 20


def test_no_value_repeats_a_validation_row(published):
    """Calibration and validation data stay disjoint: no group-F validation figure reappears here."""
    assert VALIDATION.is_file(), f"the validation set ships with the project: {VALIDATION}"
    scale = {"TFLOP/s": 1e12, "GB/s": 1e9, "TB/s": 1e12}
    ours = []
    for row in published["matmul"] + published["attention"]:
        if row["measured_tflops"]:
            ours.append(row["measured_tflops"] * 1e12)
    for row in published["memory_bandwidth"]:
        ours.append(row["measured_bytes_per_s"])
    for row in published["collectives"]:
        ours += [row[name] for name in ("alg_bytes_per_s", "bus_bytes_per_s") if row[name]]
    with VALIDATION.open(newline="", encoding="utf-8") as stream:
        for record in csv.DictReader(stream):
            if record["group"] != "F" or record["unit"] not in scale:
                continue
            try:
                value = float(record["value"]) * scale[record["unit"]]
            except ValueError:
                continue  # a range such as 3759-3780
            clashes = [mine for mine in ours if math.isclose(mine, value, rel_tol=1e-9)]
            assert not clashes, f"validation row {record['system']!r} {record['workload']!r} is in the calibration data"


def test_the_attention_file_is_what_the_extraction_script_writes(published):
    """attention.csv carries hand-transcribed figure labels; the script and the file must agree."""
    path = DATA_DIRECTORY / "extract_sources.py"
    spec = importlib.util.spec_from_file_location("extract_sources", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with published_path("attention").open(newline="", encoding="utf-8") as stream:
        shipped = list(csv.DictReader(stream))
    expected = [{key: str(value) for key, value in row.items()} for row in module.attention_rows()]
    assert shipped == expected
    assert module.scaled("139519467775467", module.TERA_INV) == "139.519467775467"
    assert module.scaled("13526.6", module.GIGA) == "13526600000000"
    assert module.scaled("43.83", module.MICRO) == "0.00004383"


# --- malformed files -------------------------------------------------------------------------------


def _write_copy(tmp_path: Path, kind: str, edit) -> Path:
    with published_path(kind).open(newline="", encoding="utf-8") as stream:
        rows = list(csv.reader(stream))
    rows = edit(rows)
    path = tmp_path / f"broken_{kind}.csv"
    with path.open("w", newline="", encoding="utf-8") as stream:
        csv.writer(stream, lineterminator="\n").writerows(rows)
    return path


def _set(rows, line: int, column: str, value: str):
    rows[line - 1][rows[0].index(column)] = value
    return rows


@pytest.mark.parametrize(("kind", "column", "value", "expected"), [
    ("matmul", "device", "h100", "expected one of a100-sxm-80gb"),
    ("matmul", "measured_tflops", "-3", "positive finite number"),
    ("matmul", "measured_tflops", "nan", "positive finite number"),
    ("matmul", "k", "1.5", "positive integer"),
    ("matmul", "dtype", "int4", "expected one of bf16"),
    ("memory_bandwidth", "level", "l3", "expected one of hbm, l2, l1"),
    ("memory_bandwidth", "measured_bytes_per_s", "inf", "positive finite number"),
    ("collectives", "gpus", "1", "at least 2 GPUs"),
    ("collectives", "url", "github.com/openxla/xla", "https:// URL"),
    ("attention", "causal", "yes", "true or false"),
    ("attention", "version", "", "required"),
    ("attention", "url", "", "required"),
])
def test_a_bad_cell_is_reported_by_file_line_and_column(tmp_path, kind, column, value, expected):
    path = _write_copy(tmp_path, kind, lambda rows: _set(rows, 4, column, value))
    with pytest.raises(PublishedDataError) as caught:
        load_published(kind, path)
    message = str(caught.value)
    assert str(path) in message and f"{path}:4" in message, message
    assert f"column {column!r}" in message and expected in message, message
    assert isinstance(caught.value, PerfmodelError)


def test_a_row_without_any_measured_value_is_reported(tmp_path):
    path = _write_copy(tmp_path, "collectives", lambda rows: _set(_set(rows, 3, "alg_bytes_per_s", ""), 3,
                                                                  "bus_bytes_per_s", ""))
    with pytest.raises(PublishedDataError, match=r"broken_collectives\.csv:3: column 'time_s': no measured value"):
        load_published("collectives", path)


def test_a_truncated_or_overlong_row_is_reported(tmp_path):
    path = _write_copy(tmp_path, "matmul", lambda rows: rows[:5] + [rows[5][:4]])
    with pytest.raises(PublishedDataError, match=r"broken_matmul\.csv:6: 4 fields; the header has 14"):
        load_published("matmul", path)
    path = _write_copy(tmp_path, "matmul", lambda rows: rows[:2] + [rows[2] + ["extra"]])
    with pytest.raises(PublishedDataError, match=r"broken_matmul\.csv:3: 15 fields"):
        load_published("matmul", path)


def test_a_missing_or_unknown_column_is_reported_on_the_header_line(tmp_path):
    def drop_url(rows):
        index = rows[0].index("url")
        return [row[:index] + row[index + 1:] for row in rows]

    path = _write_copy(tmp_path, "attention", drop_url)
    with pytest.raises(PublishedDataError, match=r"broken_attention\.csv:1: column 'url': missing column"):
        load_published("attention", path)
    path = _write_copy(tmp_path, "attention", lambda rows: [rows[0] + ["note"]] + [row + [""] for row in rows[1:]])
    with pytest.raises(PublishedDataError, match=r"broken_attention\.csv:1: column 'note': unknown column"):
        load_published("attention", path)


def test_empty_unreadable_and_unknown_inputs(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(PublishedDataError, match="empty file"):
        load_published("matmul", empty)
    header_only = _write_copy(tmp_path, "matmul", lambda rows: rows[:1])
    with pytest.raises(PublishedDataError, match="no data rows"):
        load_published("matmul", header_only)
    with pytest.raises(PublishedDataError, match="cannot read"):
        load_published("matmul", tmp_path / "absent.csv")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"source,device\n\xff\xfe\x00garbage\n")
    with pytest.raises(PublishedDataError, match="not UTF-8"):
        load_published("matmul", binary)
    with pytest.raises(PublishedDataError, match="unknown kind of published data 'gemm'"):
        load_published("gemm")


def test_decode_attention_reads_its_kv_cache_no_faster_than_the_datasheet(published):
    """Each decode row's KV cache (K and V of every sequence) read in its published time stays under the
    device's HBM bandwidth, and the record built from it is one query token against that cache."""
    from calibration.achievable import _decode_attention
    from perfmodel.dtypes import DTYPES

    for row in published["decode_attention"]:
        elements = 2 * row["batch"] * row["kv_heads"] * row["seq_kv"] * row["head_dim"]  # K and V
        kv_bytes = elements * DTYPES[row["dtype"]].bytes_per_element
        bandwidth = load_hardware(row["device"]).level("hbm").bandwidth_bytes_per_s
        assert kv_bytes / (row["time_us"] * 1e-6) <= bandwidth, f"decode_attention.csv:{row['line']}"
        record = _decode_attention(row, row["device"])
        (op,) = record.graph().ops
        assert op.attrs["seq_q"] == 1 and op.attrs["seq_kv"] == row["seq_kv"] and op.attrs["kv_heads"] == row["kv_heads"]
        assert record.duration_s == pytest.approx(row["time_us"] * 1e-6)
        assert sum(tensor.bytes for tensor in op.inputs if tensor.role == "kv_cache") == kv_bytes
