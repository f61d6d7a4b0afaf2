"""perfmodel.landscape: Lab 1's landscape table, one definition for every lab that grows it.

The numbers are checked against a hand computation on the TPU v5e, whose spec prices both kernels as a
plain roofline plus one program launch (a compiled program: the matmul is compute-bound, the add bound by
its HBM)."""

import dataclasses
import math
import subprocess
import sys

import nbformat
import pandas as pd
import pytest

import perfmodel
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import Parameters
from perfmodel.landscape import (
    ADD_ELEMENTS,
    GEMM_N,
    RATIO_COLUMNS,
    ROW_COLUMNS,
    describe_row,
    landscape_dtype,
    landscape_row,
    landscape_table,
)
from tests.notebook_runs import NOTEBOOKS, code_cells

FIVE = ["h100-sxm", "tpu-v5e", "cerebras-wse-3", "groq-lpu-v1", "ibm-spyre"]
CPU = "epyc-zen4-2vcpu-fitted"  # a shipped CPU spec, standing in for the labs' detected one
GEMM_FLOPS = 2 * GEMM_N**3
ADD_BYTES = 3 * ADD_ELEMENTS * 2  # two bf16 inputs read, one output written


@pytest.fixture(scope="module")
def tpu():
    return perfmodel.load_hardware("tpu-v5e")


@pytest.fixture(scope="module")
def table():
    hardware = [perfmodel.load_hardware(name) for name in [CPU, *FIVE]]
    return landscape_table([landscape_row(spec) for spec in hardware])


def test_a_row_matches_the_hand_computation(tpu):
    launch = tpu.scheduling.mode().program_launch_s  # one compiled program per kernel
    row = landscape_row(tpu)
    assert row["system"] == "tpu-v5e" and row["dtype"] == "bf16" and row["memory"] == "hbm"
    assert row["peak TFLOP/s"] == pytest.approx(197.0)  # the spec's bf16 peak
    assert row["bandwidth TB/s"] == pytest.approx(0.819)  # the spec's HBM bandwidth
    assert row["gemm 4096 (ms)"] == pytest.approx((GEMM_FLOPS / 197e12 + launch) * 1e3, rel=1e-9)
    assert row["add 64M (ms)"] == pytest.approx((ADD_BYTES / 819e9 + launch) * 1e3, rel=1e-9)
    assert (row["gemm bound"], row["add bound"]) == ("compute", "memory:hbm")
    assert list(row) == list(ROW_COLUMNS)


def test_each_system_is_compared_in_its_16_bit_format_and_a_cpu_in_fp32():
    dtypes = {name: landscape_dtype(perfmodel.load_hardware(name)) for name in [CPU, *FIVE]}
    assert dtypes == {CPU: "fp32", "h100-sxm": "bf16", "tpu-v5e": "bf16", "cerebras-wse-3": "bf16",
                      "groq-lpu-v1": "fp16", "ibm-spyre": "fp16"}


def test_a_label_names_the_row(tpu):
    assert landscape_row(tpu, "tpu-v5e, a what-if (lab 9)")["system"] == "tpu-v5e, a what-if (lab 9)"


def test_parameters_scale_the_peak_and_the_bandwidth_by_their_efficiencies(tpu):
    launch = tpu.scheduling.mode().program_launch_s
    halved = Parameters(name="test", kind="calibrated", compute_efficiency={"matmul": 0.5},
                        memory_efficiency={"hbm": 0.8})
    row, datasheet = landscape_row(tpu, "fitted", halved), landscape_row(tpu)
    assert row["peak TFLOP/s"] == pytest.approx(0.5 * datasheet["peak TFLOP/s"])
    assert row["bandwidth TB/s"] == pytest.approx(0.8 * datasheet["bandwidth TB/s"])
    # ... and the predictions use the same efficiencies: the row's time is the hand computation at its own figures
    assert row["gemm 4096 (ms)"] == pytest.approx((GEMM_FLOPS / (0.5 * 197e12) + launch) * 1e3, rel=1e-9)
    assert row["add 64M (ms)"] == pytest.approx((ADD_BYTES / (0.8 * 819e9) + launch) * 1e3, rel=1e-9)


def test_the_kind_specific_efficiencies_are_the_ones_used():
    """The peak takes the matmul's efficiency on its engine and dtype, the bandwidth the element-wise one."""
    h100 = perfmodel.load_hardware("h100-sxm")
    parameters = Parameters(compute_efficiency={"matmul:tensor_cores:bf16": 0.7, "*": 0.1},
                            memory_efficiency={"elementwise:hbm": 0.9, "hbm": 0.2})
    row = landscape_row(h100, "h100-sxm, fitted", parameters)
    assert row["peak TFLOP/s"] == pytest.approx(0.7 * 989.4)
    assert row["bandwidth TB/s"] == pytest.approx(0.9 * 3.35)


def test_mode_is_passed_to_the_evaluation():
    h100 = perfmodel.load_hardware("h100-sxm")
    graph, eager = landscape_row(h100, "graph", mode="graph"), landscape_row(h100)
    gemm = perfmodel.Graph(name="gemm", ops=[perfmodel.Op(
        name="gemm", kind="matmul", inputs=(perfmodel.TensorSpec(shape=(GEMM_N, GEMM_N), dtype="bf16"),) * 2,
        outputs=(perfmodel.TensorSpec(shape=(GEMM_N, GEMM_N), dtype="bf16"),),
        attrs={"m": GEMM_N, "n": GEMM_N, "k": GEMM_N})])
    assert graph["gemm 4096 (ms)"] == pytest.approx(perfmodel.evaluate(gemm, h100, mode="graph").total_s * 1e3)
    assert graph["gemm 4096 (ms)"] != eager["gemm 4096 (ms)"]
    assert (graph["peak TFLOP/s"], graph["bandwidth TB/s"]) == (eager["peak TFLOP/s"], eager["bandwidth TB/s"])


def test_the_table_has_lab_1s_columns_indexed_by_system(table):
    assert table.index.name == "system" and list(table.index) == [CPU, *FIVE]
    assert list(table.columns) == [*ROW_COLUMNS[1:], *RATIO_COLUMNS]
    assert list(RATIO_COLUMNS) == ["gemm speed-up", "peak ratio", "add speed-up", "bandwidth ratio"]


def test_the_baselines_ratios_are_one_and_the_others_are_ratios_to_it(table):
    assert table.iloc[0][list(RATIO_COLUMNS)].tolist() == [1.0, 1.0, 1.0, 1.0]
    cpu, tpu = table.loc[CPU], table.loc["tpu-v5e"]
    assert tpu["gemm speed-up"] == pytest.approx(cpu["gemm 4096 (ms)"] / tpu["gemm 4096 (ms)"])
    assert tpu["add speed-up"] == pytest.approx(cpu["add 64M (ms)"] / tpu["add 64M (ms)"])
    assert tpu["peak ratio"] == pytest.approx(197.0 / cpu["peak TFLOP/s"])
    assert tpu["bandwidth ratio"] == pytest.approx(0.819 / cpu["bandwidth TB/s"])
    assert all(math.isfinite(value) and value > 0 for value in table[list(RATIO_COLUMNS)].to_numpy().ravel())


def test_a_grown_row_is_last_and_the_others_do_not_move(table, tpu):
    rows = [landscape_row(perfmodel.load_hardware(name)) for name in [CPU, *FIVE]]
    lab_row = landscape_row(tpu, "tpu-v5e, fitted (lab 9)", Parameters(memory_efficiency={"hbm": 0.5}))
    grown = landscape_table(rows + [lab_row])
    assert list(grown.index) == [CPU, *FIVE, "tpu-v5e, fitted (lab 9)"]
    pd.testing.assert_frame_equal(grown.iloc[:-1], table)
    assert grown.iloc[-1]["bandwidth ratio"] == pytest.approx(table.loc["tpu-v5e", "bandwidth ratio"] / 2)


def test_describe_row_states_a_row_in_words(table):
    text = describe_row(table.loc["tpu-v5e"])
    gemm, add = table.loc["tpu-v5e", "gemm 4096 (ms)"], table.loc["tpu-v5e", "add 64M (ms)"]
    assert text == (f"tpu-v5e: peak 197 TFLOP/s, hbm 819 GB/s; gemm 4096 {gemm:.4g} ms (bound by compute), "
                    f"add 64M {add:.4g} ms (bound by memory:hbm)")


# --- bad input -------------------------------------------------------------------------------------------------


def test_a_spec_without_the_format_it_is_compared_in_is_refused(tpu):
    engines = {name: dataclasses.replace(engine, peak_flops_per_s={"int8": 394e12}) for name, engine in tpu.compute.items()}
    int8_only = dataclasses.replace(tpu, compute=engines)
    with pytest.raises(PerfmodelError, match="tpu-v5e has no place in the landscape table: it needs a bf16 or fp16 peak"):
        landscape_row(int8_only)


def test_rows_must_be_of_hardware_and_parameters(tpu):
    with pytest.raises(TypeError, match="needs a Hardware"):
        landscape_row("tpu-v5e")
    with pytest.raises(TypeError, match="parameters must be a perfmodel.Parameters"):
        landscape_row(tpu, "fitted", {"matmul": 0.5})


def test_a_table_needs_a_baseline_complete_rows_and_distinct_names(tpu):
    row = landscape_row(tpu)
    with pytest.raises(PerfmodelError, match="at least one row"):
        landscape_table([])
    with pytest.raises(PerfmodelError, match=r"landscape row 1 lacks \['add bound'\]"):
        landscape_table([row, {key: value for key, value in row.items() if key != "add bound"}])
    with pytest.raises(PerfmodelError, match=r"repeated: \['tpu-v5e'\]"):
        landscape_table([row, row])


def test_the_pure_core_does_not_import_it():
    code = ("import sys, perfmodel, perfmodel.roofline, perfmodel.llm, perfmodel.training; "
            "perfmodel.evaluate(perfmodel.load_graph('transformer_block'), perfmodel.load_hardware('h100-sxm')); "
            "print('perfmodel.landscape' in sys.modules, 'pandas' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"], result.stdout


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("0*.ipynb")), ids=lambda path: path.stem[:2])
def test_every_lab_builds_its_landscape_with_this_module(path):
    """One definition: no lab defines its own landscape row or table; each imports them from here."""
    notebook = nbformat.read(path, as_version=4)
    source = "\n".join(cell.source for cell in code_cells(notebook))
    assert "def landscape_row(" not in source and "def grown_landscape(" not in source
    assert "from perfmodel.landscape import " in source
    assert len(code_cells(notebook, calling="landscape_table(lab1_rows")) == 1


def test_a_calibrated_spec_states_its_own_efficiencies_without_parameters():
    fitted = perfmodel.load_hardware("epyc-zen4-2vcpu-fitted")
    assert fitted.efficiency is not None
    row = landscape_row(fitted)
    assert row == landscape_row(fitted, parameters=fitted.efficiency)
    engine = next(name for name, engine in fitted.compute.items() if engine.peak_flops_per_s.get("fp32"))
    expected = fitted.compute[engine].peak_flops_per_s["fp32"] * fitted.efficiency.compute(engine, "fp32", "matmul")
    assert row["peak TFLOP/s"] * 1e12 == pytest.approx(expected)
