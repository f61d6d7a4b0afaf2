"""The request-level serving simulator (perfmodel.serving) and ``perfmodel serve``."""

import json

import numpy as np
import pytest

from perfmodel.cli import main
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm import Scenario, llm_predict
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving import ArrivalProcess, ClosedLoop, Server, ServingConfig, max_context, parse_length

PROMPT, OUTPUT = parse_length("fixed:512"), parse_length("fixed:128")


@pytest.fixture(scope="module")
def setup():
    architecture = load_architecture("llama-2-7b")
    hardware = load_for_prediction("h100-sxm")
    server = Server(architecture, hardware, max_context=max_context(PROMPT, OUTPUT))
    return architecture, hardware, server


def test_isolated_requests_match_the_single_request_prediction(setup):
    architecture, hardware, server = setup
    oracle = llm_predict(architecture, hardware, Scenario(batch=1, prompt_tokens=512, generated_tokens=128))
    result = server.simulate(ArrivalProcess(kind="fixed", rate_per_s=0.2), 20, PROMPT, OUTPUT)
    assert result.ttft.p50 == pytest.approx(oracle.ttft_s, rel=0.03)
    assert result.ttft.p99 == pytest.approx(oracle.ttft_s, rel=0.03)
    assert result.tpot.mean == pytest.approx(oracle.tpot_s, rel=0.03)
    assert result.e2e.mean == pytest.approx(oracle.e2e_s, rel=0.03)
    assert result.max_queue <= 1 and result.preemptions == 0


def test_littles_law(setup):
    _, _, server = setup
    rate = 4.0
    result = server.simulate(ArrivalProcess(kind="poisson", rate_per_s=rate), 400, PROMPT, OUTPUT, seed=3)
    assert result.mean_in_system == pytest.approx(rate * result.e2e.mean, rel=0.15)
    assert result.mean_in_system == pytest.approx(result.requests_per_s * result.e2e.mean, rel=0.01)


def test_ttft_grows_with_rate_and_throughput_saturates(setup):
    _, _, server = setup
    rates = [2, 16, 64, 128, 256]
    results = [server.simulate(ArrivalProcess(kind="poisson", rate_per_s=r), 300, PROMPT, OUTPUT, seed=1)
               for r in rates]
    p99 = [r.ttft.p99 for r in results]
    throughput = [r.tokens_per_s for r in results]
    assert all(a < b for a, b in zip(p99, p99[1:], strict=False))
    assert throughput[1] > 6 * throughput[0]  # far below the knee throughput follows the rate
    assert throughput[-1] < 1.1 * throughput[-2]  # past the knee it stops growing
    assert results[-1].max_queue > results[0].max_queue


def test_tiny_kv_cache_preempts_and_completes(setup):
    architecture, hardware, _ = setup
    weights = 2 * architecture.parameter_count()
    capacity = load_for_prediction("h100-sxm").memory
    total = sum(level.total_capacity_bytes for level in capacity if not level.off_device)
    share = (weights + 3e9) / total  # about 3 GB for activations, logits and a few sequences' KV
    server = Server(architecture, hardware, config=ServingConfig(max_batch=64, max_tokens_per_step=2048,
                                                                 memory_utilization=share),
                    max_context=max_context(PROMPT, OUTPUT))
    assert server.kv.tokens < 64 * 640
    result = server.simulate(ArrivalProcess(kind="burst"), 60, PROMPT, OUTPUT)
    assert result.preemptions > 0
    assert len(result.e2e_s) == 60 and np.all(np.isfinite(result.e2e_s))
    assert result.peak_kv_blocks <= result.kv_blocks


def test_closed_loop_and_distributions(setup):
    _, _, server = setup
    result = server.simulate(ClosedLoop(users=8, think_s=1.0), 40, parse_length("uniform:128-1024"),
                             parse_length("lognormal:100,0.5"), seed=2)
    assert result.max_queue <= 8 and len(set(result.prompt_tokens)) > 10
    assert all(128 <= p <= 1024 for p in result.prompt_tokens)


def test_seeds(setup):
    _, _, server = setup
    stream = ArrivalProcess(kind="poisson", rate_per_s=8)
    one = server.simulate(stream, 50, PROMPT, OUTPUT, seed=7).to_dict()
    assert one == server.simulate(stream, 50, PROMPT, OUTPUT, seed=7).to_dict()
    assert one != server.simulate(stream, 50, PROMPT, OUTPUT, seed=8).to_dict()


@pytest.mark.parametrize("text", ["bogus", "fixed:0", "fixed:", "uniform:10-5", "lognormal:100,0", "normal:5"])
def test_bad_length_text(text):
    with pytest.raises(PerfmodelError, match="expected 'fixed:512'"):
        parse_length(text)


def test_cli_json(capsys):
    argv = ["serve", "--model", "llama-2-7b", "--on", "h100-sxm", "--rate", "4/s", "--requests", "30",
            "--ttft-slo", "1s", "--tpot-slo", "50ms", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("ttft_s", "tpot_s", "e2e_s", "itl_s"):
        assert set(data[key]) == {"p50", "p90", "p99", "mean"}
    assert data["goodput"] == 1.0 and data["preemptions"] == 0 and data["requests"] == 30
    assert len(data["per_request"]["ttft_s"]) == 30 and data["tokens_per_s"] > 0


def test_cli_rates_table(capsys):
    argv = ["serve", "--model", "llama-2-7b", "--on", "h100-sxm", "--rates", "2,16,128,256", "--requests", "150"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "TTFT p99" in out and out.count("<- knee") == 1 and "knee: 128/s" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rates"] == [2, 16, 128, 256] and len(data["results"]) == 4


@pytest.mark.parametrize(("extra", "message"), [(["--rate", "0/s"], "--rate '0/s'"),
                                                (["--rate", "1/s", "--prompt-dist", "bogus"], "--prompt-dist 'bogus'"),
                                                (["--rate", "1/s", "--requests", "0"], "--requests must be at least 1"),
                                                ([], "give an arrival rate"),
                                                (["--rate", "1/s", "--users", "3"], "give one of")])
def test_cli_bad_input(extra, message, capsys):
    assert main(["serve", "--model", "llama-2-7b", "--on", "h100-sxm", *extra]) == 2
    assert message in capsys.readouterr().err


def test_readme_example_is_current(capsys):
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    marker = "`perfmodel serve --model llama-2-7b --on h100-sxm --rate 4/s --requests 200 --ttft-slo 1s --tpot-slo 50ms`\n("
    start = readme.index("```\n", readme.index(marker)) + len("```\n")
    block = readme[start:readme.index("```", start)]
    argv = ["serve", "--model", "llama-2-7b", "--on", "h100-sxm", "--rate", "4/s", "--requests", "200",
            "--ttft-slo", "1s", "--tpot-slo", "50ms"]
    assert main(argv) == 0
    assert capsys.readouterr().out == block
