"""Kernel classes and per-dtype start-up latencies (issue 29): decode attention is priced with its own
parameters, an fp8 GEMM with its own fixed cost, and every lookup falls back to what was there before."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from calibration.achievable import device_time_hardware
from calibration.aiconfigurator import attention_op, gemm_op
from calibration.fit import fit
from calibration.records import MeasurementRecord
from perfmodel.costs.rules import ATTENTION_BACKWARD, DECODE_ATTENTION, pricing_kind
from perfmodel.hardware.loader import load_hardware
from perfmodel.hardware.model import Parameters, kind_chain
from perfmodel.roofline import evaluate
from perfmodel.workload.io import dumps
from perfmodel.workload.ir import Graph, Op


def _attention(seq_q, seq_kv=1024, batch=8, **extra) -> Op:
    op = attention_op(batch, 32, 8, seq_q, seq_kv, 128)  # the engines' tables' op (causal when seq_q == seq_kv)
    return dataclasses.replace(op, attrs={**op.attrs, **extra}) if extra else op


def _matmul(m: int, n: int, k: int, dtype: str) -> Op:
    return gemm_op(m, n, k, dtype)


def test_one_query_per_sequence_is_the_decode_class():
    assert pricing_kind(_attention(1)) == DECODE_ATTENTION
    assert pricing_kind(_attention(128)) == "attention"                     # prefill
    assert pricing_kind(_attention(4)) == "attention"                       # speculative verification
    assert pricing_kind(_attention(1, backward=True)) == ATTENTION_BACKWARD  # the backward kernels' own class
    def swept(queries):
        op = _attention(1)
        return dataclasses.replace(op, attrs={**op.attrs, "seq_q": np.array(queries)})

    # a sweep over query counts: one class for every point, whichever points are evaluated together
    assert pricing_kind(swept([1, 1, 1])) == "attention"
    assert pricing_kind(swept([1, 64])) == "attention"
    assert pricing_kind(_matmul(1, 4096, 4096, "bf16")) == "matmul"


def test_lookups_fall_back_from_the_class_and_the_dtype_to_the_kind():
    assert kind_chain(DECODE_ATTENTION) == (DECODE_ATTENTION, "attention") and kind_chain("matmul") == ("matmul",)
    old = Parameters(compute_efficiency={"attention": 0.4, "matmul": 0.8}, memory_efficiency={"attention:hbm": 0.6},
                     compute_latency_s={"attention": 20e-6, "matmul": 5e-6})
    # A parameter set fitted before the class and the dtypes existed prices them as before.
    assert old.compute("tensor_cores", "bf16", DECODE_ATTENTION) == 0.4
    assert old.memory("hbm", DECODE_ATTENTION) == 0.6
    assert old.latency(DECODE_ATTENTION, "bf16") == 20e-6 and old.latency("matmul", "fp8") == 5e-6
    new = dataclasses.replace(old, compute_latency_s={"attention": 20e-6, f"{DECODE_ATTENTION}:bf16": 9e-6,
                                                      "matmul:fp8": 12e-6, "matmul:bf16": 2e-6, "matmul": 4e-6},
                              compute_efficiency={"attention": 0.4, f"{DECODE_ATTENTION}:tensor_cores:bf16": 0.1})
    assert new.latency(DECODE_ATTENTION, "bf16") == 9e-6
    assert new.latency(DECODE_ATTENTION, "fp16") == 9e-6           # fp16 runs at bf16's rate: its twin
    assert new.latency(DECODE_ATTENTION, "fp8") == 20e-6           # no fp8 decode entry: the plain kind's
    assert new.latency("matmul", "fp8") == 12e-6 and new.latency("matmul", "tf32") == 4e-6
    assert new.latency("softmax", "fp32") == 0.0
    assert new.compute("tensor_cores", "bf16", DECODE_ATTENTION) == 0.1
    assert new.compute("tensor_cores", "bf16", "attention") == 0.4


def test_the_evaluation_charges_the_class_and_dtype_latency():
    hardware = load_hardware("h100-sxm")
    parameters = Parameters(name="p", kind="calibrated",
                            compute_latency_s={"attention": 30e-6, f"{DECODE_ATTENTION}:bf16": 7e-6,
                                               "matmul:bf16": 1e-6, "matmul:fp8": 15e-6})
    decode = evaluate(Graph(name="d", ops=[_attention(1, seq_kv=16, batch=1)]), hardware, mode="graph",
                      parameters=parameters)
    prefill = evaluate(Graph(name="p", ops=[_attention(16, seq_kv=16, batch=1)]), hardware, mode="graph",
                       parameters=parameters)
    # attention counts thread blocks (``OpCost.work_units``), so its start-up is charged beside its
    # bottlenecks, in the device-side fixed time, not inside its compute time
    fixed = hardware.compute["tensor_cores"].kernel_fixed_s
    assert decode.ops[0].fixed_s - fixed == pytest.approx(7e-6) and prefill.ops[0].fixed_s - fixed == pytest.approx(30e-6)
    assert decode.ops[0].compute_s < 1e-6 and prefill.ops[0].compute_s < 1e-6
    fp8 = evaluate(Graph(name="f", ops=[_matmul(16, 256, 256, "fp8")]), hardware, mode="graph", parameters=parameters)
    bf16 = evaluate(Graph(name="b", ops=[_matmul(16, 256, 256, "bf16")]), hardware, mode="graph", parameters=parameters)
    assert fp8.ops[0].compute_s >= 15e-6 > 2e-6 > bf16.ops[0].compute_s


def _record(op: Op, seconds: float, op_class: str, index: int) -> MeasurementRecord:
    return MeasurementRecord(name=f"r{index}", op_class=op_class, duration_s=seconds,
                             workload_json=dumps(Graph(name=f"r{index}", ops=[op]), "json"))


def fitted_to_truth(ops, hardware, truth: Parameters):
    """The fit of records that ``truth`` prices exactly (``ops``: (op, op class) pairs) and its fitted values."""
    records = [_record(op, evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=truth).total_s,
                       op_class, index) for index, (op, op_class) in enumerate(ops)]
    result = fit(records, hardware, mode="graph", folds=0, extra_seeds=0)
    return result, {name: value for name, (value, _) in result.params.items()}


def test_the_fit_recovers_latencies_per_dtype_and_for_the_decode_class():
    """Synthetic truth with a bf16 GEMM start-up of 2 us, an fp8 one of 12 us and a decode-attention floor of
    9 us below a prefill one of 25 us: the fit gives each its own latency, within 15%. Device time only, as
    the engines' tables time kernels (no graph-launch cost to hide the small shapes under)."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated",
                       compute_efficiency={"matmul:tensor_cores:bf16": 0.8, "matmul:tensor_cores:fp8": 0.55,
                                           "attention": 0.4},
                       compute_latency_s={"matmul:bf16": 2e-6, "matmul:fp8": 12e-6, "attention": 25e-6,
                                          f"{DECODE_ATTENTION}:bf16": 9e-6})
    ops = [(_matmul(size, size, size, dtype), f"gemm:{dtype}") for dtype in ("bf16", "fp8")
           for size in (64, 128, 256, 512, 1024, 2048, 4096, 8192)]
    ops += [(_attention(seq, seq_kv=seq, batch=batch), "prefill") for seq in (64, 256, 1024, 4096)
            for batch in (1, 8)]
    ops += [(_attention(1, seq_kv=seq_kv, batch=batch), "decode") for seq_kv in (16, 256, 4096, 32768)
            for batch in (1, 8, 64)]
    records = [_record(op, evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=truth).total_s,
                       op_class, index) for index, (op, op_class) in enumerate(ops)]
    result = fit(records, hardware, mode="graph", folds=0, extra_seeds=0)
    fitted = {name: value for name, (value, _) in result.params.items()}
    assert fitted["latency:matmul:bf16"] == pytest.approx(2e-6, rel=0.15)
    assert fitted["latency:matmul:fp8"] == pytest.approx(12e-6, rel=0.15)
    # one dtype of attention here: one latency per kind (a split needs two dtypes that each show theirs)
    assert fitted["latency:attention"] == pytest.approx(25e-6, rel=0.15)
    assert fitted[f"latency:{DECODE_ATTENTION}"] == pytest.approx(9e-6, rel=0.15)
    # Written as a parameter set, a dtype no record measured takes the kind's geometric mean.
    written = result.parameters("fitted")
    assert written.latency("matmul", "tf32") == pytest.approx((fitted["latency:matmul:bf16"]
                                                               * fitted["latency:matmul:fp8"]) ** 0.5)


def test_a_latency_at_its_floor_is_written_as_zero_not_as_another_dtype_s():
    """Synthetic truth with no bf16 GEMM start-up and a 12 us fp8 one: the fit takes the bf16 latency to its
    floor (under 10x its 1 ns bound); written, it is 0 (before, it was left out, and bf16 GEMMs looked up the
    kind's mean: the fp8 kernels' 12 us, which priced B200's small bf16 GEMMs at several times their time)."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated",
                       compute_efficiency={"matmul:tensor_cores:bf16": 0.8, "matmul:tensor_cores:fp8": 0.55},
                       compute_latency_s={"matmul:bf16": 0.0, "matmul:fp8": 12e-6})
    ops = [(_matmul(size, size, size, dtype), f"gemm:{dtype}") for dtype in ("bf16", "fp8")
           for size in (64, 128, 256, 512, 1024, 2048, 4096, 8192)]
    records = [_record(op, evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=truth).total_s,
                       op_class, index) for index, (op, op_class) in enumerate(ops)]
    result = fit(records, hardware, mode="graph", folds=0, extra_seeds=0)
    assert "latency:matmul:bf16" in result.at_floor and "latency:matmul:bf16" not in result.at_bounds
    written = result.parameters("fitted")
    assert written.latency("matmul", "bf16") == 0.0
    assert written.latency("matmul", "fp8") == pytest.approx(12e-6, rel=0.15)
    # the kind-level entry (dtypes no record measured) is the mean of the latencies there are, not dragged to 0
    assert written.latency("matmul", "tf32") == pytest.approx(written.latency("matmul", "fp8"))
    small = Graph(name="g", ops=[_matmul(64, 64, 64, "bf16")])
    assert evaluate(small, hardware, mode="graph", parameters=written).total_s == pytest.approx(
        evaluate(small, hardware, mode="graph", parameters=truth).total_s, rel=0.1)


def test_a_dtype_without_small_kernels_shares_the_kind_latency():
    """fp8 GEMMs measured only at sizes far above any fixed cost (the published H800 rows: 32 us and up)
    cannot tell a latency of their own: the kind keeps one, shared with bf16."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated", compute_efficiency={"matmul": 0.8},
                       compute_latency_s={"matmul": 4e-6})
    ops = [_matmul(size, size, size, "bf16") for size in (128, 256, 512, 1024, 2048, 4096, 8192)]
    ops += [_matmul(size, size, size, "fp8") for size in (4096, 8192, 16384, 32768)]
    records = [_record(op, evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=truth).total_s,
                       op.dtype, index) for index, op in enumerate(ops)]
    result = fit(records, hardware, mode="graph", folds=0, extra_seeds=0)
    names = [name for name in result.params if name.startswith("latency:")]
    assert names == ["latency:matmul"]
    assert result.params["latency:matmul"][0] == pytest.approx(4e-6, rel=0.15)


def test_attention_counts_its_thread_blocks():
    """Prefill tiles each query head's rows by 128; decode packs a KV head's query group into one block; a
    one-token prompt (no cache) runs the context kernels; the backward kernel counts none."""
    from perfmodel.costs.rules import CostContext, op_cost

    context = CostContext(hardware=load_hardware("h100-sxm"))
    assert op_cost(_attention(1000, seq_kv=1000, batch=2), context).work_units == 2 * 32 * 8   # ceil(1000/128)
    assert op_cost(_attention(1, seq_kv=4096, batch=16), context).work_units == 16 * 8          # 4 heads a KV head
    one_token = _attention(1, seq_kv=1, batch=16)
    assert pricing_kind(one_token) == "attention" and op_cost(one_token, context).work_units == 16 * 32
    assert op_cost(_attention(1000, seq_kv=1000, backward=True), context).work_units == 0
    # alike ops priced together as arrays count what each would alone
    swept = _attention(1, seq_kv=4096, batch=16)
    swept = dataclasses.replace(swept, attrs={**swept.attrs, "seq_q": np.array([1, 256]),
                                              "seq_kv": np.array([4096, 256])})
    assert list(op_cost(swept, context).work_units) == [16 * 8, 16 * 32 * 2]


def test_unit_latency_is_per_block_and_never_the_start_up():
    parameters = Parameters(compute_latency_s={"attention": 20e-6, "attention@unit": 3e-6,
                                               f"{DECODE_ATTENTION}@unit": 2e-6})
    assert parameters.unit_latency(DECODE_ATTENTION) == 2e-6 and parameters.unit_latency("attention") == 3e-6
    assert Parameters(compute_latency_s={"attention": 20e-6}).unit_latency(DECODE_ATTENTION) == 0.0
    assert Parameters(compute_latency_s={"attention@unit": 3e-6}).unit_latency(DECODE_ATTENTION) == 3e-6
    assert parameters.latency("attention", "bf16") == 20e-6                 # the start-up is not the block's


def test_the_evaluation_charges_blocks_and_exposes_prefill_traffic():
    """Blocks cost their latency per SM (132 on H100): a decode's as one more bottleneck (its blocks' prologues
    run under the other blocks' streaming), so with few cached tokens they set the time and with many the
    stream does; a prefill's beside the bottlenecks, and its HBM time adds to the slowest of its other
    bottlenecks, a decode's overlaps."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    units = hardware.compute["tensor_cores"].units
    parameters = Parameters(name="p", kind="calibrated", compute_latency_s={f"{DECODE_ATTENTION}@unit": 3e-6})
    decode = evaluate(Graph(name="d", ops=[_attention(1, seq_kv=8, batch=1024)]), hardware, mode="graph",
                      parameters=parameters).ops[0]
    start = hardware.compute["tensor_cores"].kernel_fixed_s  # every kernel's own, from the spec
    blocks = 1024 * 8 / units * 3e-6
    assert decode.fixed_s == pytest.approx(start)
    assert blocks > max(decode.compute_s, *decode.memory_s.values())
    assert decode.total_s == pytest.approx(blocks + decode.fixed_s)
    long = evaluate(Graph(name="d", ops=[_attention(1, seq_kv=65536, batch=1024)]), hardware, mode="graph",
                    parameters=parameters).ops[0]
    assert long.memory_s["hbm"] > blocks
    assert long.total_s == pytest.approx(max(long.compute_s, *long.memory_s.values()) + long.fixed_s)
    prefill = evaluate(Graph(name="p", ops=[_attention(512, seq_kv=512, batch=64)]), hardware, mode="graph",
                       parameters=Parameters(name="q", kind="calibrated")).ops[0]
    others = max(prefill.compute_s, *(time for level, time in prefill.memory_s.items() if level != "hbm"))
    assert prefill.memory_s["hbm"] > 0
    assert prefill.total_s == pytest.approx(others + prefill.memory_s["hbm"] + prefill.fixed_s)


def test_the_fit_recovers_the_block_costs():
    """Synthetic truth with 3 us a decode block and 5 us a prefill tile (per SM): the fit finds both within 15%
    from shapes whose block counts span decades (2-8 cached tokens at batch 1-2048 bind the decode one)."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated", compute_efficiency={"attention": 0.5},
                       memory_efficiency={f"{DECODE_ATTENTION}:hbm": 0.85},
                       compute_latency_s={"attention": 15e-6, f"{DECODE_ATTENTION}:bf16": 8e-6,
                                          "attention@unit": 5e-6, f"{DECODE_ATTENTION}@unit": 3e-6})
    ops = [(_attention(seq, seq_kv=seq, batch=batch), "prefill") for seq in (64, 512, 2048, 8192)
           for batch in (1, 4, 32)]
    ops += [(_attention(1, seq_kv=seq_kv, batch=batch), "decode") for seq_kv in (4, 512, 16384)
            for batch in (1, 16, 256, 2048)]
    result, fitted = fitted_to_truth(ops, hardware, truth)
    assert fitted[f"latency:{DECODE_ATTENTION}@unit"] == pytest.approx(3e-6, rel=0.15)
    assert fitted["latency:attention@unit"] == pytest.approx(5e-6, rel=0.15)
    assert result.median_abs_error < 0.02


def test_a_compute_efficiency_above_the_peak_ends_at_the_datasheet_ceiling_and_is_written_as_one():
    """GEMMs timed 1.3x faster than the tensor cores' peak allows: the fit cannot give the matmuls more than the
    peak (``calibration.fit.capped_at_datasheet``), says the efficiency ended at its ceiling (not a failed bound)
    and writes 1, so the written set prices them at the peak rather than dropping to the datasheet default by
    accident."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated", compute_efficiency={"matmul:tensor_cores:bf16": 1.3},
                       compute_latency_s={"matmul:bf16": 2e-6})
    ops = [(_matmul(size, size, size, "bf16"), "gemm:bf16") for size in (64, 256, 1024, 2048, 4096, 8192, 16384)]
    result, fitted = fitted_to_truth(ops, hardware, truth)
    name = "compute:matmul:tensor_cores:bf16"
    assert name in result.at_ceiling and name not in result.at_bounds and fitted[name] == 1.0
    assert result.parameters("fitted").compute_efficiency["matmul:tensor_cores:bf16"] == 1.0


def test_the_k_step_floor_is_chosen_by_the_training_half():
    """GEMMs timed on a device whose k-loop takes at least 75 ns a step (skinny, deep products: the floor binds):
    among the candidate floors the fit's training half costs least at the true one
    (``calibration.engine_overlays.chosen_k_step``), and a single candidate is taken as given."""
    from calibration.engine_overlays import chosen_k_step, with_k_step

    device = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated", compute_efficiency={"matmul:tensor_cores:bf16": 0.8},
                       compute_latency_s={"matmul:bf16": 2e-6})
    timed = with_k_step(device, 75e-9)
    ops = [_matmul(m, n, k, "bf16") for m in (1, 16, 128) for n in (1024, 8192) for k in (4096, 16384, 65536)]
    ops += [_matmul(size, size, size, "bf16") for size in (512, 2048, 8192)]
    records = [_record(op, evaluate(Graph(name="g", ops=[op]), timed, mode="graph", parameters=truth).total_s,
                       "gemm:bf16", index) for index, op in enumerate(ops)]
    assert chosen_k_step(records, device, 0, (0.0, 25e-9, 75e-9, 150e-9)) == 75e-9
    assert chosen_k_step(records, device, 0, (25e-9,)) == 25e-9


def test_the_k_step_floor_never_exceeds_the_native_tiles_own_step():
    """A floor longer than the native tile's step at the bf16 peak would slow that tile's math (a compute rate, which
    the efficiency prices), so the fit chooses at or under it (``k_step_ceiling_s``): GEMMs timed with a 2 us floor on
    the H100 (its 128 x 128 x 64 step takes 280 ns) choose the largest candidate under 280 ns, not 2 us."""
    from calibration.engine_overlays import chosen_k_step, k_step_ceiling_s, with_k_step

    device = device_time_hardware(load_hardware("h100-sxm"))
    engine = device.compute["tensor_cores"]
    ceiling = k_step_ceiling_s(device)
    assert ceiling == pytest.approx(2 * 128 * 128 * 64 * engine.units / engine.peak_flops_per_s["bf16"])
    assert 270e-9 < ceiling < 290e-9
    assert k_step_ceiling_s(device_time_hardware(load_hardware("a100-sxm-80gb"))) == pytest.approx(
        2 * 128 * 128 * 64 * 108 / 312e12)
    timed = with_k_step(device, 2e-6)
    ops = [_matmul(m, 1024, k, "bf16") for m in (1, 16, 128) for k in (4096, 16384, 65536)]
    records = [_record(op, evaluate(Graph(name="g", ops=[op]), timed, mode="graph").total_s, "gemm:bf16", index)
               for index, op in enumerate(ops)]
    assert chosen_k_step(records, device, 0, (0.0, 100e-9, 250e-9, 2e-6)) == 250e-9
