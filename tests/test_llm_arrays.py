"""llm_predict over arrays of scenarios: one evaluation per phase, the same numbers as one call each."""

import json

import numpy as np
import pytest

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_hardware
from perfmodel.llm import Parallelism, Scenario, llm_predict
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import stage_graph
from perfmodel.roofline.sweep import hardware_with

BATCH = np.array([1, 8, 64, 1, 300])
PROMPT = np.array([128, 2048, 128, 3000, 512])
GEN = np.array([128, 128, 2048, 64, 256])
SCALAR_FIELDS = ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s_per_user", "tokens_per_s", "tokens_per_s_per_chip")


def _assert_same(point, alone):
    for name in SCALAR_FIELDS:
        assert getattr(point, name) == pytest.approx(getattr(alone, name), rel=1e-12), name
    assert (point.fits, point.weights_streamed) == (alone.fits, alone.weights_streamed)
    assert point.bound_by_phase == alone.bound_by_phase
    assert point.memory_bytes.as_dict() == pytest.approx(alone.memory_bytes.as_dict(), rel=1e-12)
    assert point.ops_per_decode_step == alone.ops_per_decode_step
    assert (point.scenario.batch, point.scenario.prompt_tokens, point.scenario.generated_tokens) == \
        (alone.scenario.batch, alone.scenario.prompt_tokens, alone.scenario.generated_tokens)
    for phase, shares in alone.time_by_bound_by_phase.items():
        spent = {bound: time for bound, time in shares.items() if time > 0}
        assert list(point.time_by_bound_by_phase[phase]) == list(spent), phase
        assert list(point.time_by_bound_by_phase[phase].values()) == pytest.approx(list(spent.values()), rel=1e-12)


@pytest.mark.parametrize("model, spec, parallelism", [
    ("llama-2-70b", "h100-sxm", Parallelism(tp=8)),                 # tensor parallel, dynamic (eager) mode
    ("mixtral-8x7b", "h100-sxm", Parallelism(tp=4, ep=2)),          # experts touched depend on the batch
    ("llama-2-7b", "groq-lpu-v1", Parallelism(tp=8, pp=11)),        # static mode, pipeline sends
    ("llama-3.1-8b", "cerebras-wse-3", Parallelism()),              # spatial: batch 300 streams from MemoryX
    ("llama-2-7b", "epyc-zen4-2vcpu", Parallelism()),
])
def test_array_scenarios_match_one_call_each(model, spec, parallelism):
    architecture, hardware = load_architecture(model), load_hardware(spec)
    swept = llm_predict(architecture, hardware, Scenario(batch=BATCH, prompt_tokens=PROMPT, generated_tokens=GEN),
                        parallelism)
    assert swept.points == len(BATCH) and swept.tpot_s.shape == BATCH.shape
    for index, (batch, prompt, gen) in enumerate(zip(BATCH, PROMPT, GEN, strict=True)):
        alone = llm_predict(architecture, hardware, Scenario(batch=int(batch), prompt_tokens=int(prompt),
                                                             generated_tokens=int(gen)), parallelism)
        _assert_same(swept.at(index), alone)


def test_scenarios_on_both_sides_of_residency_are_evaluated_apart():
    """On one wafer, Llama-3.1-8B's weights stay in SRAM at batch 1 and stream from MemoryX at batch
    150: one array result holds both, each priced as it would be alone."""
    architecture, wafer = load_architecture("llama-3.1-8b"), load_hardware("cerebras-wse-3")
    swept = llm_predict(architecture, wafer, Scenario(batch=np.array([1, 150]), prompt_tokens=1024,
                                                      generated_tokens=256))
    assert swept.weights_streamed.tolist() == [False, True] and swept.fits.tolist() == [True, True]
    assert swept.bound_by_phase["decode"].tolist() == ["compute", "memory:memoryx"]
    beyond = llm_predict(architecture, wafer, Scenario(batch=np.array([150, 2000]), prompt_tokens=1024,
                                                       generated_tokens=256))
    assert beyond.fits.tolist() == [True, False] and beyond.weights_streamed.tolist() == [True, False]
    for index, batch in enumerate((1, 150)):
        _assert_same(swept.at(index), llm_predict(architecture, wafer, Scenario(batch=batch, prompt_tokens=1024,
                                                                                generated_tokens=256)))


def test_a_builder_other_than_the_condensed_graphs_is_called_one_scenario_at_a_time():
    calls = []

    def builder(architecture, scenario, parallelism, *, phase, context):
        calls.append(np.ndim(scenario.prompt_tokens))
        return stage_graph(architecture, scenario, parallelism, phase=phase, context=context)

    architecture, hardware = load_architecture("llama-2-7b"), load_hardware("a100-sxm-80gb")
    scenario = Scenario(batch=np.array([1, 16]), prompt_tokens=np.array([256, 64]), generated_tokens=32)
    swept = llm_predict(architecture, hardware, scenario, graphs=builder)
    assert calls and not any(calls)  # every graph was built for one scenario
    condensed = llm_predict(architecture, hardware, scenario)
    assert swept.tpot_s == pytest.approx(condensed.tpot_s, rel=1e-12)
    assert swept.ttft_s == pytest.approx(condensed.ttft_s, rel=1e-12)


def test_scalars_broadcast_against_arrays_and_results_serialize():
    result = llm_predict(load_architecture("llama-2-7b"), load_hardware("h100-sxm"),
                         Scenario(batch=np.array([1, 4, 16]), prompt_tokens=512, generated_tokens=64))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["batch"] == [1, 4, 16] and data["prompt"] == [512, 512, 512] and len(data["tpot_s"]) == 3
    assert result.tokens_per_s.tolist() == pytest.approx((np.array([1, 4, 16]) / result.tpot_s).tolist())
    assert np.all(np.diff(result.tpot_s) >= 0)  # a larger batch never decodes faster per step
    with pytest.raises(PerfmodelError, match="one scenario"):
        result.at(0).at(0)


@pytest.mark.parametrize("scenario, fragment", [
    (Scenario(batch=np.array([1, 2]), prompt_tokens=np.array([1, 2, 3]), generated_tokens=8), "broadcast"),
    (Scenario(batch=np.ones((2, 2), dtype=int), prompt_tokens=8, generated_tokens=8), "one axis"),
    (Scenario(batch=1, prompt_tokens=np.array([16, 0]), generated_tokens=8), "at least 1"),
    (Scenario(batch=1, prompt_tokens=np.array([16, 4000]), generated_tokens=200), "positions"),
])
def test_bad_arrays_of_scenarios_give_clear_errors(scenario, fragment):
    with pytest.raises(PerfmodelError, match=fragment):
        llm_predict(load_architecture("llama-2-7b"), load_hardware("h100-sxm"), scenario)


def test_arrays_of_scenarios_and_a_swept_spec_are_not_combined():
    swept_spec = hardware_with(load_hardware("h100-sxm"), {"memory.hbm.bandwidth": np.array([2e12, 3e12])})
    with pytest.raises(PerfmodelError, match="not both"):
        llm_predict(load_architecture("llama-2-7b"), swept_spec,
                    Scenario(batch=np.array([1, 2]), prompt_tokens=64, generated_tokens=8))
