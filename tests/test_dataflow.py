"""Spatial (layer-pipelined) dataflow on a wafer: regions sized by weights, fabric hops, token pipelining."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from perfmodel.hardware.loader import load_hardware
from perfmodel.llm import Parallelism, Scenario, llm_predict
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import stage_graph
from perfmodel.roofline import evaluate
from perfmodel.roofline.arrays import evaluate_arrays, pipelined_totals
from perfmodel.workload.ir import Graph, Op, TensorSpec

FP16 = {"weight_dtype": "fp16", "kv_dtype": "fp16", "activation_dtype": "fp16"}


def _gemv(name: str, k: int, n: int) -> Op:
    return Op(name=name, kind="matmul", inputs=(TensorSpec(shape=(1, k), dtype="fp16"),
                                                TensorSpec(shape=(k, n), dtype="fp16", role="weight")),
              outputs=(TensorSpec(shape=(1, n), dtype="fp16"),), attrs={"m": 1, "n": n, "k": k})


def test_each_op_runs_on_its_region_and_pays_the_fabric_hops():
    """Two GEMVs holding 3/4 and 1/4 of the weights (26 and 9 GB, most of the wafer's SRAM): each runs
    on that share of the wafer's compute and SRAM bandwidth and pays 2 sqrt(cores in its region) hops
    of 0.91 ns (both regions are narrower than the latency-optimal width, spatial_regions)."""
    wafer = load_hardware("cerebras-wse-3")
    big, small = _gemv("big", 65536, 3 * 65536), _gemv("small", 65536, 65536)
    spatial = evaluate(Graph(name="two", ops=[big, small]), wafer, mode="spatial")
    whole = evaluate(Graph(name="two", ops=[big, small]), wafer, mode="static")
    cores, hop = 900_000, wafer.scheduling.modes["spatial"].fabric_hop_s
    assert hop == pytest.approx(0.91e-9)
    for timing, full, share in ((spatial.ops[0], whole.ops[0], 0.75), (spatial.ops[1], whole.ops[1], 0.25)):
        assert timing.compute_s == pytest.approx(full.compute_s / share)
        assert timing.memory_s["sram"] == pytest.approx(full.memory_s["sram"] / share)
        assert timing.scheduling_s == pytest.approx(2 * math.sqrt(share * cores) * hop)
        busy = max(timing.compute_s, *timing.memory_s.values())
        assert timing.total_s == pytest.approx(busy + timing.scheduling_s)


def test_a_small_op_uses_no_more_of_its_region_than_lowers_its_latency():
    """Two 100 and 34 MB GEMVs alone on the wafer are allotted 675,000 and 225,000 cores, where the
    fabric's 2 sqrt(cores) hops (1.5 us) would dwarf their work (~10 ns on the whole wafer): each runs
    on the A* = (s x cores / hop)^(2/3) cores that minimize s x cores / A + 2 sqrt(A) x hop, and that
    is faster than its whole allotment."""
    wafer = load_hardware("cerebras-wse-3")
    big, small = _gemv("big", 4096, 3 * 4096), _gemv("small", 4096, 4096)
    spatial = evaluate(Graph(name="two", ops=[big, small]), wafer, mode="spatial")
    whole = evaluate(Graph(name="two", ops=[big, small]), wafer, mode="static")
    cores, hop = 900_000, wafer.scheduling.modes["spatial"].fabric_hop_s
    for timing, full, share in ((spatial.ops[0], whole.ops[0], 0.75), (spatial.ops[1], whole.ops[1], 0.25)):
        work = max(full.compute_s, *full.memory_s.values())
        region = (work * cores / hop) ** (2 / 3)
        assert 1 < region < share * cores
        assert timing.compute_s == pytest.approx(full.compute_s * cores / region)
        assert timing.scheduling_s == pytest.approx(2 * math.sqrt(region) * hop)
        allotted = work / share + 2 * math.sqrt(share * cores) * hop
        assert timing.total_s < allotted


def test_a_token_stream_leaves_the_pipeline_one_slowest_stage_apart():
    times = np.array([[1.0], [3.0], [2.0]])  # three stages' time for all 8 items together
    totals = pipelined_totals(times, np.ones((3, 1)), np.asarray(8.0))
    # 6/8 for the first item through every stage, then 7 more at 3/8 each from the slowest stage.
    assert totals.sum() == pytest.approx(6 / 8 + 7 * 3 / 8)
    assert totals[1, 0] == pytest.approx(3 / 8 + 7 * 3 / 8)


def test_batch1_decode_on_one_wafer_is_the_sum_over_its_regions():
    """Llama-3.1-8B on one WSE-3: per-token time = sum over op instances (no pipelining at batch 1),
    about 32 x 6 weight-holding stages (q, k, v, o, gate_up, down) of ~1 us (16 GB of weights over the wafer's 15.8 PFLOP/s
    dense fp16 and 21 PB/s, each stage a region sized by its weights) plus the fabric hops."""
    architecture, wafer = load_architecture("llama-3.1-8b"), load_hardware("cerebras-wse-3")
    scenario = Scenario(batch=1, prompt_tokens=512, generated_tokens=256, **FP16)
    graph = stage_graph(architecture, scenario, Parallelism(), phase="decode", context=640)
    arrays = evaluate_arrays(graph, wafer, stream_items=1)
    assert arrays.mode == "spatial"
    weights = sum(t.bytes * op.count for op in graph.ops for t in op.inputs if t.role == "weight")
    flops = float(np.sum(arrays.executed_flops))
    per_stage_floor = max(flops / 15.8e15, weights / 21e15)  # each stage's share of the whole-wafer time
    stages = sum(op.count for op in graph.ops if any(t.role == "weight" for t in op.inputs))
    assert stages == 32 * 6 + 2  # and the embedding and the LM head
    assert float(arrays.total_s.sum()) >= stages * per_stage_floor * 0.9
    result = llm_predict(architecture, wafer, scenario)
    assert 1 / result.tpot_s == pytest.approx(1 / float(arrays.total_s.sum() + arrays.program_s), rel=0.05)


def test_a_model_on_four_wafers_is_priced_across_four():
    """Llama-3.1-70B in fp16 (141 GB) needs four 44 GB wafers: each stage holds 20 layers, the token
    crosses the four in turn and is sent between them three times over SwarmX."""
    architecture, wafer = load_architecture("llama-3.1-70b"), load_hardware("cerebras-wse-3")
    scenario = Scenario(batch=1, prompt_tokens=512, generated_tokens=256, **FP16)
    one_wafer = llm_predict(architecture, wafer, scenario, Parallelism(pp=1))
    four = llm_predict(architecture, wafer, scenario, Parallelism(pp=4))
    assert one_wafer.weights_streamed and four.fits and not four.weights_streamed
    assert one_wafer.tpot_s > 10 * four.tpot_s  # 141 GB a token through the 150 GB/s MemoryX link
    stage = stage_graph(architecture, scenario, Parallelism(pp=4), phase="decode", context=512 + 128)
    assert {op.count for op in stage.ops if op.name.startswith("layers.")} == {20}
    stage_s = float(evaluate_arrays(stage, wafer).total_s.sum())
    assert four.tpot_s > 4 * stage_s * 0.95  # four stages in turn, plus three sends
    slower = dataclasses.replace(wafer, links={"swarmx": dataclasses.replace(
        wafer.links["swarmx"], bandwidth_bytes_per_s_per_direction=1e6)})
    assert llm_predict(architecture, slower, scenario, Parallelism(pp=4)).tpot_s > four.tpot_s
