"""Prediction intervals (issue 32): the conformal arithmetic, the stored residual table, parameter
uncertainty from a fit's covariance, and the commands that print them."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from perfmodel.uncertainty import (
    RATE,
    TIME,
    Band,
    combine,
    conformal_band,
    conformal_quantile,
    cross_conformal_band,
    interval,
    minimum_residuals,
    parameter_band,
    parameter_samples,
)


def test_conformal_band_hand_worked():
    # n = 19 at 80%: ranks 0.1 x 20 = 2 and 0.9 x 20 = 18 of the sorted residuals.
    residuals = np.arange(1.0, 20.0)[::-1]
    assert conformal_band(residuals, 0.8) == pytest.approx((2.0, 18.0))
    # rank 0.05 x 20 = 1 and 0.95 x 20 = 19: the sample's ends at 90%.
    assert conformal_band(residuals, 0.9) == pytest.approx((1.0, 19.0))
    assert conformal_band(residuals, 0.95) is None  # rank 0.025 x 20 = 0.5 < 1: past the sample
    assert minimum_residuals(0.8) == 9 and minimum_residuals(0.9) == 19 and minimum_residuals(0.5) == 3
    assert conformal_band(residuals[:8], 0.8) is None and conformal_band(residuals[:9], 0.8) is not None
    assert conformal_quantile(residuals, 0.5) == pytest.approx(10.0)
    assert conformal_quantile(residuals[:3], 0.2) is None  # rank 0.8 < 1


def test_conformal_band_covers_its_confidence_on_exchangeable_data():
    rng = np.random.default_rng(3)
    trials, n = 4000, 20
    samples = rng.standard_t(df=3, size=(trials, n + 1))
    hits = 0
    for row in samples:
        low, high = conformal_band(row[:n], 0.8)
        hits += low <= row[n] <= high
    assert abs(hits / trials - 0.8) < 0.02


def test_cross_conformal_band_hand_worked():
    # Two sources: a = 0, 1, 2, 3, 4 (median 2), b = 10, 11, 12, 13, 14 (median 12). Each row against the
    # other source's median: a's rows give 12 -/+ |r - 12| (lows 0..4, highs 20..24), b's give 2 -/+ |r - 2|
    # (lows -10..-6, highs 10..14). n = 10 at 80%: the floor(0.2 x 11) = 2nd smallest low (-9) and the
    # ceil(0.8 x 11) = 9th smallest high (23).
    residuals = [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    sources = ["a"] * 5 + ["b"] * 5
    assert cross_conformal_band(residuals, sources, 0.8) == pytest.approx((-9.0, 23.0))
    assert cross_conformal_band(residuals, ["a"] * 10, 0.8) is None  # one source: nothing to compare with
    assert cross_conformal_band(residuals[:8], sources[:8], 0.8) is None  # fewer than 9
    with pytest.raises(ValueError):
        cross_conformal_band(residuals, sources[:3], 0.8)


def test_cross_conformal_covers_a_new_source_where_pooled_rows_do_not():
    """Residuals with a per-source offset (between-source sd 1, within 0.2), three sources of six rows (like
    TPU's table): the pooled rows' band sees the spread of the three offsets it has and under-covers a row
    of a new source (about 58%); the band that compares each source with the others covers it at about
    its confidence (about 77% here; CV+ guarantees at least 1 - 2 alpha, and nears 1 - alpha as sources grow)."""
    rng = np.random.default_rng(5)
    trials, sources, rows = 1500, 3, 6
    pooled_hits = cross_hits = 0
    labels = [str(index // rows) for index in range(sources * rows)]
    for _ in range(trials):
        offsets = rng.normal(size=sources + 1)
        values = np.repeat(offsets[:sources], rows) + rng.normal(scale=0.2, size=sources * rows)
        new = offsets[sources] + rng.normal(scale=0.2)
        low, high = conformal_band(values, 0.8)
        pooled_hits += low <= new <= high
        low, high = cross_conformal_band(values, labels, 0.8)
        cross_hits += low <= new <= high
    assert pooled_hits / trials < 0.65
    assert 0.72 < cross_hits / trials < 0.9


def test_interval_orientation():
    band = Band(confidence=0.8, basis="test", low=-0.1, high=0.2, residuals=10)
    time = interval(2.0, band, TIME)  # true time = predicted x exp(-residual)
    assert time.low == pytest.approx(2 * math.exp(-0.2)) and time.high == pytest.approx(2 * math.exp(0.1))
    rate = interval(2.0, band, RATE)  # a rate is a reciprocal time
    assert rate.low == pytest.approx(2 * math.exp(-0.1)) and rate.high == pytest.approx(2 * math.exp(0.2))
    unknown = interval(2.0, Band(confidence=0.8, basis="no evidence"), TIME)
    assert unknown.low is None and unknown.high is None and unknown.basis == "no evidence"


def test_combine_adds_half_widths_in_quadrature_and_keeps_no_evidence():
    band = Band(confidence=0.8, basis="b", low=-0.3, high=0.1, residuals=10)  # centre -0.1, half-width 0.2
    combined = combine(band, (-0.15, 0.15), "fit")
    assert combined.low == pytest.approx(-0.1 - math.hypot(0.2, 0.15))
    assert combined.high == pytest.approx(-0.1 + math.hypot(0.2, 0.15))
    assert combined.basis == "b; with fit"
    none = Band(confidence=0.8, basis="none")
    assert combine(none, (-1.0, 1.0)) is none


def test_a_parameter_spread_towards_slower_widens_the_interval_towards_slower():
    """Sampled predictions ``T exp(p)`` all slower than the nominal ``T`` (p in [0, 0.4]) say the truth may
    be slower than predicted: the time's upper end moves up (the band's low end down, by the spread's
    high end), its lower end only by the model-form band's own half-width (the spread's low end, 0)."""
    band = Band(confidence=0.8, basis="b", low=-0.3, high=0.1, residuals=10)  # centre -0.1, half-width 0.2
    combined = combine(band, (0.0, 0.4), "fit")
    assert combined.low == pytest.approx(-0.1 - math.hypot(0.2, 0.4))
    assert combined.high == pytest.approx(0.1)
    alone, both = interval(1.0, band, TIME), interval(1.0, combined, TIME)
    assert both.high > alone.high and both.low == pytest.approx(alone.low)
    # A rate's interval is the reciprocal's: a slower truth is a lower rate.
    assert interval(1.0, combined, RATE).low < interval(1.0, band, RATE).low
    # The array form (sweeps: a spread per point) gives the same numbers.
    from perfmodel.uncertainty import combined_bounds

    low, high = combined_bounds(-0.3, 0.1, np.array([0.0, -0.15]), np.array([0.4, 0.15]))
    assert low == pytest.approx([combined.low, -0.1 - math.hypot(0.2, 0.15)])
    assert high == pytest.approx([combined.high, -0.1 + math.hypot(0.2, 0.15)])


def test_residual_orientation_of_units():
    from perfmodel.intervals import device_of, orientation

    assert orientation("ms") == TIME and orientation("s") == TIME and orientation("tok/s/GPU") == RATE
    assert orientation("TFLOP/s") == RATE and orientation("%") == RATE and orientation("W") is None
    assert device_of("h100-sxm-trtllm") == "h100-sxm" and device_of("tpu-v5p-achievable") == "tpu-v5p"


@pytest.mark.parametrize("parameter_set", ["achievable", "ideal"])
def test_stored_residual_table_matches_validate(parameter_set):
    """The shipped table is what ``validate`` predicts today: regenerate with
    ``python -m perfmodel.intervals --write`` when this fails."""
    from perfmodel.intervals import load_table, residuals_of
    from perfmodel.validation import validate

    fresh = residuals_of(validate(ideal=parameter_set == "ideal"))
    stored = load_table()[parameter_set]
    assert [item.line for item in stored] == [item.line for item in fresh], \
        "stale interval_residuals.json: run python -m perfmodel.intervals --write"
    for old, new in zip(stored, fresh, strict=True):
        assert (old.family, old.kind, old.device, old.source, old.orientation) == \
            (new.family, new.kind, new.device, new.source, new.orientation), old.line
        assert old.predicted == pytest.approx(new.predicted, rel=1e-9), \
            f"line {old.line}: stale interval_residuals.json: run python -m perfmodel.intervals --write"


def test_band_for_states_its_basis_and_refuses_without_evidence():
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.intervals import band_for

    h100 = band_for(load_for_prediction("h100-sxm", engine=None), "scenario", 0.8)
    assert h100.known and h100.residuals >= 9 and "gpu scenario" in h100.basis and "80%" in h100.basis
    ideal = band_for(load_for_prediction("h100-sxm", ideal=True), "scenario", 0.8)
    assert "ideal parameters" in ideal.basis and (ideal.low, ideal.high) != (h100.low, h100.high)
    what_if = band_for(load_for_prediction("h100-sxm", overrides={"memory.hbm.bandwidth": "6 TB/s"}), "scenario", 0.8)
    assert not what_if.known and "what-if" in what_if.basis
    unmeasured = band_for(load_for_prediction("mi300x"), "scenario", 0.8)
    assert not unmeasured.known and "mi300x" in unmeasured.basis
    groq = band_for(load_for_prediction("groq-lpu-v1"), "scenario", 0.8)  # 4 rows: fewer than 9
    assert not groq.known and "at least 9" in groq.basis
    # A kind with too few residuals borrows its family's, and says so.
    tpu_served = band_for(load_for_prediction("tpu-v6e"), "served", 0.8)
    assert tpu_served.known and "every kind" in tpu_served.basis


def _gemm_graph():
    from perfmodel.workload.ir import Graph, Op, TensorSpec

    ops = []
    for size in (256, 1024, 4096):
        operands = (TensorSpec(shape=(size, size), dtype="bf16"),) * 2
        ops.append(Op(name=f"gemm{size}", kind="matmul", inputs=operands,
                      outputs=(TensorSpec(shape=(size, size), dtype="bf16"),),
                      attrs={"m": size, "n": size, "k": size}))
    return Graph(name="gemms", ops=ops)


def test_parameter_interval_shrinks_when_calibration_data_grows():
    """Fit H100's achievable parameters on 25% and on 100% of its published microbenchmarks (every fourth
    record of each class, in file order): the parameter band of the same GEMMs is wider from the quarter."""
    from calibration.achievable import device_time_hardware, published_records
    from calibration.fit import fit
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.roofline import evaluate

    hardware = load_hardware("h100-sxm")
    records = published_records("h100-sxm", hardware).records
    seen: dict[str, int] = {}
    quarter = []
    for record in records:
        seen[record.op_class] = seen.get(record.op_class, 0) + 1
        if seen[record.op_class] % 4 == 1:
            quarter.append(record)
    graph, device = _gemm_graph(), device_time_hardware(hardware)
    widths = []
    for subset in (quarter, records):
        result = fit(subset, device, mode="graph", folds=0, extra_seeds=0)
        nominal = result.parameters("h100-test")
        # the parameters the fit writes (as an overlay stores them): one left at a bound (the exposed
        # prefill traffic's efficiency, held at the datasheet) has no curvature to draw from
        fitted = list(result.covariance_names)
        kept = [fitted.index(name) for name in result.identified() if name in fitted]
        names = [fitted[index] for index in kept]
        covariance = np.asarray(result.log_covariance)[np.ix_(kept, kept)]
        samples = parameter_samples(nominal, names, covariance, 200, seed=1)
        assert len(samples) == 200 and samples[0] != nominal
        centre = evaluate(graph, device, mode="graph", parameters=nominal).total_s
        sampled = [evaluate(graph, device, mode="graph", parameters=sample).total_s for sample in samples]
        low, high = parameter_band(centre, sampled, 0.8, TIME)
        assert low < 0 < high
        widths.append(high - low)
    assert widths[0] > 1.3 * widths[1], widths


def test_parameter_samples_follow_the_covariance():
    from perfmodel.hardware.model import Parameters

    nominal = Parameters(name="p", kind="calibrated", compute_efficiency={"matmul": 0.8},
                         memory_efficiency={"hbm": 0.9})
    covariance = np.array([[0.01, 0.0], [0.0, 0.04]])
    samples = parameter_samples(nominal, ["compute:matmul", "memory:hbm"], covariance, 4000, seed=0)
    compute = np.log([sample.compute_efficiency["matmul"] / 0.8 for sample in samples])
    memory = np.log([sample.memory_efficiency["hbm"] / 0.9 for sample in samples])
    assert np.std(compute) == pytest.approx(0.1, rel=0.05) and np.std(memory) == pytest.approx(0.2, rel=0.05)
    # An unbound parameter (infinite variance) stays at its nominal value.
    fixed = parameter_samples(nominal, ["compute:matmul", "memory:hbm"], np.diag([0.01, np.inf]), 10, seed=0)
    assert all(sample.memory_efficiency["hbm"] == 0.9 for sample in fixed)


def test_llm_json_carries_intervals(capsys):
    from perfmodel.cli import main

    assert main(["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--batch", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    block = data["intervals"]
    assert block["confidence"] == 0.8 and "gpu scenario" in block["basis"]
    for name in ("ttft_s", "tpot_s", "tokens_per_s"):
        assert block[name]["low"] < data[name] < block[name]["high"]
    assert main(["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--batch", "8", "--json",
                 "--confidence", "90%"]) == 0
    wider = json.loads(capsys.readouterr().out)["intervals"]["tpot_s"]
    assert wider["high"] - wider["low"] > block["tpot_s"]["high"] - block["tpot_s"]["low"]


def test_confidence_option_rejects_bad_values(capsys):
    from perfmodel.cli import main

    assert main(["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--confidence", "1.5"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err


def test_size_holds_targets_at_the_confidence(capsys):
    from perfmodel.cli import main

    command = ["size", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--rate", "5/s", "--tpot-p99", "20ms",
               "--requests", "60", "--json"]
    assert main(command) == 0
    at_80 = json.loads(capsys.readouterr().out)["h100-sxm"]["confidence"]
    assert main(command + ["--at-median"]) == 0
    median = json.loads(capsys.readouterr().out)["h100-sxm"]["confidence"]
    assert at_80["level"] == 0.8 and median["level"] is None
    # Holding a target at 80% is stricter than at the median: the allowed predicted time is smaller.
    assert at_80["limit_factor"] < median["limit_factor"]
    assert "one-sided" in at_80["basis"] and "median" in median["basis"]


def test_heldout_coverage_counts_rows_per_family():
    from perfmodel.intervals import Residual, heldout_coverage

    rng = np.random.default_rng(0)
    rows = [Residual(line=index, family="gpu", kind="kernel", device="d", source=f"s{index % 12}", predicted=1.0,
                     measured=1.0, orientation=TIME, residual=float(value))
            for index, value in enumerate(rng.normal(size=60))]
    rows += [replace(rows[0], family="lpu", line=100)]
    coverage = {item.family: item for item in heldout_coverage(rows, 0.8)}
    assert coverage["gpu"].banded == 60 and 0.65 < coverage["gpu"].share < 0.95
    assert coverage["lpu"].banded == 0 and coverage["lpu"].share is None


def test_sweep_interval_columns(capsys):
    from perfmodel.cli import main

    assert main(["sweep", "--on", "h100-sxm", "--grid", "batch=1,8", "--json", "--confidence", "0.9",
                 "--chunk-points", "1"]) == 0  # two chunks: the records stream after the table's basis
    table = json.loads(capsys.readouterr().out)
    assert table["confidence"] == 0.9 and "cross-conformal" in table["basis"] and "gpu scenario" in table["basis"]
    assert [record["batch"] for record in table["rows"]] == [1, 8]
    for record in table["rows"]:
        assert record["total_s_low"] < record["total_s"] < record["total_s_high"]
    assert main(["sweep", "--on", "h100-sxm", "--grid", "batch=1", "--grid", "memory.hbm.bandwidth=2TB/s,4TB/s",
                 "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["confidence"] == 0.8 and "what-if" in table["basis"]
    assert all(record["total_s_low"] is None for record in table["rows"])  # what-if points


SERVE = ["serve", "--model", "llama-2-7b", "--on", "h100-sxm", "--requests", "40"]


def test_serve_rates_print_an_interval_per_rate(capsys):
    from perfmodel.cli import main

    assert main([*SERVE, "--rates", "2,16", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    for result in results:
        block = result["intervals"]
        assert block["confidence"] == 0.8 and "served" in block["basis"]
        assert block["tpot_p50_s"]["low"] < result["tpot_s"]["p50"] < block["tpot_p50_s"]["high"]
        assert block["tokens_per_s"]["low"] < result["tokens_per_s"] < block["tokens_per_s"]["high"]
    assert main([*SERVE, "--rates", "2,16", "--confidence", "90%"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("90% interval")]
    assert [line.split(":")[0] for line in lines] == ["90% interval at 2/s", "90% interval at 16/s"]


def test_serve_server_scenario_prints_intervals(capsys):
    from perfmodel.cli import main

    scenario = [*SERVE, "--scenario", "server", "--ttft-slo", "200ms", "--tpot-slo", "50ms"]
    assert main([*scenario, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for run in (data["offline"], data["result"]):
        assert run["intervals"]["ttft_p50_s"]["low"] < run["ttft_s"]["p50"] < run["intervals"]["ttft_p50_s"]["high"]
    assert main(scenario) == 0
    text = capsys.readouterr().out
    assert "80% interval offline: TTFT p50" in text and "80% interval server: TTFT p50" in text


def _errorbars(ax):
    from matplotlib.container import ErrorbarContainer

    return [item for item in ax.containers if isinstance(item, ErrorbarContainer)]


def _legend_texts(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_charts_draw_intervals_as_error_bars():
    from types import SimpleNamespace

    pytest.importorskip("matplotlib")
    from perfmodel.plotting import plot_serving_rates, pyplot

    band = Band(confidence=0.9, basis="test", low=-0.2, high=0.1, residuals=20)
    runs = [SimpleNamespace(tokens_per_s=rate * 100.0, ttft=SimpleNamespace(p99=0.05), tpot=SimpleNamespace(p99=0.01),
                            model="m", hardware="h", parallelism=SimpleNamespace(chips=1)) for rate in (1, 2, 4)]
    found = [interval(run.tokens_per_s, band, RATE) for run in runs]
    ax = plot_serving_rates([1, 2, 4], runs, throughput_intervals=found)
    (bars,) = _errorbars(ax)
    segments = bars.lines[2][0].get_segments()  # one vertical segment a rate, from low to high
    assert np.array([segment[:, 1] for segment in segments]) == pytest.approx(
        np.array([(i.low, i.high) for i in found]))
    assert "throughput: 90% interval" in _legend_texts(ax)
    pyplot().close(ax.figure)
    # no evidence: nothing drawn, nothing claimed in the legend
    blank = [interval(run.tokens_per_s, Band(confidence=0.9, basis="none"), RATE) for run in runs]
    ax = plot_serving_rates([1, 2, 4], runs, throughput_intervals=blank)
    assert not _errorbars(ax) and not any("interval" in text for text in _legend_texts(ax))
    pyplot().close(ax.figure)


def test_serve_and_train_charts_carry_the_commands_intervals(monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import perfmodel.plotting as plotting
    from perfmodel.cli import main

    drawn = []
    monkeypatch.setattr(plotting, "save_figure", lambda ax, path: drawn.append(ax))
    assert main([*SERVE, "--rates", "2,16", "--chart", str(tmp_path / "rates.png")]) == 0
    assert main([*SERVE, "--rate", "4/s", "--chart", str(tmp_path / "latency.png"), "--confidence", "70%"]) == 0
    assert main(["train", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "8", "--global-batch", "64",
                 "--seq", "2048", "--fsdp", "8", "--chart", str(tmp_path / "steps.png")]) == 0
    capsys.readouterr()
    rates, latency, steps = drawn
    assert len(_errorbars(rates)) == 1 and "throughput: 80% interval" in _legend_texts(rates)
    assert len(_errorbars(latency)) == 2 and "TTFT p50: 70% interval" in _legend_texts(latency)
    assert len(_errorbars(steps)) == 1 and "step time: 80% interval" in _legend_texts(steps)
    for ax in drawn:
        plotting.pyplot().close(ax.figure)


def test_search_json_and_chart_carry_the_front_intervals(monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import perfmodel.plotting as plotting
    from perfmodel.cli import main

    drawn = []
    monkeypatch.setattr(plotting, "save_figure", lambda ax, path: drawn.append(ax))
    assert main(["search", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "4", "--engines", "vllm",
                 "--batches", "8,64", "--no-disagg", "--simulate", "0", "--json", "--confidence", "0.9",
                 "--chart", str(tmp_path / "search.png")]) == 0
    for point in json.loads(capsys.readouterr().out)["front"]:
        block = point["intervals"]
        assert block["confidence"] == 0.9 and "scenario" in block["basis"]
        assert block["tokens_per_s_per_chip"]["low"] < point["tokens_per_s_per_chip"] \
            < block["tokens_per_s_per_chip"]["high"]
    (ax,) = drawn
    per_chip, per_user = _errorbars(ax)
    front = len(ax.get_lines()[0].get_xdata())  # the Pareto front's line
    assert len(per_chip.lines[2][0].get_segments()) == len(per_user.lines[2][0].get_segments()) == front
    assert {"per chip: 90% interval", "per user: 90% interval"} <= set(_legend_texts(ax))
    plotting.pyplot().close(ax.figure)


def test_serve_disagg_prints_intervals_for_both_deployments(capsys):
    from perfmodel.cli import main

    assert main([*SERVE, "--rate", "2/s", "--disagg", "1P1D", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for name in ("disaggregated", "aggregated"):
        block = data[name]["intervals"]
        assert block["e2e_p50_s"]["low"] < data[name]["e2e_s"]["p50"] < block["e2e_p50_s"]["high"]
    assert main([*SERVE, "--rate", "2/s", "--disagg", "1P1D"]) == 0
    text = capsys.readouterr().out
    assert "80% interval disaggregated: TTFT p50" in text and "80% interval aggregated: TTFT p50" in text


def _overlay_with_fit(tmp_path, edit=None):
    """The shipped H100 achievable overlay (which stores its fit's covariance) copied, ``edit`` applied."""
    from perfmodel.hardware.loader import load_hardware

    text = open(str(load_hardware("h100-sxm-achievable").origin)).read()
    assert "\n  fit:\n" in text
    path = tmp_path / "h100-copy.yaml"
    path.write_text((edit or (lambda value: value))(text).replace("name: h100-sxm-achievable", "name: h100-copy"))
    return path


def test_an_overlay_stores_its_fit_covariance_and_the_loader_checks_it(tmp_path):
    from perfmodel.hardware.loader import load_hardware, validate_spec_file

    hardware = load_hardware(_overlay_with_fit(tmp_path))
    fit = hardware.efficiency.fit
    assert fit is not None and fit.measurements > 0 and len(fit.relative_covariance) == len(fit.names)
    # A kind-level entry copied from the only dtype fitted for it moves with that dtype: equal variances,
    # correlation one (the fitter writes A C A^T of what it writes, not of what it fitted).
    index = {name: position for position, name in enumerate(fit.names)}
    copy, fitted = index["compute:attention"], index["compute:attention:tensor_cores:fp16"]
    covariance = fit.relative_covariance
    assert covariance[copy][copy] == covariance[fitted][fitted] == covariance[copy][fitted] > 0

    def problems(edit):
        return [problem.message for problem in validate_spec_file(_overlay_with_fit(tmp_path, edit))]

    misnamed = problems(lambda text: text.replace("    - memory:l2\n", "    - memory:l3\n"))
    assert len(misnamed) == 1 and "fit parameter 'memory:l3' names no value" in misnamed[0]
    rows = [line for line in _overlay_with_fit(tmp_path).read_text().splitlines() if line.startswith("    - [")]
    second = rows[1].split(", ")
    asymmetric = problems(lambda text: text.replace(rows[1], ", ".join(["    - [0.5", *second[1:]]), 1))
    assert len(asymmetric) == 1 and "symmetric" in asymmetric[0]
    short = problems(lambda text: text.replace(rows[-1] + "\n", ""))
    assert len(short) == 1 and f"{len(rows)} x {len(rows)} matrix" in short[0]


def test_llm_interval_combines_the_fit_covariance_with_the_model_form_band(capsys):
    """Where the overlay stores its fit's covariance, ``llm`` propagates it (parameter sets drawn from it,
    each evaluated) and widens the model-form band by it; the basis says which, and the datasheet's
    interval says it is model-form only."""
    from perfmodel.cli import main

    command = ["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--engine", "none", "--batch", "8", "--json"]
    assert main(command) == 0
    found = json.loads(capsys.readouterr().out)["intervals"]
    assert "parameter uncertainty from h100-sxm-achievable's fit covariance" in found["basis"]
    assert main([*command, "--ideal"]) == 0
    ideal = json.loads(capsys.readouterr().out)["intervals"]
    assert "model-form error only (datasheet parameters)" in ideal["basis"]


def test_parameter_spread_widens_the_band_it_is_combined_with():
    from perfmodel.cli.confidence import sample_runs, scenario_intervals
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.llm import Parallelism, Scenario, llm_predict
    from perfmodel.llm.catalog import load_architecture

    hardware = load_for_prediction("h100-sxm", engine="vllm")
    architecture = load_architecture("llama-3.1-8b")
    scenario = Scenario(batch=64, prompt_tokens=2048, generated_tokens=128)
    result = llm_predict(architecture, hardware, scenario, Parallelism(tp=1))
    runs, basis = sample_runs(hardware, "scenario", 0.8,
                              lambda sampled: llm_predict(architecture, sampled, scenario, Parallelism(tp=1)))
    assert len(runs) == 32 and len({run.ttft_s for run in runs}) > 1  # the prefill's GEMMs move with the fit
    alone = scenario_intervals(hardware, result, 0.8)["ttft_s"]
    both = scenario_intervals(hardware, result, 0.8, runs, basis)["ttft_s"]
    assert "model-form error only" in alone.basis and basis in both.basis
    assert both.low < alone.low < result.ttft_s < alone.high < both.high


def test_roofline_breakdown_chart_carries_each_systems_total_interval(monkeypatch, tmp_path, capsys):
    """``roofline --kind breakdown`` draws each system's total time with its interval (the scenario rows'
    band for a many-op graph); a system without evidence (MI300X: no reproduced measurement) gets none."""
    pytest.importorskip("matplotlib")
    import perfmodel.plotting as plotting
    from perfmodel.cli import main
    from perfmodel.intervals import band_for

    drawn = []
    monkeypatch.setattr(plotting, "save_figure", lambda ax, path: drawn.append(ax))
    assert main(["roofline", "elementwise_chain", "--on", "h100-sxm-achievable,mi300x", "--kind", "breakdown",
                 "-o", str(tmp_path / "breakdown.png")]) == 0
    capsys.readouterr()
    (ax,) = drawn
    (bars,) = _errorbars(ax)
    assert "total: 80% interval" in _legend_texts(ax)
    (segment,) = bars.lines[2][0].get_segments()  # the H100's bar only
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.roofline import evaluate
    from perfmodel.workload.io import load_graph

    h100 = load_hardware("h100-sxm-achievable")
    graph = load_graph("elementwise_chain")
    band = band_for(h100, "kernel" if len(graph.ops) == 1 else "scenario", 0.8)
    total_ms = evaluate(graph, h100).total_s * 1e3
    assert segment[:, 1] == pytest.approx([total_ms * math.exp(-band.high), total_ms * math.exp(-band.low)])
    plotting.pyplot().close(ax.figure)


def test_an_interval_wholly_on_one_side_of_its_value_is_drawn_as_it_is():
    """The datasheet's predicted times are all optimistic: the band lies below zero and the interval of a
    time wholly above the prediction; the error bar spans exactly low..high (it once failed to draw)."""
    pytest.importorskip("matplotlib")
    from perfmodel.plotting import _interval_bars, pyplot

    found = [interval(2.0, Band(confidence=0.8, basis="biased", low=-0.4, high=-0.1, residuals=20), TIME)]
    assert found[0].low > found[0].value
    ax = pyplot().figure().add_subplot()
    bars = _interval_bars(ax, [0], found)
    (segment,) = bars.lines[2][0].get_segments()
    assert segment[:, 1] == pytest.approx([found[0].low, found[0].high])
    pyplot().close(ax.figure)


def test_a_repository_at_a_commit_is_one_source():
    """Rows from several files of one repository snapshot (tpu-recipes' per-slice READMEs) share their
    publication's harness: they count, and are held out, as one source; other commits and other URLs
    stay apart, and a #fragment does not split a page."""
    from perfmodel.intervals import Residual, heldout_coverage, source_group

    base = "https://github.com/AI-Hypercomputer/tpu-recipes/blob/e83b691620476bcc4e6a9f957b9526c24c13429b/training/"
    assert source_group(base + "a/README.md") == source_group(base + "b/README.md") \
        == "github.com/AI-Hypercomputer/tpu-recipes@e83b691620476bcc4e6a9f957b9526c24c13429b"
    assert source_group(base.replace("e83b691", "0000000") + "a/README.md") != source_group(base + "a/README.md")
    assert source_group("https://example.com/post#table-2") == "https://example.com/post"

    # Five sources of 4 rows near 0 and one publication of 8 files near 1: held out together, the 8 rows
    # meet a band built only from the other sources and all miss it; counted as 8 sources, each would
    # be compared with a band that holds its 7 siblings.
    rows = [Residual(line=index, family="tpu", kind="training", device="d", source=f"https://s{index // 4}.org",
                     predicted=1.0, measured=1.0, orientation=TIME, residual=0.01 * (index % 4))
            for index in range(20)]
    rows += [replace(rows[0], line=100 + index, source=base + f"f{index}/README.md", residual=1.0 + 0.01 * index)
             for index in range(8)]
    coverage = heldout_coverage(rows, 0.8)[0]
    assert coverage.banded == 28 and coverage.covered <= 20
