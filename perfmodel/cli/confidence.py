"""``--confidence``: the interval every command prints beside its headline figures (``perfmodel.intervals``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from perfmodel.uncertainty import DEFAULT_CONFIDENCE, RATE, TIME, Interval, combine, interval, parameter_band
from perfmodel.units import format_quantity


def _confidence(text: str) -> float:
    """A confidence as 0.8 or 80% (argparse type)."""
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a confidence such as 0.8 or 80%, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (or 0% and 100%), exclusive; got {text!r}")
    return value


def add_confidence_argument(parser) -> None:
    parser.add_argument("--confidence", type=_confidence, default=DEFAULT_CONFIDENCE, metavar="C",
                        help=f"coverage of the printed intervals, e.g. 0.9 or 90%% (default {DEFAULT_CONFIDENCE:g}): "
                             "cross-conformal bands over the sources of the published measurements of the "
                             "system's family and kind of prediction (perfmodel validate); none where there is "
                             "no evidence")


PARAMETER_SAMPLES = 32  # parameter sets drawn from a fit's covariance per prediction (seed 0: reproducible)


@dataclass(frozen=True)
class Sampled:
    """A prediction's figures at parameter sets drawn from the fit's covariance, and what they rest on."""

    figures: Mapping[str, Sequence[float]]
    basis: str


def model_form_note(hardware) -> str:
    """Why an interval holds no parameter uncertainty."""
    efficiency = hardware.efficiency
    if efficiency is None or efficiency.kind == "ideal":
        return "model-form error only (datasheet parameters)"
    if efficiency.fit is None:
        return f"model-form error only ({efficiency.name} stores no fit covariance)"
    return "model-form error only (parameter uncertainty not propagated for this output)"


def sample_runs(hardware, kind: str, confidence: float, evaluate: Callable[[object], object]) -> tuple[list, str]:
    """``evaluate(h)`` on copies ``h`` of ``hardware`` whose parameters are drawn from its fit's covariance
    (``uncertainty.fit_samples``), and the basis; ([], "") when there is no fit covariance, or no
    model-form band to combine with (a parameter spread alone would claim a precision the model has not
    shown, so it is not computed)."""
    from perfmodel.intervals import band_for
    from perfmodel.uncertainty import fit_samples

    efficiency = hardware.efficiency
    if efficiency is None or efficiency.fit is None or not band_for(hardware, kind, confidence).known:
        return [], ""
    sets = fit_samples(efficiency, PARAMETER_SAMPLES)
    basis = (f"parameter uncertainty from {efficiency.name}'s fit covariance ({len(efficiency.fit.names)} values, "
             f"{efficiency.fit.measurements} measurements; {len(sets)} parameter sets)")
    return [evaluate(replace(hardware, efficiency=parameters)) for parameters in sets], basis


def intervals(hardware, kind: str, confidence: float, figures: Mapping[str, tuple[float, str]],
              sampled: Sampled | None = None) -> dict[str, Interval]:
    """Each figure ``name -> (value, 'time' | 'rate')`` with its interval on ``hardware``: the model-form
    band of ``kind``, widened by the spread of the figure over ``sampled`` parameter sets where given."""
    from perfmodel.intervals import band_for

    band = band_for(hardware, kind, confidence)
    found = {}
    for name, (value, orientation) in figures.items():
        figure_band = band
        if band.known:
            runs = None if sampled is None else sampled.figures.get(name)
            usable = runs is not None and len(runs) > 0 and math.isfinite(value) and value > 0 and all(
                math.isfinite(run) and run > 0 for run in runs)
            if usable:
                assert runs is not None and sampled is not None
                figure_band = combine(band, parameter_band(value, runs, confidence, orientation), sampled.basis)
            elif runs:
                figure_band = replace(band, basis=f"{band.basis}; model-form error only (a parameter set drawn from "
                                                  "the fit gave no finite positive value)")
            else:
                figure_band = replace(band, basis=f"{band.basis}; {model_form_note(hardware)}")
        found[name] = interval(value, figure_band, orientation)
    return found


SCENARIO_FIGURES = {"ttft_s": TIME, "tpot_s": TIME, "e2e_s": TIME, "tokens_per_s_per_user": RATE,
                    "tokens_per_s": RATE, "tokens_per_s_per_chip": RATE}  # llm_predict's headline figures


def scenario_intervals(hardware, result, confidence: float, runs: Sequence = (), basis: str = "") -> dict[str, Interval]:
    """The headline figures (``SCENARIO_FIGURES``) of one ``llm_predict`` scenario on ``hardware`` with
    their intervals: what ``perfmodel llm`` prints and the explorer's LLM view shows. ``runs``: the same
    scenario at parameter sets drawn from the fit's covariance (``sample_runs``), ``basis`` theirs."""
    sampled = Sampled(figures={name: [getattr(run, name) for run in runs] for name in SCENARIO_FIGURES},
                      basis=basis) if runs else None
    return intervals(hardware, "scenario", confidence,
                     {name: (getattr(result, name), orientation) for name, orientation in SCENARIO_FIGURES.items()},
                     sampled)


def to_json(found: Mapping[str, Interval]) -> dict:
    """The JSON block: ``{"confidence", "basis", name: {"low", "high"}}`` (one basis for all the figures)."""
    first = next(iter(found.values()), None)
    block: dict = {"confidence": first.confidence if first else None, "basis": first.basis if first else None}
    block.update({name: {"low": item.low, "high": item.high} for name, item in found.items()})
    return block


def text(item: Interval, style: Callable[[float], str]) -> str:
    """``[low, high]`` in ``style``, or ``no evidence``."""
    if item.low is None or item.high is None:
        return "no evidence"
    return f"{style(item.low)} - {style(item.high)}"


def heading(confidence: float) -> str:
    return f"{round(100 * confidence, 1):g}% interval"


def served_intervals(hardware, result, confidence: float) -> dict[str, Interval]:
    """The headline figures of one served run (p50 TTFT, TPOT and end-to-end, output tokens/s) with their
    intervals on ``hardware`` (the served-load rows' residuals): what every ``serve`` output prints."""
    return intervals(hardware, "served", confidence, {
        "ttft_p50_s": (result.ttft.p50, TIME), "tpot_p50_s": (result.tpot.p50, TIME),
        "e2e_p50_s": (result.e2e.p50, TIME), "tokens_per_s": (result.tokens_per_s, RATE)})


def served_line(found: Mapping[str, Interval], confidence: float, at: str = "") -> str:
    """The interval line of ``served_intervals`` (``at``: which run, e.g. ``at 4/s``)."""
    return (f"{heading(confidence)}{' ' + at if at else ''}: TTFT p50 {text(found['ttft_p50_s'], _seconds)}, "
            f"TPOT p50 {text(found['tpot_p50_s'], _seconds)}, end-to-end p50 {text(found['e2e_p50_s'], _seconds)}, "
            f"throughput {text(found['tokens_per_s'], lambda v: f'{v:.1f}')} output tokens/s "
            f"({found['tokens_per_s'].basis})")


def _seconds(value: float) -> str:
    return format_quantity(value, "seconds")
