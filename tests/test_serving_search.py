"""Issue 31: the deployment search (serving.search), its Pareto front, and launch settings (serving.launch)."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from perfmodel.cli import main
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm import Parallelism
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving.launch import DOCUMENTED_FLAGS, ENGINES, Worker, launch_settings
from perfmodel.serving.search import Configuration, pareto_front, search
from perfmodel.serving.speculation import Speculation


def _configuration(user: float, chip: float, **extra) -> Configuration:
    base = dict(engine="vllm", hardware="x", disaggregated=False, layout=Parallelism(), workers=1,
                prefill_layout=None, prefill_workers=0, max_batch=8, max_tokens_per_step=8192, speculation=None,
                chips=1, ttft_s=0.1, tpot_s=1 / user, tokens_per_s=chip, requests_per_s=1.0,
                price_usd_per_chip_hour=None, tdp_watts=700.0, meets_slo=True)
    return Configuration(**{**base, **extra})


def _dominates(a: Configuration, b: Configuration) -> bool:
    return (a.tokens_per_s_per_user >= b.tokens_per_s_per_user and a.tokens_per_s_per_chip >= b.tokens_per_s_per_chip
            and (a.tokens_per_s_per_user > b.tokens_per_s_per_user
                 or a.tokens_per_s_per_chip > b.tokens_per_s_per_chip))


@pytest.mark.parametrize("seed", range(20))
def test_the_front_is_non_dominated_and_covers_every_point(seed):
    rng = np.random.default_rng(seed)
    points = [_configuration(float(u), float(c)) for u, c in rng.integers(1, 30, size=(int(rng.integers(1, 60)), 2))]
    front = pareto_front(points)
    assert not any(_dominates(a, b) for a in front for b in front)
    for point in points:  # every configuration is on the front or beaten (or matched) by a front point
        assert point in front or any(_dominates(f, point) or (
            f.tokens_per_s_per_user == point.tokens_per_s_per_user
            and f.tokens_per_s_per_chip == point.tokens_per_s_per_chip) for f in front)
    users = [c.tokens_per_s_per_user for c in front]
    chips = [c.tokens_per_s_per_chip for c in front]
    assert users == sorted(users) and chips == sorted(chips, reverse=True)


@pytest.fixture(scope="module")
def searched():
    architecture = load_architecture("llama-3.1-8b")
    hardware = {"trtllm": load_for_prediction("h100-sxm", engine="trtllm"),
                "vllm": load_for_prediction("h100-sxm", engine="vllm")}
    return search(architecture, hardware, 4, prompt_tokens=1024, output_tokens=128, batches=(8, 64),
                  speculations=(None, Speculation(method="eagle", tokens=3, acceptance=0.8)), ttft_slo_s=0.5,
                  tpot_slo_s=0.02, max_pp=2, simulate=2, requests=40)


def test_search_enumerates_every_kind_and_returns_its_front(searched):
    kinds = {(c.engine, c.disaggregated, c.speculation is not None) for c in searched.configurations}
    assert {(e, d, s) for e in ("trtllm", "vllm") for d in (False, True) for s in (False, True)} <= kinds
    assert set(searched.front) <= set(searched.configurations)
    assert not any(_dominates(a, b) for a in searched.front for b in searched.configurations if b in searched.front)
    for configuration in searched.configurations:
        assert configuration.chips <= 4
        if configuration.disaggregated:
            assert configuration.prefill_workers >= 1 and configuration.workers >= 1
    best = searched.best
    assert best is not None and best.meets_slo and best.tpot_s <= 0.02 and best.ttft_s <= 0.5
    assert len(searched.simulated) == 2
    assert all(s.result.chips == s.configuration.chips for s in searched.simulated)


def test_speculation_with_zero_acceptance_never_makes_the_front_better(searched):
    architecture = load_architecture("llama-3.1-8b")
    hardware = {"trtllm": load_for_prediction("h100-sxm", engine="trtllm")}
    kwargs = dict(prompt_tokens=1024, output_tokens=128, batches=(8, 64), max_pp=1, simulate=0, disaggregation=False)
    plain = search(architecture, hardware, 2, **kwargs)
    useless = search(architecture, hardware, 2, speculations=(Speculation(method="eagle", tokens=3, acceptance=0.0),),
                     **kwargs)
    by_key = {(c.layout, c.max_batch): c for c in plain.configurations}
    for configuration in useless.configurations:
        twin = by_key[(configuration.layout, configuration.max_batch)]
        assert configuration.tokens_per_s_per_user < twin.tokens_per_s_per_user


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("speculation", [None, Speculation(method="eagle", tokens=3, acceptance=0.8),
                                         Speculation(method="mtp", tokens=1, acceptance=0.85)])
@pytest.mark.parametrize("layout", [Parallelism(tp=4, pp=2, ep=4), Parallelism(tp=1, ep=16, dp=16)])
def test_exported_flags_are_the_documented_ones(engine, speculation, layout):
    worker = Worker(role="serve", parallelism=layout, max_batch=64, max_tokens_per_step=8192,
                    memory_utilization=0.9, block_size=16, kv_dtype="fp8", speculation=speculation, count=2)
    for workers in ([worker], [replace(worker, role="prefill", speculation=None), replace(worker, role="decode")]):
        launch = launch_settings(engine, "meta-llama/Llama-3.1-70B-Instruct", workers)
        allowed = set(DOCUMENTED_FLAGS[engine]["flags"]) | {"--model-path"}  # SGLang names the model by a flag
        assert set(launch.flags()) <= allowed
        assert DOCUMENTED_FLAGS[engine]["source"].startswith("https://")
        text = launch.text()
        assert str(layout.tp * layout.dp) in text and "64" in text
        if speculation is not None:
            assert any("spec" in flag or flag == "--extra_llm_api_options" for flag in launch.flags())


def test_trtllm_speculation_goes_to_the_extra_options_file():
    worker = Worker(role="serve", parallelism=Parallelism(tp=8), max_batch=32, max_tokens_per_step=4096,
                    memory_utilization=0.9, block_size=32, kv_dtype="bf16",
                    speculation=Speculation(method="mtp", tokens=1, acceptance=0.85))
    launch = launch_settings("trtllm", "deepseek-ai/DeepSeek-V3", [worker])
    assert "decoding_type: MTP" in launch.files["serve-extra-llm-api-options.yaml"]
    assert "--extra_llm_api_options" in launch.flags()


SEARCH = ["search", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "2", "--engines", "trtllm",
          "--batches", "8,32", "--max-pp", "1", "--simulate", "1"]


def test_cli_search_and_export(capsys, tmp_path):
    chart = tmp_path / "front.png"
    assert main([*SEARCH, "--tpot-slo", "50ms", "--export", "sglang", "--json", "--chart", str(chart)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["front"] and data["chosen"]["meets_slo"] and chart.stat().st_size > 0
    assert data["launch"]["engine"] == "sglang"
    assert main([*SEARCH, "--speculative", "none,eagle", "--export", "trtllm", "--pick", "1"]) == 0
    out = capsys.readouterr().out
    assert "Pareto front" in out and "trtllm-serve" in out
    # Each row of the front's table carries its tokens/s per user and per chip intervals (80% columns).
    lines = out.splitlines()
    header = next(index for index, line in enumerate(lines) if line.startswith("#  deployment"))
    assert lines[header].split().count("80%") == 2
    rows = []
    for line in lines[header + 2:]:
        if not line[:1].isdigit():
            break
        rows.append(line)
    assert rows and all(len(re.findall(r"\d - \d", row)) == 2 for row in rows), rows


@pytest.mark.parametrize("extra, message", [
    (["--engines", "tgi"], "--engines"),
    (["--batches", "0,8"], "at least 1"),
    (["--batches", "eight"], "whole numbers"),
    (["--speculative", "draft"], "expected none, mtp or eagle"),
    (["--pick", "1"], "--export"),
    (["--export", "vllm", "--pick", "999"], "the front has points"),
    (["--chart", "front.txt"], ".png"),
])
def test_cli_search_bad_input(extra, message, capsys):
    assert main([*SEARCH, "--simulate", "0", *extra]) == 2
    assert message in capsys.readouterr().err


def test_moe_search_tries_wide_expert_parallelism():
    architecture = load_architecture("qwen3-30b-a3b")
    hardware = {"sglang": load_for_prediction("h100-sxm", engine="sglang")}
    result = search(architecture, hardware, 16, prompt_tokens=1024, output_tokens=128, batches=(16, 64), max_pp=1,
                    simulate=0)
    wide = [c for c in result.configurations if c.layout.dp > 1]
    assert {c.layout.dp for c in wide} >= {2, 4, 8, 16} and all(c.layout.ep == c.layout.dp for c in wide)
    assert any(c.disaggregated for c in wide) and any(not c.disaggregated for c in wide)
    assert all(c.prefill_layout is None or c.prefill_layout.dp == 1 for c in result.configurations)


def test_mxfp4_experts_let_gpt_oss_fit_smaller_layouts_and_serve_more_per_chip():
    architecture = load_architecture("gpt-oss-120b")
    hardware = {"vllm": load_for_prediction("h100-sxm", engine="vllm")}
    results = {dtype: search(architecture, hardware, 4, prompt_tokens=1024, output_tokens=128, batches=(16, 64),
                             max_pp=1, simulate=0, expert_weight_dtype=dtype) for dtype in (None, "mxfp4")}
    layouts = {dtype: {c.layout.chips for c in result.configurations} for dtype, result in results.items()}
    assert min(layouts["mxfp4"]) < min(layouts[None])  # bf16 experts (~234 GB) need all 4 H100s
    best = {dtype: max(c.tokens_per_s_per_chip for c in result.configurations) for dtype, result in results.items()}
    assert best["mxfp4"] > best[None]


def test_cli_search_refuses_a_bad_expert_weight_dtype(capsys):
    assert main(["search", "--model", "gpt-oss-120b", "--on", "h100-sxm", "--chips", "4", "--simulate", "0",
                 "--expert-weights", "fp5"]) == 2
    error = capsys.readouterr().err
    assert "expert_weight_dtype 'fp5' is unknown" in error and "Traceback" not in error
