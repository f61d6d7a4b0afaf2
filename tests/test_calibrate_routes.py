"""``perfmodel calibrate`` on every measurement format: format detection, the counter route (Nsight
Compute) and the shape route (profiler traces, generic CSV, bench CSV) end to end, unmapped time,
the noise limit, the harness's measurement conditions, and clear errors on bad files."""

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from calibration.counters import counter_components, counter_levels, kernel_kind
from calibration.harness import quantization_warning
from calibration.readers.common import ReaderError
from calibration.readers.detect import detect_format, load_measurements
from calibration.readers.ncu import read_ncu_csv
from calibration.readers.trace_ops import read_trace_ops
from calibration.records import MeasurementRecord, read_records, write_records
from calibration.shapes import NotMapped, ShapeError, shape_components, trace_op
from perfmodel.cli import main
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_hardware, validate_spec_file
from perfmodel.roofline import evaluate
from perfmodel.workload import builders
from perfmodel.workload.capture import POINTWISE_OPS, classify_aten
from perfmodel.workload.io import dumps

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from make_route_fixtures import NCU_TRUTH  # noqa: E402

ROUTE_FIXTURES = [  # fixture, spec, format, route, unmapped names expected (prefixes)
    ("ncu_counters.csv", "h100-sxm", "ncu", "counter", ["distribution_elementwise_grid_stride_kernel"]),
    ("torch_cpu_ops_trace.json", "epyc-zen4-2vcpu", "torch-trace", "shape", ["aten::cat", "aten::t"]),
    ("torch_cuda_ops_trace.json.gz", "h100-sxm", "torch-trace", "shape",
     ["Memcpy HtoD", "ncclDevKernel_AllReduce", "aten::cat/", "aten::nonzero/"]),
    ("spyre_ops_trace.json", "ibm-spyre", "spyre", "shape", ["<unnamed kernel>", "Memcpy (HtoD)", "aten::nonzero/"]),
    ("generic_ops.csv", "tpu-v5e", "generic", "shape", ["llama-8b decode step", "resnet50 batch 8"]),
]


def _not_json(constant: str):
    raise AssertionError(f"{constant} in --json output: not strict JSON")


def _calibrate(tmp_path, capsys, *arguments):
    output = tmp_path / "fitted.yaml"
    code = main(["calibrate", *arguments, "-o", str(output)])
    captured = capsys.readouterr()
    return code, captured, output


# ---------------------------------------------------------------------------------------- detection
@pytest.mark.parametrize("name, expected", [
    ("ncu_counters.csv", "ncu"), ("ncu_details_2023.csv", "ncu"), ("ncu_details_recent.csv", "ncu"),
    ("ncu_raw.csv", "ncu"), ("torch_cpu_ops_trace.json", "torch-trace"), ("torch_cpu_trace.json", "torch-trace"),
    ("torch_gpu_trace.json.gz", "torch-trace"), ("torch_cuda_ops_trace.json.gz", "torch-trace"),
    ("spyre_ops_trace.json", "spyre"), ("spyre_torch_trace.json", "spyre"), ("spyre_flex_trace.json", "spyre"),
    ("generic_ops.csv", "generic"), ("generic_counters.csv", "generic"),
])
def test_format_is_detected_from_content(name, expected):
    assert detect_format(FIXTURES / name) == expected


def test_bench_csv_is_detected(tmp_path):
    path = tmp_path / "bench.csv"
    write_records([_graph_record(builders.gemm_sweep(sizes=(64,)), 1e-3, "matmul")], path)
    assert detect_format(path) == "bench"


def test_undetectable_file_names_the_file_and_the_formats(tmp_path, capsys):
    path = tmp_path / "mystery.txt"
    path.write_text("this is not a measurement\n1 2 3\n")
    code, captured, output = _calibrate(tmp_path, capsys, "--spec", "h100-sxm", "--measurements", str(path))
    assert code == 2 and "Traceback" not in captured.err
    assert str(path) in captured.err and "--format" in captured.err and "cannot tell" in captured.err
    assert not output.exists()


def test_explicit_format_overrides_detection(tmp_path, capsys):
    code, captured, _ = _calibrate(tmp_path, capsys, "--spec", "h100-sxm", "--format", "generic",
                                   "--measurements", str(FIXTURES / "ncu_counters.csv"))
    assert code == 2 and "ncu_counters.csv" in captured.err and "Traceback" not in captured.err


# ---------------------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("name, spec, format_name, route, unmapped", ROUTE_FIXTURES)
def test_calibrate_end_to_end_writes_a_valid_spec(tmp_path, capsys, name, spec, format_name, route, unmapped):
    code, captured, output = _calibrate(tmp_path, capsys, "--spec", spec, "--measurements", str(FIXTURES / name),
                                        "--json")
    assert code == 0, captured.err
    report = json.loads(captured.out, parse_constant=_not_json)  # strict JSON: no NaN or Infinity
    # An unidentified parameter's standard error is infinite: null in --json (the fuzzer found Infinity).
    assert all(report["params"][name]["stderr"] is None for name in report["parameters_unidentified"])
    assert validate_spec_file(output) == []
    assert load_hardware(output).efficiency is not None
    assert report["route"] == route and report["files"][0]["format"] == format_name
    assert 0 < report["explained_share"] < 1
    names = [entry["name"] for entry in report["unmapped"]]
    for prefix in unmapped:
        assert any(entry.startswith(prefix) for entry in names), (prefix, names)
    for entry in report["unmapped"]:
        assert entry["reason"] and entry["share"] == pytest.approx(entry["time_s"] / report["measured_time_s"])
    # The parts add up to the whole: explained time plus unmapped time is the measured time.
    assert report["explained_share"] + sum(entry["share"] for entry in report["unmapped"]) == pytest.approx(1.0)
    assert report["n_measurements"] == report["files"][0]["records"] >= 4


def test_calibrate_prints_the_explained_share_and_the_unmapped_table(tmp_path, capsys):
    code, captured, _ = _calibrate(tmp_path, capsys, "--spec", "h100-sxm", "--measurements",
                                   str(FIXTURES / "torch_cuda_ops_trace.json.gz"))
    assert code == 0
    assert "the fit explains 83.4% of the measured time" in captured.out
    assert "unmapped (not in the fit)" in captured.out
    assert "a host<->device transfer" in captured.out and "9.2%" in captured.out


def test_counter_route_recovers_the_parameters_behind_the_fixture(tmp_path, capsys):
    from calibration.fit import fit

    spec = load_hardware("h100-sxm")
    measurements = load_measurements(FIXTURES / "ncu_counters.csv", None, spec)
    records = list(measurements.records)
    result = fit(records, spec, parts=counter_components(records, spec))
    for name, value in NCU_TRUTH.items():
        assert result.params[name][0] == pytest.approx(value, rel=0.1), name


def test_several_files_of_one_route_fit_together(tmp_path, capsys):
    code, captured, _ = _calibrate(tmp_path, capsys, "--spec", "h100-sxm", "--json", "--measurements",
                                   str(FIXTURES / "torch_cuda_ops_trace.json.gz"), str(FIXTURES / "torch_gpu_trace.json.gz"))
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert [item["records"] for item in report["files"]] == [21, 1]
    memcpy = [entry for entry in report["unmapped"] if entry["name"] == "Memcpy HtoD (Pageable -> Device)"]
    assert memcpy[0]["count"] == 2 and len(memcpy[0]["files"]) == 2  # merged over the files


def test_routes_do_not_mix(tmp_path, capsys):
    code, captured, output = _calibrate(tmp_path, capsys, "--spec", "h100-sxm", "--measurements",
                                        str(FIXTURES / "ncu_counters.csv"), str(FIXTURES / "torch_cuda_ops_trace.json.gz"))
    assert code == 2 and "counter-route and shape-route" in captured.err and not output.exists()


@pytest.mark.parametrize("name, fragment", [
    ("spyre_flex_trace.json", "a Flex trace records no op shapes"),
    ("generic_counters.csv", "no aten_op and input_shapes"),
])
def test_files_without_priceable_measurements_are_refused(tmp_path, capsys, name, fragment):
    code, captured, output = _calibrate(tmp_path, capsys, "--spec", "ibm-spyre", "--measurements", str(FIXTURES / name))
    assert code == 2 and "nothing to fit" in captured.err and fragment in captured.err
    assert name in captured.err and not output.exists()


# ---------------------------------------------------------------------------------------- bad input
def _edit_trace(path, edit):
    data = json.loads(path.read_text())
    edit(data["traceEvents"])
    return json.dumps(data)


def _first(events, **match):
    return next(event for event in events if all(event.get(key) == value for key, value in match.items()))


def _set_dur(events):
    _first(events, name="aten::mm")["dur"] = "fast"


def _set_dims(events):
    _first(events, name="aten::mm")["args"]["Input Dims"][0] = ["64", 64]


def _set_cycles(events):
    _first(events, cat="kernel")["args"]["cycles_ts"][0] = "zz"


@pytest.mark.parametrize("name, mutate, fragments", [
    ("torch_cpu_ops_trace.json", lambda path: path.read_text()[: len(path.read_text()) // 2],
     ["not valid JSON", "truncated"]),
    ("torch_cpu_ops_trace.json", lambda path: _edit_trace(path, _set_dur),
     ["column 'dur'", "expected a number of microseconds in 'aten::mm', got 'fast'"]),
    ("torch_cpu_ops_trace.json", lambda path: _edit_trace(path, _set_dims), ["column 'Input Dims[0]'", "expected a shape"]),
    ("spyre_ops_trace.json", lambda path: _edit_trace(path, _set_cycles),
     ["column 'cycles_ts'", "'zz' is not a cycle counter"]),
    ("ncu_counters.csv", lambda path: path.read_text().replace('"nsecond","6,686"', '"nsecond","fast"'),
     ["ncu_counters.csv:6", "column 'Metric Value'", "'fast' is not a number"]),
    ("ncu_counters.csv", lambda path: path.read_text().replace('"byte","4,718,592"', '"furlong","4,718,592"'),
     ["ncu_counters.csv:7", "unknown unit 'furlong'"]),
    ("generic_ops.csv", lambda path: path.read_text().replace('"[[1024, 1024], [1024, 1024]]"', '"[[1024, 1024], [1024"'),
     ["generic_ops.csv:2", "column 'input_shapes'", "not valid JSON"]),
    ("generic_ops.csv", lambda path: path.read_text().replace(",bf16,", ",bfloat17,", 1),
     ["generic_ops.csv:2", "column 'dtype'"]),
    ("generic_ops.csv", lambda path: path.read_text().replace(",device\n", ",wall\n", 1),
     ["generic_ops.csv:2", "column 'clock'"]),
])
def test_bad_files_exit_2_naming_file_row_and_field(tmp_path, capsys, name, mutate, fragments):
    path = tmp_path / name
    path.write_text(mutate(FIXTURES / name))
    spec = {"ncu_": "h100-sxm", "torc": "epyc-zen4-2vcpu", "gene": "tpu-v5e", "spyr": "ibm-spyre"}[name[:4]]
    code, captured, output = _calibrate(tmp_path, capsys, "--spec", spec, "--measurements", str(path))
    assert code == 2 and "Traceback" not in captured.err, captured.err
    assert str(path) in captured.err
    for fragment in fragments:
        assert fragment in captured.err, (fragment, captured.err)
    assert not output.exists()


def test_missing_and_binary_files(tmp_path, capsys):
    code, captured, _ = _calibrate(tmp_path, capsys, "--spec", "h100-sxm", "--measurements", str(tmp_path / "nope.csv"))
    assert code == 2 and "nope.csv" in captured.err
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    code, captured, output = _calibrate(tmp_path, capsys, "--spec", "h100-sxm", "--measurements", str(binary))
    assert code == 2 and "blob.bin" in captured.err and "Traceback" not in captured.err and not output.exists()
    code, captured, _ = _calibrate(tmp_path, capsys, "--spec", "h100-sxm", "--format", "bench", "--measurements",
                                   str(binary))
    assert code == 2 and "blob.bin" in captured.err and "Traceback" not in captured.err


# ---------------------------------------------------------------------------------------- noise limit
def _graph_record(graph, seconds, op_class, spread=0.0):
    return MeasurementRecord(name=graph.name, op_class=op_class, duration_s=seconds, spread_s=spread * seconds,
                             workload_json=dumps(graph, "json"), tool="synthetic")


def _noisy_bench_csv(path, spread):
    spec = load_hardware("epyc-zen4-2vcpu")
    records = []
    for size in (64, 128, 256, 512, 1024):
        graph = dataclasses.replace(builders.gemm_sweep(sizes=(size,), dtype="fp32"), name=f"gemm{size}")
        records.append(_graph_record(graph, evaluate(graph, spec, fuse=False).total_s * 1.5, "matmul", spread))
    for elements in (1_000, 100_000, 1_000_000, 10_000_000, 50_000_000):
        graph = dataclasses.replace(builders.elementwise_chain(elements=elements, length=1, dtype="fp32"),
                                    name=f"add{elements}")
        records.append(_graph_record(graph, evaluate(graph, spec, fuse=False).total_s * 1.2, "elementwise", spread))
    write_records(records, path)


def test_noise_limit_refuses_and_force_overrides(tmp_path, capsys):
    path = tmp_path / "noisy.csv"
    _noisy_bench_csv(path, spread=0.25)
    code, captured, output = _calibrate(tmp_path, capsys, "--spec", "epyc-zen4-2vcpu", "--measurements", str(path))
    assert code == 2 and "Traceback" not in captured.err
    assert "median spread across rounds is 25.0%, above the 10% limit" in captured.err and "--force" in captured.err
    assert str(path) in captured.err and not output.exists()
    code, captured, output = _calibrate(tmp_path, capsys, "--spec", "epyc-zen4-2vcpu", "--measurements", str(path),
                                        "--force", "--json")
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["noise"] == {"median_spread": pytest.approx(0.25), "limit": 0.1, "forced": True}
    assert report["explained_share"] == pytest.approx(1.0) and validate_spec_file(output) == []


def test_quiet_data_pass_the_noise_limit(tmp_path, capsys):
    path = tmp_path / "quiet.csv"
    _noisy_bench_csv(path, spread=0.02)
    code, captured, _ = _calibrate(tmp_path, capsys, "--spec", "epyc-zen4-2vcpu", "--measurements", str(path))
    assert code == 0, captured.err
    assert "the fit explains 100.0% of the measured time" in captured.out


def test_quantization_at_the_scheduler_time_slice_is_flagged():
    def records(spreads):
        return [MeasurementRecord(name=str(i), op_class="x", duration_s=0.02, spread_s=s) for i, s in enumerate(spreads)]

    slice_s = 4e-3
    warning = quantization_warning(records([4.1e-3, 8e-3, 3.9e-3, 12.2e-3, 8.1e-3, 1e-5]), slice_s)
    assert warning and "5 of 5" in warning and "4 ms" in warning
    assert quantization_warning(records([2.5e-3, 5.9e-3, 3.1e-3, 9.8e-3, 6.2e-3]), slice_s) is None
    assert quantization_warning(records([4e-3, 8e-3]), slice_s) is None  # too few to judge


# ---------------------------------------------------------------------------------------- records
def test_records_carry_measurement_conditions_and_old_csvs_still_read(tmp_path):
    graph = builders.gemm_sweep(sizes=(64,))
    record = dataclasses.replace(_graph_record(graph, 1e-3, "matmul"), flops=7.0, threads=1, allocator="page-faulted",
                                 page_faults_per_call=12.5, clock="device", flops_by_engine={"vector:fp32": 7.0})
    path = tmp_path / "m.csv"
    write_records([record], path)
    assert read_records(path) == [record]
    old = tmp_path / "old.csv"
    old.write_text("name,op_class,duration_s,spread_s,count,flops,bytes\ngemm,matmul,0.001,0,3,10,20\n")
    [loaded] = read_records(old)
    assert (loaded.threads, loaded.allocator, loaded.clock, loaded.page_faults_per_call) == (None, "", "host", None)
    bad = tmp_path / "bad.csv"
    bad.write_text("name,op_class,duration_s,clock,threads\ngemm,matmul,0.001,wall,2\n")
    with pytest.raises(PerfmodelError, match=r"bad.csv:2: column 'clock': 'wall' is not one of host, device"):
        read_records(bad)
    bad.write_text("name,op_class,duration_s,threads\ngemm,matmul,0.001,two\n")
    with pytest.raises(PerfmodelError, match=r"bad.csv:2: column 'threads': 'two' is not a number"):
        read_records(bad)
    bad.write_text('name,op_class,duration_s,bytes_by_level\ngemm,matmul,0.001,"{dram: 1"\n')
    with pytest.raises(PerfmodelError, match=r"bad.csv:2: column 'bytes_by_level': not a JSON object"):
        read_records(bad)


def test_bench_cli_records_threads_allocator_and_noise(tmp_path, capsys, monkeypatch):
    import calibration.harness as harness

    chosen = [case for case in harness.suite(quick=True) if case.name in ("add_1000", "gemm_fp32_64")]
    monkeypatch.setattr(harness, "suite", lambda quick=False: chosen)
    output = tmp_path / "bench.csv"
    assert main(["bench", "--quick", "--rounds", "2", "--threads", "1", "--allocator", "page-faulted", "-o",
                 str(output)]) == 0
    out = capsys.readouterr().out
    assert "noise: median spread across rounds" in out and "limit of 'perfmodel calibrate'" in out
    records = read_records(output)
    assert [record.name for record in records] == [case.name for case in chosen]
    for record in records:
        assert record.threads == 1 and record.clock == "host" and record.page_faults_per_call >= 0
        assert record.allocator in ("page-faulted", "")  # "" where glibc's mallopt is missing
    assert main(["bench", "--threads", "0", "-o", str(output)]) == 2


# ---------------------------------------------------------------------------------------- counter route
def test_counter_components_by_hand():
    spec = load_hardware("h100-sxm")
    gemm = MeasurementRecord(name="ampere_sgemm_128x128_nn", op_class="matmul", duration_s=1e-3, clock="device",
                             flops_by_engine={"vector:fp32": 66.9e9},
                             bytes_by_level={"dram": 3.35e9 / 2, "l2": 11.2e9, "l1": 1e6})
    tensor = MeasurementRecord(name="sm90_xmma_gemm_bf16", op_class="kernel", duration_s=1e-3, clock="host",
                               flops_by_engine={"matrix:bf16": 989.4e9, "vector:fp32": 66.9e6}, launches=2)
    parts = counter_components([gemm, tensor], spec)
    assert parts.level_names == ("smem", "l2", "hbm")
    assert parts.compute_s == pytest.approx([1e-3, 1e-3])
    assert parts.memory_s[:, 0] == pytest.approx([1e6 / 30.9e12, 1e-3, 0.5e-3])
    assert parts.compute_keys == ("matmul:cuda_cores:fp32", "matmul:tensor_cores:bf16")
    assert parts.fixed_s == pytest.approx([0.0, 2 * 2e-6])  # tensor-core kernels' fixed time, per launch
    # A device-timed kernel pays no launch; a host-timed one pays the dynamic mode's launch per kernel.
    assert parts.scheduling_s == pytest.approx([0.0, 2 * spec.scheduling.modes["dynamic"].kernel_launch_s])
    assert parts.execution_model.overlapped(parts.execution)
    assert parts.launch_s == spec.scheduling.modes["dynamic"].kernel_launch_s


@pytest.mark.parametrize("spec, expected", [
    ("h100-sxm", {"dram": "hbm", "l2": "l2", "l1": "smem"}),
    ("epyc-zen4-2vcpu", {"dram": "dram", "l2": "l2", "l1": "l1d"}),
    ("ibm-spyre", {"dram": "lpddr5", "l1": "lx"}),
])
def test_counter_levels_map_onto_the_spec(spec, expected):
    hardware = load_hardware(spec)
    mapping = {level: hardware.memory[index].name for level, index in counter_levels(hardware).items() if level != "hbm"}
    assert mapping == expected


@pytest.mark.parametrize("name, kind", [
    ("ampere_sgemm_128x128_nn", "matmul"), ("sm80_xmma_fprop_implicit_gemm_f16f16", "conv"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10>(float*)", "softmax"),
    ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>", "attention"),
    ("void at::native::reduce_kernel<512, 1>(...)", "reduction"), ("mystery_kernel", "other"),
])
def test_kernel_kind_from_name(name, kind):
    assert kernel_kind(name) == kind


def test_ncu_tensor_path_metrics_and_instruction_factor(tmp_path):
    path = tmp_path / "raw.csv"
    path.write_text(
        '"ID","Kernel Name","gpu__time_duration.sum","sm__ops_path_tensor_src_bf16_dst_fp32.sum",'
        '"sm__inst_executed_pipe_tensor.sum","sm__sass_thread_inst_executed_op_ffma_pred_on.sum"\n'
        '"","","usecond","","inst","inst"\n'
        '"0","sm90_gemm_bf16","10","2,000,000","7","100"\n'
        '"1","volta_h884gemm_128x128","10","n/a","1000","n/a"\n')
    first, second = read_ncu_csv(path, tensor_flops_per_instruction=512)
    assert first.flops_by_engine == {"vector:fp32": 200.0, "matrix:bf16": 2e6}  # the path metric wins
    assert second.flops_by_engine == {"matrix:fp16": 512_000.0}  # dtype from the name fallback: fp16
    assert first.clock == "device" and first.flops == pytest.approx(2e6 + 200)


# ---------------------------------------------------------------------------------------- shape route
def test_trace_ops_by_hand():
    linear = trace_op("aten::linear", [[8, 64, 128], [256, 128], [256]], ["c10::BFloat16"] * 3, ["", "", ""])
    assert (linear.kind, dict(linear.attrs)) == ("matmul", {"m": 64, "n": 256, "k": 128, "batch": 8})
    assert [t.role for t in linear.inputs] == ["activation", "weight", "weight"]
    assert linear.outputs[0].shape == (8, 64, 256) and linear.outputs[0].dtype == "bf16"
    conv = trace_op("aten::conv2d", [[2, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], []],
                    ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                    ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    assert conv.outputs[0].shape == (2, 8, 16, 16)  # (32 + 2 - 2 - 1) // 2 + 1
    assert dict(conv.attrs) == {"m": 2 * 16 * 16, "n": 8, "k": 27, "transposed": False}
    transposed = trace_op("aten::conv_transpose2d", [[2, 3, 32, 32], [3, 4, 3, 3], [], [], [], [], [], []],
                          ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"],
                          ["", "", "", "[2, 2]", "[0, 0]", "[0, 0]", "1", "[1, 1]"])
    assert transposed.outputs[0].shape == (2, 4, 65, 65)  # (32 - 1) * 2 + (3 - 1) + 1
    sdpa = trace_op("aten::scaled_dot_product_attention", [[1, 4, 64, 32]] * 3 + [[]] * 5,
                    ["float"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"], ["", "", "", "", "0.", "True", "", "False"])
    assert sdpa.attrs["causal"] is True and sdpa.outputs[0].shape == (1, 4, 64, 32)
    total = trace_op("aten::sum", [[64, 256], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[-1]", "True", ""])
    assert total.kind == "reduction" and total.outputs[0].shape == (64, 1)
    var = trace_op("aten::var", [[64, 128], [], [], []], ["float", "ScalarList", "Scalar", "Scalar"],
                   ["", "[-1]", "True", "False"])  # unbiased=True is not keepdim
    assert var.outputs[0].shape == (64,)
    pool = trace_op("aten::max_pool2d", [[2, 3, 32, 32]] + [[]] * 5,
                    ["float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                    ["", "[2, 2]", "[]", "[0, 0]", "[1, 1]", "False"])
    assert pool.outputs[0].shape == (2, 3, 16, 16)
    mask = trace_op("aten::gt", [[64, 128], []], ["float", "Scalar"], ["", "0"])
    assert mask.kind == "elementwise" and mask.outputs[0].dtype == "bool"


@pytest.mark.parametrize("name, dims, types, concrete, reason", [
    ("aten::t", [[4, 4]], ["float"], [""], "free in the model"),
    ("aten::nonzero", [[16]], ["float"], [""], "no rule in the op table"),
    ("aten::cat", [[[4, 4], [4, 4]], []], ["TensorList", "Scalar"], ["", "0"], "tensor list"),
    ("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []],
     ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"], None, "not recorded"),
    ("aten::mm", [[4, 0], [0, 4]], ["float", "float"], None, "needs its operand shapes"),
    ("mylib::fused", [[4]], ["float"], None, "not an aten op"),
])
def test_ops_the_table_cannot_price_say_why(name, dims, types, concrete, reason):
    with pytest.raises(NotMapped, match=reason):
        trace_op(name, dims, types, concrete)


def test_a_tensor_list_is_priced_at_the_dtype_the_caller_states():
    """aten::cat's inputs are recorded as a TensorList without a dtype (the KV cache's append in a decode
    step); with ``list_dtype`` the call is priced as the copy it is: both inputs read, the output written."""
    cat = trace_op("aten::cat", [[[1, 4, 128, 64], [1, 4, 1, 64]], []], ["TensorList", "Scalar"], ["", "-2"],
                   list_dtype="fp32")
    assert cat.kind == "copy" and cat.outputs[0].shape == (1, 4, 129, 64) and cat.outputs[0].dtype == "fp32"
    assert [tensor.shape for tensor in cat.inputs] == [(1, 4, 128, 64), (1, 4, 1, 64)]
    with pytest.raises(ValueError, match="list_dtype 'float' is not a perfmodel dtype"):
        read_trace_ops(Path(__file__), list_dtype="float")


def test_malformed_shapes_are_errors_not_unmapped():
    with pytest.raises(ShapeError, match="Input Dims"):
        trace_op("aten::mm", [[4, "4"], [4, 4]], ["float", "float"])
    with pytest.raises(ShapeError, match="Input type"):
        trace_op("aten::mm", [[4, 4], [4, 4]], ["float"])


def test_reader_and_capture_share_one_op_table():
    """Every op a capture records is classified identically from its shapes alone (the path the trace
    and generic readers take)."""
    import torch

    from calibration.harness import suite
    from perfmodel.workload.capture import capture

    checked = 0
    for case in suite(quick=True):
        module, inputs = case.make(torch, "cpu")
        for op in capture(module, inputs).graph.ops:
            name = op.provenance.removeprefix("aten.")
            kind, attrs = classify_aten(name, [t.shape for t in op.inputs], [t.shape for t in op.outputs],
                                        transposed=op.attrs.get("transposed"), causal=op.attrs.get("causal", False))
            assert (kind, attrs) == (op.kind, dict(op.attrs)), (case.name, op.name)
            checked += 1
    assert checked > 50


def test_pointwise_table_agrees_with_torch_tags():
    import torch

    for name in sorted(POINTWISE_OPS):
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        tags = set().union(*(getattr(packet, overload).tags for overload in packet.overloads()))
        assert torch.Tag.pointwise in tags, name


def test_trace_attribution_on_a_real_cpu_trace():
    """aten::linear owns its t/addmm/copy_ children; a view outside any priced op is unmapped."""
    spec = load_hardware("epyc-zen4-2vcpu")
    measurements = load_measurements(FIXTURES / "torch_cpu_ops_trace.json", None, spec)
    names = [record.name for record in measurements.records]
    assert "aten::linear(32x256, 512x256, 512)" in names and not any("addmm" in name for name in names)
    assert len(measurements.records) == 26 and all(record.clock == "host" for record in measurements.records)
    assert {entry.name for entry in measurements.unmapped} >= {"aten::cat", "aten::t"}
    assert measurements.mapped_s + sum(entry.time_s for entry in measurements.unmapped) == pytest.approx(
        measurements.total_s)


def test_gpu_and_spyre_traces_are_device_timed_and_charge_no_launch():
    for name, spec_name in (("torch_cuda_ops_trace.json.gz", "h100-sxm"), ("spyre_ops_trace.json", "ibm-spyre")):
        spec = load_hardware(spec_name)
        records = list(load_measurements(FIXTURES / name, None, spec).records)
        assert all(record.clock == "device" for record in records)
        parts = shape_components(records, spec)
        assert not np.any(parts.scheduling_s)


def test_spyre_kernel_time_is_the_whole_cycle_span_across_a_wrap():
    spec = load_hardware("ibm-spyre")
    records = load_measurements(FIXTURES / "spyre_ops_trace.json", None, spec).records
    events = json.loads((FIXTURES / "spyre_ops_trace.json").read_text())["traceEvents"]
    first = next(event for event in events if event.get("cat") == "kernel")
    start, end = first["args"]["cycles_ts"][0], first["args"]["cycles_ts"][4]
    assert end < start  # the fixture's first kernel wraps the 32-bit counter
    assert records[0].duration_s == pytest.approx((end - start + 2**32) * 1e-9)


def test_generic_rows_with_shapes_become_ops():
    spec = load_hardware("tpu-v5e")
    measurements = load_measurements(FIXTURES / "generic_ops.csv", None, spec)
    conv = next(record for record in measurements.records if record.name.startswith("conv"))
    [op] = conv.graph().ops
    assert op.kind == "conv" and op.outputs[0].shape == (8, 64, 56, 56) and conv.clock == "device"
    assert math.isclose(measurements.explained_share + sum(e.time_s for e in measurements.unmapped)
                        / measurements.total_s, 1.0)


def test_reader_error_for_missing_file():
    with pytest.raises(ReaderError, match="nope"):
        detect_format(FIXTURES / "nope.json")
