"""``--confidence``: the interval every command prints beside its headline figures (``perfmodel.intervals``)."""

from __future__ import annotations

import argparse
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from perfmodel.cli.overrides import whole_number
from perfmodel.errors import PerfmodelError
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


def add_confidence_argument(parser, *, parameter_sets: int | None = None) -> None:
    """``--confidence``, and for commands that propagate the fit's covariance ``--parameter-sets`` (its
    default: ``parameter_sets``, else ``PARAMETER_SAMPLES``; 0 leaves the option out)."""
    parser.add_argument("--confidence", type=_confidence, default=DEFAULT_CONFIDENCE, metavar="C",
                        help=f"coverage of the printed intervals, e.g. 0.9 or 90%% (default {DEFAULT_CONFIDENCE:g}): "
                             "cross-conformal bands over the sources of the published measurements of the "
                             "system's family and kind of prediction (perfmodel validate); none where there is "
                             "no evidence")
    default = PARAMETER_SAMPLES if parameter_sets is None else parameter_sets
    if default:
        parser.add_argument("--parameter-sets", type=whole_number(0), metavar="N",
                            help="parameter sets drawn (seed 0) from the covariance the overlay's fit stores, at "
                                 "each of which the headline figures are recomputed to widen their intervals by "
                                 f"the parameter uncertainty (default {default}, or as many as a conformal band "
                                 "needs at --confidence if more: 19 at 90%%; 0: model-form error only)")
        parser.set_defaults(default_parameter_sets=default)


def sets_asked(args) -> int:
    """The parameter sets a command draws: ``--parameter-sets``, else ``default_sets`` of its default."""
    if args.parameter_sets is not None:
        return int(args.parameter_sets)
    return default_sets(int(args.default_parameter_sets), args.confidence)


def default_sets(default: int, confidence: float | None) -> int:
    """``default`` parameter sets, raised to what a band at ``confidence`` needs (``uncertainty.minimum_residuals``;
    None: the median, ``default``)."""
    from perfmodel.uncertainty import minimum_residuals

    return default if confidence is None else max(default, minimum_residuals(confidence))


PARAMETER_SAMPLES = 32  # parameter sets drawn from a fit's covariance per prediction (seed 0: reproducible)
PARAMETER_SEED = 0


@dataclass(frozen=True)
class Sampled:
    """A prediction's figures at parameter sets drawn from the fit's covariance, and what they rest on
    (no figures: ``basis`` says why none were drawn)."""

    figures: Mapping[str, Sequence[float]]
    basis: str


def model_form_note(hardware, samples: int | None = None) -> str:
    """Why an interval holds no parameter uncertainty (``samples``: the sets asked for, when known)."""
    efficiency = hardware.efficiency
    if efficiency is None or efficiency.kind == "ideal":
        return "model-form error only (datasheet parameters)"
    if efficiency.fit is None:
        return f"model-form error only ({efficiency.name} stores no fit covariance)"
    if samples == 0:
        return "model-form error only (--parameter-sets 0)"
    return "model-form error only (parameter uncertainty not propagated for this output)"


def parameter_sets(hardware, kind: str, confidence: float, samples: int | None = None) -> tuple[list, str]:
    """The parameter sets (``hardware.model.Parameters``) drawn from ``hardware``'s fit covariance
    (``uncertainty.fit_samples``, seed ``PARAMETER_SEED``) and the basis they give an interval; ([], why
    not) when there is no fit covariance, ``samples`` is 0, or there is no model-form band to combine
    with (a parameter spread alone would claim a precision the model has not shown, so it is not
    computed). Fewer sets than a conformal band of ``confidence`` needs cannot place its quantiles: refused.
    ``samples`` None: ``default_sets(PARAMETER_SAMPLES, confidence)``."""
    from perfmodel.intervals import band_for
    from perfmodel.uncertainty import fit_samples, minimum_residuals

    if samples is None:
        samples = default_sets(PARAMETER_SAMPLES, confidence)
    if samples and samples < minimum_residuals(confidence):
        raise PerfmodelError(f"--parameter-sets {samples}: a {heading(confidence)} needs at least "
                             f"{minimum_residuals(confidence)} parameter sets to place its quantiles (or 0: "
                             "model-form error only)")
    efficiency = hardware.efficiency
    if efficiency is None or efficiency.fit is None or not samples or not band_for(hardware, kind, confidence).known:
        return [], model_form_note(hardware, samples)
    sets = fit_samples(efficiency, samples, PARAMETER_SEED)
    basis = (f"parameter uncertainty from {efficiency.name}'s fit covariance ({len(efficiency.fit.names)} values, "
             f"{efficiency.fit.measurements} measurements; {len(sets)} parameter sets, seed {PARAMETER_SEED})")
    return sets, basis


def sample_runs(hardware, kind: str, confidence: float, evaluate: Callable[[object], object],
                samples: int | None = None) -> tuple[list, str]:
    """``evaluate(h)`` on copies ``h`` of ``hardware`` whose parameters are the sets ``parameter_sets``
    draws, and the basis; ([], why not) when it draws none."""
    sets, basis = parameter_sets(hardware, kind, confidence, samples)
    return [evaluate(replace(hardware, efficiency=parameters)) for parameters in sets], basis


def sampled_figures(runs: Sequence, basis: str, figures: Mapping[str, Callable[[Any], float]]) -> Sampled:
    """Each figure ``name -> getter`` of every run (``sample_runs``), as ``intervals`` takes them."""
    return Sampled(figures={name: [get(run) for run in runs] for name, get in figures.items()} if runs else {},
                   basis=basis)


def intervals(hardware, kind: str, confidence: float, figures: Mapping[str, tuple[float, str]],
              sampled: Sampled | None = None) -> dict[str, Interval]:
    """Each figure ``name -> (value, 'time' | 'rate')`` with its interval on ``hardware``: the model-form
    band of ``kind``, widened by the spread of the figure over ``sampled`` parameter sets where given
    (``sampled`` without figures: its basis says why there are none)."""
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
                why = sampled.basis if sampled is not None and not sampled.figures and sampled.basis else \
                    model_form_note(hardware)
                figure_band = replace(band, basis=f"{band.basis}; {why}")
        found[name] = interval(value, figure_band, orientation)
    return found


SCENARIO_FIGURES = {"ttft_s": TIME, "tpot_s": TIME, "e2e_s": TIME, "tokens_per_s_per_user": RATE,
                    "tokens_per_s": RATE, "tokens_per_s_per_chip": RATE}  # llm_predict's headline figures


def scenario_intervals(hardware, result, confidence: float, runs: Sequence = (), basis: str = "") -> dict[str, Interval]:
    """The headline figures (``SCENARIO_FIGURES``) of one ``llm_predict`` scenario on ``hardware`` with
    their intervals: what ``perfmodel llm`` prints and the explorer's LLM view shows. ``runs``: the same
    scenario at parameter sets drawn from the fit's covariance (``sample_runs``), ``basis`` theirs (or
    why there are none)."""
    sampled = sampled_figures(runs, basis, {name: operator.attrgetter(name) for name in SCENARIO_FIGURES}) \
        if runs or basis else None
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


SERVED_FIGURES = {"ttft_p50_s": (operator.attrgetter("ttft.p50"), TIME),
                  "tpot_p50_s": (operator.attrgetter("tpot.p50"), TIME),
                  "e2e_p50_s": (operator.attrgetter("e2e.p50"), TIME),
                  "tokens_per_s": (operator.attrgetter("tokens_per_s"), RATE)}  # a served run's headline figures


def served_intervals(hardware, result, confidence: float, runs: Sequence = (), basis: str = "") -> dict[str, Interval]:
    """The headline figures of one served run (``SERVED_FIGURES``: p50 TTFT, TPOT and end-to-end, output
    tokens/s) with their intervals on ``hardware`` (the served-load rows' residuals): what every ``serve``
    output prints. ``runs``: the same requests simulated at parameter sets drawn from the fit's covariance
    (``sample_runs``; ``Server.repriced``), ``basis`` theirs (or why there are none)."""
    sampled = sampled_figures(runs, basis, {name: get for name, (get, _) in SERVED_FIGURES.items()}) \
        if runs or basis else None
    return intervals(hardware, "served", confidence,
                     {name: (get(result), orientation) for name, (get, orientation) in SERVED_FIGURES.items()},
                     sampled)


def served_line(found: Mapping[str, Interval], confidence: float, at: str = "") -> str:
    """The interval line of ``served_intervals`` (``at``: which run, e.g. ``at 4/s``)."""
    return (f"{heading(confidence)}{' ' + at if at else ''}: TTFT p50 {text(found['ttft_p50_s'], _seconds)}, "
            f"TPOT p50 {text(found['tpot_p50_s'], _seconds)}, end-to-end p50 {text(found['e2e_p50_s'], _seconds)}, "
            f"throughput {text(found['tokens_per_s'], lambda v: f'{v:.1f}')} output tokens/s "
            f"({found['tokens_per_s'].basis})")


def _seconds(value: float) -> str:
    return format_quantity(value, "seconds")
