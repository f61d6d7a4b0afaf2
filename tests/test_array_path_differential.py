"""The array path's shortcuts (issue 34: blocks of scenarios, kernels chosen once per distinct size, alike
ops priced once, the row-pass argmax, decode's context-free ops priced at one context) give the numbers
of the plain computation, on seeded scenarios."""

import numpy as np
import pytest

from perfmodel.costs import rules
from perfmodel.costs.columns import op_costs
from perfmodel.costs.rules import CostContext, op_cost
from perfmodel.hardware.execution_models import resolve_mode
from perfmodel.hardware.loader import load_hardware
from perfmodel.llm import Parallelism, Scenario, llm_predict, metrics
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import stage_graph
from perfmodel.tracing import argmax, argmin
from tests.test_llm_arrays import _assert_same

RESULT_ARRAYS = ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s_per_user", "tokens_per_s", "tokens_per_s_per_chip")


def _scenarios(count: int, seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    return Scenario(batch=rng.integers(1, 129, count), prompt_tokens=rng.integers(1, 2049, count),
                    generated_tokens=rng.integers(1, 1025, count))


def _assert_results_equal(blocks, whole):
    for name in RESULT_ARRAYS:
        np.testing.assert_allclose(getattr(blocks, name), getattr(whole, name), rtol=1e-12, atol=0, err_msg=name)
    for name in ("fits", "weights_streamed"):
        assert np.array_equal(getattr(blocks, name), getattr(whole, name)), name
    for key, value in whole.memory_bytes.as_dict().items():
        np.testing.assert_allclose(blocks.memory_bytes.as_dict()[key], value, rtol=1e-12, atol=0, err_msg=key)
    assert {phase: list(shares) for phase, shares in blocks.time_by_bound_by_phase.items()} == \
        {phase: list(shares) for phase, shares in whole.time_by_bound_by_phase.items()}
    for phase, shares in whole.time_by_bound_by_phase.items():
        for bound, time in shares.items():
            np.testing.assert_allclose(blocks.time_by_bound_by_phase[phase][bound], time, rtol=1e-12, atol=0)
        assert np.array_equal(blocks.bound_by_phase[phase], whole.bound_by_phase[phase]), phase
    assert blocks.ops_per_decode_step == whole.ops_per_decode_step


@pytest.mark.parametrize("model, spec, parallelism", [
    ("llama-2-7b", "a100-sxm-80gb", Parallelism()),            # scenarios on both sides of residency
    ("mistral-7b", "h100-sxm", Parallelism(tp=2)),             # sliding window, all-reduces
    ("llama-3.1-8b", "cerebras-wse-3", Parallelism()),         # spatial: pipelined totals (argmax over ops)
])
def test_blocks_of_scenarios_give_the_whole_arrays_numbers_and_the_scalar_paths(model, spec, parallelism, monkeypatch):
    architecture, hardware = load_architecture(model), load_hardware(spec)
    scenario = _scenarios(2 * metrics.CHUNK_POINTS + 17, seed=34)
    blocks = llm_predict(architecture, hardware, scenario, parallelism)
    monkeypatch.setattr(metrics, "CHUNK_POINTS", 10**9)  # one block: the plain array computation,
    monkeypatch.setattr(metrics, "_context_ops", lambda graph, execution: None)  # every decode op at 3 contexts
    whole = llm_predict(architecture, hardware, scenario, parallelism)
    _assert_results_equal(blocks, whole)
    # ... and each scenario as the scalar path (``_predict_one``, its own implementation) prices it alone.
    execution = resolve_mode(hardware, None)
    for index in np.random.default_rng(35).choice(len(scenario.batch), 8, replace=False):
        one = Scenario(batch=int(scenario.batch[index]), prompt_tokens=int(scenario.prompt_tokens[index]),
                       generated_tokens=int(scenario.generated_tokens[index]))
        alone = metrics._predict_one(architecture, hardware, one, parallelism, execution, stage_graph)
        _assert_same(blocks.at(int(index)), alone)


def test_a_kernel_chosen_once_per_distinct_size_is_the_one_chosen_per_point(monkeypatch):
    hardware = load_hardware("a100-sxm-80gb")
    architecture = load_architecture("llama-2-7b")
    batch = np.random.default_rng(3).integers(1, 129, 3 * rules.FEW_VALUES_FROM_POINTS)
    scenario = Scenario(batch=batch, prompt_tokens=512, generated_tokens=64)
    graph = stage_graph(architecture, scenario, Parallelism(), phase="decode", context=np.full(batch.shape, 600))
    context = CostContext(hardware=hardware, weights_resident=False)
    matmuls = [op for op in graph.ops if op.kind == "matmul"]
    few = [op_cost(op, context) for op in matmuls]
    monkeypatch.setattr(rules, "FEW_VALUES_FROM_POINTS", 10**12)  # every point priced on its own
    each = [op_cost(op, context) for op in matmuls]
    for cost, alone in zip(few, each, strict=True):
        assert np.array_equal(cost.executed_flops, alone.executed_flops)
        assert np.array_equal(cost.kernel, alone.kernel)
        assert len(cost.bytes_by_level) == len(alone.bytes_by_level)
        for level, level_alone in zip(cost.bytes_by_level, alone.bytes_by_level, strict=True):
            assert np.array_equal(np.broadcast_to(level, batch.shape), np.broadcast_to(level_alone, batch.shape))


def test_alike_ops_with_the_same_numbers_are_priced_once_to_the_same_cost():
    hardware = load_hardware("h100-sxm")
    architecture = load_architecture("llama-2-7b")
    rng = np.random.default_rng(5)
    scenario = Scenario(batch=rng.integers(1, 64, 6000), prompt_tokens=rng.integers(1, 4000, 6000), generated_tokens=8)
    graph = stage_graph(architecture, scenario, Parallelism(), phase="prefill", context=scenario.prompt_tokens)
    context = CostContext(hardware=hardware)
    together = op_costs(graph.ops, context)
    projections = [cost for op, cost in zip(graph.ops, together, strict=True) if op.name.endswith(("q_proj", "k_proj"))]
    assert projections[0] is projections[1]  # the same numbers: one pricing
    for op, cost in zip(graph.ops, together, strict=True):
        alone = op_cost(op, context)
        assert np.array_equal(cost.executed_flops, alone.executed_flops), op.name
        for level, level_alone in zip(cost.bytes_by_level, alone.bytes_by_level, strict=True):
            assert np.array_equal(level, level_alone), op.name


@pytest.mark.parametrize("shape", [(6, 15, 3, 400), (7, 5000), (2, 300), (5, 10), (300, 2, 2)])
def test_argmax_and_argmin_along_the_first_axis_are_numpys(shape):
    rng = np.random.default_rng(sum(shape))
    values = rng.random(shape)
    values[values < 0.4] = 0.0  # ties: the first of equals
    values[values > 0.95] = -0.0
    assert np.array_equal(argmax(values, axis=0), np.argmax(values, axis=0))
    assert np.array_equal(argmin(values, axis=0), np.argmin(values, axis=0))
    values.flat[::97] = np.nan  # numpy's rule: the first NaN
    values.flat[::89] = np.inf
    assert np.array_equal(argmax(values, axis=0), np.argmax(values, axis=0))
    assert np.array_equal(argmin(values, axis=0), np.argmin(values, axis=0))
