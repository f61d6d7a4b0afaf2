"""Decode attention's kernel classes (issue 29): an fp8 KV cache and one query head a KV head (MHA) each run
other kernels than grouped decode on a bf16 cache, are priced with parameters of their own where a fit gave
them, fall back to the decode class where not, and the engines' fp8-KV generation rows become records."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from calibration import aiconfigurator as tables
from calibration.achievable import device_time_hardware
from calibration.aiconfigurator import attention_op
from perfmodel.costs.rules import (
    DECODE_ATTENTION,
    DECODE_ATTENTION_FP8_CACHE,
    MHA_VARIANT,
    CostContext,
    fitted_kind,
    op_cost,
    pricing_kind,
)
from perfmodel.hardware.loader import load_hardware
from perfmodel.hardware.model import Parameters, kind_chain
from perfmodel.roofline import evaluate
from perfmodel.workload.ir import Graph
from tests.test_kernel_classes import fitted_to_truth

MHA = f"{DECODE_ATTENTION}/{MHA_VARIANT}"
FP8_MHA = f"{DECODE_ATTENTION_FP8_CACHE}/{MHA_VARIANT}"


def test_the_cache_dtype_and_the_query_group_choose_the_decode_class():
    assert pricing_kind(attention_op(8, 32, 8, 1, 1024, 128)) == DECODE_ATTENTION
    assert pricing_kind(attention_op(8, 32, 8, 1, 1024, 128, "fp8")) == DECODE_ATTENTION_FP8_CACHE
    assert pricing_kind(attention_op(8, 32, 32, 1, 1024, 128)) == MHA
    assert pricing_kind(attention_op(8, 32, 32, 1, 1024, 128, "fp8")) == FP8_MHA
    # prefill keeps the attention class whatever its cache; an int8 cache is not an fp8 one (no table times it)
    assert pricing_kind(attention_op(8, 32, 32, 512, 512, 128, "fp8")) == "attention"
    assert pricing_kind(attention_op(8, 32, 8, 1, 1024, 128, "int8")) == DECODE_ATTENTION
    # a sweep over head counts keeps the grouped class at every point (evaluated together or apart alike)
    op = attention_op(8, 32, 32, 1, 1024, 128)
    swept = dataclasses.replace(op, attrs={**op.attrs, "heads": np.array([32, 64]), "kv_heads": np.array([32, 8])})
    assert pricing_kind(swept) == DECODE_ATTENTION


def test_nested_classes_fall_back_to_their_parent_then_the_kind():
    assert kind_chain(FP8_MHA) == (FP8_MHA, DECODE_ATTENTION_FP8_CACHE, DECODE_ATTENTION, "attention")
    assert kind_chain(MHA) == (MHA, DECODE_ATTENTION, "attention")
    # every decode class has a reach of HBM of its own and shares the tensor-core rate of attention
    for kind in (DECODE_ATTENTION_FP8_CACHE, MHA, FP8_MHA):
        assert fitted_kind(kind, "memory") == kind and fitted_kind(kind, "rate") == "attention"
    # a parameter set fitted before the classes existed prices them as bf16-cache grouped decode
    old = Parameters(memory_efficiency={f"{DECODE_ATTENTION}:hbm": 0.7, "attention:hbm": 0.5},
                     compute_latency_s={f"{DECODE_ATTENTION}:bf16": 7e-6, f"{DECODE_ATTENTION}@unit": 3e-6,
                                        "attention": 15e-6})
    for kind in (DECODE_ATTENTION_FP8_CACHE, MHA, FP8_MHA):
        assert old.memory("hbm", kind) == 0.7 and old.latency(kind, "bf16") == 7e-6 and old.unit_latency(kind) == 3e-6
    new = dataclasses.replace(old, compute_latency_s={**old.compute_latency_s, f"{DECODE_ATTENTION_FP8_CACHE}@unit": 1e-6})
    assert new.unit_latency(FP8_MHA) == 1e-6 and new.unit_latency(MHA) == 3e-6


def test_an_fp8_cache_moves_half_the_bytes_at_its_own_efficiency():
    hardware = load_hardware("h100-sxm")
    bf16, fp8 = attention_op(64, 32, 8, 1, 8192, 128), attention_op(64, 32, 8, 1, 8192, 128, "fp8")
    context = CostContext(hardware=hardware)
    assert op_cost(fp8, context).bytes_by_level[-1] == pytest.approx(op_cost(bf16, context).bytes_by_level[-1] / 2,
                                                                     rel=0.01)
    parameters = Parameters(name="p", kind="calibrated", memory_efficiency={f"{DECODE_ATTENTION}:hbm": 0.8,
                                                                           f"{DECODE_ATTENTION_FP8_CACHE}:hbm": 0.4})

    def memory_s(op):
        return evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=parameters).ops[0].memory_s["hbm"]
    # half the bytes at half the reach of HBM: the same time (the datasheet's half-the-bytes would be half)
    assert memory_s(fp8) == pytest.approx(memory_s(bf16), rel=0.02)


def test_the_fit_tells_mha_and_grouped_block_costs_and_the_fp8_cache_efficiency_apart():
    """Synthetic truth shaped like NVIDIA's H100 TensorRT-LLM tables: 1.2 us a block (per SM) for MHA decode,
    4 us for grouped decode, and an fp8 cache read at 0.55 of HBM where bf16 reaches 0.8. One block cost for
    all decode would miss one or the other by 3x at large batch; the fit recovers each within 15%."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated", compute_efficiency={"attention": 0.5},
                       memory_efficiency={f"{DECODE_ATTENTION}:hbm": 0.8, f"{DECODE_ATTENTION_FP8_CACHE}:hbm": 0.55},
                       compute_latency_s={"attention": 15e-6, f"{DECODE_ATTENTION}:bf16": 8e-6,
                                          f"{DECODE_ATTENTION}@unit": 4e-6, f"{MHA}@unit": 1.2e-6})
    ops = [(attention_op(batch, 32, 32 // group, 1, seq_kv, 128, cache), "decode")
           for cache in ("bf16", "fp8") for group in (1, 4) for seq_kv in (4, 512, 16384)
           for batch in (1, 16, 256, 2048)]
    result, fitted = fitted_to_truth(ops, hardware, truth)
    assert fitted[f"latency:{DECODE_ATTENTION}@unit"] == pytest.approx(4e-6, rel=0.15)
    assert fitted[f"latency:{MHA}@unit"] == pytest.approx(1.2e-6, rel=0.15)
    assert fitted[f"memory:{DECODE_ATTENTION_FP8_CACHE}:hbm"] == pytest.approx(0.55, rel=0.15)
    assert fitted[f"memory:{DECODE_ATTENTION}:hbm"] == pytest.approx(0.8, rel=0.15)
    assert result.median_abs_error < 0.03


def test_fp8_cache_generation_rows_become_their_own_records():
    """The committed SGLang sample's fp8-KV generation rows are records of ``decode_attention:fp8_kv`` reading an
    fp8 cache, its fp8 context rows records of ``prefill_attention:fp8`` computing in fp8; windowed rows and
    16-bit context kernels writing an fp8 cache stay skipped with their reason."""
    import pandas as pd

    records, skipped, _ = tables.sample_records()
    frame = pd.read_csv(tables.sample_path("decode_attention"))
    fp8 = [record for record in records if record.op_class == "decode_attention:fp8_kv"]
    full = frame[frame.window_size == 0]
    assert len(fp8) == int((full.kv_cache_dtype == "fp8").sum()) > 0
    for record in fp8:
        row = frame.loc[record.source_row]
        op = record.graph().ops[0]
        assert row["kv_cache_dtype"] == "fp8" and op.inputs[1].dtype == "fp8" and op.inputs[1].role == "kv_cache"
        assert pricing_kind(op) in (DECODE_ATTENTION_FP8_CACHE, FP8_MHA)
    assert skipped["decode_attention: windowed rows or cache dtypes not priced (the rules price full attention on "
                   "a bf16 or fp8 cache)"] == int((frame.window_size != 0).sum())
    prefill = pd.read_csv(tables.sample_path("prefill_attention"))
    full = prefill[prefill.window_size == 0]
    fp8 = [record for record in records if record.op_class == "prefill_attention:fp8"]
    assert len(fp8) == int(((full.attn_dtype == "fp8") & (full.kv_cache_dtype == "fp8")).sum()) > 0
    for record in fp8:
        op = record.graph().ops[0]
        assert prefill.loc[record.source_row, "attn_dtype"] == "fp8"
        assert op.attrs["dtype"] == "fp8" and {tensor.dtype for tensor in op.inputs} == {"fp8"}
    mixed = (prefill.attn_dtype == "bfloat16") & (prefill.kv_cache_dtype == "fp8")
    assert skipped.get("prefill_attention: windowed rows or cache dtypes not priced (the rules price full attention "
                       "in bf16 or fp8 throughout; not a 16-bit kernel writing an fp8 cache)", 0) \
        == int(((prefill.window_size != 0) | mixed).sum())


def test_decode_rows_are_sampled_per_cache_dtype_and_the_bf16_sample_is_unchanged():
    """Each cache dtype gets its own sample of the generation table; the bf16 one is the rows an unstratified
    draw of the bf16 rows alone takes (the sample the overlays were fitted on before fp8 rows were priced)."""
    import pandas as pd

    frame = pd.read_csv(tables.sample_path("decode_attention"))
    frame = frame[frame.window_size == 0]
    chosen = tables.sample(frame, 10, 0, tables.STRATA["decode_attention"])
    assert chosen.groupby("kv_cache_dtype").size().to_dict() == {"bfloat16": 10, "fp8": 10}
    bf16 = tables.sample(frame[frame.kv_cache_dtype == "bfloat16"], 10, 0)
    assert list(chosen[chosen.kv_cache_dtype == "bfloat16"].index) == list(bf16.index)


def _decode_rows(version: str, heads: int, kv_heads: int):
    """One bf16 generation-attention row (8 sequences, 4,096 cached tokens) of a TensorRT-LLM table of ``version``."""
    import pandas as pd

    frame = pd.DataFrame([{"framework": "TRTLLM", "batch_size": 8, "isl": 1, "step": 4095, "num_heads": heads,
                           "num_key_value_heads": kv_heads, "head_dim": 128, "window_size": 0,
                           "kv_cache_dtype": "bfloat16", "attn_dtype": "bfloat16", "latency": 0.1}])
    source = tables.Table(gpu="a100-sxm-80gb", engine="trtllm", version=version, kind="decode_attention",
                          path=Path("generation_attention_perf.parquet"), package_version="0.12.0")
    return list(tables.records(source, frame, {}))


def _hbm_bytes(record) -> float:
    hardware = load_hardware("a100-sxm-80gb")
    (op,) = record.graph().ops
    level = [item.name for item in hardware.memory].index("hbm")
    return float(op_cost(op, CostContext(hardware=hardware)).bytes_by_level[level])


def test_a_keys_only_cache_table_prices_its_grouped_decode_rows_on_one_cache_buffer():
    """TensorRT-LLM 1.0.0's collector timed attention on a keys-only cache (``K_ONLY_CACHE_TABLES``): its grouped
    rows (a one-pass kernel) stream the 8 x 8 x 4,096 x 128 bf16 keys once (67 MB), not keys and values (134 MB);
    its multi-head rows (a pass over the keys, then over the values) read the buffer twice, a full cache's traffic;
    the 1.3.0rc20 tables (a separate V) keep both."""
    keys = 8 * 8 * 4096 * 128 * 2
    (legacy_grouped,) = _decode_rows("1.0.0", 32, 8)
    (current_grouped,) = _decode_rows("1.3.0rc20", 32, 8)
    (legacy_mha,) = _decode_rows("1.0.0", 8, 8)
    assert _hbm_bytes(legacy_grouped) == pytest.approx(keys, rel=0.01)
    assert _hbm_bytes(current_grouped) == pytest.approx(2 * keys, rel=0.01)
    assert _hbm_bytes(legacy_mha) == pytest.approx(2 * keys, rel=0.01)


def test_a_decode_kernel_splits_its_keys_when_its_blocks_leave_the_units_idle():
    """FlashAttention's split rule (``decode_splits_keys``): blocks (one a sequence and KV head) under 0.8 of the
    units and more than one key block of cache. On an A100 (108 SMs): 1 sequence x 1 KV head splits from 129
    cached tokens; 86 pairs (0.8 x 108 = 86.4) still split, 87 do not; prefill never does."""
    hardware = load_hardware("a100-sxm-80gb")
    context = CostContext(hardware=hardware)

    def splits(batch, kv_heads, seq_q, seq_kv):
        return op_cost(attention_op(batch, 8 * kv_heads, kv_heads, seq_q, seq_kv, 128), context).splits_keys

    assert not splits(1, 1, 1, 128) and splits(1, 1, 1, 129)
    assert splits(86, 1, 1, 4096) and not splits(87, 1, 1, 4096)
    assert not splits(1, 1, 4096, 4096)


def test_a_split_decode_kernel_pays_its_combine_phase_and_the_fit_recovers_it():
    """Synthetic truth with a 5 us combine phase for grouped decode (``attention/decode@split``) and none for MHA:
    evaluation adds exactly it to the kernels that split and nothing to the others; the fit, on records that hold
    both, recovers it within 15% and the rest of the decode parameters as before."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated", compute_efficiency={"attention": 0.5},
                       memory_efficiency={f"{DECODE_ATTENTION}:hbm": 0.8},
                       compute_latency_s={"attention": 15e-6, f"{DECODE_ATTENTION}:bf16": 8e-6,
                                          f"{DECODE_ATTENTION}@unit": 4e-6, f"{DECODE_ATTENTION}@split": 5e-6})
    without = dataclasses.replace(truth, compute_latency_s={key: value for key, value in truth.compute_latency_s.items()
                                                            if not key.endswith("@split")})
    ops = [(attention_op(batch, 32, 8, 1, seq_kv, 128), "decode") for seq_kv in (4, 64, 512, 4096, 32768)
           for batch in (1, 2, 4, 16, 256, 2048)]
    for op, _ in ops:
        split = op_cost(op, CostContext(hardware=hardware)).splits_keys
        added = (evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=truth).total_s
                 - evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=without).total_s)
        assert added == pytest.approx(5e-6 if split else 0.0, abs=1e-12)
    result, fitted = fitted_to_truth(ops, hardware, truth)
    assert fitted[f"latency:{DECODE_ATTENTION}@split"] == pytest.approx(5e-6, rel=0.15)
    assert fitted[f"latency:{DECODE_ATTENTION}@unit"] == pytest.approx(4e-6, rel=0.15)
    assert fitted["memory:hbm"] == pytest.approx(0.8, rel=0.15)  # (one class read HBM: the level's own)
    assert result.median_abs_error < 0.03
    assert result.parameters("fitted").split_latency(f"{DECODE_ATTENTION}/fp8_cache") == pytest.approx(
        fitted[f"latency:{DECODE_ATTENTION}@split"])  # a class without its own takes its parent's
