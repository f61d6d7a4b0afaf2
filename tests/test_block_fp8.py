"""Block-scaled fp8 GEMMs (DeepSeek-V3's 1 x 128 / 128 x 128 scales) as a kernel class of their own: the
engines' table rows become that class, the fit gives it its own rate and fixed cost, a parameter set without
it prices it as an fp8 matmul, and a model whose checkpoint is block-scaled fp8 runs its GEMMs in it."""

from __future__ import annotations

import dataclasses
import json
import statistics

import numpy as np
import pandas as pd
import pytest

from calibration import aiconfigurator as tables
from calibration.achievable import device_time_hardware
from calibration.engine_overlays import DATASHEET_LEVELS
from calibration.fit import components, fit, heldout_errors, split_half, spread_weights
from calibration.records import MeasurementRecord
from perfmodel.costs.rules import BLOCK_FP8_MATMUL, KERNEL_CLASSES, fitted_kind, pricing_kind
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_hardware
from perfmodel.hardware.model import Parameters
from perfmodel.llm import Parallelism, Scenario, llm_predict
from perfmodel.llm.catalog import load_architecture, load_config
from perfmodel.llm.graphs import stage_graph
from perfmodel.llm.quantization import checkpoint_dtypes
from perfmodel.roofline import evaluate
from perfmodel.workload.io import dumps
from perfmodel.workload.ir import Graph, Op, TensorSpec

# The fitted classes' parameters are fitted on the GEMMs' own levels: shared memory and L2 at the datasheet,
# as the engine overlays hold them (calibration.engine_overlays).
HELD_LEVELS = DATASHEET_LEVELS + ("l2",)


def _gemm(m: int, n: int, k: int, activation: str, weight: str) -> Op:
    return Op(name="gemm", kind="matmul",
              inputs=(TensorSpec(shape=(m, k), dtype=activation), TensorSpec(shape=(k, n), dtype=weight, role="weight")),
              outputs=(TensorSpec(shape=(m, n), dtype="bf16"),), attrs={"m": m, "n": n, "k": k, "dtype": activation})


@pytest.fixture(scope="module")
def fp8_rows():
    return tables.fp8_sample_records()


# -- the class ----------------------------------------------------------------------------------------------------
def test_fp8_activations_on_block_scaled_weights_are_the_class():
    assert pricing_kind(_gemm(16, 4096, 7168, "fp8", "fp8_block")) == BLOCK_FP8_MATMUL
    assert pricing_kind(_gemm(16, 4096, 7168, "fp8", "fp8")) == "matmul"          # per-tensor fp8
    assert pricing_kind(_gemm(16, 4096, 7168, "bf16", "fp8_block")) == "matmul"   # weight-only: dequantized
    assert pricing_kind(_gemm(16, 4096, 7168, "fp4", "nvfp4")) == "matmul"
    # the class has its own rate and fixed cost; its weights stream as any matmul's
    assert (fitted_kind(BLOCK_FP8_MATMUL, "rate"), fitted_kind(BLOCK_FP8_MATMUL, "memory")) == (BLOCK_FP8_MATMUL,
                                                                                                "matmul")
    assert KERNEL_CLASSES[BLOCK_FP8_MATMUL].own_rate and not KERNEL_CLASSES[BLOCK_FP8_MATMUL].own_memory


def test_a_parameter_set_without_the_class_prices_it_as_an_fp8_matmul():
    """Overlays fitted before the class existed, and the datasheet (efficiency 1, the fp8 peak), price a block-scaled
    GEMM as the fp8 one; a fitted class entry takes over."""
    old = Parameters(name="old", kind="achievable", compute_efficiency={"matmul:tensor_cores:fp8": 0.5},
                     compute_latency_s={"matmul:fp8": 12e-6}, memory_efficiency={"matmul:hbm": 0.7})
    assert old.compute("tensor_cores", "fp8", BLOCK_FP8_MATMUL) == 0.5
    assert old.latency(BLOCK_FP8_MATMUL, "fp8") == 12e-6 and old.memory("hbm", BLOCK_FP8_MATMUL) == 0.7
    new = dataclasses.replace(old, compute_efficiency={**old.compute_efficiency,
                                                       f"{BLOCK_FP8_MATMUL}:tensor_cores:fp8": 0.4},
                              compute_latency_s={**old.compute_latency_s, BLOCK_FP8_MATMUL: 5e-6})
    assert new.compute("tensor_cores", "fp8", BLOCK_FP8_MATMUL) == 0.4 and new.latency(BLOCK_FP8_MATMUL, "fp8") == 5e-6
    assert new.compute("tensor_cores", "fp8", "matmul") == 0.5 and new.latency("matmul", "fp8") == 12e-6
    h100 = load_hardware("h100-sxm")
    shape = (4096, 7168, 7168)  # compute-bound: the scale promotion on the CUDA cores stays under the MMA time
    block, plain = (evaluate(Graph(name="g", ops=[_gemm(*shape, "fp8", weight)]), h100, mode="graph").ops[0]
                    for weight in ("fp8_block", "fp8"))
    assert block.compute_s == pytest.approx(plain.compute_s, rel=1e-12)
    block, plain = (evaluate(Graph(name="g", ops=[_gemm(*shape, "fp8", weight)]), h100, mode="graph", parameters=new
                             ).ops[0] for weight in ("fp8_block", "fp8"))
    flops = 2.0 * shape[0] * shape[1] * shape[2]
    assert block.compute_s - 5e-6 == pytest.approx((plain.compute_s - 12e-6) * 0.5 / 0.4, rel=0.05)
    assert block.compute_s > flops / (0.4 * h100.compute["tensor_cores"].peak_flops_per_s["fp8"])


# -- the engines' rows --------------------------------------------------------------------------------------------
def test_fp8_block_rows_become_records_of_the_class(fp8_rows):
    frame = pd.read_csv(tables.fp8_sample_path())
    block = [record for record in fp8_rows if record.op_class == "gemm:fp8_block"]
    assert len(block) == (frame.gemm_dtype == "fp8_block").sum() == tables.FP8_SAMPLE_ROWS
    record = block[0]
    row = frame.loc[record.source_row]
    assert row["gemm_dtype"] == "fp8_block" and record.duration_s == pytest.approx(row["latency"] * 1e-3)
    op = record.graph().ops[0]
    assert [tensor.dtype for tensor in (*op.inputs, *op.outputs)] == ["fp8", "fp8_block", "bf16"]
    assert (op.attrs["m"], op.attrs["n"], op.attrs["k"]) == (row["m"], row["n"], row["k"])
    assert pricing_kind(op) == BLOCK_FP8_MATMUL
    sglang, _, _ = tables.sample_records()  # the SGLang sample's fp8_block rows are records now, none skipped
    assert any(record.op_class == "gemm:fp8_block" for record in sglang)


def test_rows_timed_without_a_cuda_graph_are_skipped_with_their_source():
    """aiconfigurator's vLLM collector times fp8_block eagerly (the host's Python path inside: a floor of 55-90 us
    on H100 flat in m); every other engine's GEMM rows are graph replays."""
    def row(framework, dtype):
        return pd.Series({"framework": framework, "gemm_dtype": dtype})

    assert "without a CUDA graph" in tables.unpriced("gemm", row("VLLM", "fp8_block"))
    assert "use_cuda_graph" in tables.EAGER_TIMED_GEMMS[("vllm", "fp8_block")]
    assert tables.unpriced("gemm", row("SGLang", "fp8_block")) is None
    assert tables.unpriced("gemm", row("TRTLLM", "fp8_block")) is None
    assert tables.unpriced("gemm", row("VLLM", "fp8")) is None
    assert "not priced" in tables.unpriced("gemm", row("TRTLLM", "int4_wo"))


# -- the fit ------------------------------------------------------------------------------------------------------
def _synthetic(truth: Parameters, hardware) -> list[MeasurementRecord]:
    """GEMM records of both fp8 kinds over m = 1..16k, timed by the model itself with ``truth``."""
    found = []
    for m in (1, 4, 16, 64, 256, 1024, 4096, 16384):
        for n, k in ((4096, 4096), (7168, 2048), (2048, 7168), (16384, 7168)):
            for weight in ("fp8", "fp8_block"):
                op = _gemm(m, n, k, "fp8", weight)
                graph = Graph(name=f"{weight}_{m}x{n}x{k}", ops=[op])
                seconds = float(evaluate(graph, hardware, mode="graph", parameters=truth).total_s)
                found.append(MeasurementRecord(
                    name=graph.name, op_class=f"gemm:{weight}", duration_s=seconds, device="h100-sxm", tool="synthetic",
                    flops_source="analytic_shapes", bytes_source="model_derived", clock="device",
                    workload_json=dumps(graph, "json")))
    return found


def test_the_fit_recovers_the_class_rate_and_fixed_cost_apart_from_fp8():
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    truth = Parameters(name="truth", kind="calibrated",
                       compute_efficiency={"matmul:tensor_cores:fp8": 0.55, f"{BLOCK_FP8_MATMUL}:tensor_cores:fp8": 0.4},
                       compute_latency_s={"matmul:fp8": 12e-6, BLOCK_FP8_MATMUL: 5e-6},
                       memory_efficiency={"hbm": 0.75})
    result = fit(_synthetic(truth, hardware), hardware, mode="graph", datasheet_levels=HELD_LEVELS, folds=0,
                 extra_seeds=0)
    values = result.identified()
    assert values[f"compute:{BLOCK_FP8_MATMUL}:tensor_cores:fp8"] == pytest.approx(0.4, rel=0.05)
    assert values["compute:matmul:tensor_cores:fp8"] == pytest.approx(0.55, rel=0.05)
    assert values[f"latency:{BLOCK_FP8_MATMUL}"] == pytest.approx(5e-6, rel=0.2)
    assert values["memory:hbm"] == pytest.approx(0.75, rel=0.05)
    assert not [name for name in result.params if name.startswith(f"memory:{BLOCK_FP8_MATMUL}")]  # shared streams
    assert result.median_abs_error < 0.02


def test_fitted_class_predicts_held_out_engine_rows(fp8_rows):
    """TensorRT-LLM's H100 block-scaled kernels: fit on a random half of each class of the committed sample,
    predict the other half. Measured: median |error| 16.1% on the fp8_block half (seed 0; 16-26% over seeds
    0-4), against 41% with the class left at the datasheet (the fit's fallback for a class it never saw)."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    parts = components(fp8_rows, hardware, "graph", HELD_LEVELS)
    classes = [record.op_class for record in fp8_rows]
    measured, weights = np.asarray([record.duration_s for record in fp8_rows]), spread_weights(fp8_rows)
    train, test = split_half(classes, 0)
    block = test[[classes[index] == "gemm:fp8_block" for index in test]]
    errors = heldout_errors(parts, measured, train, block, weights)
    assert statistics.median(np.abs(errors)) < 0.25
    unfitted = heldout_errors(parts, measured, train[[classes[index] != "gemm:fp8_block" for index in train]], block,
                              weights)
    assert statistics.median(np.abs(unfitted)) > 2 * statistics.median(np.abs(errors))


def _table_gemm(record):
    """The GEMM of a table row's graph (an fp8 row also holds the activations' quantize kernel it times)."""
    return next(op for op in record.graph().ops if op.kind == "matmul")


def test_the_class_fixed_cost_and_rate_agree_with_the_small_and_large_rows(fp8_rows):
    """Fixed costs from small shapes, rates from large ones: TensorRT-LLM's block-scaled kernels start in half the
    time of its per-tensor fp8 path (its small rows: 6.9 vs 12.8 us) and run at a lower rate on H100."""
    hardware = device_time_hardware(load_hardware("h100-sxm"))
    values = fit(fp8_rows, hardware, mode="graph", datasheet_levels=HELD_LEVELS, folds=0, extra_seeds=0).identified()

    def small(op_class):
        return statistics.median(record.duration_s for record in fp8_rows if record.op_class == op_class and (
            lambda a: a["m"] <= 16 and a["n"] * a["k"] <= 4 * 2 ** 20)(_table_gemm(record).attrs))

    block_latency = values[f"latency:{BLOCK_FP8_MATMUL}"]
    fp8_latency = values.get("latency:matmul:fp8", values.get("latency:matmul"))
    assert 0.5 < block_latency / small("gemm:fp8_block") < 1.5 and 0.5 < fp8_latency / small("gemm:fp8") < 1.5
    assert block_latency < 0.7 * fp8_latency
    assert values[f"compute:{BLOCK_FP8_MATMUL}:tensor_cores:fp8"] < values["compute:matmul:tensor_cores:fp8"]


# -- models whose checkpoint is block-scaled fp8 ------------------------------------------------------------------
def test_checkpoint_dtypes_come_from_the_quantization_config():
    assert checkpoint_dtypes(load_config("deepseek-v3")) == {"weight_dtype": "fp8_block", "activation_dtype": "fp8",
                                                             "kv_dtype": "bf16", "expert_weight_dtype": None}
    assert checkpoint_dtypes(load_config("deepseek-r1"))["weight_dtype"] == "fp8_block"
    assert checkpoint_dtypes(load_config("gpt-oss-120b")) == {"weight_dtype": "bf16", "activation_dtype": "bf16",
                                                              "kv_dtype": "bf16", "expert_weight_dtype": "mxfp4"}
    assert checkpoint_dtypes(load_config("llama-3.1-8b"))["weight_dtype"] == "bf16"
    per_tensor = {"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}}
    assert checkpoint_dtypes(per_tensor)["weight_dtype"] == "fp8"


@pytest.mark.parametrize(("quantization", "message"), [
    ({"quant_method": "awq", "bits": 4}, "quant_method 'awq' is not a format perfmodel reads"),
    ({"quant_method": "fp8", "weight_block_size": [64, 64]}, r"weight_block_size \[64, 64\]"),
    ("fp8", "must be a JSON object")])
def test_an_unknown_quantization_is_refused(quantization, message):
    with pytest.raises(PerfmodelError, match=message):
        checkpoint_dtypes({"quantization_config": quantization})


def test_a_block_fp8_model_runs_its_gemms_in_the_class():
    deepseek = load_architecture("deepseek-v3")
    scenario = Scenario(batch=8, prompt_tokens=512, generated_tokens=2, **checkpoint_dtypes(load_config("deepseek-v3")))
    graph = stage_graph(deepseek, scenario, Parallelism(tp=8), phase="decode", context=512)
    # the output head and the MoE gate keep bf16 weights (DeepSeek-V3, arXiv 2412.19437 section 3.3: "the
    # embedding module, the output head, MoE gating modules ... retain their original precision")
    head = {"lm_head", "layers.moe.router"}
    assert all(op.inputs[1].dtype == "bf16" for op in graph.ops if op.name in head)
    weighted = [op for op in graph.ops if op.kind == "matmul" and op.inputs[1].role == "weight" and op.name not in head]
    assert weighted and all(pricing_kind(op) == BLOCK_FP8_MATMUL for op in weighted)
    # the class's own parameters reach the prediction: a fixed cost on it alone slows every such GEMM
    h200 = load_hardware("h200-sxm")
    base = Parameters(name="base", kind="calibrated")
    slow = dataclasses.replace(base, compute_latency_s={BLOCK_FP8_MATMUL: 50e-6})
    tpot = {name: llm_predict(deepseek, dataclasses.replace(h200, efficiency=parameters), scenario, Parallelism(tp=8),
                              mode="graph").tpot_s for name, parameters in (("base", base), ("slow", slow))}
    gemms = sum(op.count for op in weighted)  # each pays the 50 us, less what hid under its memory time
    assert 0.5 * gemms * 50e-6 < tpot["slow"] - tpot["base"] <= gemms * 50e-6 * (1 + 1e-9)


def test_cli_weights_checkpoint(tmp_path, capsys):
    from perfmodel.cli import main

    assert main(["llm", "--model", "deepseek-v3", "--on", "h200-sxm", "--tp", "8", "--batch", "4", "--prompt", "256",
                 "--gen", "2", "--weights", "checkpoint", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert json.dumps(shown).count("fp8_block") >= 1
    config = load_config("llama-3.1-8b") | {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    path = tmp_path / "gptq.json"
    path.write_text(json.dumps(config))
    assert main(["llm", "--model", str(path), "--on", "h100-sxm", "--weights", "checkpoint"]) == 2
    assert "quant_method 'gptq' is not a format perfmodel reads" in capsys.readouterr().err
    # size: an A100 has no fp8 tensor cores for the checkpoint's fp8 activations, and says so
    assert main(["size", "--model", "deepseek-v3", "--on", "a100-sxm-80gb", "--rate", "1/s", "--tpot", "50ms",
                 "--weights", "checkpoint", "--requests", "10"]) == 0
    assert "no engine for fp8_block weights with fp8 activations" in capsys.readouterr().out
    assert main(["search", "--model", "deepseek-v3", "--on", "h200-sxm", "--chips", "8", "--weights", "checkpoint"]) == 2
    assert "search prices bf16 activations" in capsys.readouterr().err
