"""vLLM TPU's overlay (``tpu-v6e-vllm``): the XLA collectives its jitted step runs, fitted to published
all-reduce microbenchmarks (``calibration.tpu_engine_overlays``)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from calibration.achievable import device_time_hardware
from calibration.tpu_engine_overlays import (
    BASE,
    XLA_ALL_REDUCE_V6E,
    all_reduce_records,
    fit_engine_collectives,
    overlay_text,
)
from perfmodel.hardware.loader import engine_overlays, load_hardware, serving_spec_name
from perfmodel.roofline.arrays import evaluate_arrays

SHIPPED = Path(__file__).resolve().parent.parent / "hardware_specs" / "tpu" / "tpu-v6e-vllm.yaml"


def _relative_errors(spec: str) -> list[float]:
    """|predicted / measured - 1| of every published all-reduce on ``spec`` (device time: no dispatch)."""
    hardware = device_time_hardware(load_hardware(spec))
    return [abs(float(evaluate_arrays(record.graph(), hardware, mode="graph").total_s.sum()) / record.duration_s - 1)
            for record in all_reduce_records(hardware)]


@pytest.fixture(scope="module")
def fitted():
    return fit_engine_collectives()


def test_the_shipped_overlay_is_what_the_fit_writes(fitted):
    assert SHIPPED.read_text() == overlay_text(fitted)


def test_the_overlay_reproduces_the_measured_all_reduces_the_datasheet_link_misses():
    """The datasheet ICI (100 GB/s a link, 1 us a hop) prices these XLA all-reduces at about half their
    measured time; the fitted link is within 15% at the median, and every row within 30%."""
    before, after = _relative_errors(BASE), _relative_errors("tpu-v6e-vllm")
    assert statistics.median(before) > 0.3, before
    assert statistics.median(after) < 0.15 and max(after) < 0.3, after


def test_the_fit_identifies_both_link_parameters_with_a_small_error(fitted):
    params = fitted.result.params
    efficiency, efficiency_error = params["link:ici"]
    latency, latency_error = params["collective_latency:ici"]
    assert 0.5 < efficiency < 1 and efficiency_error < 0.15 * efficiency
    # The smallest rows (0.25 MiB on 8 chips: 30.5 us) bound the fixed part from above.
    assert 5e-6 < latency < min(seconds for _, _, seconds in XLA_ALL_REDUCE_V6E) and latency_error < 0.25 * latency
    assert not fitted.result.unidentified and not fitted.result.at_bounds


def test_the_rows_are_the_published_table_in_si_units():
    assert len(XLA_ALL_REDUCE_V6E) == 12
    assert {chips for chips, _, _ in XLA_ALL_REDUCE_V6E} == {8, 16, 32}
    assert {size for _, size, _ in XLA_ALL_REDUCE_V6E} == {2**18, 2**20, 2**22, 2**24}
    assert all(10e-6 < seconds < 1e-3 for _, _, seconds in XLA_ALL_REDUCE_V6E)


def test_the_engine_overlay_keeps_the_device_s_fitted_mxu_and_is_named_for_serving():
    spec, base = load_hardware("tpu-v6e-vllm"), load_hardware(BASE)
    assert spec.efficiency.name == "tpu-v6e-vllm" and spec.efficiency.kind == "achievable"
    assert spec.efficiency.compute_efficiency == base.efficiency.compute_efficiency
    assert spec.sources["engine-collectives"].kind == "vendor-code"
    assert engine_overlays("tpu-v6e") == ("vllm",)
    assert serving_spec_name("tpu-v6e", "vllm") == "tpu-v6e-vllm"
    # its only engine is the default for serve/size/llm (GPUs keep TensorRT-LLM); 'none' still opts out
    assert serving_spec_name("tpu-v6e", None) == "tpu-v6e-vllm"
    assert serving_spec_name("tpu-v6e", "none") == "tpu-v6e"
    assert serving_spec_name("tpu-v5e", None) == "tpu-v5e"


def test_a_tp8_decode_step_pays_the_measured_all_reduces():
    """Llama-3.1-70B TP8 decode at batch 64: 160 all-reduces of 1 MiB a step; at XLA's measured ~44 us each
    they add about 4 ms over the datasheet link's ~17 us."""
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.graphs import Parallelism, Scenario, stage_graph

    architecture = load_architecture("llama-3.1-70b")
    scenario = Scenario(batch=64, prompt_tokens=1500, generated_tokens=2, weight_dtype="bf16", kv_dtype="bf16",
                        activation_dtype="bf16")
    graph = stage_graph(architecture, scenario, Parallelism(tp=8), phase="decode", context=1500)
    links = {name: float(evaluate_arrays(graph, load_hardware(name), mode="graph").link_s.sum())
             for name in (BASE, "tpu-v6e-vllm")}
    assert 2.5e-3 < links["tpu-v6e-vllm"] - links[BASE] < 6e-3, links
