"""Per-engine overlays fitted to serving engines' kernel tables (issue 29): reading the tables, the
fitted overlays, how predictions choose them, and their accuracy on rows they were not fitted on."""

from __future__ import annotations

import math
import statistics

import pytest

from calibration import aiconfigurator as tables
from calibration.engine_overlays import DATASHEET_LEVELS, without_step_latency
from perfmodel.costs.rules import DECODE_ATTENTION
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import (
    DEFAULT_SERVING_ENGINE,
    SERVING_ENGINES,
    engine_overlays,
    load_for_prediction,
    load_hardware,
    serving_spec_name,
)
from perfmodel.roofline import evaluate
from perfmodel.validation import _serving_spec

GPUS = tuple(tables.GPU_FOLDERS)


@pytest.fixture(scope="module")
def sample():
    return tables.sample_records()


def test_sample_rows_become_records_in_si_units(sample):
    records, skipped = sample
    by_class = {record.op_class for record in records}
    assert by_class == {"gemm:bf16", "gemm:fp8", "prefill_attention", "decode_attention", "all_reduce"}
    import pandas as pd

    gemm = pd.read_csv(tables.sample_path("gemm"))
    first = next(record for record in records if record.op_class.startswith("gemm"))
    row = gemm.loc[first.source_row]
    assert first.duration_s == pytest.approx(row["latency"] * 1e-3)  # milliseconds in the table
    op = first.graph().ops[0]
    assert (op.attrs["m"], op.attrs["n"], op.attrs["k"]) == (row["m"], row["n"], row["k"])
    assert all(record.clock == "device" and "sglang 0.5.14" in record.tool_version for record in records)


def test_rows_the_rules_do_not_price_are_skipped_and_counted(sample):
    _, skipped = sample
    assert skipped["gemm fp8_block: scale traffic / dequantization not priced yet"] > 0
    assert skipped["all_reduce: eager variant (serving runs the CUDA-graph one)"] > 0


def test_decode_attention_reads_isl_plus_step_cached_tokens(sample):
    import pandas as pd

    records, _ = sample
    frame = pd.read_csv(tables.sample_path("decode_attention"))
    decode = next(record for record in records if record.op_class == "decode_attention")
    row = frame.loc[decode.source_row]
    op = decode.graph().ops[0]
    assert op.attrs["seq_q"] == 1 and op.attrs["seq_kv"] == row["isl"] + row["step"]
    assert op.inputs[1].role == "kv_cache"


def test_all_reduce_message_size_counts_bf16_elements(sample):
    records, _ = sample
    reduce = next(record for record in records if record.op_class == "all_reduce")
    elements = int(reduce.name.rsplit("_", 1)[1])
    assert reduce.graph().ops[0].attrs["bytes"] == 2 * elements


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("engine", SERVING_ENGINES)
def test_every_engine_overlay_ships_loads_and_runs_graph_mode(gpu, engine):
    spec = load_hardware(f"{gpu}-{engine}")
    assert spec.efficiency.kind == "achievable" and spec.efficiency.name == f"{gpu}-{engine}"
    assert spec.scheduling.default_mode == "graph"
    assert "aiconfigurator-core" in spec.sources["calibration"].url
    # The fitted serving-kernel fixed costs are an order below the older FlashAttention intercept (64 us).
    assert 0 < spec.efficiency.latency("attention", "bf16") < 30e-6
    # Decode attention is its own kernel class with its own fitted floor (a few KB take 8-10 us on an H100).
    assert DECODE_ATTENTION in spec.efficiency.compute_latency_s
    assert 0 < spec.efficiency.latency(DECODE_ATTENTION, "bf16") < 30e-6
    link = next(link for link in spec.links.values() if link.kind == "chip_to_chip")
    assert spec.field_sources[f"links.{link.name}.latency"] == "calibration"


def test_shipped_overlay_predicts_rows_it_was_not_fitted_on(sample):
    """The committed sample is drawn with another seed than the fit's: most rows are new to the overlay."""
    records, _ = sample
    from calibration.achievable import device_time_hardware

    hardware = device_time_hardware(load_hardware("h100-sxm-sglang"))  # kernels timed alone: no launch
    errors: dict[str, list[float]] = {}
    for record in records:
        predicted = evaluate(record.graph(), hardware, mode="graph").total_s
        errors.setdefault(record.op_class.split(":")[0], []).append(abs(predicted / record.duration_s - 1))
    medians = {name: statistics.median(values) for name, values in errors.items()}
    assert all(median < 0.35 for median in medians.values()), medians
    assert statistics.median([value for values in errors.values() for value in values]) < 0.25


def test_default_engine_for_a_gpu_and_none_for_the_rest():
    assert serving_spec_name("h100-sxm", None) == f"h100-sxm-{DEFAULT_SERVING_ENGINE}"
    assert serving_spec_name("h100-sxm", "vllm") == "h100-sxm-vllm"
    assert serving_spec_name("h100-sxm", "none") == "h100-sxm"
    assert serving_spec_name("tpu-v5e", None) == "tpu-v5e"
    assert engine_overlays("tpu-v5e") == ()
    assert load_for_prediction("h100-sxm", engine=None).name == "h100-sxm-trtllm"
    assert load_for_prediction("h100-sxm").name == "h100-sxm-achievable"  # predict/train: engine-independent
    assert load_for_prediction("h100-sxm", engine="sglang", ideal=True).name == "h100-sxm"


def test_an_engine_without_an_overlay_is_refused_clearly():
    with pytest.raises(PerfmodelError, match="no vllm overlay ships for 'tpu-v5e'.*--engine none"):
        serving_spec_name("tpu-v5e", "vllm")


def test_validation_prices_an_llm_row_with_the_engine_it_names():
    assert _serving_spec("h100-sxm", "H100 SXM 80GB (TensorRT-LLM v1.0)", False, None) == "h100-sxm-trtllm"
    assert _serving_spec("a100-sxm-80gb", "A100-SXM 80GB @330W (gpt-fast)", False, None) == "a100-sxm-80gb"
    assert _serving_spec("tpu-v6e", "TPU v6e Trillium (vLLM-TPU)", False, None) == "tpu-v6e"  # no TPU overlay
    assert _serving_spec("h100-sxm", "H100 SXM 80GB (TensorRT-LLM)", False, "none") == "h100-sxm"
    assert _serving_spec("h100-sxm", "H100 SXM 80GB (TensorRT-LLM)", True, None) == "h100-sxm"
    assert _serving_spec("h100-sxm", "Azure ND H100 v5", False, "vllm") == "h100-sxm-vllm"


def test_levels_held_at_the_datasheet_get_no_parameter(sample):
    from calibration.achievable import device_time_hardware
    from calibration.fit import fit

    records, _ = sample
    hardware = without_step_latency(device_time_hardware(load_hardware("h100-sxm")))
    result = fit(records, hardware, mode="graph", folds=0, extra_seeds=0, datasheet_levels=DATASHEET_LEVELS)
    assert not [name for name in result.params if name.endswith(":smem")]
    assert 0 < max(value for name, (value, _) in result.params.items() if name.startswith("latency:matmul")) < 20e-6


def test_engine_overlay_removes_the_per_step_link_latency_the_alpha_replaces():
    spec = load_hardware("h100-sxm")
    stripped = without_step_latency(spec)
    assert stripped.links["nvlink"].latency_s == 0 and spec.links["nvlink"].latency_s > 0
    assert stripped.links["network"].latency_s == spec.links["network"].latency_s


def test_cli_engine_flag_names_the_overlay(capsys):
    from perfmodel.cli import main

    assert main(["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--batch", "1", "--prompt", "128",
                 "--gen", "4", "--engine", "vllm"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "h100-sxm-vllm" in header and "graph mode" in header
    assert main(["llm", "--model", "llama-3.1-8b", "--on", "tpu-v5e", "--batch", "1", "--engine", "vllm"]) == 2
    assert "no vllm overlay ships" in capsys.readouterr().err


def test_engine_overlay_decode_step_is_finite_and_below_eager():
    from perfmodel.llm import Parallelism, Scenario, llm_predict
    from perfmodel.llm.catalog import load_architecture

    architecture = load_architecture("llama-3.1-70b")
    scenario = Scenario(batch=64, prompt_tokens=4096, generated_tokens=2)
    graph = llm_predict(architecture, load_for_prediction("h100-sxm", engine="trtllm"), scenario, Parallelism(tp=8))
    eager = llm_predict(architecture, load_for_prediction("h100-sxm", engine="trtllm"), scenario, Parallelism(tp=8),
                        mode="dynamic")
    assert math.isfinite(graph.tpot_s) and graph.tpot_s < eager.tpot_s


def test_the_stored_covariance_is_the_fit_posterior_not_its_curvature():
    """H100's TensorRT-LLM bf16 GEMM start-up latency binds no table row at the fit (memory time hides it),
    so the Gauss-Newton curvature leaves it a log standard error near 2 (drawn from it, latencies 50x the
    fit); the fit's own cost refuses it as soon as it binds. The covariance the overlay stores (importance
    draws weighted by that cost) keeps it inside -100%..+100%, and leaves a parameter the data bind well
    (the bf16 GEMM efficiency) near its Gauss-Newton error. The overlay's block is what this fit writes."""
    import numpy as np

    from calibration.engine_overlays import fit_engine, overlay_text

    fitted = fit_engine("h100-sxm", "trtllm", heldout=False)
    result = fitted.result
    names = list(result.covariance_names)
    latency, efficiency = names.index("latency:matmul:bf16"), names.index("compute:matmul:tensor_cores:bf16")
    curvature, posterior = np.asarray(result.log_covariance), result.posterior_relative_covariance
    assert posterior is not None
    assert math.sqrt(curvature[latency, latency]) > 1.5 and math.sqrt(posterior[latency, latency]) < 1.0
    assert math.sqrt(posterior[efficiency, efficiency]) == pytest.approx(math.sqrt(curvature[efficiency, efficiency]),
                                                                         rel=0.5)
    stored = load_hardware("h100-sxm-trtllm").efficiency.fit
    text = overlay_text(fitted)
    assert stored is not None and all(f"    - {name}\n" in text for name in stored.names)
