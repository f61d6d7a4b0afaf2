"""The three-bottleneck engine: analytic oracles, hand-worked bounds, properties, bad workloads."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.cli import main
from perfmodel.costs.traffic import matmul_elements_moved
from perfmodel.errors import PerfmodelError, WorkloadError
from perfmodel.hardware.loader import load_hardware
from perfmodel.roofline import evaluate
from perfmodel.roofline.sweep import hardware_with, sweep
from perfmodel.workload import builders
from perfmodel.workload.io import dumps, graph_from_document, load_graph, save_graph
from perfmodel.workload.ir import Graph, Op, TensorSpec
from perfmodel.yaml_source import parse_yaml
from tests.test_spec_errors import VALID

FAMILY_SPECS = ["h100-sxm", "tpu-v5e", "cerebras-wse-3", "groq-lpu-v1", "ibm-spyre", "epyc-zen4-2vcpu"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A one-level device: 100 TFLOP/s bf16, 1 TB/s, 5 us per kernel launch (see VALID)."""
    path = tmp_path_factory.mktemp("spec") / "tiny.yaml"
    path.write_text(VALID.replace("    peak: {bf16: 100 TFLOP/s}\n", "    peak: {bf16: 100 TFLOP/s, fp32: 10 TFLOP/s}\n"))
    return load_hardware(path)


def gemm(m, n, k, dtype="bf16", count=1):
    return Op(name="mm", kind="matmul", count=count,
              inputs=(TensorSpec(shape=(m, k), dtype=dtype), TensorSpec(shape=(k, n), dtype=dtype, role="weight")),
              outputs=(TensorSpec(shape=(m, n), dtype=dtype),), attrs={"m": m, "n": n, "k": k})


def test_matmul_flops_and_compulsory_bytes_by_hand(tiny):
    # 4096^3 bf16: 2*4096^3 = 137.4 GFLOP at 100 TFLOP/s = 1.374 ms; bytes 3*4096^2*2 = 100.7 MB at 1 TB/s = 0.1 ms.
    [timing] = evaluate(Graph(name="g", ops=[gemm(4096, 4096, 4096)]), tiny).ops
    assert timing.flops == 2 * 4096**3
    assert timing.bytes["hbm"] == 3 * 4096 * 4096 * 2  # one level, no tile: compulsory traffic
    assert timing.compute_s == pytest.approx(2 * 4096**3 / 100e12)
    assert timing.total_s == pytest.approx(2 * 4096**3 / 100e12)
    assert timing.bound == "compute"


def test_memory_bound_by_hand(tiny):
    # A matrix-vector product: 2*8192*8192 FLOP (1.3 us) but 8192^2*2 bytes of weights (134 us).
    [timing] = evaluate(Graph(name="g", ops=[gemm(1, 8192, 8192)]), tiny).ops
    expected_bytes = (8192 + 8192 * 8192 + 8192) * 2
    assert timing.bytes["hbm"] == expected_bytes
    assert timing.total_s == pytest.approx(expected_bytes / 1e12)
    assert timing.bound == "memory:hbm"


def test_scheduling_bound_by_hand(tiny):
    op = Op(name="add", kind="elementwise", inputs=(TensorSpec(shape=(1024,), dtype="bf16"),) * 2,
            outputs=(TensorSpec(shape=(1024,), dtype="bf16"),))
    [timing] = evaluate(Graph(name="g", ops=[op]), tiny).ops
    assert timing.scheduling_s == pytest.approx(5e-6)
    assert timing.total_s == pytest.approx(5e-6)  # host dispatch (5 us) hides 6 KB of traffic (6 ns)
    assert timing.bound == "scheduling"


def test_tiled_traffic_formula_by_hand():
    # S = 64 elements -> b = 8: A read m*k*ceil(n/8), B read k*n*ceil(m/8), C written once.
    a, b, c = matmul_elements_moved(32, 32, 16, 64)
    assert (a, b, c) == (32 * 16 * 4, 16 * 32 * 4, 32 * 32)
    # Capacity that holds everything: compulsory traffic only.
    assert sum(matmul_elements_moved(32, 32, 16, 10**9)) == 32 * 16 + 16 * 32 + 32 * 32


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 5000), n=st.integers(1, 5000), k=st.integers(1, 5000),
       small=st.floats(1e3, 1e7), factor=st.floats(1.0, 100.0))
def test_bigger_scratchpad_never_increases_outer_traffic(m, n, k, small, factor):
    assert sum(matmul_elements_moved(m, n, k, small * factor)) <= sum(matmul_elements_moved(m, n, k, small)) + 1e-6


def test_spyre_dram_traffic_depends_on_scratchpad_size():
    spyre = load_hardware("ibm-spyre")
    graph = Graph(name="g", ops=[gemm(2048, 8192, 8192, dtype="fp16")])
    traffic = [evaluate(graph, hardware_with(spyre, {"memory.lx.capacity": size})).ops[0].bytes["lpddr5"]
               for size in (0.5e6, 2e6, 8e6)]
    assert traffic[0] > traffic[1] > traffic[2]
    compulsory = (2048 * 8192 + 8192 * 8192 + 2048 * 8192) * 2
    assert traffic[2] >= compulsory


def test_padding_to_native_tiles_is_reported():
    spyre = load_hardware("ibm-spyre")  # PT tile m=8: a one-row product does 8 rows of work
    timing = evaluate(Graph(name="g", ops=[gemm(1, 4096, 4096, dtype="fp16")]), spyre).ops[0]
    tiles = 4096 // 64
    waves = -(-tiles // 32)
    assert timing.executed_flops == 2 * waves * 32 * 8 * 64 * 4096
    assert timing.padding_ratio == pytest.approx(8.0)
    h100 = load_hardware("h100-sxm")  # 132 SMs: 4096/128 squared = 1024 tiles -> 8 waves of 132
    [timing] = evaluate(Graph(name="g", ops=[gemm(4096, 4096, 4096)]), h100).ops
    assert timing.padding_ratio == pytest.approx(8 * 132 / 1024)


@pytest.mark.parametrize("name", FAMILY_SPECS)
def test_each_family_gets_each_bound(name):
    hardware = load_hardware(name)
    dtype = "fp16" if name in ("groq-lpu-v1", "ibm-spyre") else "bf16"
    big = evaluate(Graph(name="g", ops=[gemm(8192, 8192, 8192, dtype)]), hardware)
    assert big.ops[0].bound in ("compute", *[f"memory:{level.name}" for level in hardware.memory])
    tiny_op = Op(name="add", kind="elementwise", inputs=(TensorSpec(shape=(8,), dtype=dtype),),
                 outputs=(TensorSpec(shape=(8,), dtype=dtype),))
    small = evaluate(Graph(name="g", ops=[tiny_op]), hardware)
    mode = hardware.scheduling.mode()
    if max(mode.kernel_launch_s, mode.program_launch_s) > 0:
        assert small.bound == "scheduling"
    matvec = evaluate(Graph(name="g", ops=[gemm(1, 8192, 8192, dtype)]), hardware)
    assert matvec.ops[0].bound != "compute" or hardware.family == "wafer"


def test_dynamic_small_kernels_become_host_bound_and_graph_mode_fuses():
    h100 = load_hardware("h100-sxm")
    chain = builders.elementwise_chain(elements=4096, length=8)
    eager = evaluate(chain, h100, mode="dynamic")
    graphed = evaluate(chain, h100, mode="graph")
    assert eager.bound == "scheduling" and eager.total_s == pytest.approx(8 * 20e-6)
    assert graphed.kernels == 1 and graphed.total_s < eager.total_s / 5
    # Fusion keeps intermediates on chip: for a chain too big for L2, HBM sees only its input and output.
    big = builders.elementwise_chain(elements=1 << 26, length=8)
    tensor = 2**26 * 2
    outside_l2 = 1 - 50 * 2**20 / (2 * tensor)  # an op's 2 tensors; an ideal 50 MiB L2 keeps 50 MiB of them
    graphed_hbm = sum(op.bytes["hbm"] for op in evaluate(big, h100, mode="graph").ops)
    assert graphed_hbm == pytest.approx(2 * tensor * outside_l2)
    assert sum(op.bytes["hbm"] for op in evaluate(big, h100, mode="dynamic").ops) == pytest.approx(8 * graphed_hbm)


def test_small_activations_are_served_from_a_warm_cache():
    h100 = load_hardware("h100-sxm")
    small = Op(name="add", kind="elementwise", inputs=(TensorSpec(shape=(1 << 20,), dtype="bf16"),) * 2,
               outputs=(TensorSpec(shape=(1 << 20,), dtype="bf16"),))  # 6 MiB fits the 50 MB L2
    [timing] = evaluate(Graph(name="g", ops=[small]), h100).ops
    assert timing.bytes["hbm"] == 0 and timing.bytes["l2"] == 3 * 2**21
    weights = dataclasses.replace(small, inputs=(small.inputs[0], TensorSpec(shape=(1 << 20,), dtype="bf16",
                                                                            role="weight")))
    assert evaluate(Graph(name="g", ops=[weights]), h100).ops[0].bytes["hbm"] == 3 * 2**21


def test_spyre_pays_its_program_launch_and_dmas():
    spyre = load_hardware("ibm-spyre")
    evaluation = evaluate(builders.elementwise_chain(), spyre)
    launch = [op for op in evaluation.ops if op.kind == "launch"]
    assert launch and launch[0].total_s == pytest.approx(3e-3 + 3 * 30e-6)


def test_cerebras_streams_weights_only_when_they_do_not_fit():
    wse = load_hardware("cerebras-wse-3")
    small = evaluate(Graph(name="g", ops=[gemm(16, 4096, 4096)]), wse)
    assert small.weights_resident and small.ops[0].bytes["memoryx"] == 0
    huge = evaluate(Graph(name="g", ops=[gemm(16, 8192, 8192, count=400)]), wse)  # 53.7 GB of weights
    assert not huge.weights_resident
    assert huge.ops[0].bytes["memoryx"] == pytest.approx(8192 * 8192 * 2 * 400)
    assert huge.bound == "memory:memoryx"


@settings(max_examples=30, deadline=None)
@given(scale=st.floats(1.0, 50.0), which=st.sampled_from(["memory.hbm.bandwidth", "memory.l2.bandwidth",
                                                          "compute.tensor_cores.peak.bf16"]))
def test_more_peak_or_bandwidth_never_slower(scale, which):
    h100 = load_hardware("h100-sxm")
    graph = builders.transformer_block(seq=128)
    base = evaluate(graph, h100).total_s
    current = {"memory.hbm.bandwidth": 3.35e12, "memory.l2.bandwidth": 11.2e12,
               "compute.tensor_cores.peak.bf16": 989.4e12}[which]
    assert evaluate(graph, hardware_with(h100, {which: current * scale})).total_s <= base * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(launch=st.floats(0.0, 20e-6))
def test_less_launch_overhead_never_slower(launch):
    h100 = load_hardware("h100-sxm")
    graph = builders.transformer_block(seq=16)
    faster = hardware_with(h100, {"scheduling.modes.dynamic.kernel_launch": launch})
    assert evaluate(graph, faster).total_s <= evaluate(graph, h100).total_s * (1 + 1e-12)


@pytest.mark.parametrize("name", FAMILY_SPECS)
def test_count_n_equals_n_copies_and_sum_is_at_least_max(name):
    hardware = load_hardware(name)
    dtype = "fp16" if name in ("groq-lpu-v1", "ibm-spyre") else "bf16"
    repeated = Graph(name="g", ops=[gemm(512, 1024, 2048, dtype, count=5)])
    copies = Graph(name="g", ops=[dataclasses.replace(gemm(512, 1024, 2048, dtype), name=f"mm{i}") for i in range(5)])
    assert evaluate(repeated, hardware, fuse=False).total_s == pytest.approx(evaluate(copies, hardware, fuse=False).total_s)
    block = builders.transformer_block(seq=64, dtype=dtype)
    assert evaluate(block, hardware, overlap="sum").total_s >= evaluate(block, hardware, overlap="max").total_s


def test_sweep_matches_point_by_point_evaluation():
    h100 = load_hardware("h100-sxm")
    batches, bandwidths = [1, 4, 32], [2e12, 6e12]
    result = sweep(lambda batch: builders.transformer_block(batch=batch, seq=1, kv_len=512), h100,
                   scenario={"batch": np.asarray(batches)}, spec={"memory.hbm.bandwidth": bandwidths})
    for index in range(result.size):
        batch, bandwidth = int(result.points["batch"][index]), result.points["memory.hbm.bandwidth"][index]
        graph = builders.transformer_block(batch=batch, seq=1, kv_len=512)
        expected = evaluate(graph, hardware_with(h100, {"memory.hbm.bandwidth": bandwidth})).total_s
        assert result.total_s[index] == pytest.approx(expected)


@pytest.mark.parametrize("mutate, fragment", [
    (lambda op: dataclasses.replace(op, attrs={**op.attrs, "m": 0}), "attrs.m: must be more than zero"),
    (lambda op: dataclasses.replace(op, inputs=(TensorSpec(shape=(-4, 8), dtype="bf16"),)), "positive integer"),
    (lambda op: dataclasses.replace(op, inputs=(TensorSpec(shape=(4, 8), dtype="fp12"),)), "unknown dtype 'fp12'"),
    (lambda op: dataclasses.replace(op, count=0), "count must be a positive integer"),
])
def test_bad_workloads_give_clear_errors(mutate, fragment):
    with pytest.raises(WorkloadError, match=fragment):
        Graph(name="g", ops=[mutate(gemm(4, 8, 8))])


def test_cycle_is_an_error():
    ops = [gemm(4, 8, 8), dataclasses.replace(gemm(4, 8, 8), name="mm2")]
    with pytest.raises(WorkloadError, match="points backwards"):
        Graph(name="g", ops=ops, edges=[("mm2", "mm")])


def test_missing_engine_is_a_clear_error():
    with pytest.raises(PerfmodelError, match="tpu-v5e has no engine for a matmul op in fp64"):
        evaluate(Graph(name="g", ops=[gemm(64, 64, 64, dtype="fp64")]), load_hardware("tpu-v5e"))


def test_unknown_op_is_estimated_and_listed(tiny):
    odd = Op(name="weird", kind="other", provenance="aten.nonzero", inputs=(TensorSpec(shape=(1000,), dtype="bf16"),),
             outputs=(TensorSpec(shape=(1000,), dtype="bf16"),))
    evaluation = evaluate(Graph(name="g", ops=[odd]), tiny)
    assert evaluation.unsupported == {"other:weird": 1}
    assert evaluation.ops[0].bytes["hbm"] == 4000 and evaluation.total_s > 0


@pytest.mark.parametrize("name", sorted(builders.SHIPPED))
def test_shipped_workloads_round_trip_exactly(name, tmp_path):
    graph = load_graph(name)
    assert graph == builders.SHIPPED[name]()
    for suffix in (".yaml", ".json"):
        save_graph(graph, tmp_path / f"g{suffix}")
        assert load_graph(tmp_path / f"g{suffix}") == graph
    assert dumps(load_graph(tmp_path / "g.yaml")) == dumps(graph)


def test_bad_workload_file_names_file_line_and_field():
    text = dumps(builders.small_cnn()).replace("kind: conv", "kind: convolution", 1).replace("- 32\n", "- 0\n", 1)
    with pytest.raises(WorkloadError) as error:
        graph_from_document(parse_yaml(text, "bad.yaml"))
    message = str(error.value)
    assert "unknown kind 'convolution'" in message and "bad.yaml:" in message


def test_predict_cli_json_contract(capsys):
    assert main(["predict", "transformer_block", "--on", "h100-sxm,ibm-spyre", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # H100 predictions use its achievable overlay by default; Spyre has none (datasheet).
    assert [item["hardware"] for item in data] == ["h100-sxm-achievable", "ibm-spyre"]
    assert [item["parameters"] for item in data] == ["achievable (h100-sxm-achievable)", "ideal (datasheet)"]
    for item in data:
        assert {"total_s", "flops_total", "time_by_bound", "ops"} <= set(item)
        op = item["ops"][0]
        assert {"name", "kind", "flops", "bytes", "compute_s", "memory_s", "scheduling_s", "total_s", "bound"} <= set(op)
        assert item["total_s"] == pytest.approx(sum(o["total_s"] for o in item["ops"]))


def test_predict_cli_what_if_and_errors(capsys):
    assert main(["predict", "transformer_block", "--on", "h100-sxm", "--set", "memory.hbm.bandwidth=33.5TB/s",
                 "--json"]) == 0
    faster = json.loads(capsys.readouterr().out)["total_s"]
    assert main(["predict", "transformer_block", "--on", "h100-sxm", "--json"]) == 0
    assert faster < json.loads(capsys.readouterr().out)["total_s"]
    assert main(["predict", "no_such_workload", "--on", "h100-sxm"]) == 2
    assert "not a shipped workload" in capsys.readouterr().err
    assert main(["predict", "transformer_block", "--on", "h100-sxm", "--set", "memory.hbm.bandwidth=fast"]) == 2
    assert main(["sweep", "--on", "h100-sxm", "--grid", "batch=1,2", "--grid", "memory.hbm.bandwidth=2TB/s,4TB/s",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]  # the object: confidence, basis, rows (issue 32)
    assert len(rows) == 4 and {"batch", "memory.hbm.bandwidth", "total_s", "bound"} <= set(rows[0])


def test_sweep_writes_csv_and_parquet(tmp_path, capsys):
    import pandas as pd

    for suffix in ("csv", "parquet"):
        target = tmp_path / f"sweep.{suffix}"
        assert main(["sweep", "--on", "ibm-spyre", "--grid", "memory.lx.capacity=1MB,4MB", "--grid", "batch=1,2",
                     "-o", str(target)]) == 0
        frame = pd.read_csv(target) if suffix == "csv" else pd.read_parquet(target)
        assert len(frame) == 4 and (frame["total_s"] > 0).all()
        one = frame[frame["batch"] == 1].sort_values("memory.lx.capacity")
        assert one["time_s:memory:lpddr5"].iloc[1] < one["time_s:memory:lpddr5"].iloc[0]  # bigger LX, less LPDDR
