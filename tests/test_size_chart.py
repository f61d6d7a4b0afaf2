"""``perfmodel size --chart``: the deployments the sizing considered, each system's sized deployment and
the interval of its simulated TPOT (``plotting.plot_pareto``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfmodel.cli import main
from perfmodel.uncertainty import TIME, Band, interval

SIZE = ["size", "--model", "llama-3.1-8b", "--rate", "4/s", "--tpot-p99", "50ms", "--requests", "40"]


def _errorbars(ax):
    from matplotlib.container import ErrorbarContainer

    return [item for item in ax.containers if isinstance(item, ErrorbarContainer)]


def _legend_texts(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_plot_pareto_marks_each_sized_deployment_with_its_interval():
    """A hand-made case: the star sits at the deployment's chips and TPOT, the error bar spans the
    interval's ends (ms), the target is a horizontal line, and a system without evidence gets no bar."""
    pytest.importorskip("matplotlib")
    from perfmodel.llm.graphs import Parallelism
    from perfmodel.llm.sizing import SizingOption
    from perfmodel.plotting import plot_pareto, pyplot

    def option(chips: int, tpot_s: float, meets: bool = True) -> SizingOption:
        return SizingOption(hardware="x", parallelism=Parallelism(tp=chips), replicas=1, concurrency=8, ttft_s=0.1,
                            tpot_s=tpot_s, tokens_per_s=1e3, memory_bytes_per_chip=1e9, capacity_bytes_per_chip=8e10,
                            power_watts=700.0 * chips, cost_usd_per_hour=None, meets_targets=meets)

    known = interval(0.010, Band(confidence=0.8, basis="test", low=-0.2, high=0.1, residuals=20), TIME)
    unknown = interval(0.020, Band(confidence=0.8, basis="no evidence"), TIME)
    options = {"a": [option(1, 0.030), option(2, 0.025), option(4, 0.040, meets=False)], "b": [option(8, 0.050)]}
    ax = plot_pareto(options, chosen={"a": (2, 0.010), "b": (8, 0.020)}, chosen_intervals={"a": known, "b": unknown},
                     tpot_targets_s=[("target: TPOT p99 <= 50 ms", 0.050)])
    (bars,) = _errorbars(ax)  # only "a" has evidence
    (segment,) = bars.lines[2][0].get_segments()
    assert segment[:, 0] == pytest.approx([2, 2])
    assert segment[:, 1] == pytest.approx([known.low * 1e3, known.high * 1e3])
    stars = {line.get_label(): (line.get_xdata()[0], line.get_ydata()[0]) for line in ax.get_lines()
             if line.get_marker() == "*"}
    assert stars == {"a: sized deployment": pytest.approx((2, 10.0)), "b: sized deployment": pytest.approx((8, 20.0))}
    front = next(line for line in ax.get_lines() if line.get_label() == "a (Pareto front)")
    assert list(front.get_xdata()) == [1, 2]  # the 4-chip option misses the targets: not on the front
    assert "target: TPOT p99 <= 50 ms" in _legend_texts(ax) and "a: 80% interval" in _legend_texts(ax)
    assert not any(text.startswith("b: ") and "interval" in text for text in _legend_texts(ax))
    pyplot().close(ax.figure)


def test_size_chart_is_written_and_carries_the_sized_deployments(monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import perfmodel.plotting as plotting

    chart = tmp_path / "size.png"
    assert main([*SIZE, "--on", "h100-sxm,tpu-v6e", "--chart", str(chart), "--json"]) == 0
    sized = json.loads(capsys.readouterr().out)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
    assert not [path.name for path in tmp_path.iterdir() if path.name != "size.png"]  # no temporary file left

    drawn = []
    monkeypatch.setattr(plotting, "save_figure", lambda ax, path: drawn.append(ax))
    assert main([*SIZE, "--on", "h100-sxm,tpu-v6e", "--chart", str(chart)]) == 0
    capsys.readouterr()
    (ax,) = drawn
    stars = {line.get_label().split(":")[0]: line for line in ax.get_lines() if line.get_marker() == "*"}
    assert set(stars) == {"h100-sxm", "tpu-v6e"}
    for name, line in stars.items():  # the star is the JSON's deployment (chips dodged a few percent)
        best = sized[name]["best"]
        assert line.get_xdata()[0] == pytest.approx(best["chips"], rel=0.1)
        assert line.get_ydata()[0] == pytest.approx(best["tpot_s"]["p50"] * 1e3)
    bars = _errorbars(ax)
    assert len(bars) == 2 and {"h100-sxm: 80% interval", "tpu-v6e: 80% interval"} <= set(_legend_texts(ax))
    for bar in bars:  # each interval brackets its deployment's TPOT
        (segment,) = bar.lines[2][0].get_segments()
        low, high = sorted(segment[:, 1])
        assert any(low < line.get_ydata()[0] < high and np.isclose(line.get_xdata()[0], segment[0, 0])
                   for line in stars.values())
    assert "target: TPOT p99 <= 50 ms" in _legend_texts(ax)
    plotting.pyplot().close(ax.figure)


def test_size_chart_of_a_what_if_spec_draws_no_interval(monkeypatch, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import perfmodel.plotting as plotting

    drawn = []
    monkeypatch.setattr(plotting, "save_figure", lambda ax, path: drawn.append(ax))
    assert main([*SIZE, "--on", "h100-sxm", "--set", "memory.hbm.bandwidth=5TB/s",
                 "--chart", str(tmp_path / "size.svg")]) == 0
    capsys.readouterr()
    (ax,) = drawn
    assert [line for line in ax.get_lines() if line.get_marker() == "*"] and not _errorbars(ax)
    assert not any("interval" in text for text in _legend_texts(ax))
    plotting.pyplot().close(ax.figure)


@pytest.mark.parametrize("chart, expected", [
    ("size.gif", "unknown extension '.gif'"),
    ("size", "unknown extension '(none)'"),
    ("", "is not a file name"),
    ("sub/", "is a directory"),
])
def test_size_chart_bad_paths_exit_2_before_any_work(chart, expected, monkeypatch, tmp_path, capsys):
    import perfmodel.serving.sizing as sizing

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    monkeypatch.setattr(sizing, "size_deployment", lambda *a, **k: pytest.fail("sized before checking --chart"))
    assert main([*SIZE, "--on", "h100-sxm", "--chart", chart]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err and "Traceback" not in captured.err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sub"]  # nothing written
