"""vLLM's per-tensor dynamic fp8 scale (issue 29): its GEMM rows time a reduction of the activations to one
scale, one thread block a token and an atomic max each, before the quantize pass and the GEMM
(``calibration.aiconfigurator.ATOMIC_SCALE_GEMMS``); the reduction's blocks are priced as work units."""

from __future__ import annotations

import pandas as pd
import pytest

from calibration.achievable import device_time_hardware
from calibration.aiconfigurator import ATOMIC_SCALE_GEMMS, Table, gemm_ops, records
from calibration.fit import fit
from calibration.records import MeasurementRecord
from perfmodel.costs.rules import CostContext, op_cost
from perfmodel.hardware.loader import load_hardware
from perfmodel.hardware.model import Parameters
from perfmodel.roofline import evaluate
from perfmodel.workload.io import dumps
from perfmodel.workload.ir import Graph


def _kinds(ops):
    return [op.kind for op in ops]


def test_only_vllm_fp8_rows_reduce_to_one_scale_a_block_a_row():
    assert ("vllm", "fp8") in ATOMIC_SCALE_GEMMS
    scale, quantize, gemm = gemm_ops(4096, 32, 2048, "fp8", "vllm")
    assert (scale.kind, quantize.kind, gemm.kind) == ("reduction", "elementwise", "matmul")
    assert scale.attrs["blocks"] == 4096 and scale.inputs[0].shape == (4096, 2048)
    assert scale.inputs[0].dtype == "bf16" and quantize.inputs[0].dtype == "bf16"
    # the other engines' fp8 quantizers keep the one quantize kernel; bf16 and fp8_block rows have no reduction
    assert _kinds(gemm_ops(4096, 32, 2048, "fp8", "trtllm")) == ["elementwise", "matmul"]
    assert _kinds(gemm_ops(4096, 32, 2048, "fp8", "sglang")) == ["elementwise", "matmul"]
    assert _kinds(gemm_ops(4096, 32, 2048, "bf16", "vllm")) == ["matmul"]
    assert "reduction" not in _kinds(gemm_ops(4096, 128, 2048, "fp8_block", "vllm"))


def test_table_rows_are_built_with_the_engine_that_measured_them(tmp_path):
    frame = pd.DataFrame([{"framework": "VLLM", "gemm_dtype": "fp8", "m": 256, "n": 32, "k": 32, "latency": 0.007},
                          {"framework": "VLLM", "gemm_dtype": "bfloat16", "m": 256, "n": 32, "k": 32, "latency": 0.003}])
    source = Table(gpu="h100-sxm", engine="vllm", version="0.24.0", kind="gemm", path=tmp_path / "gemm_perf.parquet",
                   package_version="0.12.0")
    built = {record.op_class: _kinds(record.graph().ops) for record in records(source, frame, {})}
    assert built == {"gemm:fp8": ["reduction", "elementwise", "matmul"], "gemm:bf16": ["matmul"]}
    other = Table(gpu="h100-sxm", engine="trtllm", version="1.3.0rc20", kind="gemm", path=tmp_path / "g.parquet",
                  package_version="0.12.0")
    assert [_kinds(record.graph().ops) for record in records(other, frame.iloc[:1], {})] == [["elementwise", "matmul"]]


def test_the_reduction_counts_its_blocks_and_pays_them_per_unit():
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    scale = gemm_ops(32768, 32, 32, "fp8", "vllm")[0]
    assert op_cost(scale, CostContext(hardware=hardware)).work_units == 32768
    plain = gemm_ops(32768, 32, 32, "fp8", "trtllm")[0]
    assert op_cost(plain, CostContext(hardware=hardware)).work_units == 0
    units = hardware.compute[op_cost(scale, CostContext(hardware=hardware)).engine].units
    parameters = Parameters(name="p", kind="calibrated", compute_latency_s={"reduction@unit": 1e-6})
    few, many = (evaluate(Graph(name="g", ops=[gemm_ops(m, 32, 32, "fp8", "vllm")[0]]), hardware, mode="graph",
                          parameters=parameters).ops[0] for m in (1024, 32768))
    # the blocks' time is linear in the rows where the bytes are nothing: 31744 more blocks over the units
    assert many.fixed_s - few.fixed_s == pytest.approx((32768 - 1024) / units * 1e-6)


def _record(graph_ops, duration, index) -> MeasurementRecord:
    return MeasurementRecord(name=f"r{index}", op_class="gemm:fp8", duration_s=duration, device="h100-sxm",
                             tool="synthetic", tool_version="1", flops_source="analytic_shapes",
                             bytes_source="model_derived", clock="device",
                             workload_json=dumps(Graph(name=f"r{index}", ops=list(graph_ops)), "json"))


def test_the_fit_recovers_the_per_block_cost_from_the_rows():
    """Synthetic truth of 0.9 us a block and SM (vLLM's H100 table: ~7 ns a row over 132 SMs): fitted from
    GEMM rows whose m spans 1 to 32768, with the small rows telling the fixed costs apart."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated", compute_efficiency={"matmul": 0.7},
                       compute_latency_s={"matmul": 2.5e-6, "elementwise": 1.5e-6, "reduction": 1.5e-6,
                                          "reduction@unit": 0.9e-6})
    shapes = [(m, n, k) for m in (1, 16, 128, 1024, 4096, 32768) for n in (32, 4096) for k in (32, 4096)]
    rows = []
    for index, (m, n, k) in enumerate(shapes):
        ops = gemm_ops(m, n, k, "fp8", "vllm")
        rows.append(_record(ops, evaluate(Graph(name="g", ops=list(ops)), hardware, mode="graph",
                                          parameters=truth).total_s, index))
    result = fit(rows, hardware, mode="graph", folds=0, extra_seeds=0)
    fitted = {name: value for name, (value, _) in result.params.items()}
    assert fitted["latency:reduction@unit"] == pytest.approx(0.9e-6, rel=0.15)
    assert result.median_abs_error < 0.03
