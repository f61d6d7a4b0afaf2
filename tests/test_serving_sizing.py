"""Sizing against SLO percentiles (perfmodel.serving.sizing, ``perfmodel size``): answers re-simulate within
their targets and are the fewest replicas that do, more load or a stricter SLO never needs fewer chips,
cost per million tokens from first principles, and bad input is a clear error naming the flag."""

import json
import math
from functools import cache

import pytest

from perfmodel.cli import llm_command, main
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm import Parallelism
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving import ArrivalProcess, ClosedLoop, Percentiles, Server, ServingConfig, parse_length, sizing
from perfmodel.serving.sizing import Deployment, SystemSizing, Target, fewest_replicas, rank, replica_load

MODEL, SYSTEM = "llama-2-7b", "h100-sxm"  # priced as the CLI does: the default engine's overlay (engine=None)
PROMPT, OUTPUT, REQUESTS = "fixed:512", "fixed:32", 60
SMALL = ["--on", SYSTEM, "--mode", "graph", "--prompt", "512", "--gen", "32", "--requests", str(REQUESTS)]


def _targets(ttft_p99: float, tpot_p99: float) -> tuple[Target, ...]:
    return (Target(metric="ttft", statistic="p99", limit_s=ttft_p99),
            Target(metric="tpot", statistic="p99", limit_s=tpot_p99))


@cache
def _sized(rate: float, ttft_p99: float, tpot_p99: float) -> SystemSizing:
    return sizing.size_deployment(load_architecture(MODEL), load_for_prediction(SYSTEM, engine=None),
                                  _targets(ttft_p99, tpot_p99), ArrivalProcess(kind="poisson", rate_per_s=rate),
                                  parse_length(PROMPT), parse_length(OUTPUT), requests=REQUESTS, seed=0, mode="graph")


def _replay(best: Deployment, load, seed: int = 0):
    """The answer's replica, built again from the reported configuration, at ``load``."""
    server = Server(load_architecture(MODEL), load_for_prediction(SYSTEM, engine=None), best.parallelism,
                    config=ServingConfig(max_batch=best.max_batch, max_tokens_per_step=best.max_tokens_per_step),
                    max_context=512 + 32, mode=best.mode)
    return server.simulate(load, REQUESTS, parse_length(PROMPT), parse_length(OUTPUT), seed=seed)


LOADS = (8.0, 128.0, 512.0)
TPOT_LIMITS = (0.05, 0.02, 0.012)  # loose to strict, at 128/s
TTFT_P99 = 0.5


def test_more_load_never_needs_fewer_chips():
    chips = [_sized(rate, TTFT_P99, TPOT_LIMITS[0]).best.chips for rate in LOADS]
    assert chips == sorted(chips) and chips[-1] > chips[0], chips


def test_a_stricter_slo_never_needs_fewer_chips():
    chips = [_sized(LOADS[1], TTFT_P99, tpot).best.chips for tpot in TPOT_LIMITS]
    assert chips == sorted(chips) and chips[-1] > chips[0], chips


@pytest.mark.parametrize(("rate", "tpot"), [(rate, TPOT_LIMITS[0]) for rate in LOADS]
                         + [(LOADS[1], tpot) for tpot in TPOT_LIMITS[1:]])
def test_the_answer_meets_its_percentile_targets_and_one_replica_fewer_does_not(rate, tpot):
    best = _sized(rate, TTFT_P99, tpot).best
    load = ArrivalProcess(kind="poisson", rate_per_s=rate)
    again = _replay(best, replica_load(load, best.replicas))
    assert again.ttft.p99 <= TTFT_P99 and again.tpot.p99 <= tpot
    assert (again.ttft.p99, again.tpot.p99) == (best.ttft.p99, best.tpot.p99)  # the reported run, reproduced
    assert best.replica_load.rate_per_s == pytest.approx(rate / best.replicas)
    if best.replicas > best.steady_state_replicas:  # below the steady-state floor the load is not carried at all
        fewer = _replay(best, replica_load(load, best.replicas - 1))
        assert fewer.ttft.p99 > TTFT_P99 or fewer.tpot.p99 > tpot
    assert best.tokens_per_s == pytest.approx(rate * 32)  # open loop: everything offered is served
    assert best.power_watts == pytest.approx(700 * best.chips)  # H100 SXM TDP
    assert best.cost_usd_per_hour is None and best.usd_per_million_tokens is None  # no price in the spec


def test_replica_search_finds_the_threshold_with_few_checks():
    for threshold in (1, 2, 7, 40, 100):
        for probe in (1, 5, 64):
            asked = []

            def meets(replicas: int, threshold=threshold, asked=asked) -> bool:
                asked.append(replicas)
                return replicas >= threshold

            assert fewest_replicas(meets, floor=1, probe=probe, cap=200) == threshold
            assert len(asked) == len(set(asked)) <= 2 * math.ceil(math.log2(200)) + 1
    assert fewest_replicas(lambda replicas: replicas >= 9, floor=4, probe=4, cap=8) is None
    assert fewest_replicas(lambda replicas: True, floor=4, probe=4, cap=8) == 4  # the floor is never undercut


def test_a_replica_gets_its_share_of_the_load():
    assert replica_load(ArrivalProcess(kind="poisson", rate_per_s=10.0), 4).rate_per_s == pytest.approx(2.5)
    assert replica_load(ClosedLoop(users=10, think_s=5.0), 4) == ClosedLoop(users=3, think_s=5.0)  # the busiest


def _sizing(name: str, chips: int, watts: float, price: float | None) -> SystemSizing:
    nothing = Percentiles(p50=0.1, p90=0.1, p99=0.1, mean=0.1)
    best = Deployment(hardware=name, parameters="ideal (datasheet)", mode="graph",
                      parallelism=Parallelism(tp=chips), replicas=1, steady_state_replicas=1, max_batch=8,
                      max_tokens_per_step=64, weight_dtype="bf16", kv_dtype="bf16", expert_weight_dtype=None,
                      replica_load=ArrivalProcess(rate_per_s=1.0), ttft=nothing, tpot=nothing, tokens_per_s=1000.0,
                      power_watts=watts, price_usd_per_chip_hour=price, simulations=1)
    return SystemSizing(hardware=name, parameters="ideal (datasheet)", mode="graph", best=best, note="",
                        closest=None, simulations=1)


def test_ranking_by_chips_cost_or_watts():
    a, b, c = _sizing("a", 8, 5000.0, 1.0), _sizing("b", 4, 9000.0, 4.0), _sizing("c", 4, 8000.0, None)
    missing = SystemSizing(hardware="d", parameters="", mode="graph", best=None, note="no", closest=None,
                           simulations=0)
    names = {by: [s.hardware for s in rank([missing, a, b, c], by=by)] for by in ("chips", "cost", "watts")}
    assert names == {"chips": ["b", "c", "a", "d"], "cost": ["a", "b", "c", "d"], "watts": ["a", "c", "b", "d"]}
    # cost per million tokens = USD/h / (tokens/s x 3600 s/h) x 1e6, from the chips and the price per chip-hour
    assert b.best.usd_per_million_tokens == pytest.approx(4.0 * 4 / (1000.0 * 3600) * 1e6)
    with pytest.raises(sizing.PerfmodelError, match="chips, cost, watts"):
        rank([a], by="speed")


def test_cli_rate_price_and_json(capsys):
    # --at-median: one factor for every parallelism (the median of the model-form error, no parameter spread),
    # so the core sized at the targets scaled by it must give the same answer.
    assert main(["size", "--model", MODEL, *SMALL, "--rate", "128/s", "--ttft-p99", "500ms", "--tpot-p99", "20ms",
                 "--price", f"{SYSTEM}=2.5", "--at-median", "--json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text and "Infinity" not in text
    answer = json.loads(text)[SYSTEM]
    best, factors = answer["best"], answer["confidence"]["limit_factors"]
    assert best["ttft_s"]["p99"] <= 0.5 * factors["ttft"] and best["tpot_s"]["p99"] <= 0.02 * factors["tpot"]
    assert best["chips"] == _sized(128.0, TTFT_P99 * factors["ttft"], 0.02 * factors["tpot"]).best.chips
    assert best["cost_usd_per_hour"] == pytest.approx(2.5 * best["chips"])
    # independently: the chips' price per hour over the output tokens an hour at 128 requests/s of 32 tokens
    assert best["usd_per_million_tokens"] == pytest.approx(2.5 * best["chips"] / (128 * 32 * 3600) * 1e6)


def test_cli_closed_loop_users_and_no_nan_in_json(capsys):
    # One output token: no request has a TPOT (NaN in the simulator), which JSON must carry as null.
    assert main(["size", "--model", MODEL, *SMALL[:-4], "--gen", "1", "--requests", "40", "--users", "16",
                 "--think", "1s", "--ttft-p99", "1s", "--tpot-p99", "50ms", "--json"]) == 0
    text = capsys.readouterr().out
    assert "NaN" not in text
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))[SYSTEM]
    best = data["best"]
    assert best["replica_users"] == math.ceil(16 / best["replicas"]) and best["replica_rate_per_s"] is None
    assert best["ttft_s"]["p99"] <= 1.0 and best["tpot_s"]["p99"] is None
    assert data["rank"] == 1 and data["parameters"].startswith("achievable") and data["mode"] == "graph"


def test_cli_table_names_the_parameter_set_and_explains_a_miss(capsys):
    assert main(["size", "--model", MODEL, *SMALL, "--rate", "1/s", "--ttft-p99", "1ms", "--tpot-p99", "50ms"]) == 0
    out = capsys.readouterr().out
    assert "TTFT p99 <= 1 ms" in out and "misses the targets" in out
    assert "parameters: h100-sxm achievable (h100-sxm-trtllm)" in out  # the default engine's overlay


@pytest.mark.parametrize(("extra", "flag"), [
    (["--rate", "0/s"], "--rate"),
    (["--rate", "-1/s"], "--rate"),
    (["--rate", "fast"], "--rate"),
    (["--users", "0"], "--users"),
    (["--users", "4", "--think", "-1s"], "--think"),
    (["--users", "4", "--think", "soon"], "--think"),
    (["--rate", "1/s", "--think", "1s"], "--think"),
    (["--rate", "1/s", "--users", "4"], "--users"),
    ([], "--rate"),
    (["--rate", "1/s", "--ttft-p99", "0s"], "--ttft-p99"),
    (["--rate", "1/s", "--tpot-p99", "soon"], "--tpot-p99"),
    (["--rate", "1/s", "--ttft", "-5ms"], "--ttft"),
    (["--rate", "1/s", "--prompt", "0"], "--prompt"),
    (["--rate", "1/s", "--prompt", "4000", "--gen", "200"], "--prompt"),
    (["--rate", "1/s", "--prompt-dist", "fixed:4096"], "--prompt-dist"),
    (["--rate", "1/s", "--prompt", "512", "--prompt-dist", "fixed:512"], "--prompt-dist"),
    (["--rate", "1/s", "--output-dist", "normal:5"], "--output-dist"),
    (["--rate", "1/s", "--requests", "0"], "--requests"),
    (["--rate", "1/s", "--price", "h100-sxm=cheap"], "--price"),
    (["--rate", "1/s", "--price", "-2"], "--price"),
    (["--rate", "1/s", "--price", "b200=2"], "--price"),
    (["--rate", "1/s", "--rank", "speed"], "--rank"),
])
def test_bad_input_is_a_clear_error_naming_the_flag(extra, flag, capsys):
    targets = [] if any(item.startswith(("--ttft", "--tpot")) for item in extra) else ["--ttft-p99", "1s"]
    assert main(["size", "--model", MODEL, "--on", SYSTEM, *targets, *extra]) == 2
    error = capsys.readouterr().err
    assert error.startswith("perfmodel: error:") and flag in error and "Traceback" not in error


def test_no_target_is_an_error(capsys):
    assert main(["size", "--model", MODEL, "--rate", "1/s"]) == 2
    assert "--ttft-p99" in capsys.readouterr().err


def test_help_gives_each_family_its_default_mode_and_the_ranking(capsys):
    with pytest.raises(SystemExit):
        main(["size", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "gpu dynamic (eager)" in text and "tpu graph (compiled)" in text and "wafer spatial" in text
    assert "chips, then cost per million output tokens, then watts" in text


def test_the_command_line_uses_the_core_vocabulary():
    assert set(llm_command.TARGET_STATISTICS) == set(sizing.STATISTICS)
    assert llm_command.SIZE_RANKINGS == sizing.RANKINGS
    assert llm_command.DEFAULT_SIZE_REQUESTS == sizing.DEFAULT_REQUESTS


def _best_chips(extra: list[str], capsys) -> tuple[int, dict]:
    assert main(["size", "--model", "gpt-oss-120b", "--on", "h100-sxm", "--rate", "2/s", "--tpot-p50", "50ms",
                 "--json", *extra]) == 0
    best = json.loads(capsys.readouterr().out)["h100-sxm"]["best"]
    return best["chips"], best


def test_mxfp4_experts_size_gpt_oss_on_fewer_chips_than_bf16_experts(capsys):
    # gpt-oss-120b's routed experts (most of its ~117 B parameters) take 16 bits a weight in bf16 and 4.25
    # in MXFP4 (with the block scales): the same option and meaning as on llm and serve
    bf16_chips, bf16 = _best_chips([], capsys)
    mxfp4_chips, mxfp4 = _best_chips(["--expert-weights", "mxfp4"], capsys)
    assert bf16["expert_weight_dtype"] is None and mxfp4["expert_weight_dtype"] == "mxfp4"
    assert mxfp4_chips < bf16_chips


@pytest.mark.parametrize("model, value, message", [
    ("gpt-oss-120b", "bogus", "expert_weight_dtype 'bogus' is unknown"),
    (MODEL, "mxfp4", "routed experts"),
])
def test_a_bad_expert_weight_dtype_is_refused_not_sized_as_no_fit(model, value, message, capsys):
    assert main(["size", "--model", model, "--on", SYSTEM, "--rate", "1/s", "--tpot-p50", "50ms",
                 "--expert-weights", value]) == 2
    error = capsys.readouterr().err
    assert error.startswith("perfmodel: error:") and message in error and "Traceback" not in error
