"""Issue 31: speculative decoding (serving.speculation) and disaggregated prefill/decode (serving.disaggregated)."""

import json

import numpy as np
import pytest

from perfmodel.cli import main
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm import Parallelism
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving import ArrivalProcess, Server, ServingConfig, parse_length
from perfmodel.serving.disaggregated import (
    Disaggregated,
    draw,
    kv_link,
    kv_transfer_bytes,
    parse_disagg,
    simulate_pool,
)
from perfmodel.serving.speculation import Speculation, acceptance_for_length, tokens_per_step

PROMPT, OUTPUT = parse_length("fixed:512"), parse_length("fixed:64")


# ------------------------------------------------------------------------------ speculative decoding
@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.6, 0.85, 0.99])
@pytest.mark.parametrize("tokens", [1, 2, 4, 7])
def test_tokens_per_step_is_the_truncated_geometric_sum(acceptance, tokens):
    expected = (1 - acceptance ** (tokens + 1)) / (1 - acceptance)
    assert tokens_per_step(acceptance, tokens) == pytest.approx(expected)
    # the same as summing the chance that drafts 1..j are all accepted, plus the verifier's own token
    assert tokens_per_step(acceptance, tokens) == pytest.approx(sum(acceptance ** j for j in range(tokens + 1)))
    assert acceptance_for_length(tokens_per_step(acceptance, tokens), tokens) == pytest.approx(acceptance, abs=1e-6)


def test_tokens_per_step_limits():
    assert tokens_per_step(0.0, 5) == 1.0
    assert tokens_per_step(1.0, 5) == 6.0
    # DeepSeek-V3: one MTP module at 85-90% acceptance -> 1.85-1.9 tokens a step (the report's 1.8x TPS)
    assert tokens_per_step(0.85, 1) == pytest.approx(1.85)


@pytest.fixture(scope="module")
def small():
    architecture = load_architecture("llama-3.1-8b")
    hardware = load_for_prediction("h100-sxm", engine="trtllm")
    return architecture, hardware


def _server(small, speculation=None, max_batch=16):
    architecture, hardware = small
    return Server(architecture, hardware, config=ServingConfig(max_batch=max_batch, max_tokens_per_step=2048),
                  max_context=1024, speculation=speculation)


@pytest.mark.parametrize("method", ["eagle", "mtp"])
def test_zero_acceptance_makes_speculation_no_faster(small, method):
    plain = _server(small).costs
    spec = _server(small, Speculation(method=method, tokens=3, acceptance=0.0)).costs
    for batch in (1, 4, 16):
        for context in (64.0, 600.0):
            assert spec.decode_s(batch, context) > plain.decode_s(batch, context)


def test_step_time_times_tokens_per_step_does_not_depend_on_acceptance(small):
    """The drafter and verifier do the same work whatever is accepted; only the tokens it yields change."""
    low = _server(small, Speculation(method="eagle", tokens=3, acceptance=0.2))
    high = _server(small, Speculation(method="eagle", tokens=3, acceptance=0.9))
    for batch, context in ((1, 100.0), (8, 500.0), (16, 900.0)):
        assert low.costs.decode_s(batch, context) * tokens_per_step(0.2, 3) == pytest.approx(
            high.costs.decode_s(batch, context) * tokens_per_step(0.9, 3))


def test_tpot_falls_as_acceptance_rises(small):
    tpots = []
    for acceptance in (0.0, 0.5, 0.8, 0.95):
        result = _server(small, Speculation(method="eagle", tokens=4, acceptance=acceptance)).simulate(
            ArrivalProcess(kind="fixed", rate_per_s=1.0), 10, PROMPT, OUTPUT)
        tpots.append(result.tpot.mean)
    assert all(a > b for a, b in zip(tpots, tpots[1:], strict=False))


def test_verifier_is_a_batched_pass_not_k_plus_one_decode_steps(small):
    """At batch 1 decode is weight-bound: verifying 4 tokens at once costs far less than 4 decode steps."""
    plain = _server(small).costs.decode_s(1, 500.0)
    spec = _server(small, Speculation(method="eagle", tokens=3, acceptance=1.0))
    per_step = spec.costs.decode_s(1, 500.0) * 4  # undo the division by the 4 tokens a step yields
    assert plain < per_step < 2 * plain


def test_draft_model_takes_memory_and_must_share_the_vocabulary(small):
    draft = Speculation(method="draft", tokens=4, acceptance=0.7, draft_model=load_architecture("llama-3.1-8b"))
    assert _server(small, draft).kv.blocks < _server(small).kv.blocks
    other = Speculation(method="draft", tokens=2, acceptance=0.7, draft_model=load_architecture("llama-2-7b"))
    with pytest.raises(PerfmodelError, match="vocabulary"):
        _server(small, other)


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="medusa", tokens=2, acceptance=0.5), "expected one of"),
    (dict(method="eagle", tokens=0, acceptance=0.5), "speculative tokens"),
    (dict(method="eagle", tokens=2, acceptance=1.5), "acceptance rate"),
    (dict(method="draft", tokens=2, acceptance=0.5), "needs a draft model"),
])
def test_bad_speculation(kwargs, message):
    with pytest.raises(PerfmodelError, match=message):
        Speculation(**kwargs)


# ------------------------------------------------------------------------------ disaggregation
@pytest.fixture(scope="module")
def big():
    return load_architecture("llama-3.1-70b"), load_for_prediction("h200-sxm", engine="trtllm")


def test_kv_transfer_bytes_and_time_by_hand(big):
    architecture, hardware = big
    # 80 layers x (K + V) x 8 KV heads x 128 x 2 bytes = 327,680 bytes a token
    assert float(kv_transfer_bytes(architecture, 1000, "bf16")) == 327_680_000
    link = kv_link(hardware, 4, 8)
    assert link.name == "network"
    assert link.bandwidth_bytes_per_s == 4 * 50e9  # 4 senders' NICs at 50 GB/s a direction
    assert float(link.transfer_s(327_680_000)) == pytest.approx(4e-6 + 327_680_000 / 200e9)
    lengths = np.array([128, 1024, 8192, 65536])
    times = link.transfer_s(kv_transfer_bytes(architecture, lengths, "bf16"))
    assert np.all(np.diff(times) > 0)  # transfer time grows with the prompt
    assert kv_link(hardware, 4, 4, "nvlink").bandwidth_bytes_per_s == 4 * 450e9


def test_parse_disagg():
    assert parse_disagg("1P1D") == (1, 1) and parse_disagg("2p4d") == (2, 4)
    for bad in ("1X1D", "P1D", "0P1D", "1P", "three"):
        with pytest.raises(PerfmodelError, match="xPyD"):
            parse_disagg(bad)


def _compare(big, prompt_tokens, rate, requests=120):
    architecture, hardware = big
    server = Server(architecture, hardware, Parallelism(tp=4), config=ServingConfig(max_batch=128),
                    max_context=prompt_tokens + 256)
    times, prompts, outputs = draw(ArrivalProcess(kind="poisson", rate_per_s=rate), requests,
                                   parse_length(f"fixed:{prompt_tokens}"), parse_length("fixed:256"), seed=0,
                                   max_positions=architecture.max_positions)
    aggregated = simulate_pool(server, 2, times, prompts, outputs)
    disaggregated = Disaggregated(prefill=server, decode=server, prefill_workers=1, decode_workers=1,
                                  link=kv_link(hardware, 4, 4)).simulate(times, prompts, outputs)
    assert aggregated.chips == disaggregated.chips == 8
    return aggregated, disaggregated


def test_long_prompts_with_a_tight_tpot_favour_disaggregation(big):
    """8k-token prompts at 1.5/s on 8 H200s: aggregated replicas interleave long prefill chunks with
    decode steps (a decode step that shares a step with an 8k chunk waits for it), so TPOT's tail is
    several decode steps long; a decode worker only decodes. 20 ms p99 TPOT: only disaggregation meets it."""
    aggregated, disaggregated = _compare(big, 8192, 1.5)
    assert disaggregated.tpot.p99 <= 0.020 < aggregated.tpot.p99
    # the price: one prefill worker for the whole stream, and the transfer (13.4 ms for 8192 tokens)
    assert disaggregated.ttft.p50 > aggregated.ttft.p50
    assert np.nanmedian(disaggregated.transfer_s) == pytest.approx(4e-6 + 8192 * 327_680 / 200e9, rel=1e-6)


def test_short_prompts_favour_aggregation(big):
    """512-token prompts: prefill chunks barely slow decode; aggregated replicas keep TPOT within 20 ms
    and use both replicas for prefill, so their TTFT tail is shorter."""
    aggregated, disaggregated = _compare(big, 512, 6.0)
    assert aggregated.tpot.p99 <= 0.020 and disaggregated.tpot.p99 <= 0.020
    assert aggregated.ttft.p99 < disaggregated.ttft.p99


def test_an_idle_decode_worker_admits_at_once(big):
    """One request alone: TTFT = its prefill step from an idle engine (device and host work add up) + the
    transfer; TPOT = the decode worker's steps (host work overlapped)."""
    architecture, hardware = big
    server = Server(architecture, hardware, Parallelism(tp=4), config=ServingConfig(max_batch=8), max_context=4200)
    deployment = Disaggregated(prefill=server, decode=server, prefill_workers=1, decode_workers=1,
                               link=kv_link(hardware, 4, 4))
    result = deployment.simulate(np.array([0.0]), np.array([4000]), np.array([50]))
    prefill = server.costs.step_s(server.costs.prefill_s(4000, 0.0), 1, pipelined=False)
    assert server.costs.engine_step is not None and prefill > server.costs.prefill_s(4000, 0.0)
    transfer = float(deployment.link.transfer_s(kv_transfer_bytes(architecture, 4000, "bf16")))
    assert result.first_s[0] == pytest.approx(prefill + transfer, rel=1e-9)
    assert result.tpot.mean == pytest.approx(server.costs.step_s(server.costs.decode_s(1, 4025.5), 1), rel=0.02)


SERVE = ["serve", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--requests", "30", "--max-batch", "16"]


def test_cli_disagg_and_speculation(capsys):
    assert main([*SERVE, "--rate", "2/s", "--disagg", "1P2D", "--decode-tp", "2", "--speculative", "eagle",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["disaggregated"]["chips"] == 5 and data["aggregated"]["chips"] == 5  # 1 x 1 + 2 x 2
    assert data["speculation"]["method"] == "eagle"
    assert main([*SERVE, "--rate", "2/s", "--speculative", "mtp", "--acceptance", "0.9"]) == 0
    assert "MTP, 1 token drafted, acceptance 0.9 -> 1.90 tokens a step" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--rate", "1/s", "--disagg", "1Q1D"], "xPyD"),
    (["--rate", "1/s", "--decode-tp", "2"], "only apply with --disagg"),
    (["--users", "4", "--disagg", "1P1D"], "open-loop"),
    (["--rate", "1/s", "--disagg", "1P1D", "--chart", "x.png"], "drop --chart"),
    (["--rate", "1/s", "--disagg", "1P1D", "--decode-dp", "0"], "--decode-dp must be at least 1"),
    (["--rate", "1/s", "--acceptance", "0.5"], "need --speculative"),
    (["--rate", "1/s", "--speculative", "eagle", "--acceptance", "1.5"], "acceptance rate"),
    (["--rate", "1/s", "--speculative", "draft"], "--draft-model"),
    (["--rate", "1/s", "--speculative", "eagle", "--draft-model", "llama-3.1-8b"], "--draft-model is for"),
    (["--rate", "1/s", "--disagg", "1P1D", "--kv-link", "carrier-pigeon"], "has links"),
])
def test_cli_bad_input(extra, message, capsys):
    assert main([*SERVE, *extra]) == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------ wide expert parallelism
def test_wide_expert_parallelism_graph_memory_and_link():
    from perfmodel.llm.graphs import Scenario, check, stage_graph
    from perfmodel.llm.metrics import memory_per_chip
    from perfmodel.roofline import evaluate

    architecture = load_architecture("deepseek-v3")
    hardware = load_for_prediction("h200-sxm", engine="none")
    scenario = Scenario(batch=16, prompt_tokens=1, generated_tokens=1, weight_dtype="fp8")
    timings = {}
    for dp in (8, 32):
        layout = Parallelism(tp=1, ep=dp, dp=dp)
        assert layout.chips == dp
        graph = stage_graph(architecture, scenario, layout, phase="decode", context=2048)
        dispatch = next(op for op in graph.ops if op.name == "layers.moe.dispatch")
        # each chip receives its share of every group's routed tokens: 16 x dp x 8 / ep = 128 tokens
        assert dispatch.attrs["bytes"] == 16 * 8 * architecture.hidden * 2
        timings[dp] = next(op for op in evaluate(graph, hardware).ops if op.name == "layers.moe.dispatch")
    assert timings[8].bound == "link:nvlink"  # 8 chips: within the NVLink domain
    assert timings[32].bound == "link:network"  # 32 chips: over the network link, alpha-beta by hand
    assert timings[32].link_s == pytest.approx(58 * (31 / 32 * 16 * 8 * 7168 * 2 / 50e9 + 4e-6))
    # the routed experts are spread over tp x dp chips; the rest is replicated in each group
    experts = architecture.moe_layer_count * architecture.experts * architecture.expert_parameters
    whole = memory_per_chip(architecture, scenario, Parallelism()).weights
    wide = memory_per_chip(architecture, scenario, Parallelism(tp=1, ep=32, dp=32)).weights
    assert wide == pytest.approx(whole - experts * (1 - 1 / 32))
    for bad, message in ((Parallelism(tp=1, ep=64, dp=32), "at most tp=1 x dp=32"),
                         (Parallelism(tp=2, ep=24, dp=4), "must divide")):
        with pytest.raises(PerfmodelError, match=message):
            check(architecture, scenario, bad)
    with pytest.raises(PerfmodelError, match="no experts"):
        check(load_architecture("llama-3.1-8b"), scenario, Parallelism(dp=2))


def test_cli_wide_ep_decode_workers(capsys):
    argv = ["serve", "--model", "deepseek-v3", "--on", "h200-sxm", "--tp", "8", "--weights", "fp8", "--rate", "2/s",
            "--requests", "40", "--prompt-dist", "fixed:1024", "--output-dist", "fixed:32", "--disagg", "1P1D",
            "--decode-tp", "1", "--decode-dp", "16", "--decode-ep", "16", "--decode-max-batch", "8", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["disaggregated"]["chips"] == 8 + 16
    assert "dp 16 ep 16" in data["disaggregated"]["label"]
