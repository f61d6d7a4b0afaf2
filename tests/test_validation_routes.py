"""Validation routes a row the way it was measured: rows under a request rate, a number of clients or
an MLPerf scenario go through the serving simulator (their TTFT includes queueing), ITL rows are
predicted, and quantized precision strings map to dtypes."""

from __future__ import annotations

import pytest

from perfmodel.validation import _dtypes, _load, validate_row

BASE = {"group": "A", "system": "H100 SXM 80GB (vLLM)", "chips": "1", "workload": "Llama-3.1-8B", "precision": "FP8",
        "batch": "1", "input_len": "2048", "output_len": "256", "metric": "mean TTFT", "value": "100", "unit": "ms",
        "source": "synthetic test row", "notes": ""}


def _row(**changes) -> dict:
    return {**BASE, **changes}


@pytest.mark.parametrize(("batch", "notes", "kind", "value"), [
    ("rate 4/s", "", "rate", 4.0), ("4 req/s", "", "rate", 4.0), ("QPS 2.5", "", "rate", 2.5),
    ("unstated", "vllm serve ... --request-rate 3", "rate", 3.0), ("concurrency 16", "", "concurrency", 16.0),
    ("16 concurrent users", "", "concurrency", 16.0), ("Server", "MLPerf Inference v4.0, target_qps 83.5",
                                                      "mlperf-server", 83.5),
    ("Offline", "MLPerf Inference v4.0", "mlperf-offline", None),
])
def test_loads_are_read_from_the_batch_column_and_the_notes(batch, notes, kind, value):
    load = _load(_row(batch=batch, notes=notes))
    assert load is not None and (load.kind, load.value) == (kind, value)


@pytest.mark.parametrize("batch", ["1", "64", "IFB max-load", "max (sweep)", "1 user"])
def test_static_batches_are_not_loads(batch):
    assert _load(_row(batch=batch)) is None


def test_a_rate_row_goes_through_the_simulator_and_its_ttft_includes_queueing():
    lone = validate_row(2, _row())
    loaded = validate_row(3, _row(batch="rate 12/s", notes="--num-prompts 300"))
    assert lone.kind == "scenario" and not lone.skipped
    assert loaded.kind == "served" and not loaded.skipped, loaded.skipped
    assert "Poisson arrivals at 12/s" in loaded.how and "300 requests" in loaded.how
    assert "queueing included" in loaded.how
    assert loaded.predicted > 1.2 * lone.predicted  # waiting for the step in flight and sharing steps


def test_a_concurrency_row_is_a_closed_loop_and_its_itl_is_predicted():
    row = validate_row(2, _row(batch="concurrency 32", input_len="1000", output_len="200", metric="median ITL",
                               unit="ms", notes="--num-prompts 200"))
    assert row.kind == "served" and "closed loop of 32 clients" in row.how and "p50 inter-token" in row.how
    lone = validate_row(3, _row(input_len="1000", output_len="200", metric="ITL"))
    tpot = validate_row(4, _row(input_len="1000", output_len="200", metric="per-token latency"))
    assert "ITL = TPOT of a lone request" in lone.how and lone.predicted == tpot.predicted
    assert row.predicted > lone.predicted  # 32 sequences share each decode step


@pytest.mark.parametrize(("precision", "expected"), [
    ("INT8", ("int8", "bf16", "int8")),
    ("INT4 weight-only (G=32)", ("int4", "bf16", "bf16")),
    ("INT8 weight-only", ("int8", "bf16", "bf16")),
    ("INT8 weights", ("int8", "bf16", "bf16")),
    ("FP16, INT4 weight-only", ("int4", "fp16", "fp16")),
    ("BF16", ("bf16", "bf16", "bf16")),
    ("FP8", ("fp8", "fp8", "fp8")),
    ("FP8 weight-only (torchao float8wo, e4m3 weights; bf16 activations and KV)", ("fp8", "bf16", "bf16")),
    ("FP8 (torchao float8dq, dynamic per-tensor e4m3 activations and weights; KV bf16)", ("fp8", "bf16", "fp8")),
])
def test_precision_strings_map_to_dtypes(precision, expected):
    dtypes = _dtypes(precision, "H100 SXM")
    assert dtypes is not None
    assert (dtypes["weight_dtype"], dtypes["kv_dtype"], dtypes["activation_dtype"]) == expected


def test_an_int4_row_is_predicted_and_says_what_it_leaves_out():
    row = validate_row(2, _row(system="A100-SXM 80GB @330W (gpt-fast)", workload="Llama-2-7B",
                               precision="INT4 weight-only (G=32)", input_len="8", output_len="128",
                               metric="decode tokens/s per user", unit="tok/s"))
    assert not row.skipped and "int4" in row.how and "group scales not counted" in row.how


def test_a_latency_row_in_seconds_is_compared_in_seconds():
    in_ms = validate_row(2, _row(batch="1"))
    in_s = validate_row(3, _row(batch="1", value="0.1", unit="s"))
    assert in_ms.predicted is not None and in_s.predicted is not None
    assert in_s.predicted == pytest.approx(in_ms.predicted / 1000)
    assert in_s.error == pytest.approx(in_ms.error)


def test_torchao_rows_quantize_the_lm_head_as_quantize_does():
    row = _row(system="A100 80GB, SXM UNSURE (torchao generate.py, torch.compile)", workload="Llama-2-7B",
               precision="INT8 weight-only (torchao int8wo, per-channel; bf16 compute)", batch="1", input_len="6",
               output_len="200", metric="output throughput, batch 1", unit="tok/s", value="170")
    torchao = validate_row(2, {**row, "source": "https://github.com/pytorch/ao/blob/92dd5f5/torchao/quantization/README.md"})
    other = validate_row(3, row)
    assert "LM head" in torchao.how and "LM head" not in other.how
    assert torchao.predicted > other.predicted  # the int8 head reads half the bytes of a bf16 one


MLPERF = _row(system="H100 SXM 80GB (TensorRT-LLM)", chips="8", workload="Llama-2-70B", batch="Server", input_len="-",
              output_len="-", metric="tokens per second", unit="tok/s", value="20000",
              notes="MLPerf Inference Server")


def test_an_mlperf_llama2_row_without_openorca_lengths_says_why_it_is_skipped():
    row = validate_row(2, MLPERF)
    assert row.predicted is None and "openorca" in row.skipped.lower() and "294.45" in row.skipped


def test_mlperf_offline_is_every_request_at_once_with_the_dataset_lengths():
    row = validate_row(2, {**MLPERF, "batch": "Offline", "input_len": "arxiv-summarization-4k",
                           "output_len": "arxiv-summarization-4k", "notes": "MLPerf Inference Offline --num-prompts 400"})
    assert row.kind == "served" and not row.skipped, row.skipped
    assert "MLPerf Offline: every request at once" in row.how and "arxiv-summarization-4k_prompt.csv" in row.how
    assert "whole sequences reserved" in row.how  # TensorRT-LLM's admission


def test_mlperf_server_runs_poisson_arrivals_at_the_rows_rate():
    row = validate_row(2, {**MLPERF, "input_len": "512", "output_len": "128",
                           "notes": "MLPerf Inference Server, target_qps 4 --num-prompts 200"})
    assert row.kind == "served" and "MLPerf Server at the row's rate: Poisson arrivals at 4/s" in row.how


def test_rows_of_engines_built_without_the_custom_all_reduce_all_reduce_with_nccl():
    """TensorRT-LLM's performance.md at 138f96d4 reproduces its tables with engines built without
    --use_custom_all_reduce (and without fp8 attention): their tensor-parallel rows run NCCL's all-reduce (slower at
    a short prompt's small messages than the custom kernels today's engine picks); a one-GPU row has no all-reduce
    to route."""
    from perfmodel.validation import LEGACY_TRTLLM_BUILD_SOURCES

    row = _row(system="H100 SXM 80GB (TensorRT-LLM)", chips="4 (TP4)", workload="LLaMA-70B", batch="1",
               input_len="128", output_len="1", metric="1st token latency (TTFT)", unit="ms")
    engine = validate_row(2, row)
    nccl = validate_row(3, {**row, "source": f"{LEGACY_TRTLLM_BUILD_SOURCES[0]} ('Low Latency' tables)"})
    assert "NCCL all-reduce" in nccl.how and "NCCL" not in engine.how
    assert "fp16 attention" in nccl.how and "attention" not in engine.how  # an FP8 row: no fp8 attention then
    assert nccl.predicted > 1.1 * engine.predicted
    one = {**row, "chips": "1 (TP1)", "workload": "LLaMA-7B", "precision": "FP16"}
    assert validate_row(4, {**one, "source": LEGACY_TRTLLM_BUILD_SOURCES[0]}).predicted == validate_row(5, one).predicted


KERNEL = {"group": "F", "system": "NVIDIA 8x H100", "chips": "8", "workload": "NCCL AllReduce in-place, 8 GB",
          "precision": "-", "batch": "-", "input_len": "-", "output_len": "-", "metric": "bus bandwidth",
          "value": "478.87", "unit": "GB/s", "source": "synthetic test row", "notes": ""}


def test_an_nccl_tests_row_under_nvls_is_priced_as_nvls():
    """nccl-tests under NCCL_ALGO=NVLS reduce in the NVSwitch: each GPU moves 1 + 1/p payloads instead of the
    ring's 2 (p - 1) / p, so at 8 GB (bandwidth-bound) the bus bandwidth is 1.75 / 1.125 of the ring's."""
    ring = validate_row(2, {**KERNEL})
    nvls = validate_row(3, {**KERNEL, "system": "NVIDIA 8x H100 (NVLS)"})
    assert "ring" in ring.how and "NVLS" in nvls.how
    assert nvls.predicted / ring.predicted == pytest.approx(1.75 / 1.125, rel=0.02)


def test_nvbandwidths_bidirectional_read_is_the_sum_of_both_directions():
    row = {**KERNEL, "chips": "1", "metric": "bandwidth", "unit": "GB/s"}
    one = validate_row(2, {**row, "workload": "nvbandwidth device_to_device_memcpy_read_sm (peer, NVLink)"})
    both = validate_row(3, {**row, "workload": "nvbandwidth device_to_device_bidirectional_memcpy_read_sm"})
    assert not one.skipped and not both.skipped
    assert both.predicted == pytest.approx(2 * one.predicted) and "both directions" in both.how
    # priced on the link with its achievable efficiency: below the 450 GB/s datasheet in one direction
    assert one.predicted < 450


def test_a_forced_all_reduce_algorithm_must_be_one_the_model_knows():
    from perfmodel.errors import PerfmodelError
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.roofline import evaluate
    from perfmodel.workload.ir import Graph, Op

    op = Op(name="ar", kind="collective", attrs={"collective": "all_reduce", "bytes": 1 << 20, "group_size": 8,
                                                 "dtype": "bf16", "algorithm": "bogus"})
    with pytest.raises(PerfmodelError, match="not an all-reduce algorithm"):
        evaluate(Graph(name="g", ops=[op]), load_for_prediction("h100-sxm"), mode="graph")


TURBOMIND = _row(system="A100 80GB, SXM UNSURE (LMDeploy TurboMind v0.1.0a1)", chips="1 (TP1)",
                 workload="Llama-2-7B", precision="FP16", batch="concurrency 16", input_len="2048", output_len="128",
                 metric="output throughput (closed loop)", unit="tok/s", value="349",
                 notes="test_round 6; max_context_token_num 4, session_len 4104, cache_block_seq_len 128, "
                       "cache_max_entry_count 1000 KV blocks, max_batch_size 128")


def test_turbomind_settings_are_read_from_the_notes():
    from perfmodel.validation import _turbomind_settings

    config, rounds = _turbomind_settings(TURBOMIND, _load(TURBOMIND))
    # max_context_token_num 4 <= max_batch_size counts session lengths (LlamaTritonModel.cc).
    assert (config.max_batch, config.max_tokens_per_step, config.block_size, config.max_kv_blocks) == \
        (128, 4 * 4104, 128, 1000)
    assert config.memory_utilization == 1.0 and rounds == 6
    assert _turbomind_settings(BASE, _load(_row(batch="concurrency 2"))) is None  # another engine


def test_a_turbomind_row_runs_its_clients_rounds_under_its_kv_cap():
    row = validate_row(2, TURBOMIND)
    assert row.kind == "served" and not row.skipped, row.skipped
    assert "closed loop of 16 clients" in row.how and "96 requests" in row.how  # 16 clients x test_round 6
    assert "capped at 1000 (cache_max_entry_count)" in row.how
    ttft = validate_row(3, {**TURBOMIND, "metric": "mean TTFT (FTL ave)", "unit": "s", "value": "2.9"})
    assert ttft.predicted is not None and ttft.predicted > 0.1  # seconds: queued behind other prefills


@pytest.mark.parametrize(("notes", "reason"), [
    ("test_round 6; max_context_token_num 4, session_len 4104, cache_max_entry_count 1000, max_batch_size 128",
     "cache_block_seq_len"),
    ("test_round 6; max_context_token_num 4, session_len 4104, cache_block_seq_len 128, "
     "cache_max_entry_count 0.5, max_batch_size 128", "cache_max_entry_count below 1"),
])
def test_a_turbomind_row_without_its_settings_says_what_is_missing(notes, reason):
    row = validate_row(2, {**TURBOMIND, "notes": notes})
    assert row.predicted is None and reason in row.skipped
