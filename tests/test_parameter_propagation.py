"""Parameter uncertainty (the fit's covariance) propagated into serve, size, train, sweep and search."""

import json
from dataclasses import replace

import pytest

from perfmodel.cli import main
from perfmodel.cli.confidence import parameter_sets, served_intervals
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving import ArrivalProcess, Server, ServingConfig, parse_length

PROMPT, OUTPUT = parse_length("fixed:512"), parse_length("fixed:64")
FIGURES = ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s", "tokens_per_s")
CONFIG = ServingConfig(max_batch=32, max_tokens_per_step=2048)
SERVE = ["serve", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--engine", "vllm", "--requests", "40",
         "--rate", "4/s", "--json"]


def _zeroed(hardware):
    """``hardware`` whose fit covariance is all zeros: every parameter set drawn from it is the nominal one."""
    fit = hardware.efficiency.fit
    zeros = tuple(tuple(0.0 for _ in row) for row in fit.relative_covariance)
    return replace(hardware, efficiency=replace(hardware.efficiency, fit=replace(fit, relative_covariance=zeros)))


@pytest.fixture(scope="module")
def vllm():
    """Llama-3.1-8B on one H100 priced by its vLLM overlay (which stores its fit's covariance)."""
    hardware = load_for_prediction("h100-sxm", engine="vllm")
    assert hardware.efficiency.fit is not None
    server = Server(load_architecture("llama-3.1-8b"), hardware, config=CONFIG, max_context=576)
    return hardware, server


def _served(server, hardware, samples=9):
    stream = ArrivalProcess(kind="poisson", rate_per_s=4.0)
    result = server.simulate(stream, 40, PROMPT, OUTPUT, seed=1)
    sets, basis = parameter_sets(hardware, "served", 0.8, samples)
    runs = [server.repriced(parameters).simulate(stream, 40, PROMPT, OUTPUT, seed=1) for parameters in sets]
    return served_intervals(hardware, result, 0.8, runs, basis), served_intervals(hardware, result, 0.8)


def test_a_server_repriced_at_its_own_parameters_replays_the_same_run(vllm):
    hardware, server = vllm
    stream = ArrivalProcess(kind="poisson", rate_per_s=8.0)
    alone = server.simulate(stream, 30, PROMPT, OUTPUT, seed=2)
    again = server.repriced(hardware.efficiency).simulate(stream, 30, PROMPT, OUTPUT, seed=2)
    assert list(again.ttft_s) == list(alone.ttft_s) and list(again.e2e_s) == list(alone.e2e_s)
    assert server.repriced(hardware.efficiency).kv.blocks == server.kv.blocks


def test_served_interval_with_parameter_sets_contains_the_model_form_one(vllm):
    """Each figure's interval is at least as wide on both sides as the model-form band alone, and wider
    where the step costs move with the fitted parameters (the latencies); the basis names the covariance."""
    hardware, server = vllm
    both, alone = _served(server, hardware)
    for name in FIGURES:
        assert both[name].low <= alone[name].low * (1 + 1e-12) and both[name].high >= alone[name].high * (1 - 1e-12)
    for name in ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s"):
        assert both[name].low < alone[name].low and both[name].high > alone[name].high, name
    assert "parameter uncertainty from h100-sxm-vllm's fit covariance" in both["ttft_p50_s"].basis
    assert "9 parameter sets, seed 0" in both["ttft_p50_s"].basis


def test_a_zero_covariance_gives_the_model_form_interval(vllm):
    hardware, _ = vllm
    zeroed = _zeroed(hardware)
    server = Server(load_architecture("llama-3.1-8b"), zeroed, config=CONFIG, max_context=576)
    both, alone = _served(server, zeroed)
    for name in FIGURES:
        assert both[name].low == pytest.approx(alone[name].low, rel=1e-12)
        assert both[name].high == pytest.approx(alone[name].high, rel=1e-12)


def test_serve_propagates_reproducibly_and_says_what_it_rests_on(capsys):
    assert main(SERVE) == 0
    first = json.loads(capsys.readouterr().out)["intervals"]
    assert main(SERVE) == 0
    assert json.loads(capsys.readouterr().out)["intervals"] == first  # seed 0: the same sets, the same runs
    assert "16 parameter sets, seed 0" in first["basis"]
    assert main([*SERVE, "--parameter-sets", "0"]) == 0
    alone = json.loads(capsys.readouterr().out)["intervals"]
    assert "model-form error only (--parameter-sets 0)" in alone["basis"]
    for name in FIGURES:
        assert first[name]["low"] <= alone[name]["low"] * (1 + 1e-12)
        assert first[name]["high"] >= alone[name]["high"] * (1 - 1e-12)
    assert first["tpot_p50_s"]["high"] > alone["tpot_p50_s"]["high"]


def test_a_device_without_a_fit_block_says_so(capsys, tmp_path):
    """The shipped TensorRT-LLM overlay with its fit block cut: served from the path, it keeps the model-form
    interval and says why."""
    from perfmodel.hardware.loader import resolve_spec

    text = resolve_spec("h100-sxm-trtllm").read_text()
    start = text.index("\n  fit:\n")
    end = next((index for index in range(start + 1, len(text)) if text.startswith("\n", index)
                and not text.startswith("\n   ", index)), len(text))
    path = tmp_path / "h100-sxm-trtllm.yaml"
    path.write_text(text[:start] + text[end:])
    assert load_for_prediction(str(path)).efficiency.fit is None
    command = ["serve", "--model", "llama-3.1-8b", "--on", str(path), *SERVE[7:]]
    assert main(command) == 0
    basis = json.loads(capsys.readouterr().out)["intervals"]["basis"]
    assert "model-form error only (h100-sxm-trtllm stores no fit covariance)" in basis


def test_too_few_parameter_sets_for_the_confidence_is_refused(capsys):
    assert main([*SERVE, "--parameter-sets", "5"]) == 2
    assert "--parameter-sets 5: a 80% interval needs at least 9 parameter sets" in capsys.readouterr().err


@pytest.mark.parametrize("extra, blocks", [
    (["--rates", "2,8"], lambda data: [result["intervals"] for result in data["results"]]),
    (["--scenario", "server", "--ttft-slo", "300ms", "--tpot-slo", "30ms"],
     lambda data: [data["offline"]["intervals"], data["result"]["intervals"]]),
    (["--rate", "4/s", "--disagg", "1P1D"],
     lambda data: [data["disaggregated"]["intervals"], data["aggregated"]["intervals"]]),
])
def test_every_serve_output_propagates_the_fit(extra, blocks, capsys):
    """Load sweeps, the MLPerf server scenario and disaggregated serving widen each run's interval by the
    spread of that run replayed at the parameter sets."""
    base = [item for item in SERVE if item not in ("--rate", "4/s")]
    assert main([*base, *extra, "--parameter-sets", "9"]) == 0
    found = blocks(json.loads(capsys.readouterr().out))
    assert len(found) == 2
    for block in found:
        assert "with parameter uncertainty from h100-sxm-vllm's fit covariance" in block["basis"]
        assert "9 parameter sets" in block["basis"]


TRAIN = ["train", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "8", "--global-batch", "64", "--seq",
         "4096", "--json"]


def test_a_layout_search_repriced_at_its_own_parameters_gives_its_rows():
    """``training.search.reprice`` prices the printed rows as the search did: at the nominal parameters,
    the same numbers (to float rounding: a group's micro-batch sizes are only the printed rows'), so the
    sampled sets differ from the rows only by their parameters."""
    from perfmodel.training import TrainingSetup
    from perfmodel.training.search import reprice, search

    architecture, hardware = load_architecture("llama-3.1-8b"), load_for_prediction("h100-sxm")
    setup = TrainingSetup(global_batch=64, seq_len=4096, compute_dtype="bf16", master_dtype="fp32")
    found = search(architecture, hardware, setup, 8, recompute=("none", "selective"), keep=6)
    again = reprice(architecture, hardware, list(found.ranked), 8)
    assert [r.layout for r in again] == [r.layout for r in found.ranked]
    assert [r.step_s for r in again] == pytest.approx([r.step_s for r in found.ranked], rel=1e-12)
    assert [r.mfu for r in again] == pytest.approx([r.mfu for r in found.ranked], rel=1e-12)


def test_train_intervals_widen_with_the_fit_and_not_with_a_zero_covariance(capsys):
    from perfmodel.cli.train_command import _step_intervals
    from perfmodel.training import Layout, TrainingSetup, train_predict

    assert main(TRAIN) == 0
    both = json.loads(capsys.readouterr().out)["intervals"]
    assert main([*TRAIN, "--parameter-sets", "0"]) == 0
    alone = json.loads(capsys.readouterr().out)["intervals"]
    assert "h100-sxm-achievable's fit covariance" in both["basis"] and "16 parameter sets" in both["basis"]
    for name in ("step_s", "tokens_per_s", "tokens_per_s_per_chip", "mfu"):
        assert both[name]["low"] < alone[name]["low"] and both[name]["high"] > alone[name]["high"], name
    architecture, zeroed = load_architecture("llama-3.1-8b"), _zeroed(load_for_prediction("h100-sxm"))
    setup = TrainingSetup(global_batch=64, seq_len=4096, compute_dtype="bf16", master_dtype="fp32")
    result = train_predict(architecture, zeroed, setup, Layout(fsdp=8))
    sets, basis = parameter_sets(zeroed, "training", 0.8, 9)
    runs = [train_predict(architecture, replace(zeroed, efficiency=p), setup, Layout(fsdp=8)) for p in sets]
    for name, item in _step_intervals(zeroed, result, 0.8, runs, basis).items():
        model_form = _step_intervals(zeroed, result, 0.8)[name]
        assert item.low == pytest.approx(model_form.low, rel=1e-12) and item.high == pytest.approx(model_form.high,
                                                                                                  rel=1e-12)


def test_train_search_rows_each_carry_their_propagated_interval(capsys):
    command = [*TRAIN, "--search", "--parameter-sets", "9"]
    assert main(command) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 10 and all("9 parameter sets" in row["intervals"]["basis"] for row in rows)
    assert len({(row["intervals"]["step_s"]["low"] / row["step_s"]) for row in rows}) > 1  # each its own spread


SEARCH = ["search", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "4", "--batches", "16,128",
          "--simulate", "0", "--engines", "trtllm,sglang", "--json"]


def test_a_front_repriced_at_its_own_parameters_gives_its_estimates():
    from perfmodel.serving.search import reprice_front, search

    architecture = load_architecture("llama-3.1-8b")
    hardware = {engine: load_for_prediction("h100-sxm", engine=engine) for engine in ("vllm", "sglang")}
    found = search(architecture, hardware, 4, prompt_tokens=1024, output_tokens=256, batches=(16, 128), simulate=0)
    assert any(c.disaggregated for c in found.front) and any(not c.disaggregated for c in found.front)
    again = reprice_front(architecture, hardware, found.front, prompt_tokens=1024, output_tokens=256,
                          largest_batch=128)
    assert again == list(found.front)


def test_search_front_intervals_propagate_each_engines_fit(capsys):
    assert main([*SEARCH, "--parameter-sets", "9"]) == 0
    both = json.loads(capsys.readouterr().out)["front"]
    assert main([*SEARCH, "--parameter-sets", "0"]) == 0
    alone = json.loads(capsys.readouterr().out)["front"]
    assert {point["engine"] for point in both} == {"trtllm", "sglang"}  # both engines reach the front
    for point, model_form in zip(both, alone, strict=True):
        block, other = point["intervals"], model_form["intervals"]
        assert f"h100-sxm-{point['engine']}'s fit covariance" in block["basis"]
        for name in ("tokens_per_s_per_user", "tokens_per_s_per_chip"):
            assert block[name]["low"] <= other[name]["low"] * (1 + 1e-12)
            assert block[name]["high"] >= other[name]["high"] * (1 - 1e-12)


SWEEP = ["sweep", "--on", "h100-sxm", "--grid", "batch=1,8,64", "--grid", "seq=256,4096", "--json", "--chunk-points", "4"]


def test_sweep_rows_widen_point_by_point_and_reproducibly(capsys):
    assert main(SWEEP) == 0
    both = json.loads(capsys.readouterr().out)
    assert main(SWEEP) == 0
    assert json.loads(capsys.readouterr().out) == both  # seed 0, chunk by chunk: the same table
    assert main([*SWEEP, "--parameter-sets", "0"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert "with parameter uncertainty from h100-sxm-achievable's fit covariance" in both["basis"]
    assert "16 parameter sets" in both["basis"] and "--parameter-sets 0" in alone["basis"]
    ratios = set()
    for row, model_form in zip(both["rows"], alone["rows"], strict=True):
        assert row["total_s"] == model_form["total_s"]
        assert row["total_s_low"] < model_form["total_s_low"] and row["total_s_high"] > model_form["total_s_high"]
        ratios.add(round(row["total_s_high"] / row["total_s"], 9))
    assert len(ratios) > 1  # each point its own spread (launch-bound and compute-bound points differ)


def test_a_sweep_with_a_zero_covariance_keeps_the_model_form_band():
    from perfmodel.cli.predict_command import _with_interval
    from perfmodel.intervals import band_for
    from perfmodel.roofline.sweep import sweep
    from perfmodel.workload.builders import transformer_block

    zeroed = _zeroed(load_for_prediction("h100-sxm"))
    sets, _ = parameter_sets(zeroed, "scenario", 0.8, 9)
    part = sweep(transformer_block, zeroed, scenario={"batch": [1, 8, 64]}, parameter_sets=sets, chunk_points=2)
    assert part.parameter_spread[0].shape == (3,)  # the chunks' spreads joined
    assert (part.parameter_spread[0] == 0).all() and (part.parameter_spread[1] == 0).all()
    band = band_for(zeroed, "scenario", 0.8)
    widened, plain = _with_interval(part.to_columns(), band, part.parameter_spread), _with_interval(part.to_columns(), band)
    for name in ("total_s_low", "total_s_high"):
        assert widened[name] == pytest.approx(plain[name], rel=1e-12)


SIZE = ["size", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--engine", "vllm", "--rate", "5/s", "--ttft-p99",
        "300ms", "--tpot-p99", "20ms", "--requests", "60", "--json"]


def test_size_holds_each_target_at_the_factor_widened_by_the_fit(capsys):
    """The factor a target is held at shrinks when the parameter spread of the step times is combined with
    the model-form band (per metric: the prefill's for TTFT, the decode step's for TPOT), and the chosen
    deployment's simulated statistics meet the targets at those factors."""
    assert main(SIZE) == 0
    both = json.loads(capsys.readouterr().out)["h100-sxm"]
    assert main([*SIZE, "--parameter-sets", "0"]) == 0
    alone = json.loads(capsys.readouterr().out)["h100-sxm"]["confidence"]
    held = both["confidence"]
    assert set(held["limit_factors"]) == {"ttft", "tpot"} and held["level"] == 0.8
    for metric in ("ttft", "tpot"):
        assert held["limit_factors"][metric] < alone["limit_factors"][metric] == alone["limit_factor"]
    assert held["limit_factor"] == min(held["limit_factors"].values())
    assert "h100-sxm-vllm's fit covariance" in held["basis"] and "--parameter-sets 0" in alone["basis"]
    best = both["best"]
    assert best["ttft_s"]["p99"] <= 0.3 * held["limit_factors"]["ttft"]
    assert best["tpot_s"]["p99"] <= 0.02 * held["limit_factors"]["tpot"]
    assert main([*SIZE, "--at-median"]) == 0  # the median: the model-form median residual, no spread
    median = json.loads(capsys.readouterr().out)["h100-sxm"]["confidence"]
    assert median["level"] is None and median["limit_factor"] > held["limit_factor"]
    assert "median" in median["basis"] and "fit covariance" not in median["basis"]


def test_a_zero_covariance_leaves_the_sizing_factor_as_it_was():
    from perfmodel.cli.held import held_targets
    from perfmodel.llm import Parallelism

    zeroed = _zeroed(load_for_prediction("h100-sxm", engine="vllm"))
    held = held_targets(load_architecture("llama-3.1-8b"), zeroed, 0.8, 9, prompt_tokens=1024, output_tokens=256,
                        weight_dtype="bf16", kv_dtype="bf16", activation_dtype="bf16", expert_weight_dtype=None,
                        mode=None)
    assert held.extra is not None
    assert held.extra(Parallelism(tp=2)) == pytest.approx({"ttft": 1.0, "tpot": 1.0}, rel=1e-12)


def test_a_high_confidence_draws_as_many_sets_as_its_band_needs(capsys):
    """At 95% a band needs 39 values: the default sets are raised to that (the explorer's slider reaches
    95%), while asking for fewer is refused."""
    from perfmodel.explore import api

    data = api.llm({"model": "llama-3.1-8b", "systems": ["h100-sxm-vllm"], "batch": 4, "prompt": 512, "gen": 64,
                    "confidence": 0.95})
    assert "39 parameter sets" in data["results"][0]["intervals"]["basis"]
    assert main([*SERVE, "--confidence", "95%"]) == 0
    assert "39 parameter sets" in json.loads(capsys.readouterr().out)["intervals"]["basis"]
    assert main([*SERVE, "--confidence", "95%", "--parameter-sets", "16"]) == 2
    assert "needs at least 39 parameter sets" in capsys.readouterr().err
