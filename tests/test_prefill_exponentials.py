"""Prefill attention's softmax exponentials on the special-function units (``OpCost.exponentials``): one per computed
score, priced at 16 a clock per SM in series with the matmuls, with an efficiency of their own that the fit tells
apart from the matmuls' where the records span head dimensions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from calibration.achievable import device_time_hardware
from calibration.aiconfigurator import attention_op
from calibration.fit import fit
from calibration.records import MeasurementRecord
from perfmodel.costs import conventions as C
from perfmodel.costs.rules import CostContext, exponential_rate_per_s, op_cost
from perfmodel.hardware.loader import load_hardware
from perfmodel.hardware.model import Parameters
from perfmodel.roofline import evaluate
from perfmodel.workload.io import dumps
from perfmodel.workload.ir import Graph, Op


def _attention(seq_q: int, seq_kv: int | None = None, batch: int = 4, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, **extra) -> Op:
    op = attention_op(batch, heads, kv_heads, seq_q, seq_q if seq_kv is None else seq_kv, head_dim)
    return dataclasses.replace(op, attrs={**op.attrs, **extra}) if extra else op


def _record(op: Op, seconds: float, index: int) -> MeasurementRecord:
    return MeasurementRecord(name=f"r{index}", op_class="prefill_attention", duration_s=float(seconds),
                             device="h100-sxm", tool="synthetic", tool_version="1", flops_source="analytic_shapes",
                             bytes_source="model_derived", clock="device",
                             workload_json=dumps(Graph(name=f"r{index}", ops=[op]), "json"))


def test_a_prefill_kernel_evaluates_one_exponential_per_computed_score():
    """Causal 1,000 tokens: the attended pairs plus the masked half of each diagonal 128-key block (the scores the
    kernel computes), for every sequence and query head; decode kernels and the backward count none."""
    context = CostContext(hardware=load_hardware("h100-sxm"))
    seq, batch, heads = 1000, 2, 32
    computed = seq * (seq + 1) / 2 + seq * (C.FLASH_ATTENTION_BLOCK - 1) / 2
    assert op_cost(_attention(seq, batch=batch), context).exponentials == pytest.approx(batch * heads * computed)
    assert op_cost(_attention(1, seq_kv=4096), context).exponentials == 0.0
    assert op_cost(_attention(seq, backward=True), context).exponentials == 0.0
    # alike ops priced together as arrays count what each would alone (a decode point and a 256-query chunk
    # against 256 keys, unmasked as the decode op it is swept from)
    swept = _attention(1, seq_kv=4096, batch=batch)
    swept = dataclasses.replace(swept, attrs={**swept.attrs, "seq_q": np.array([1, 256]),
                                              "seq_kv": np.array([4096, 256])})
    counted = op_cost(swept, context).exponentials
    assert counted[0] == 0.0 and counted[1] == pytest.approx(batch * heads * 256 * 256)


def test_the_special_function_rate_is_sixteen_a_clock_per_sm_on_nvidia_gpus_only():
    h100 = load_hardware("h100-sxm")
    cores = h100.compute["tensor_cores"]
    # 132 SMs x 16 x 1.83 GHz: FlashAttention-3's 3.9 T/s of special functions on an H100 SXM5
    assert exponential_rate_per_s(h100, cores) == pytest.approx(132 * 16 * 1.83e9)
    assert exponential_rate_per_s(h100, cores) == pytest.approx(3.9e12, rel=0.01)
    assert exponential_rate_per_s(h100, h100.compute["cuda_cores"]) is None   # a vector engine has no such rate
    mi300x = load_hardware("mi300x")
    engine = next(engine for engine in mi300x.compute.values() if engine.kind == "matrix")
    assert exponential_rate_per_s(mi300x, engine) is None
    assert op_cost(_attention(1024), CostContext(hardware=mi300x)).exponentials == 0.0


def test_the_exponentials_add_to_the_matmuls_at_their_own_efficiency():
    """The compute time is the matmuls' at the attention efficiency plus the exponentials' at the ``:exp`` one; a
    parameter set without an ``:exp`` entry prices them at the kind's efficiency."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    op = _attention(4096, head_dim=64)
    cost = op_cost(op, CostContext(hardware=hardware))
    rate = 132 * 16 * 1.83e9
    matmul_s = cost.executed_flops / hardware.compute["tensor_cores"].peak_flops_per_s["bf16"]
    own = Parameters(name="p", kind="calibrated", compute_efficiency={"attention:tensor_cores:bf16": 0.8,
                                                                       "attention:tensor_cores:exp": 1.25})
    timed = evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=own).ops[0]
    assert timed.compute_s == pytest.approx(matmul_s / 0.8 + cost.exponentials / (rate * 1.25))
    shared = Parameters(name="q", kind="calibrated", compute_efficiency={"attention": 0.7})
    timed = evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=shared).ops[0]
    assert timed.compute_s == pytest.approx((matmul_s + cost.exponentials / rate) / 0.7)
    # At head dim 64 the exponentials take about as long as the matmuls (256 FLOP a score at 989 TFLOP/s
    # against one exponential at 3.9 T/s): what makes the engines' small head dimensions slow.
    assert 0.8 < (cost.exponentials / rate) / matmul_s < 1.1


def test_the_fit_tells_the_exponential_rate_from_the_matmul_rate_across_head_dims():
    """Synthetic truth with the matmuls at 0.8 and the exponentials at 0.6 of their datasheet rates: records over
    head dims 64-256 give both back (within 5% and 10%: the datasheet prior pulls the smaller share's rate toward
    1 a little); records of head dim 128 alone cannot tell them apart and fit
    none for the exponentials (they then share the matmuls' efficiency)."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    def records(head_dims, exp_efficiency=0.6):
        truth = Parameters(name="truth", kind="calibrated",
                           compute_efficiency={"attention:tensor_cores:bf16": 0.8,
                                               "attention:tensor_cores:exp": exp_efficiency},
                           compute_latency_s={"attention": 10e-6, "attention@unit": 2e-6})
        ops = [_attention(seq, batch=batch, head_dim=head_dim) for seq in (128, 1024, 4096, 16384)
               for batch in (1, 16) for head_dim in head_dims]
        return [_record(op, evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=truth).total_s,
                        index) for index, op in enumerate(ops)]

    result = fit(records((64, 128, 256)), hardware, mode="graph", folds=0, extra_seeds=0)
    fitted = {name: value for name, (value, _) in result.params.items()}
    assert fitted["compute:attention:tensor_cores:bf16"] == pytest.approx(0.8, rel=0.05)
    assert fitted["compute:attention:tensor_cores:exp"] == pytest.approx(0.6, rel=0.1)
    assert result.median_abs_error < 0.02
    assert not result.at_ceiling
    # written, the kind's shared efficiency (for dtypes no record measured) is the matmuls' alone
    assert result.parameters("fitted").compute_efficiency["attention"] == pytest.approx(
        fitted["compute:attention:tensor_cores:bf16"])
    alone = fit(records((128,)), hardware, mode="graph", folds=0, extra_seeds=0)
    assert "compute:attention:tensor_cores:exp" not in alone.params


def test_an_exponential_rate_above_the_special_function_peak_is_kept_and_not_flagged():
    """Truth faster than 16 exponentials a clock an SM (1.5x: the kernel hides a share of them under its
    asynchronous matmuls, as the H100 engine fits found): the fit gives it back as the effective rate it is,
    unflagged (no datasheet figure is wrong), and the matmuls keep their own efficiency."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    ops = [_attention(seq, batch=batch, head_dim=head_dim) for seq in (128, 1024, 4096, 16384)
           for batch in (1, 16) for head_dim in (64, 128, 256)]
    truth = Parameters(name="truth", kind="calibrated",
                       compute_efficiency={"attention:tensor_cores:bf16": 0.8, "attention:tensor_cores:exp": 1.5},
                       compute_latency_s={"attention": 10e-6, "attention@unit": 2e-6})
    records = [_record(op, evaluate(Graph(name="g", ops=[op]), hardware, mode="graph", parameters=truth).total_s,
                       index) for index, op in enumerate(ops)]
    result = fit(records, hardware, mode="graph", folds=0, extra_seeds=0)
    name = "compute:attention:tensor_cores:exp"
    assert result.params[name][0] == pytest.approx(1.5, rel=0.1)
    assert name not in result.at_ceiling and name not in result.at_bounds
    assert not [flag for flag in result.flags if flag.startswith(name)]
    assert result.params["compute:attention:tensor_cores:bf16"][0] == pytest.approx(0.8, rel=0.05)


def test_an_attention_shape_timed_with_several_backends_keeps_the_one_the_engine_serves_with():
    """SGLang serves attention (prefill and decode alike) with trtllm_mha on Blackwell: a shape its table also times
    with FlashInfer and Triton keeps the trtllm_mha row (the others counted as skipped); a shape only Triton timed
    keeps it; a decode table's shapes differ by their cached length too (``step``); other engines' and
    architectures' tables are left whole."""
    from pathlib import Path

    import pandas as pd

    from calibration.aiconfigurator import Table, priced_rows, served_attention_rows

    def row(source: str, head_dim: int, latency: float, **shape) -> dict:
        return {"batch_size": 1, "isl": 1024, "num_heads": 32, "num_key_value_heads": 8, "head_dim": head_dim,
                "window_size": 0, "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "kernel_source": source,
                "latency": latency, **shape}

    frame = pd.DataFrame([row("trtllm_mha", 128, 0.1), row("flashinfer", 128, 0.14), row("triton", 128, 0.34),
                          row("triton", 192, 0.5)])
    skipped: dict[str, int] = {}
    kept = served_attention_rows(Table(gpu="b200", engine="sglang", version="0", kind="prefill_attention",
                                       path=Path("x")), frame, skipped)
    assert sorted(zip(kept.kernel_source, kept.head_dim, strict=True)) == [("triton", 192), ("trtllm_mha", 128)]
    assert sum(skipped.values()) == 2
    for gpu, engine in (("b200", "vllm"), ("a100-sxm-80gb", "sglang")):
        table = Table(gpu=gpu, engine=engine, version="0", kind="prefill_attention", path=Path("x"))
        assert len(served_attention_rows(table, frame)) == len(frame)

    decode = pd.DataFrame([row("trtllm_mha", 128, 0.01, isl=1, step=511), row("triton", 128, 0.013, isl=1, step=511),
                           row("triton", 128, 0.02, isl=1, step=4095), row("flashinfer", 128, 0.011, isl=1, step=4095),
                           row("trtllm_mha", 128, 0.015, isl=1, step=4095)])
    source = Table(gpu="gb200", engine="sglang", version="0", kind="decode_attention", path=Path("x"))
    skipped = {}
    served = priced_rows("decode_attention", decode, skipped, source)
    assert sorted(zip(served.kernel_source, served.step, strict=True)) == [("trtllm_mha", 511), ("trtllm_mha", 4095)]
    assert sum(count for reason, count in skipped.items() if reason.startswith("decode_attention: a shape")) == 3


def test_packed_prefill_kernels_count_a_kv_heads_query_group_as_rows_of_one_block():
    """FlashAttention-3's PackGQA (vLLM and SGLang prefill on Hopper): batch x kv_heads x ceil(seq_q x group / 128)
    blocks; unpacked kernels (TensorRT-LLM's) a block per query head: batch x heads x ceil(seq_q / 128). Long
    prompts tile the same either way."""
    from perfmodel.costs.rules import attention_work_units

    assert attention_work_units(64, 96, 1, 1, 1, packed=True) == 64
    assert attention_work_units(64, 96, 1, 1, 1) == 64 * 96
    assert attention_work_units(64, 96, 1, 16, 16, packed=True) == 64 * 12
    assert attention_work_units(2, 32, 8, 4096, 4096, packed=True) == attention_work_units(2, 32, 8, 4096, 4096)
    # decode kernels pack the group whatever the flag
    assert attention_work_units(16, 32, 8, 1, 4096, packed=True) == attention_work_units(16, 32, 8, 1, 4096) == 16 * 8
    hardware = load_hardware("h100-sxm")
    packed = dataclasses.replace(hardware, compute={
        name: dataclasses.replace(engine, attention_packs_query_groups=engine.kind == "matrix")
        for name, engine in hardware.compute.items()})
    op = _attention(16, batch=64, heads=96, kv_heads=1)
    assert op_cost(op, CostContext(hardware=packed)).work_units == 64 * 12
    assert op_cost(op, CostContext(hardware=hardware)).work_units == 64 * 96


def test_the_engines_that_pack_query_groups_and_their_overlay_field(tmp_path):
    """vLLM and SGLang on Hopper pack (FlashAttention-3's variable-length kernel); TensorRT-LLM, Ampere and
    Blackwell do not. A spec declares it on its matrix engine and the loader reads it."""
    from calibration.engine_overlays import packs_query_groups

    assert packs_query_groups("h100-sxm", "vllm") and packs_query_groups("h200-sxm", "sglang")
    assert not packs_query_groups("h100-sxm", "trtllm")
    assert not packs_query_groups("b200", "vllm") and not packs_query_groups("a100-sxm-80gb", "sglang")
    spec = tmp_path / "packed.yaml"
    spec.write_text("schema_version: 1\nname: packed\nextends: h100-sxm\n"
                    "compute:\n  tensor_cores:\n    attention_packs_query_groups: true\n")
    assert load_hardware(spec).compute["tensor_cores"].attention_packs_query_groups
    assert not load_hardware("h100-sxm").compute["tensor_cores"].attention_packs_query_groups


def test_a_one_token_prompt_the_engine_runs_with_its_decode_kernel_is_priced_as_decode():
    """vLLM's FlashInfer backend runs one-token queries through its decode kernel, and NVIDIA's prefill tables label
    those rows so (``DECODE_KERNEL_SOURCES``): such a row becomes a decode over a one-token cache (the generation
    class, a block a sequence and KV head), while the same shape timed with a context kernel stays prefill (a block
    a query head). B200, 64 sequences x 48 heads on 1 KV head: 8.8 us measured; the shipped vLLM overlay prices
    the prefill rule at 65 us and the decode kernel under 12 us."""
    from pathlib import Path

    import pandas as pd

    from calibration.aiconfigurator import DECODE_KERNEL_SOURCES, Table, records
    from perfmodel.costs.rules import attention_work_units, pricing_kind

    assert attention_work_units(64, 48, 1, 1, 1) == 64 * 48
    assert attention_work_units(64, 48, 1, 1, 1, decode_kernel=True) == 64
    row = {"batch_size": 64, "isl": 1, "num_heads": 48, "num_key_value_heads": 1, "head_dim": 64, "window_size": 0,
           "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "step": 0, "latency": 0.00882}
    frame = pd.DataFrame([{**row, "kernel_source": "vllm_flashinfer_trtllmdecode"},
                          {**row, "kernel_source": "vllm_flash_attn_fa3"}])
    assert "vllm_flashinfer_trtllmdecode" in DECODE_KERNEL_SOURCES
    # (the package version given: the test runs without the calibration extra)
    table = Table(gpu="b200", engine="vllm", version="0.24.0", kind="prefill_attention", path=Path("x"),
                  package_version="0.12.0")
    by_decode, by_context = list(records(table, frame, {}))
    assert by_decode.op_class == by_context.op_class == "prefill_attention"
    decode_op, context_op = by_decode.graph().ops[0], by_context.graph().ops[0]
    assert pricing_kind(decode_op) == "attention/decode" and pricing_kind(context_op) == "attention"
    hardware = device_time_hardware(load_hardware("b200-vllm"))
    decode_s = evaluate(Graph(name="g", ops=[decode_op]), hardware, mode="graph").total_s
    context_s = evaluate(Graph(name="g", ops=[context_op]), hardware, mode="graph").total_s
    assert decode_s < 0.3 * context_s
    assert decode_s == pytest.approx(8.82e-6, rel=0.35)
