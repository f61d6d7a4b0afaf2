"""Lab 1's landscape table: what each system's spec predicts for a large matmul and a large add (edge module).

One row per system: its peak compute and its outermost on-device memory's bandwidth (from the spec), and
perfmodel's prediction of two kernels that sit on either side of every ridge point: a 4096 x 4096 by
4096 x 4096 matmul (right of every ridge: compute-bound, unless a fixed cost sets its time, as scheduling does
on Spyre) and a 64M-element add (left of every ridge: memory-bound, unless a fixed cost sets it; the table's
bound columns say which). Each system
runs them in its 16-bit format (bf16, else fp16), a CPU in fp32. The table sets the rows beside the first
one (the baseline, this CPU in the labs) as speed-ups and spec ratios, so that a matmul's speed-up can be
read against the ratio of peaks and an add's against the ratio of bandwidths.

Lab 1 builds the table; each later lab adds one row for what it measured or changed (a fitted efficiency,
a what-if spec, an execution mode), evaluated through :func:`landscape_row`'s ``parameters`` and ``mode``.
A row evaluated with ``parameters`` states what the system achieves with them: its peak and bandwidth
columns are the datasheet figures times the parameters' matmul compute efficiency and element-wise memory
efficiency, the same efficiencies its two predictions use.

This module imports pandas, so the pure core never imports it; it does not display anything (the
notebooks do).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import Hardware, Parameters
from perfmodel.roofline.arrays import DATASHEET
from perfmodel.roofline.results import evaluate
from perfmodel.workload.ir import Graph, Op, TensorSpec

GEMM_N = 4096  # the matmul: GEMM_N x GEMM_N by GEMM_N x GEMM_N
ADD_ELEMENTS = 64_000_000  # the add: two vectors of this many elements into a third

# The columns of a row, in order ("system" becomes the table's index).
ROW_COLUMNS = ("system", "dtype", "peak TFLOP/s", "memory", "bandwidth TB/s", "gemm 4096 (ms)", "gemm bound",
               "add 64M (ms)", "add bound")
# The columns landscape_table adds: each row against the first.
RATIO_COLUMNS = ("gemm speed-up", "peak ratio", "add speed-up", "bandwidth ratio")


def landscape_dtype(hardware: Hardware) -> str:
    """The format a system is compared in: fp32 on a CPU, else bf16, else fp16 (its 16-bit format)."""
    if hardware.family == "cpu":
        dtype = "fp32"
    else:
        dtype = "bf16" if hardware.peak_flops_per_s("bf16") else "fp16"
    if not hardware.peak_flops_per_s(dtype):
        wanted = "an fp32 peak (it is a CPU)" if dtype == "fp32" else "a bf16 or fp16 peak"
        raise PerfmodelError(f"{hardware.name} has no place in the landscape table: it needs {wanted}")
    return dtype


def landscape_ops(dtype: str) -> tuple[Op, Op]:
    """The table's two kernels in ``dtype``: the 4096 matmul and the 64M-element add."""
    def spec(*shape: int) -> TensorSpec:
        return TensorSpec(shape=shape, dtype=dtype)

    gemm = Op(name="gemm", kind="matmul", inputs=(spec(GEMM_N, GEMM_N), spec(GEMM_N, GEMM_N)),
              outputs=(spec(GEMM_N, GEMM_N),), attrs={"m": GEMM_N, "n": GEMM_N, "k": GEMM_N})
    add = Op(name="add", kind="elementwise", inputs=(spec(ADD_ELEMENTS), spec(ADD_ELEMENTS)),
             outputs=(spec(ADD_ELEMENTS),))
    return gemm, add


def landscape_row(hardware: Hardware, label: str | None = None, parameters: Parameters | None = None,
                  mode: str | None = None) -> dict[str, Any]:
    """One row of the landscape table: ``hardware``'s peak and outermost bandwidth, and the 4096 matmul and
    the 64M-element add predicted on it, in its :func:`landscape_dtype`.

    ``label`` names the row (default: the spec's name). ``parameters`` (efficiencies, fixed costs) and
    ``mode`` (an execution mode such as ``"graph"``) are passed to :func:`perfmodel.evaluate`; with
    ``parameters`` the peak is scaled by their matmul compute efficiency on the engine the matmul runs on
    and the bandwidth by their element-wise memory efficiency of that memory, so the row states what the
    system achieves with them. Without ``parameters`` a calibrated spec's own efficiencies are used (as
    :func:`perfmodel.evaluate` does), and any other spec's peak and bandwidth are the datasheet's.
    """
    if not isinstance(hardware, Hardware):
        raise TypeError(f"landscape_row needs a Hardware (perfmodel.load_hardware), not {type(hardware).__name__}")
    if parameters is not None and not isinstance(parameters, Parameters):
        raise TypeError(f"landscape_row's parameters must be a perfmodel.Parameters, not {type(parameters).__name__}")
    dtype = landscape_dtype(hardware)
    # A calibrated spec carries its efficiencies, which ``evaluate`` applies by default: its row states them.
    parameters = hardware.efficiency if parameters is None else parameters
    evaluated_with = DATASHEET if parameters is None else parameters
    gemm, add = (evaluate(Graph(name=op.name, ops=[op]), hardware, mode=mode, parameters=evaluated_with)
                 for op in landscape_ops(dtype))
    memory = hardware.outermost_on_device
    compute_efficiency = memory_efficiency = 1.0
    if parameters is not None:
        engine = next(op.engine for op in gemm.ops if op.kind == "matmul")
        compute_efficiency = parameters.compute(engine, dtype, "matmul")
        memory_efficiency = parameters.memory(memory.name, "elementwise")
    return {"system": label or hardware.name, "dtype": dtype,
            "peak TFLOP/s": hardware.peak_flops_per_s(dtype) * compute_efficiency / 1e12, "memory": memory.name,
            "bandwidth TB/s": memory.bandwidth_bytes_per_s * memory_efficiency / 1e12,
            "gemm 4096 (ms)": gemm.total_s * 1e3, "gemm bound": gemm.bound,
            "add 64M (ms)": add.total_s * 1e3, "add bound": add.bound}


def landscape_table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The landscape table of ``rows`` (each from :func:`landscape_row`), indexed by system, with each row's
    ratios to the first (the baseline): ``gemm speed-up`` and ``add speed-up`` (the baseline's time over the
    row's) beside ``peak ratio`` and ``bandwidth ratio`` (the row's figure over the baseline's). The
    baseline's ratios are all 1."""
    rows = list(rows)
    if not rows:
        raise PerfmodelError("the landscape table needs at least one row: the first is the baseline of the ratios")
    for position, row in enumerate(rows):
        missing = [column for column in ROW_COLUMNS if column not in row]
        if missing:
            raise PerfmodelError(f"landscape row {position} lacks {missing}: build rows with landscape_row")
    systems = [row["system"] for row in rows]
    repeated = sorted({system for system in systems if systems.count(system) > 1})
    if repeated:
        raise PerfmodelError(f"the landscape table names each row once; repeated: {repeated} (give a label)")
    table = pd.DataFrame(rows, columns=list(ROW_COLUMNS)).set_index("system")
    base = table.iloc[0]
    table["gemm speed-up"] = base["gemm 4096 (ms)"] / table["gemm 4096 (ms)"]
    table["peak ratio"] = table["peak TFLOP/s"] / base["peak TFLOP/s"]
    table["add speed-up"] = base["add 64M (ms)"] / table["add 64M (ms)"]
    table["bandwidth ratio"] = table["bandwidth TB/s"] / base["bandwidth TB/s"]
    return table


def describe_row(row: pd.Series) -> str:
    """One table row in words: ``<system>: peak <p> TFLOP/s, <memory> <b> GB/s; gemm 4096 <t> ms (bound by
    <bound>), add 64M <t> ms (bound by <bound>)``, four significant digits."""
    return (f"{row.name}: peak {row['peak TFLOP/s']:.4g} TFLOP/s, {row['memory']} {row['bandwidth TB/s'] * 1e3:.4g} GB/s; "
            f"gemm 4096 {row['gemm 4096 (ms)']:.4g} ms (bound by {row['gemm bound']}), "
            f"add 64M {row['add 64M (ms)']:.4g} ms (bound by {row['add bound']})")
