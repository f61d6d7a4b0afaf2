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


# ------------------------------------------------------------------ traces, length files, charts, prefix caching

SERVE = ["serve", "--model", "llama-2-7b", "--on", "h100-sxm"]
TRACE_ROWS = [(0.5, 300, 20), (0.75, 1200, 64), (2.0, 64, 5), (2.0, 900, 130), (7.25, 2000, 12)]


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def _trace_file(tmp_path, header="arrival_s,prompt_tokens,output_tokens"):
    rows = "\n".join(f"{a},{p},{o}" for a, p, o in TRACE_ROWS)
    return _write(tmp_path / "trace.csv", f"# a comment line\n{header}\n{rows}\n")


def test_trace_replays_exactly(tmp_path, capsys):
    path = _trace_file(tmp_path)
    assert main([*SERVE, "--trace", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["per_request"]
    assert data["requests"] == 5
    assert rows["arrival_s"] == [a for a, _, _ in TRACE_ROWS]  # first 0.5 s, last 7.25 s, as written
    assert rows["prompt_tokens"] == [p for _, p, _ in TRACE_ROWS]
    assert rows["output_tokens"] == [o for _, _, o in TRACE_ROWS]
    assert all(t > 0 for t in rows["ttft_s"]) and "trace trace.csv" in data["workload"]
    # --requests takes the first rows
    assert main([*SERVE, "--trace", str(path), "--requests", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["per_request"]["prompt_tokens"] == [300, 1200]


def test_trace_other_column_names_and_timestamps(tmp_path):
    from perfmodel.serving.workload import read_trace

    azure = _write(tmp_path / "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                           "2023-11-16 18:15:46.500000,374,44\n2023-11-16 18:15:49.250000,396,109\n")
    trace = read_trace(azure)
    assert trace.arrival_s == (0.0, 2.75) and trace.prompt_tokens == (374, 396) and trace.output_tokens == (44, 109)
    epoch = read_trace(_write(tmp_path / "epoch.csv", "timestamp,input_len,output_len,user\n"
                                                      "1700000010,10,2,a\n1700000012.5,20,3,b\n"))
    assert epoch.arrival_s == (0.0, 2.5) and epoch.prompt_tokens == (10, 20)
    assert read_trace(_write(tmp_path / "input.csv", "arrival_s,input_tokens,output_len\n1,5,6\n")).arrival_s == (1.0,)


@pytest.mark.parametrize(("text", "fragments"), [
    ("arrival_s,prompt_tokens\n0,5\n", ["line 1 (header)", "no output column", "'output_tokens'"]),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,abc,3\n", ["line 3", "column 'prompt_tokens'", "not a number"]),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,5,-2\n", ["line 3", "column 'output_tokens'", "negative"]),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,5.5,3\n", ["line 3", "column 'prompt_tokens'", "whole number"]),
    ("arrival_s,prompt_tokens,output_tokens\n-1,5,3\n", ["line 2", "column 'arrival_s'", "negative"]),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n2,5,3\n\n1,5,3\n",
     ["line 5", "column 'arrival_s'", "before the previous row's arrival (line 3", "sort the rows"]),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,5\n", ["line 3", "column 'output_tokens'", "missing"]),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,4000,200\n",
     ["line 3", "4200 tokens", "llama-2-7b's context of 4096"]),
    ("timestamp,prompt_tokens,output_tokens\nyesterday,5,3\n", ["line 2", "column 'timestamp'", "ISO 8601"]),
    ("0,5,3\n", ["line 1 (header)", "no header row"]),
    ("", ["is empty", "header row"]),
    ("# only a comment\narrival_s,prompt_tokens,output_tokens\n", ["header (line 2) but no requests"]),
])
def test_bad_trace_exits_2_naming_line_and_column(text, fragments, tmp_path, capsys):
    path = _write(tmp_path / "bad.csv", text)
    assert main([*SERVE, "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfmodel: error: ") and "Traceback" not in err
    assert str(path) in err or "bad.csv" in err
    for fragment in fragments:
        assert fragment in err


@pytest.mark.parametrize(("extra", "message"), [
    (["--rate", "1/s"], "give one of --rate, --rates, --users and --trace"),
    (["--prompt-dist", "fixed:5"], "drop --prompt-dist"),
    (["--requests", "9"], "holds 5 requests"),
])
def test_trace_conflicting_options(extra, message, tmp_path, capsys):
    assert main([*SERVE, "--trace", str(_trace_file(tmp_path)), *extra]) == 2
    assert message in capsys.readouterr().err


def test_empirical_length_distribution_mean(tmp_path):
    from perfmodel.serving.workload import read_length_csv

    weighted = _write(tmp_path / "prompts.csv", "tokens,count\n128,10\n256,25\n512,40\n1024,15\n2048,8\n3072,2\n")
    distribution = parse_length(str(weighted))
    file_mean = (128 * 10 + 256 * 25 + 512 * 40 + 1024 * 15 + 2048 * 8 + 3072 * 2) / 100
    assert distribution.kind == "empirical" and distribution.mean == pytest.approx(file_mean)
    assert distribution.largest == 3072
    draws = distribution.sample(np.random.default_rng(11), 20_000)
    assert draws.mean() == pytest.approx(file_mean, rel=0.02)
    assert set(np.unique(draws)) == {128, 256, 512, 1024, 2048, 3072}
    column = _write(tmp_path / "outputs.csv", "# one observation a row\n10\n20\n20\n50\n")
    one = read_length_csv(column)
    assert one.values == (10, 20, 50) and one.probabilities == pytest.approx((0.25, 0.5, 0.25))
    assert parse_length(f"empirical:{column}") == one


def test_empirical_lengths_in_a_simulation(setup, tmp_path):
    _, _, server = setup
    prompts = parse_length(str(_write(tmp_path / "p.csv", "value,weight\n100,1\n300,3\n")))
    outputs = parse_length(str(_write(tmp_path / "o.csv", "20\n40\n")))
    result = server.simulate(ArrivalProcess(kind="poisson", rate_per_s=4), 400, prompts, outputs, seed=5)
    assert set(result.prompt_tokens) == {100, 300} and set(result.output_tokens) == {20, 40}
    assert np.mean(result.prompt_tokens) == pytest.approx(250, rel=0.05)
    assert np.mean(result.output_tokens) == pytest.approx(30, rel=0.05)


@pytest.mark.parametrize(("text", "fragments"), [
    ("tokens,count\n128,1\n256,x\n", ["line 3", "column 'count'", "not a number"]),
    ("tokens,count\n128,1\n256,-1\n", ["line 3", "column 'count'", "negative"]),
    ("128\n12.5\n", ["line 2", "column 'value'", "whole number"]),
    ("lengths\n128\n0\n", ["line 3", "column 'lengths'", "below 1"]),
    ("128,1,2\n", ["line 1", "3 columns"]),
    ("128,1\n256\n", ["line 2", "1 cell where the first row has 2"]),
    ("tokens,count\n128,0\n", ["every weight is 0"]),
    ("", ["is empty"]),
    ("128\n5000\n", ["line 2", "column 'value'", "context of 4096"]),
])
def test_bad_length_file_exits_2(text, fragments, tmp_path, capsys):
    path = _write(tmp_path / "lengths.csv", text)
    assert main([*SERVE, "--rate", "1/s", "--prompt-dist", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--prompt-dist file" in err and "lengths.csv" in err and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def test_latency_chart_is_written(tmp_path, capsys):
    chart = tmp_path / "charts" / "latency.png"
    assert main([*SERVE, "--rate", "4/s", "--requests", "40", "--ttft-slo", "200ms", "--chart", str(chart)]) == 0
    assert f"chart: {chart}" in capsys.readouterr().out
    assert chart.stat().st_size > 10_000 and chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in chart.parent.iterdir()] == ["latency.png"]  # no temporary left behind


def test_rates_chart_is_written(tmp_path, capsys):
    chart = tmp_path / "rates.svg"
    assert main([*SERVE, "--rates", "2,16,128", "--requests", "60", "--json", "--chart", str(chart)]) == 0
    json.loads(capsys.readouterr().out)  # --json output stays pure JSON
    text = chart.read_text(encoding="utf-8")
    assert text.startswith("<?xml") and "<svg" in text and len(text) > 10_000


def test_plot_functions_take_an_axes(setup):
    from perfmodel.plotting import plot_serving_latency, plot_serving_rates, pyplot

    _, _, server = setup
    results = [server.simulate(ArrivalProcess(kind="poisson", rate_per_s=r), 30, PROMPT, OUTPUT) for r in (2, 8)]
    figure, (left, right) = pyplot().subplots(1, 2)
    assert plot_serving_latency(results[0], left) is left
    assert len(left.get_lines()) >= 3 and left.get_xscale() == "log"
    assert plot_serving_rates([2, 8], results, right, knee=8, ttft_slo_s=0.2) is right
    legend = [text.get_text() for text in right.get_legend().get_texts()]
    assert "knee: 8/s" in legend and "p99 TTFT" in legend and "TTFT SLO 200 ms" in legend
    pyplot().close(figure)
    assert len(results[0].itl_samples_s) == 30 * 127  # every gap after a first token


def test_bad_chart_name(capsys):
    assert main([*SERVE, "--rate", "1/s", "--chart", "latency.jpg"]) == 2
    assert "must end in .png, .svg or .pdf" in capsys.readouterr().err


def test_progress_bar_only_in_a_terminal_and_never_with_json(monkeypatch, capsys):
    from perfmodel.cli import serve_command

    argv = [*SERVE, "--rates", "2,4,8", "--requests", "20"]
    assert main(argv) == 0  # captured stderr is not a terminal: no bar
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(serve_command, "_stderr_is_tty", lambda: True)
    assert main(argv) == 0
    assert "simulating" in capsys.readouterr().err
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and json.loads(captured.out)["rates"] == [2, 4, 8]
    assert main([*SERVE, "--rate", "2/s", "--requests", "20"]) == 0  # short single run: no bar
    assert capsys.readouterr().err == ""


def test_prefix_caching_skips_the_cached_prefill(setup):
    _, _, server = setup
    prompt, stream = parse_length("fixed:1024"), ArrivalProcess(kind="fixed", rate_per_s=0.5)
    plain = server.simulate(stream, 10, prompt, OUTPUT)
    cached = server.simulate(stream, 10, prompt, OUTPUT, prefix_share=0.5)
    # isolated requests: TTFT is the prefill of the uncached tokens, attending to the cached prefix too
    assert plain.ttft.p50 == pytest.approx(server.costs.prefill_s(1024), rel=1e-9)
    assert cached.ttft.p50 == pytest.approx(server.costs.prefill_s(512, earlier=512), rel=1e-9)
    assert server.costs.prefill_s(512) < cached.ttft.p50 < server.costs.prefill_s(1024)
    assert cached.ttft.mean < 0.7 * plain.ttft.mean
    assert cached.tpot.mean == pytest.approx(plain.tpot.mean, rel=0.01)  # decode still reads the whole context
    assert cached.to_dict()["prefix_share"] == 0.5 and "prefix share 0.5" in cached.workload
    # under load too, and the larger the share the lower the TTFT
    busy = [server.simulate(ArrivalProcess(kind="poisson", rate_per_s=16), 200, prompt, OUTPUT, seed=4,
                            prefix_share=share).ttft.mean for share in (0.0, 0.5, 0.9)]
    assert busy[0] > busy[1] > busy[2]
    with pytest.raises(PerfmodelError, match=r"prefix share must be a fraction in \[0, 1\)"):
        server.simulate(stream, 5, prompt, OUTPUT, prefix_share=1.0)


def test_prefix_caching_on_the_command_line(capsys):
    ttft = []
    for share in ("0", "0.75"):
        assert main([*SERVE, "--rate", "4/s", "--requests", "60", "--prompt-dist", "fixed:2048",
                     "--prefix-share", share, "--json"]) == 0
        ttft.append(json.loads(capsys.readouterr().out)["ttft_s"]["mean"])
    assert ttft[1] < 0.6 * ttft[0]
    assert main([*SERVE, "--rate", "4/s", "--prefix-share", "1"]) == 2
    assert "--prefix-share must be a fraction" in capsys.readouterr().err


def test_shipped_serving_examples(capsys):
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "workloads" / "serving"
    assert main([*SERVE, "--trace", str(folder / "example_trace.csv"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"] == 60 and data["per_request"]["arrival_s"][0] == 0.0
    assert main([*SERVE, "--rate", "4/s", "--requests", "30", "--prompt-dist", str(folder / "prompt_lengths.csv"),
                 "--output-dist", str(folder / "output_lengths.csv"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["per_request"]["prompt_tokens"]) <= {128, 256, 512, 1024, 2048, 3072}


def _as_dict(result) -> dict:
    data = result.to_dict()
    data["itl_samples"] = result.itl_samples_s.tolist()
    return data


@pytest.mark.parametrize("case", ["burst", "poisson", "closed", "tiny-cache"])
def test_decode_stretches_equal_step_by_step(setup, monkeypatch, case):
    """Stretches of pure decode steps are run as one update of the arrays; with that shortcut switched
    off every step goes through the scheduler, and the results are the same to the last bit."""
    architecture, hardware, server = setup
    if case == "tiny-cache":  # KV runs out: the stretch must stop where the sequential rule preempts
        weights = 2 * architecture.parameter_count()
        total = sum(level.total_capacity_bytes for level in hardware.memory if not level.off_device)
        server = Server(architecture, hardware, config=ServingConfig(max_batch=64, max_tokens_per_step=2048,
                                                                     memory_utilization=(weights + 3e9) / total),
                        max_context=1800)
    arrivals = {"burst": ArrivalProcess(kind="burst"), "poisson": ArrivalProcess(kind="poisson", rate_per_s=64),
                "closed": ClosedLoop(users=16, think_s=0.5), "tiny-cache": ArrivalProcess(kind="burst")}[case]
    prompt, output = parse_length("uniform:16-1500"), parse_length("uniform:1-300")

    def run():
        return server.simulate(arrivals, 150, prompt, output, seed=11, prefix_share=0.2)

    fast = run()
    monkeypatch.setattr(Server, "_decode_only", lambda *args: False)
    slow = run()
    assert _as_dict(fast) == _as_dict(slow)
    assert fast.steps == slow.steps > 150
    if case == "tiny-cache":
        assert fast.preemptions > 0


def test_reserved_admission_never_preempts(setup):
    architecture, hardware, _ = setup
    weights = 2 * architecture.parameter_count()
    total = sum(level.total_capacity_bytes for level in hardware.memory if not level.off_device)
    results = {}
    for admission in ("on-demand", "reserve"):
        config = ServingConfig(max_batch=64, max_tokens_per_step=2048, memory_utilization=(weights + 3e9) / total,
                               kv_admission=admission)
        server = Server(architecture, hardware, config=config, max_context=max_context(PROMPT, OUTPUT))
        results[admission] = server.simulate(ArrivalProcess(kind="burst"), 80, PROMPT, OUTPUT)
    demand, reserve = results["on-demand"], results["reserve"]
    assert demand.preemptions > 0 and reserve.preemptions == 0
    blocks_per_request = -(-(512 + 128) // 16)
    # reserve admits only whole sequences: at most blocks // 40 requests run at once
    assert reserve.peak_kv_blocks <= reserve.kv_blocks
    assert reserve.peak_kv_blocks % blocks_per_request == 0
    assert reserve.mean_in_system == pytest.approx(demand.mean_in_system, rel=0.5)
    assert len(reserve.e2e_s) == 80 and np.all(np.isfinite(reserve.e2e_s))
    with pytest.raises(PerfmodelError, match="kv-admission must be one of on-demand, reserve"):
        ServingConfig(kv_admission="lazy")


@pytest.mark.parametrize(("flag", "value", "header", "bad"), [
    ("--kv-admission", "reserve", "whole sequences reserved at admission", "sometimes"),
    ("--first-token", "decode", "first token from the decode step after the prefill", "later"),
])
def test_scheduler_choices_on_the_command_line(flag, value, header, bad, capsys):
    assert main([*SERVE, "--arrival", "burst", "--requests", "40", flag, value]) == 0
    assert header in capsys.readouterr().out
    assert main([*SERVE, "--rate", "2/s", flag, bad]) == 2
    assert flag in capsys.readouterr().err


def test_trtllm_bench_settings_follow_its_heuristic():
    """tensorrt_llm/bench/build/tuning.py worked by hand for Llama-3.1-8B FP8 (fp8 KV) on one H100:
    KV per token 2 x 32 layers x 8 heads x 128 x 1 byte = 64 KiB; weights 8.03e9 B = 7.48 GiB;
    on-device memory 79.72 GiB (the spec's HBM and caches); 0.95 x (79.72 - 7.48) GiB / (64 KiB x 2176
    tokens) = 516.8 requests at 128/2048; batch 128 x ceil(516.8 / 128) = 640; tokens
    516.8 x (1 + 128/2048) = 549 -> the floor of 2048."""
    from perfmodel.llm import Scenario
    from perfmodel.llm.graphs import Parallelism
    from perfmodel.validation import trtllm_bench_settings

    architecture, hardware = load_architecture("llama-3.1-8b"), load_for_prediction("h100-sxm", ideal=True)
    scenario = Scenario(batch=1, prompt_tokens=128, generated_tokens=2048, weight_dtype="fp8", kv_dtype="fp8",
                        activation_dtype="fp8")
    settings = trtllm_bench_settings(architecture, hardware, Parallelism(), scenario)
    weights_gib = architecture.parameter_count() / 2**30
    memory_gib = sum(level.total_capacity_bytes for level in hardware.memory if not level.off_device) / 2**30
    assert memory_gib == pytest.approx(79.72, abs=0.01)
    expected = 0.95 * (memory_gib - weights_gib) / (2 * 32 * 8 * 128 / 2**30 * 2176)
    assert settings.kv_max_requests == pytest.approx(expected, rel=1e-9) == pytest.approx(516.8, abs=0.1)
    assert settings.max_batch == 640 and settings.max_tokens == 2048
    short = trtllm_bench_settings(architecture, hardware, Parallelism(),
                                  Scenario(batch=1, prompt_tokens=128, generated_tokens=128, weight_dtype="fp8",
                                           kv_dtype="fp8", activation_dtype="fp8"))
    assert short.max_batch == 4096 and short.max_tokens == 8192  # capped at 4096; 2 x 4096 tokens


def test_max_load_rows_go_through_the_simulator():
    from perfmodel.validation import validate

    rows = [row for row in validate() if row.group == "A" and "max-load" in row.how]
    assert len(rows) == 18
    for row in rows:
        assert "trtllm-bench max-load simulated" in row.how and row.predicted > 0
        assert "whole sequences reserved" in row.how


def test_steady_state_is_flagged_past_saturation(setup, capsys):
    _, _, server = setup
    calm = server.simulate(ArrivalProcess(kind="poisson", rate_per_s=4), 300, PROMPT, OUTPUT, seed=1)
    flooded = server.simulate(ArrivalProcess(kind="poisson", rate_per_s=256), 300, PROMPT, OUTPUT, seed=1)
    assert calm.steady_state is True and flooded.steady_state is False
    assert server.simulate(ArrivalProcess(kind="burst"), 40, PROMPT, OUTPUT).steady_state is None
    assert server.simulate(ClosedLoop(users=4, think_s=1.0), 40, PROMPT, OUTPUT).steady_state is None
    assert flooded.to_dict()["steady_state"] is False
    assert main([*SERVE, "--rate", "256/s", "--requests", "300"]) == 0
    assert "did not reach a steady state" in capsys.readouterr().out
    assert main([*SERVE, "--rate", "4/s", "--requests", "100"]) == 0
    assert "steady state" not in capsys.readouterr().out


def test_server_scenario_finds_the_highest_rate_meeting_p99(setup):
    from perfmodel.serving import server_scenario

    _, _, server = setup
    loose = server_scenario(server, 300, PROMPT, OUTPUT, ttft_slo_s=0.2, tpot_slo_s=0.05)
    strict = server_scenario(server, 300, PROMPT, OUTPUT, ttft_slo_s=0.05, tpot_slo_s=0.05)
    for found, ttft in ((loose, 0.2), (strict, 0.05)):
        assert found.result is not None and found.result.ttft.p99 <= ttft and found.result.tpot.p99 <= 0.05
        assert found.rate_per_s <= found.offline.requests_per_s
        failed = [rate for rate, met in found.tried if not met]
        # every rate tried above the answer failed; the search bracket closed within 2% (or hit the ceiling)
        assert all(rate > found.rate_per_s for rate in failed)
        assert found.rate_per_s == found.offline.requests_per_s or min(failed) <= 1.021 * found.rate_per_s
    assert strict.rate_per_s < loose.rate_per_s
    oracle = llm_predict(*setup[:2], Scenario(batch=1, prompt_tokens=512, generated_tokens=128))
    impossible = server_scenario(server, 100, PROMPT, OUTPUT, ttft_slo_s=0.5 * oracle.ttft_s, tpot_slo_s=None)
    assert impossible.rate_per_s is None and impossible.result is None
    with pytest.raises(PerfmodelError, match="needs a TTFT or a TPOT constraint"):
        server_scenario(server, 100, PROMPT, OUTPUT, ttft_slo_s=None, tpot_slo_s=None)


def test_server_scenario_on_the_command_line(capsys):
    assert main([*SERVE, "--scenario", "server", "--ttft-slo", "200ms", "--tpot-slo", "50ms", "--requests", "150",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scenario"] == "server" and data["rate_per_s"] > 0
    assert data["result"]["ttft_s"]["p99"] <= 0.2 and data["offline"]["requests_per_s"] >= data["rate_per_s"]
    assert main([*SERVE, "--scenario", "offline", "--requests", "50"]) == 0
    assert "burst (all at t = 0)" in capsys.readouterr().out
    assert main([*SERVE, "--scenario", "server", "--requests", "50"]) == 2
    assert "needs a p99 constraint" in capsys.readouterr().err
    assert main([*SERVE, "--scenario", "server", "--rate", "2/s", "--ttft-slo", "1s"]) == 2
    assert "sets the arrivals itself; drop --rate" in capsys.readouterr().err


@pytest.mark.parametrize("arrivals", [ArrivalProcess(kind="poisson", rate_per_s=8), ArrivalProcess(kind="burst"),
                                      ClosedLoop(users=16, think_s=0.5)], ids=["poisson", "burst", "closed"])
def test_latency_percentiles_are_ordered(setup, arrivals):
    _, _, server = setup
    result = server.simulate(arrivals, 200, parse_length("uniform:64-2048"), parse_length("lognormal:200,0.8"), seed=5)
    for name in ("ttft", "tpot", "e2e", "itl"):
        p = getattr(result, name)
        assert 0 < p.p50 <= p.p90 <= p.p99, name
        samples = np.asarray({"ttft": result.ttft_s, "tpot": result.tpot_s, "e2e": result.e2e_s,
                              "itl": result.itl_samples_s}[name], dtype=float)
        samples = samples[~np.isnan(samples)]
        assert p.p99 <= samples.max() and p.mean == pytest.approx(samples.mean(), rel=1e-12)
    assert np.all(np.asarray(result.e2e_s) >= np.asarray(result.ttft_s))


def test_ttft_explodes_past_saturation(setup):
    """Below the knee TTFT stays near the single-request prefill; past it, it grows with the run's
    length (the queue grows without bound): 4x the requests, several times the p99 TTFT."""
    _, _, server = setup
    saturated = ArrivalProcess(kind="poisson", rate_per_s=128)
    short, long = (server.simulate(saturated, n, PROMPT, OUTPUT, seed=2) for n in (200, 800))
    calm = server.simulate(ArrivalProcess(kind="poisson", rate_per_s=4), 200, PROMPT, OUTPUT, seed=2)
    assert long.ttft.p99 > 3 * short.ttft.p99 > 30 * calm.ttft.p99
    assert calm.steady_state and not long.steady_state


def test_a_chunk_pays_attention_to_the_earlier_chunks(setup):
    """A chunk of n tokens after e cached ones costs the prefill graph of n queries over n + e causal
    positions: more than n alone, growing with e, and a long prompt prefilled in chunks pays at least
    what one pass over it costs (the chunks' weight reads and launches come on top)."""
    architecture, hardware, _ = setup
    server = Server(architecture, hardware, config=ServingConfig(max_batch=8, max_tokens_per_step=512),
                    max_context=4096)
    costs = server.costs
    chunks = [costs.prefill_s(512, earlier=e) for e in range(0, 4096, 512)]
    assert all(a < b for a, b in zip(chunks, chunks[1:], strict=False))
    whole = Server(architecture, hardware, config=ServingConfig(max_batch=8, max_tokens_per_step=4096),
                   max_context=4096).costs.prefill_s(4096)
    assert sum(chunks) > whole
    one = server.simulate(ArrivalProcess(kind="fixed", rate_per_s=0.1), 3, parse_length("fixed:4096"),
                          parse_length("fixed:2"))
    assert one.ttft.p50 == pytest.approx(sum(chunks), rel=1e-4)  # the same grid, at the chunks' own earlier counts


@pytest.mark.parametrize("model, tp, pp", [("llama-2-7b", 1, 1), ("llama-2-7b", 2, 2)])
def test_step_cost_grids_equal_each_point_evaluated_alone(model, tp, pp):
    """The decode and prefill grids are priced in one evaluation each (batch and context, tokens and
    earlier tokens flattened into arrays): every entry is what one scenario's graph gives on its own."""
    from dataclasses import replace

    from perfmodel.llm import Parallelism
    from perfmodel.llm.graphs import pipeline_send, stage_graph
    from perfmodel.llm.metrics import phase_time
    from perfmodel.roofline.arrays import evaluate_arrays
    from perfmodel.workload.ir import Graph

    architecture, hardware = load_architecture(model), load_for_prediction("h100-sxm")
    parallelism = Parallelism(tp=tp, pp=pp)
    server = Server(architecture, hardware, parallelism, config=ServingConfig(max_batch=16, max_tokens_per_step=1024),
                    max_context=2048)
    costs, resident = server.costs, server.kv.state_bytes

    def alone(phase, batch, tokens, context):
        scenario = replace(server.scenario, batch=batch, prompt_tokens=tokens)
        graph = stage_graph(architecture, scenario, parallelism, phase=phase, context=context)
        stage = evaluate_arrays(graph, hardware, mode=costs.mode, resident_bytes=resident,
                                stream_items=batch * (tokens if phase == "prefill" else 1))
        send = Graph(name="send", ops=[pipeline_send(scenario, architecture, phase)])
        return float(phase_time(stage, hardware, parallelism, send))

    for batch in (1, 7, 16):
        for index in (0, 5, len(costs.contexts) - 1):
            context = int(costs.contexts[index])
            assert costs.decode_s(batch, context) == pytest.approx(alone("decode", batch, 1, context), rel=1e-12)
    for row, earlier in enumerate(costs.prefill_earlier):
        for column in (0, 20, len(costs.prefill_tokens) - 1):
            tokens = int(costs.prefill_tokens[column])
            expected = alone("prefill", 1, tokens, tokens + int(earlier))
            assert costs.prefill_times[row, column] == pytest.approx(expected, rel=1e-12)


def test_a_kv_block_cap_limits_the_cache_and_queues_requests(setup):
    architecture, hardware, server = setup
    capped = Server(architecture, hardware, config=ServingConfig(max_kv_blocks=40), max_context=max_context(PROMPT,
                                                                                                           OUTPUT))
    assert server.kv.blocks > 40 and capped.kv.blocks == 40
    assert capped.kv.budget_bytes == pytest.approx(40 * capped.kv.block_size * capped.kv.bytes_per_token)
    above = Server(architecture, hardware, config=ServingConfig(max_kv_blocks=10**9),
                   max_context=max_context(PROMPT, OUTPUT))
    assert above.kv.blocks == server.kv.blocks  # a cap above what the memory holds changes nothing
    free = server.simulate(ClosedLoop(users=32, think_s=0.0), 96, PROMPT, OUTPUT)
    tight = capped.simulate(ClosedLoop(users=32, think_s=0.0), 96, PROMPT, OUTPUT)
    assert tight.peak_kv_blocks <= 40 < free.peak_kv_blocks
    assert tight.ttft.mean > free.ttft.mean and tight.tokens_per_s < free.tokens_per_s
    with pytest.raises(PerfmodelError, match="max-kv-blocks must be at least 1"):
        ServingConfig(max_kv_blocks=0)


def test_max_kv_blocks_on_the_command_line(capsys):
    assert main([*SERVE, "--arrival", "burst", "--requests", "20", "--max-kv-blocks", "50"]) == 0
    assert "KV cache 50 blocks of 16 tokens" in capsys.readouterr().out
    assert main([*SERVE, "--rate", "2/s", "--max-kv-blocks", "0"]) == 2
    assert "max-kv-blocks must be at least 1" in capsys.readouterr().err
    assert main([*SERVE, "--rate", "2/s", "--requests", "5", "--max-kv-blocks", "3"]) == 2  # 640 tokens need 40
    assert "needs 40 KV blocks, the cache holds 3 (48 tokens); raise --max-kv-blocks" in capsys.readouterr().err


def test_first_token_from_the_decode_step_adds_a_step_to_ttft_and_keeps_the_rest(setup):
    """TurboMind's context decoding leaves a prompt's last token to the next decode step (first_token
    "decode"): a lone request's first token costs the prefill of all but one prompt token plus a decode
    step; its lengths, TPOT and inter-token gaps are those of the default engine."""
    architecture, hardware, server = setup
    decode = Server(architecture, hardware, config=ServingConfig(first_token="decode"),
                    max_context=max_context(PROMPT, OUTPUT))
    lone = ArrivalProcess(kind="fixed", rate_per_s=0.2)
    usual = server.simulate(lone, 5, PROMPT, OUTPUT)
    late = decode.simulate(lone, 5, PROMPT, OUTPUT)
    shorter = server.simulate(lone, 5, parse_length("fixed:511"), OUTPUT)
    step = usual.tpot.mean
    assert late.ttft.mean == pytest.approx(shorter.ttft.mean + step, rel=0.02)
    assert late.ttft.mean > usual.ttft.mean
    assert late.tpot.mean == pytest.approx(usual.tpot.mean, rel=0.02)
    assert late.prompt_tokens == usual.prompt_tokens and late.output_tokens == usual.output_tokens
    assert late.itl_samples_s.size == usual.itl_samples_s.size == 5 * (128 - 1)
    one = parse_length("fixed:1")  # no context to decode: the one step is the decode step already
    assert decode.simulate(lone, 5, one, OUTPUT).ttft_s == server.simulate(lone, 5, one, OUTPUT).ttft_s
    loaded = decode.simulate(ClosedLoop(users=16, think_s=0.0), 64, PROMPT, OUTPUT)
    assert loaded.itl_samples_s.size == 64 * 127 and np.all(np.isfinite(loaded.ttft_s))
    with pytest.raises(PerfmodelError, match="first-token must be one of prefill, decode"):
        ServingConfig(first_token="sampling")
