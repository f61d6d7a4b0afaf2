"""A scheduler step that runs prefill chunks and decoding sequences together is one fused forward pass
(``serving.steps``: the token-wise layers once over all the step's tokens, the attention per kind of
request), priced from the rows of the decode and prefill grids; pure steps keep their own prices."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm import Parallelism
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import pipeline_send
from perfmodel.llm.metrics import phase_time
from perfmodel.roofline.arrays import evaluate_arrays
from perfmodel.serving import ArrivalProcess, Server, ServingConfig, parse_length
from perfmodel.serving.speculation import Speculation
from perfmodel.serving.steps import StepCosts, mixed_graph
from perfmodel.workload.ir import Graph

# A budget of 17 tokens puts every token count 1..17 on the prefill grid (its 17 linear points), so a
# chunk and the step's whole token count are both grid points and no interpolation enters.
SMALL = ServingConfig(max_batch=16, max_tokens_per_step=17)


def fused_graph_s(server: Server, tokens: int, earlier: int, batch: int, context: int) -> float:
    """The fused step's graph (``mixed_graph``) evaluated on its own, through the pipeline."""
    a, p, costs = server.architecture, server.parallelism, server.costs
    graph = mixed_graph(a, server.scenario, p, prefill_tokens=tokens, earlier=earlier, decoding=batch, context=context)
    stage = evaluate_arrays(graph, server.hardware, mode=costs.mode, resident_bytes=server.kv.state_bytes,
                            stream_items=tokens + batch)
    step = replace(server.scenario, batch=1, prompt_tokens=tokens + batch)
    return float(phase_time(stage, server.hardware, p, Graph(name="send", ops=[pipeline_send(step, a, "prefill")])))


@pytest.mark.parametrize("model, spec, tp, pp, rel", [
    ("llama-2-7b", "h100-sxm", 1, 1, 1e-12),           # eager: every op its own kernel
    ("llama-3.1-8b", "h100-sxm-trtllm", 2, 2, 1e-12),  # CUDA graphs (fused chains), tp all-reduces, pipeline sends
    ("gpt-oss-20b", "h100-sxm-vllm", 1, 1, 1e-12),     # MoE, sliding and full attention layers
    # A hybrid whose point-wise ops fuse into the neighbouring kernel (the attention's output gate, the
    # conv after the recurrent mixer's projection): in the one fused graph they meet the other kind's
    # kernel, in the grids their own phase's; the rows then differ by those fusion boundaries.
    ("qwen3-next-80b-a3b", "h200-sxm-vllm", 4, 1, 1e-2),
])
def test_a_mixed_step_is_the_fused_graphs_evaluation(model, spec, tp, pp, rel):
    architecture, hardware = load_architecture(model), load_for_prediction(spec)
    server = Server(architecture, hardware, Parallelism(tp=tp, pp=pp), config=SMALL, max_context=2048)
    costs = server.costs
    contexts, earliers = costs.contexts, costs.prefill_earlier
    checked = 0
    # (a chunk of one token is priced on the prefill grid as a prefill kernel; alone, as a decode one)
    for tokens, batch in ((2, 1), (2, 15), (9, 8), (16, 1), (5, 12)):
        for earlier in (earliers[0], earliers[3]):
            for context in (contexts[1], contexts[9]):
                expected = fused_graph_s(server, tokens, int(earlier), batch, int(context))
                assert costs.mixed_s(tokens, earlier, batch, context) == pytest.approx(expected, rel=rel)
                checked += 1
    assert checked == 20


@pytest.fixture(scope="module")
def llama():
    architecture, hardware = load_architecture("llama-3.1-8b"), load_for_prediction("h100-sxm-trtllm")
    return Server(architecture, hardware, config=ServingConfig(max_batch=64, max_tokens_per_step=2048),
                  max_context=4096)


def test_a_weight_bound_mixed_step_reads_the_weights_once(llama):
    """Small chunks beside a small decode batch are weight-bound: fused, the step reads the weights once,
    so it costs far less than the two passes (each reading them) and more than either pass alone."""
    costs = llama.costs
    for tokens, batch, context in ((16, 8, 1000.0), (64, 32, 2000.0), (1, 1, 100.0)):
        prefill, decode = costs.prefill_s(tokens, 500.0), costs.decode_s(batch, context)
        mixed = costs.mixed_s(tokens, 500.0, batch, context)
        assert max(prefill, decode) < mixed < 0.7 * (prefill + decode)


def test_a_compute_bound_mixed_step_saves_little(llama):
    """A full chunk is compute-bound: the decoding sequences add their tokens to its GEMMs, and reading
    the weights once saves only the decode pass's weight reads, a small share of the step."""
    costs = llama.costs
    prefill, decode = costs.prefill_s(2000, 0.0), costs.decode_s(48, 2000.0)
    mixed = costs.mixed_s(2000, 0.0, 48, 2000.0)
    assert prefill < mixed < prefill + decode
    assert mixed > 0.9 * (prefill + decode) - decode  # at most the decode pass saved
    assert mixed > 0.95 * prefill


def test_pure_steps_keep_their_own_price(llama):
    costs = llama.costs
    for tokens, earlier in ((1, 0.0), (700, 1234.5), (2048, 4000.0)):
        assert costs.mixed_s(tokens, earlier, 0, 0.0) == costs.prefill_s(tokens, earlier)
    for batch, context in ((1, 1.0), (17, 999.5), (64, 4096.0)):
        assert costs.mixed_s(0, 0.0, batch, context) == costs.decode_s(batch, context)


def two_passes(costs: StepCosts, tokens, earlier, batch, context):
    return costs.prefill_s(tokens, earlier) + costs.decode_s(batch, context)


def test_runs_without_mixed_steps_are_unchanged_and_runs_with_them_are_faster(llama, monkeypatch):
    """One request at a time never mixes: the run is the same to the last bit with the two-pass pricing.
    Under load chunks meet decoding sequences, and the fused steps make tokens come sooner."""
    prompt, output = parse_length("uniform:100-1500"), parse_length("uniform:20-200")
    alone = ArrivalProcess(kind="fixed", rate_per_s=0.05)
    loaded = ArrivalProcess(kind="poisson", rate_per_s=40.0)
    fused = [llama.simulate(arrivals, 60, prompt, output, seed=3) for arrivals in (alone, loaded)]
    monkeypatch.setattr(StepCosts, "mixed_s", two_passes)
    separate = [llama.simulate(arrivals, 60, prompt, output, seed=3) for arrivals in (alone, loaded)]
    assert fused[0].to_dict() == separate[0].to_dict()
    # (the run's length is the arrivals'; the steps that mix are what get shorter)
    assert fused[1].tpot.mean < 0.95 * separate[1].tpot.mean
    assert fused[1].ttft.mean < 0.9 * separate[1].ttft.mean


def test_speculative_and_spatial_steps_stay_two_passes():
    """Where the step is not one pass (speculative decoding's expected-value step; a spatial layer pipeline,
    whose regions are sized to the whole graph), a mixed step is the prefill pass plus the decode pass."""
    architecture = load_architecture("llama-3.1-8b")
    speculative = Server(architecture, load_for_prediction("h100-sxm-trtllm"),
                         config=ServingConfig(max_batch=8, max_tokens_per_step=512), max_context=2048,
                         speculation=Speculation(method="eagle", tokens=3, acceptance=0.6))
    spatial = Server(architecture, load_for_prediction("cerebras-wse-3"),
                     config=ServingConfig(max_batch=8, max_tokens_per_step=512), max_context=2048)
    for server in (speculative, spatial):
        costs = server.costs
        assert costs.mixed_s(100, 50.0, 4, 700.0) == two_passes(costs, 100, 50.0, 4, 700.0)


def test_an_engine_that_runs_prefill_and_decode_apart_pays_both_passes(llama):
    """SGLang runs a prefill batch and a decode batch as separate passes unless --enable-mixed-chunk (off by
    default): its overlays say so (``fuses_mixed``), and a mixed step then costs the two passes."""
    from calibration.engine_overlays import engine_step_overrides

    written = {engine: engine_step_overrides(engine)[0]["modes"]["graph"]["engine_step"]
               for engine in ("sglang", "vllm", "trtllm")}
    assert written["sglang"]["fuses_mixed"] is False
    assert "fuses_mixed" not in written["vllm"] and "fuses_mixed" not in written["trtllm"]  # (default: fused)
    hardware = llama.hardware
    modes = dict(hardware.scheduling.modes)
    modes["graph"] = replace(modes["graph"], engine_step=replace(modes["graph"].engine_step, fuses_mixed=False))
    apart = Server(llama.architecture, replace(hardware, scheduling=replace(hardware.scheduling, modes=modes)),
                   config=llama.config, max_context=4096).costs
    fused = llama.costs
    assert apart.mixed_s(64, 500.0, 32, 2000.0) == two_passes(fused, 64, 500.0, 32, 2000.0)
    assert fused.mixed_s(64, 500.0, 32, 2000.0) < 0.8 * apart.mixed_s(64, 500.0, 32, 2000.0)
