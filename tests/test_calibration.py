"""Calibration: readers on fixtures and malformed files, recovery of known parameters from synthetic
measurements, and a fitted spec that loads and predicts what the report says."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from calibration.fit import fit
from calibration.readers import (
    ReaderError,
    read_flex_trace,
    read_generic_csv,
    read_ncu_csv,
    read_spyre_torch_trace,
    read_torch_trace,
)
from calibration.readers.spyre import cycles_between
from calibration.records import MeasurementRecord, read_records, write_records
from perfmodel.cli import main
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_hardware
from perfmodel.roofline import evaluate
from perfmodel.workload import builders
from perfmodel.workload.io import dumps
from perfmodel.workload.ir import Graph, Op, TensorSpec

FIXTURES = Path(__file__).parent / "fixtures"


# ---------------------------------------------------------------------------------------- readers
def test_ncu_details_page_2023_layout():
    records = read_ncu_csv(FIXTURES / "ncu_details_2023.csv")
    assert len(records) == 2  # two launches of the same kernel, keyed by ID
    first, second = records
    assert first.name.startswith("void gemm_kernel<float, 128, 128>(float const*, float const*")  # commas inside
    assert first.duration_s == pytest.approx(1.25e-3)  # "1,250,000" nsecond
    assert first.bytes_by_level == {"dram": 6400.0, "l2": 12500.0}  # Kbyte converted
    assert first.flops == 2 * 1000 + 10  # ffma x2 + fadd; the n/a hfma counts as nothing
    assert first.flops_source == "hw_counter" and first.source_row == 5
    assert second.duration_s == pytest.approx(1.5e-6)


def test_ncu_recent_layout_with_european_separators():
    [record] = read_ncu_csv(FIXTURES / "ncu_details_recent.csv")
    assert record.duration_s == pytest.approx(27_595_520e-9)
    assert record.device == "0"


def test_ncu_raw_page_with_units_row():
    first, second = read_ncu_csv(FIXTURES / "ncu_raw.csv")
    assert first.duration_s == pytest.approx(2e-3)
    assert first.bytes_by_level["dram"] == pytest.approx(2e9 + 1e6)  # read (byte) + write (Mbyte)
    assert second.bytes_by_level["dram"] == pytest.approx(1000 + 0.5e6)


@pytest.mark.parametrize("mutate, fragment", [
    (lambda text: text.replace('"ID",', '"Id",'), "no Nsight Compute CSV header"),
    (lambda text: text.replace('"nsecond","1,250,000"', '"parsec","1,250,000"'), "unknown unit 'parsec'"),
    (lambda text: text.replace('"nsecond","1,250,000"', '"nsecond","-5"'), "negative duration"),
    (lambda text: text.replace('"nsecond","1,250,000"', '"nsecond","fast"'), "'fast' is not a number"),
    (lambda text: text.replace('"Metric Unit",', '"Unit",'), "column 'Metric Unit': missing column"),
])
def test_ncu_malformed_inputs_name_row_and_column(tmp_path, mutate, fragment):
    path = tmp_path / "bad.csv"
    path.write_text(mutate((FIXTURES / "ncu_details_2023.csv").read_text()))
    with pytest.raises(ReaderError, match=fragment) as error:
        read_ncu_csv(path)
    assert str(path) in str(error.value)


def test_ncu_truncated_raw_row(tmp_path):
    path = tmp_path / "truncated.csv"
    path.write_text((FIXTURES / "ncu_raw.csv").read_text().rsplit(",", 3)[0] + "\n")
    with pytest.raises(ReaderError, match=r"truncated.csv:4: .*fields but the header has"):
        read_ncu_csv(path)


def test_torch_cpu_trace_leaf_ops_and_flops():
    records = read_torch_trace(FIXTURES / "torch_cpu_trace.json")
    names = [record.name for record in records]
    assert names == ["aten::addmm", "aten::relu"]  # aten::linear encloses addmm: not a leaf
    addmm = records[0]
    assert addmm.duration_s == pytest.approx(40e-6) and addmm.flops == 2 * 64 * 128 * 256
    assert math.isnan(records[1].flops)


def test_torch_gpu_trace_links_kernels_to_ops():
    kernel, memcpy = read_torch_trace(FIXTURES / "torch_gpu_trace.json.gz")
    assert kernel.name == "aten::mm/sm90_xmma_gemm_bf16bf16_bf16f32"
    assert kernel.duration_s == pytest.approx(95.5e-6) and kernel.flops == 2 * 2048 * 4096 * 4096
    assert memcpy.op_class == "gpu_memcpy" and memcpy.bytes_by_level == {"dram": 1048576.0}


@pytest.mark.parametrize("text, fragment", [
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": -3}]}', "negative duration"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1}]}', "missing or non-numeric"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op"', "not valid JSON"),
    ('{"schemaVersion": 1}', "no 'traceEvents' list"),
])
def test_torch_trace_malformed(tmp_path, text, fragment):
    path = tmp_path / "trace.json"
    path.write_text(text)
    with pytest.raises(ReaderError, match=fragment):
        read_torch_trace(path)


def test_spyre_flex_trace_cycles_wrap_and_phases():
    compute, dma = read_flex_trace(FIXTURES / "spyre_flex_trace.json", clock_hz=1e9)
    assert compute.name == "convolution_1" and compute.op_class == "compute"
    assert compute.duration_s == pytest.approx((0xc0736e0e - 0xc0732073) * 1e-9)
    assert dma.op_class == "dma_in" and dma.duration_s == pytest.approx((200 + 2**32 - 4294967000) * 1e-9)
    assert dma.bytes_by_level == {"pcie": 524288.0}
    assert cycles_between(0xFFFFFFF0, 0x10) == 0x20


def test_spyre_torch_trace_uses_cycles_or_falls_back_to_dur():
    kernel, blank, memcpy = read_spyre_torch_trace(FIXTURES / "spyre_torch_trace.json", clock_hz=1e9)
    assert kernel.duration_s == pytest.approx((553000 - 3000) * 1e-9)
    assert blank.name == "spyre_kernel#1" and blank.duration_s == pytest.approx(42e-6)  # counters all zero
    assert memcpy.op_class == "transfer" and memcpy.bytes_by_level == {"pcie": 2097152.0}


def test_generic_counters_csv(tmp_path):
    decode, resnet = read_generic_csv(FIXTURES / "generic_counters.csv")
    assert decode.duration_s == pytest.approx(3.5e-3) and decode.bytes == 1.4e11 and decode.op_class == "llm"
    assert resnet.duration_s == pytest.approx(49e-6) and resnet.bytes_by_level == {}
    bad = tmp_path / "bad.csv"
    bad.write_text("name,duration,duration_unit\nx,3,fortnights\n")
    with pytest.raises(ReaderError, match=r"bad.csv:2: column 'duration_unit': unknown time unit"):
        read_generic_csv(bad)
    bad.write_text("name,duration_ms\nx,nan\n")
    with pytest.raises(ReaderError, match=r"bad.csv:2: column 'duration_ms': missing value"):
        read_generic_csv(bad)


# ---------------------------------------------------------------------------------------- records
def _record(graph: Graph, seconds: float, op_class: str) -> MeasurementRecord:
    return MeasurementRecord(name=graph.name, op_class=op_class, duration_s=seconds, workload_json=dumps(graph, "json"),
                             tool="synthetic")


def test_records_round_trip_and_errors(tmp_path):
    graph = builders.gemm_sweep(sizes=(64,))
    records = [dataclasses.replace(_record(graph, 1e-3, "matmul"), bytes_by_level={"dram": 5.0}, flops=7.0)]
    path = tmp_path / "m.csv"
    write_records(records, path)
    assert read_records(path) == records
    text = path.read_text()
    (tmp_path / "neg.csv").write_text(text.replace(",0.001,", ",-0.001,"))
    with pytest.raises(PerfmodelError, match=r"neg.csv:2: column 'duration_s' must be more than zero"):
        read_records(tmp_path / "neg.csv")
    (tmp_path / "short.csv").write_text(text.splitlines()[0] + "\ngemm,matmul\n")
    with pytest.raises(PerfmodelError, match=r"short.csv:2: the row has too few fields"):
        read_records(tmp_path / "short.csv")


# ---------------------------------------------------------------------------------------- fitting
def _synthetic_suite():
    graphs = []
    for size in (64, 128, 256, 512, 1024, 2048):
        graphs.append(("matmul", builders.gemm_sweep(sizes=(size,), dtype="fp32"), f"gemm{size}"))
    for elements in (10, 1_000, 100_000, 1_000_000, 10_000_000, 30_000_000, 50_000_000, 80_000_000):
        chain = builders.elementwise_chain(elements=elements, length=1, dtype="fp32")
        graphs.append(("elementwise", chain, f"add{elements}"))
    for length in (5, 20, 60):
        graphs.append(("dispatch", builders.elementwise_chain(elements=16, length=length, dtype="fp32"), f"chain{length}"))
    return [(op_class, dataclasses.replace(graph, name=name)) for op_class, graph, name in graphs]


def test_fit_recovers_known_parameters_from_noisy_synthetic_data():
    spec = load_hardware("epyc-zen4-2vcpu")
    truth = dataclasses.replace(spec, efficiency=None)
    from perfmodel.hardware.model import Parameters

    true_parameters = Parameters(name="truth", compute_efficiency={"matmul:simd:fp32": 0.6},
                                 memory_efficiency={"elementwise:dram": 0.5})
    true_launch = 5e-6
    truth = dataclasses.replace(truth, scheduling=dataclasses.replace(
        truth.scheduling, modes={"dynamic": dataclasses.replace(truth.scheduling.modes["dynamic"],
                                                                 kernel_launch_s=true_launch)}))
    rng = np.random.default_rng(7)
    records = []
    for op_class, graph in _synthetic_suite():
        seconds = evaluate(graph, truth, parameters=true_parameters, fuse=False).total_s
        records.append(_record(graph, seconds * math.exp(rng.normal(0, 0.03)), op_class))  # 3% noise
    result = fit(records, spec)
    assert result.params["compute:matmul:simd:fp32"][0] == pytest.approx(0.6, rel=0.1)
    # The element-wise ops' DRAM efficiency: the level's (memory:dram) when only they bind DRAM, their
    # class's (memory:vector:dram) when a GEMM binds it too (at the spec's 3.7 GHz peaks the smallest do).
    dram = result.params.get("memory:dram", result.params.get("memory:vector:dram"))
    assert dram is not None and dram[0] == pytest.approx(0.5, rel=0.1)
    assert result.params["kernel_launch_s"][0] == pytest.approx(true_launch, rel=0.1)
    assert result.median_abs_error < 0.05
    value, error = result.params["compute:matmul:simd:fp32"]
    assert 0 < error < value  # a standard error, and a sane one


def test_calibrate_cli_writes_a_spec_that_predicts_what_the_report_says(tmp_path, capsys):
    spec = load_hardware("epyc-zen4-2vcpu")
    rng = np.random.default_rng(3)
    from perfmodel.hardware.model import Parameters

    hidden = Parameters(name="hidden", compute_efficiency={"matmul": 0.7}, memory_efficiency={"dram": 0.8})
    records = []
    for op_class, graph in _synthetic_suite():
        seconds = evaluate(graph, spec, parameters=hidden, fuse=False).total_s
        records.append(_record(graph, seconds * math.exp(rng.normal(0, 0.02)), op_class))
    measurements = tmp_path / "measurements.csv"
    write_records(records, measurements)
    fitted = tmp_path / "fitted.yaml"
    assert main(["calibrate", "--spec", "epyc-zen4-2vcpu", "--measurements", str(measurements), "-o", str(fitted),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"params", "n_measurements", "heldout_median_abs_error", "heldout_by_class"} <= set(report)
    assert report["n_measurements"] == len(records)
    assert all({"value", "stderr"} <= set(item) for item in report["params"].values())
    assert Path(report["chart"]).stat().st_size > 5000
    calibrated = load_hardware(fitted)
    assert calibrated.efficiency is not None
    assert calibrated.source_of("efficiency.compute.matmul:simd:fp32").kind == "measured"
    for row, record in zip(report["rows"], records, strict=True):
        predicted = evaluate(record.graph(), calibrated, fuse=False).total_s
        assert predicted == pytest.approx(row["predicted_s"], rel=1e-9)


def test_calibrate_refuses_records_without_graphs(tmp_path, capsys):
    path = tmp_path / "m.csv"
    write_records(read_generic_csv(FIXTURES / "generic_counters.csv"), path)
    assert main(["calibrate", "--spec", "epyc-zen4-2vcpu", "--measurements", str(path), "-o",
                 str(tmp_path / "f.yaml")]) == 2
    assert "carry no workload graph" in capsys.readouterr().err


def test_bench_quick_subset_runs(tmp_path):
    from calibration.harness import run_suite, suite

    cases = [case for case in suite(quick=True) if case.name in ("add_1000", "gemm_fp32_64", "chain_20x16")]
    records = run_suite(load_hardware("epyc-zen4-2vcpu"), cases=cases, rounds=1, quick=True)
    assert [record.name for record in records] == [case.name for case in cases]
    for record in records:
        assert record.duration_s > 0 and record.flops >= 0 and record.graph().ops
        assert "torch" in record.tool_version


# ------------------------------------------------------------------- vector kernels in the fit (issue 12)
def _row_op(kind: str, rows: int, cols: int, weights: int = 0) -> Graph:

    def tensor(*shape, role="activation"):
        return TensorSpec(shape=shape, dtype="fp32", role=role)

    op = Op(name=kind, kind=kind, inputs=(tensor(rows, cols), *(tensor(cols, role="weight") for _ in range(weights))),
            outputs=(tensor(rows, cols),), attrs={"norm": "layer"} if kind == "norm" else {})
    return Graph(name=f"{kind}_{rows}x{cols}", ops=(op,))


def test_a_norms_activations_come_from_the_cache_and_only_its_scale_and_shift_stream():
    # A layer norm's scale and shift (one row each) used to turn off the cache rule for the whole op:
    # a 64 KB norm then read all of its activations from DRAM on every call.
    from perfmodel.costs.rules import CostContext, op_cost

    spec = load_hardware("epyc-zen4-2vcpu")
    context = CostContext(hardware=spec)
    dram = [level.name for level in spec.memory].index("dram")
    small = op_cost(_row_op("norm", 16, 1024, weights=2).ops[0], context)
    assert small.bytes_by_level[dram] == 2 * 1024 * 4  # the weights only
    assert small.bytes_by_level[0] == (2 * 16 * 1024 + 2 * 1024) * 4  # the innermost level still sees everything
    large = op_cost(_row_op("norm", 8192, 4096, weights=2).ops[0], context)
    activations = 2 * 8192 * 4096 * 4
    missing = math.prod(1 - level.total_capacity_bytes / activations for level in spec.memory if level.kind == "cache")
    assert large.bytes_by_level[dram] == pytest.approx(2 * 4096 * 4 + activations * missing)
    # Ops whose weights are whole parameters (a matmul) keep their rule's traffic.
    gemm = builders.gemm_sweep(sizes=(64,), dtype="fp32").ops[0]
    from perfmodel.costs.rules import COST_RULES

    assert op_cost(gemm, context).bytes_by_level == COST_RULES[gemm.kind](gemm, context).bytes_by_level


def _vector_suite_records(truth, rng, spec=None):
    spec = spec or load_hardware("epyc-zen4-2vcpu")
    records = []
    for op_class, graph in _synthetic_suite():
        records.append((op_class, graph))
    for rows, cols in ((16, 1024), (128, 768), (512, 1024), (64, 8192), (4096, 512), (1024, 4096), (2048, 4096),
                       (8192, 4096)):
        records.append(("softmax", _row_op("softmax", rows, cols)))
    return [_record(graph, evaluate(graph, spec, parameters=truth, fuse=False).total_s
                    * math.exp(rng.normal(0, 0.02)), op_class) for op_class, graph in records]


def test_a_slow_vector_kernel_hidden_under_memory_at_the_datasheet_is_found_not_replaced_by_a_latency():
    # A softmax reaches ~10% of the SIMD FMA peak (its exp): at the datasheet's efficiency its compute
    # looks hidden under memory time, so the fit must judge it at a reachable efficiency and start
    # from one; and when the training half has only same-size small softmaxes, a 100 us "start-up
    # latency" must not stand in for the slow exp (the one-sided prior on latencies).
    from calibration.fit import components, heldout_errors, spread_weights
    from perfmodel.hardware.model import Parameters

    # The synthetic device this case was built on: the Zen 4 spec at its former 2.6 GHz peaks (166 GFLOP/s
    # fp32). At the 3.7 GHz boost clock's 237 GFLOP/s the softmax's compute hides further under memory and the
    # held-out 16x1024 softmax lands at 50.3%, on the bound below (issue 36 moved the clock, not the fit).
    spec = load_hardware("epyc-zen4-2vcpu", overrides={"compute.simd.peak.fp32": "166 GFLOP/s"})
    truth = Parameters(name="truth", compute_efficiency={"softmax": 0.1, "matmul": 0.9})
    records = _vector_suite_records(truth, np.random.default_rng(11), spec)
    result = fit(records, spec, extra_seeds=0, folds=0)
    value, error = result.params["compute:softmax:simd:fp32"]
    assert value == pytest.approx(0.1, rel=0.1) and 0 < error < value
    latencies = [value for name, (value, _) in result.params.items() if name.startswith("latency:softmax")]
    assert max(latencies, default=0.0) < 10 * spec.scheduling.modes["dynamic"].kernel_launch_s
    # The held-out case: train on two 512k-element softmaxes and the two largest, predict the small ones.
    names = [record.name for record in records]
    held = [names.index(f"softmax_{shape}") for shape in ("16x1024", "128x768")]
    dropped = [names.index(f"softmax_{shape}") for shape in ("4096x512", "1024x4096")]
    train = np.asarray([index for index in range(len(records)) if index not in held + dropped])
    parts = components(records, spec)
    measured = np.asarray([record.duration_s for record in records])
    errors = heldout_errors(parts, measured, train, np.asarray(held), spread_weights(records))
    assert np.all(np.abs(errors) < 0.5), errors  # (a few-us start-up the held-out sizes alone would show)


def test_vector_and_matrix_work_at_dram_get_their_own_class_efficiencies():
    """GEMVs and streams both bind DRAM, no vector kind with enough records of its own: each class
    recovers its own efficiency (a GEMV reading its weights slower than a stream), and the written
    parameters give it to every kind of the class."""
    spec = load_hardware("epyc-zen4-2vcpu")
    from perfmodel.hardware.model import Parameters
    from perfmodel.workload.ir import Op, TensorSpec

    truth = Parameters(name="truth", memory_efficiency={"matmul:dram": 0.4, "elementwise:dram": 0.9,
                                                        "norm:dram": 0.9})
    graphs = [("matmul", builders.gemm_sweep(sizes=(size,), dtype="fp32")) for size in (64, 128, 256)]
    graphs += [("elementwise", builders.elementwise_chain(elements=elements, length=1, dtype="fp32"))
               for elements in (1_000, 30_000_000, 80_000_000)]
    for rows in (8192, 16384):  # RMS norms over 128 and 256 MiB
        tensor = TensorSpec(shape=(rows, 4096), dtype="fp32")
        graphs.append(("norm", Graph(name="norm", ops=[Op(name="norm", kind="norm", inputs=(tensor,), outputs=(tensor,),
                                                           attrs={"norm": "rms"})])))
    graphs += [("matmul", Graph(name="gemv", ops=[builders.linear("gemv", rows, 4096, 4096, "fp32")]))
               for rows in (1, 2, 4, 8)]
    rng = np.random.default_rng(3)
    records = []
    for index, (op_class, graph) in enumerate(graphs):
        graph = dataclasses.replace(graph, name=f"{op_class}{index}")
        seconds = evaluate(graph, spec, parameters=truth, fuse=False).total_s
        records.append(_record(graph, seconds * math.exp(rng.normal(0, 0.02)), op_class))
    result = fit(records, spec)
    assert result.params["memory:matrix:dram"][0] == pytest.approx(0.4, rel=0.15)
    assert result.params["memory:vector:dram"][0] == pytest.approx(0.9, rel=0.15)
    written = result.parameters("fitted")
    assert written.memory("dram", "matmul") == pytest.approx(result.params["memory:matrix:dram"][0])
    assert written.memory("dram", "softmax") == pytest.approx(result.params["memory:vector:dram"][0])
    assert "vector:dram" not in written.memory_efficiency


def test_a_cpu_vector_kernel_adds_its_compute_to_its_data_movement():
    """``vector_kernels_hide_memory: false`` (the CPU spec): a vector op takes compute + memory, a
    matmul on the same engine still the larger of the two; a GPU's vector ops keep the maximum."""
    cpu = load_hardware("epyc-zen4-2vcpu")
    hiding = load_hardware("epyc-zen4-2vcpu", {"compute.simd.vector_kernels_hide_memory": "true"})
    assert not cpu.compute["simd"].vector_kernels_hide_memory and hiding.compute["simd"].vector_kernels_hide_memory
    gelu = Graph(name="gelu", ops=[Op(name="gelu", kind="elementwise", inputs=(TensorSpec(shape=(8_000_000,),
                                      dtype="fp32"),), outputs=(TensorSpec(shape=(8_000_000,), dtype="fp32"),),
                                      attrs={"flops_per_element": 12})])
    serial, overlapped = evaluate(gelu, cpu, fuse=False).ops[0], evaluate(gelu, hiding, fuse=False).ops[0]
    busy = serial.total_s - serial.scheduling_s
    assert busy == pytest.approx(serial.compute_s + max(serial.memory_s.values()), rel=1e-9)
    assert overlapped.total_s - overlapped.scheduling_s == pytest.approx(
        max(overlapped.compute_s, *overlapped.memory_s.values()), rel=1e-9)
    gemm = builders.gemm_sweep(sizes=(1024,), dtype="fp32")
    assert evaluate(gemm, cpu).total_s == pytest.approx(evaluate(gemm, hiding).total_s, rel=1e-12)
    h100 = load_hardware("h100-sxm")
    assert all(engine.vector_kernels_hide_memory for engine in h100.compute.values())


def test_a_causal_attention_wastes_half_of_its_engines_key_block_per_row():
    """A flash kernel skips only key blocks masked whole: PyTorch's CPU kernel blocks keys by 512
    (``attention_kv_block`` in the CPU spec), a GPU's FlashAttention-2 by 128 (the default)."""
    op = Op(name="sdpa", kind="attention", inputs=(TensorSpec(shape=(1, 8, 1024, 64), dtype="fp32"),),
            outputs=(TensorSpec(shape=(1, 8, 1024, 64), dtype="fp32"),),
            attrs={"batch": 1, "heads": 8, "seq_q": 1024, "seq_kv": 1024, "head_dim": 64, "causal": True})
    per_pair = 8 * (4 * 64 + 5)  # heads x (QK^T and PV FLOPs per pair + the softmax's)
    attended = 1024 * 1025 / 2
    cpu, h100 = load_hardware("epyc-zen4-2vcpu"), load_hardware("h100-sxm")
    assert cpu.compute["simd"].attention_kv_block == 512
    cpu_executed = evaluate(Graph(name="a", ops=[op]), cpu).ops[0].executed_flops
    assert cpu_executed == pytest.approx(per_pair * (attended + 1024 * 511 / 2))
    gpu_executed = evaluate(Graph(name="a", ops=[op]), h100).ops[0].executed_flops
    assert gpu_executed == pytest.approx(per_pair * (attended + 1024 * 127 / 2))


def test_a_library_dispatched_op_pays_the_modes_call_cost():
    """PyTorch hands exact gelu on a CPU to oneDNN: the CPU spec's eager mode charges that call
    (``library_dispatch``) on top of the dispatch every op pays; an add does not, nor a compiled program;
    and the fit predicts what the evaluation does (the call cost is the spec's, not rescaled)."""
    cpu = load_hardware("epyc-zen4-2vcpu")
    call = cpu.scheduling.modes["dynamic"].library_dispatch_s["gelu"]
    assert call == pytest.approx(4.4e-6)

    def tensor():
        return TensorSpec(shape=(1000,), dtype="fp32")

    gelu = Op(name="gelu", kind="elementwise", provenance="aten.gelu", inputs=(tensor(),), outputs=(tensor(),),
              attrs={"flops_per_element": 12})
    add = dataclasses.replace(gelu, name="add", provenance="aten.add", attrs={})
    eager = {op.name: evaluate(Graph(name="g", ops=[op]), cpu, fuse=False).ops[0] for op in (gelu, add)}
    assert eager["gelu"].scheduling_s == pytest.approx(eager["add"].scheduling_s + call)
    compiled = evaluate(Graph(name="g", ops=[gelu]), cpu, mode="graph").ops[0]
    assert compiled.scheduling_s < eager["add"].scheduling_s  # no per-op dispatch, no library call
    records = [_record(Graph(name=f"gelu{index}", ops=[gelu]), eager["gelu"].total_s, "elementwise")
               for index in range(4)]
    result = fit(records, cpu)
    assert result.predicted_s[0] == pytest.approx(eager["gelu"].total_s, rel=0.02)
