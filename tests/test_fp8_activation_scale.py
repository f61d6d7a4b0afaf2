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


def test_cutlass_scaled_mm_libraries_run_k_whole():
    """vLLM's and SGLang's fp8 GEMMs (CUTLASS, data-parallel tile schedulers) never split k: a skinny product
    with a long k runs on its few output tiles' CTAs, where cuBLAS's (bf16) and TensorRT-LLM's fp8 split it."""
    from perfmodel.costs.rules import unsplit_only

    assert gemm_ops(8, 64, 65536, "fp8", "vllm")[-1].attrs["split_k"] is False
    assert gemm_ops(8, 64, 65536, "fp8", "sglang")[-1].attrs["split_k"] is False
    assert "split_k" not in gemm_ops(8, 64, 65536, "fp8", "trtllm")[-1].attrs
    assert "split_k" not in gemm_ops(8, 64, 65536, "bf16", "vllm")[-1].attrs
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    engine = hardware.compute["tensor_cores"]
    assert all(not kernel.split_k for kernel in unsplit_only(engine.kernel_candidates))
    whole, split = (evaluate(Graph(name="g", ops=[gemm_ops(8, 64, 65536, "fp8", engine_name)[-1]]), hardware,
                             mode="graph").ops[0] for engine_name in ("vllm", "trtllm"))
    # one CTA runs the 65536-deep loop alone where the split spreads it over the SMs
    assert whole.compute_s > 5 * split.compute_s
    short = [evaluate(Graph(name="g", ops=[gemm_ops(8, 64, 256, "fp8", e)[-1]]), hardware, mode="graph").ops[0]
             for e in ("vllm", "trtllm")]
    assert short[0].total_s == pytest.approx(short[1].total_s)   # a short k is not split either way


def test_a_narrower_operand_steps_deeper_in_k():
    """A stage holds the same bytes of k: fp8 tiles are twice bf16's depth, fp4 four times; wider operands keep
    the declared depth. The k-loop's step floor (``k_step_flops``) is then paid half as often for fp8."""
    import dataclasses

    from perfmodel.costs.rules import k_tile_scale

    assert (k_tile_scale(2.0), k_tile_scale(1.0), k_tile_scale(0.5), k_tile_scale(4.0)) == (1.0, 2.0, 4.0, 1.0)
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    stepped = dataclasses.replace(hardware, compute={
        name: dataclasses.replace(engine, k_step_s=100e-9) if engine.kind == "matrix" else engine
        for name, engine in hardware.compute.items()})
    fp8, bf16 = (evaluate(Graph(name="g", ops=[gemm_ops(8, 64, 65536, dtype, "vllm")[-1]]), stepped,
                          mode="graph").ops[0] for dtype in ("fp8", "bf16"))
    # one tile, unsplit: 512 steps of 128 (fp8) at the 100 ns floor
    assert fp8.compute_s == pytest.approx(512 * 100e-9, rel=0.02)
    assert bf16.total_s < fp8.total_s   # bf16 splits its 1024 steps over the SMs


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (8, 64, 65536), (3000, 7168, 2048), (129, 33, 100)])
def test_scalar_and_array_kernel_selection_agree_for_narrow_operands(shape):
    import numpy as np

    from perfmodel.costs.rules import select_kernel

    m, n, k = shape
    hardware = load_hardware("h100-sxm")
    engine = hardware.compute["tensor_cores"]
    context = CostContext(hardware=hardware)
    for op in (gemm_ops(m, n, k, "fp8", "vllm")[-1], gemm_ops(m, n, k, "fp8", "trtllm")[-1]):
        scalar = select_kernel(op, context, engine, "fp8", m, n, k, 1, (1, 1, 2))
        array = select_kernel(op, context, engine, "fp8", np.array([m]), n, k, 1, (1, 1, 2))
        assert scalar[2] == array[2][0]
        assert scalar[0] == pytest.approx(array[0][0], rel=1e-12)
