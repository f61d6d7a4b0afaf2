"""Per-engine overlays fitted to serving engines' kernel tables (issue 29): reading the tables, the
fitted overlays, how predictions choose them, and their accuracy on rows they were not fitted on."""

from __future__ import annotations

import math
import statistics

import pytest

from calibration import aiconfigurator as tables
from calibration.engine_overlays import DATASHEET_LEVELS, SMALL_MESSAGE_BYTES, with_measured_step_latency
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
    records, skipped, _ = tables.sample_records()
    return records, skipped


def test_sample_rows_become_records_in_si_units(sample):
    records, skipped = sample
    by_class = {record.op_class for record in records}
    assert by_class == {"gemm:bf16", "gemm:fp8", "gemm:fp8_block", "prefill_attention", "prefill_attention:fp8",
                        "decode_attention", "decode_attention:fp8_kv", "all_reduce"}
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
    assert skipped["all_reduce: eager variant (serving runs the CUDA-graph one)"] > 0
    assert not [reason for reason in skipped if reason.startswith("gemm")]  # SGLang's GEMM rows are all priced


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
    # The engine's all-reduce rule (vendor code) and its own kernels' measured step; the link's latency stays
    # the collective library's. TensorRT-LLM without NVLink runs NCCL only: no kernel step of its own.
    link = next(link for link in spec.links.values() if link.kind == "chip_to_chip")
    assert link.all_reduce is not None and link.all_reduce.startswith(engine)
    assert "engine-all-reduce" in spec.sources and spec.sources["engine-all-reduce"].url.startswith("https://github.com/")
    if (engine, link.kind, link.name) == ("trtllm", "chip_to_chip", "pcie_p2p"):
        assert link.kernel_latency_s is None
    else:
        assert spec.field_sources[f"links.{link.name}.kernel_latency"] == "calibration"
        assert 0 < link.kernel_latency_s < 20e-6


@pytest.mark.parametrize("gpu", ["l40s", "rtx-pro-6000"])
def test_gpus_without_nvlink_reduce_over_their_pcie_chip_to_chip_link(gpu):
    """Their engines' all-reduce rows run on the spec's ``pcie_p2p`` link (NVLink rows would not price)."""
    import pandas as pd

    path = tables.sample_path("all_reduce")
    source = tables.Table(gpu=gpu, engine="sglang", version="0.5.14", kind="all_reduce", path=path,
                          package_version="0.12.0")
    record = next(tables.records(source, pd.read_csv(path), {}))
    assert record.graph().ops[0].attrs["link"] == "pcie_p2p"
    spec = load_hardware(f"{gpu}-sglang")
    assert spec.links["pcie_p2p"].kind == "chip_to_chip" and "nvlink" not in spec.links
    assert evaluate(record.graph(), spec, mode="graph").total_s > 0


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
    hardware = with_measured_step_latency(device_time_hardware(load_hardware("h100-sxm")), records)
    result = fit(records, hardware, mode="graph", folds=0, extra_seeds=0, datasheet_levels=DATASHEET_LEVELS)
    assert not [name for name in result.params if name.endswith(":smem")]
    assert 0 < max(value for name, (value, _) in result.params.items() if name.startswith("latency:matmul")) < 20e-6


def test_engine_overlay_step_latency_is_the_median_of_the_smallest_all_reduces(sample):
    import statistics

    records, _ = sample
    small = [record.duration_s for record in records if record.op_class == "all_reduce"
             and record.graph().ops[0].attrs["bytes"] <= SMALL_MESSAGE_BYTES]
    assert len(small) >= 3
    spec = load_hardware("h100-sxm")
    stepped = with_measured_step_latency(spec, records, "sglang-nvlink")
    assert stepped.links["nvlink"].kernel_latency_s == statistics.median(small)  # all one-shot under SGLang's rule
    assert 1e-6 < stepped.links["nvlink"].kernel_latency_s < 10e-6  # engines' one-shot kernels: a few microseconds
    assert stepped.links["nvlink"].all_reduce == "sglang-nvlink"
    # the link's own latency stays NCCL's step (what the engine's NCCL fallback pays)
    assert stepped.links["nvlink"].latency_s == spec.links["nvlink"].latency_s
    assert stepped.links["network"].latency_s == spec.links["network"].latency_s
    without = with_measured_step_latency(spec, [r for r in records if r.op_class != "all_reduce"])
    assert without.links["nvlink"].kernel_latency_s == 0.0


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


def test_tensorrt_llm_decode_rows_of_large_query_groups_are_skipped_with_their_reason():
    import pandas as pd

    from calibration.aiconfigurator import unpriced

    def row(framework, heads, kv_heads):
        return pd.Series({"framework": framework, "num_heads": heads, "num_key_value_heads": kv_heads,
                          "window_size": 0, "kv_cache_dtype": "bfloat16"})

    assert "re-reads the cache" in unpriced("decode_attention", row("TRTLLM", 64, 1))
    assert unpriced("decode_attention", row("TRTLLM", 32, 1)) is None  # a group of 32 reads the cache once
    assert unpriced("decode_attention", row("VLLM", 64, 1)) is None  # vLLM's kernel shares the read


def test_a_model_whose_decode_the_engine_runs_unpriced_gets_a_note(capsys):
    from perfmodel.cli import main
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.caveats import engine_caveats

    palm = load_architecture("palm-540b")  # 48 query heads on one KV head
    assert engine_caveats(palm, load_for_prediction("h100-sxm", engine="trtllm"))
    assert not engine_caveats(palm, load_for_prediction("h100-sxm", engine="vllm"))
    assert not engine_caveats(load_architecture("llama-3.1-70b"), load_for_prediction("h100-sxm", engine="trtllm"))
    assert main(["llm", "--model", "palm-540b", "--on", "h100-sxm", "--tp", "8", "--batch", "1", "--prompt", "128",
                 "--gen", "2"]) == 0
    assert "query heads a KV head" in capsys.readouterr().err


@pytest.fixture(scope="module")
def shipped_fit():
    """H100's vLLM fit rerun from the rows the shipped fit chose, committed (no package needed), at the k-loop step
    floor the shipped fit chose among ``K_STEP_CANDIDATES_S`` (choosing again re-solves once per candidate: most of
    the fit's time; the choice itself: test_kernel_classes.py's ``test_the_k_step_floor_is_chosen_by_the_training_half``)."""
    from calibration.engine_overlays import K_STEP_CANDIDATES_S, fit_engine

    written = load_hardware(f"{tables.FIT_ROWS_GPU}-{tables.FIT_ROWS_ENGINE}").compute["tensor_cores"].k_step_s
    shipped = min(K_STEP_CANDIDATES_S, key=lambda candidate: abs(candidate - written))
    assert written == pytest.approx(shipped, rel=1e-9)  # (as the overlay's text gives it back)
    return fit_engine(tables.FIT_ROWS_GPU, tables.FIT_ROWS_ENGINE, heldout=False, rows=tables.FIT_ROWS_DIRECTORY,
                      k_step_candidates=(shipped,))


def test_the_overlay_writes_the_engines_sourced_host_work_per_step(shipped_fit, tmp_path):
    """The overlay the refit writes carries its engine's host work per step (``ENGINE_STEPS``) in the graph
    mode, with the evidence as its source, and loads like any spec."""
    from calibration.engine_overlays import ENGINE_STEPS, overlay_text

    path = tmp_path / f"{shipped_fit.name}.yaml"
    path.write_text(overlay_text(shipped_fit))
    hardware = load_hardware(path)
    evidence = ENGINE_STEPS[tables.FIT_ROWS_ENGINE]
    step = hardware.scheduling.modes["graph"].engine_step
    assert hardware.scheduling.default_mode == "graph" and step is not None
    assert (step.host_fixed_s, step.host_per_sequence_s, step.overlap) == (
        pytest.approx(evidence.host_fixed_s), pytest.approx(evidence.host_per_sequence_s), evidence.overlap)
    source = hardware.sources[hardware.field_sources["scheduling.modes.graph.engine_step.host_fixed"]]
    assert (source.url, source.kind, source.note) == (evidence.source["url"], evidence.source["kind"],
                                                      evidence.source["note"])
    assert hardware.scheduling.modes["dynamic"].engine_step is None


def test_the_stored_covariance_is_the_fit_posterior_not_its_curvature(shipped_fit):
    """H100's vLLM reduction HBM efficiency binds few table rows at the fit (the fp8 GEMM rows' scale reductions,
    whose activations often sit in L2: the fit puts it near 1.2x the datasheet), so the Gauss-Newton curvature
    leaves it a log standard error near 1 (0.97 in the 2026-12-07 refit on the sample spread over decades of
    work); the fit's own cost refuses draws far from it. The covariance the overlay stores (importance draws
    weighted by that cost) narrows it by a fifth or more, and leaves a parameter the data bind well (the bf16 GEMM
    efficiency) near its Gauss-Newton error. The overlay's block is what this fit writes. (In the refit on a
    uniform sample the loosely bound parameter was the element-wise HBM efficiency; before the decode kernel
    classes and the vLLM fp8 scale reduction, the HBM latency; before the GEMM k-step floor and attention's
    per-block cost, the bf16 GEMM start-up latency.)"""
    import numpy as np

    from calibration.engine_overlays import overlay_text

    # The rows the shipped fit chose, committed: the fit reruns without the package.
    fitted = shipped_fit
    result = fitted.result
    names = list(result.covariance_names)
    loose, efficiency = names.index("memory:reduction:hbm"), names.index("compute:matmul:tensor_cores:bf16")
    curvature, posterior = np.asarray(result.log_covariance), result.posterior_relative_covariance
    assert posterior is not None
    assert math.sqrt(curvature[loose, loose]) > 0.9
    assert math.sqrt(posterior[loose, loose]) < 0.8 * math.sqrt(curvature[loose, loose])
    assert math.sqrt(posterior[efficiency, efficiency]) == pytest.approx(math.sqrt(curvature[efficiency, efficiency]),
                                                                         rel=0.5)
    stored = load_hardware("h100-sxm-vllm").efficiency.fit
    text = overlay_text(fitted)
    assert stored is not None and all(f"    - {name}\n" in text for name in stored.names)
    stored_loose = stored.names.index("memory:reduction:hbm")
    assert stored.relative_covariance[stored_loose][stored_loose] == pytest.approx(posterior[loose, loose], rel=1e-3)


def test_the_overlay_of_an_engine_whose_prefill_packs_query_groups_says_so(shipped_fit, tmp_path):
    """vLLM on H100 prefills with FlashAttention-3's variable-length kernel (PackGQA): the overlay its refit writes
    declares it on the tensor cores, with the kernel's source, and the fit ran with it."""
    from calibration.engine_overlays import PACKED_PREFILL_SOURCE, overlay_text

    path = tmp_path / f"{shipped_fit.name}.yaml"
    path.write_text(overlay_text(shipped_fit))
    hardware = load_hardware(path)
    assert hardware.compute["tensor_cores"].attention_packs_query_groups
    assert hardware.sources["engine-attention-packing"].url == PACKED_PREFILL_SOURCE["url"]
