"""``--confidence``: the interval every command prints beside its headline figures (``perfmodel.intervals``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from perfmodel.uncertainty import DEFAULT_CONFIDENCE, RATE, TIME, Interval, interval
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


def intervals(hardware, kind: str, confidence: float, figures: Mapping[str, tuple[float, str]]) -> dict[str, Interval]:
    """Each figure ``name -> (value, 'time' | 'rate')`` with its interval on ``hardware``."""
    from perfmodel.intervals import band_for

    band = band_for(hardware, kind, confidence)
    return {name: interval(value, band, orientation) for name, (value, orientation) in figures.items()}


SCENARIO_FIGURES = {"ttft_s": TIME, "tpot_s": TIME, "e2e_s": TIME, "tokens_per_s_per_user": RATE,
                    "tokens_per_s": RATE, "tokens_per_s_per_chip": RATE}  # llm_predict's headline figures


def scenario_intervals(hardware, result, confidence: float) -> dict[str, Interval]:
    """The headline figures (``SCENARIO_FIGURES``) of one ``llm_predict`` scenario on ``hardware`` with
    their intervals: what ``perfmodel llm`` prints and the explorer's LLM view shows."""
    return intervals(hardware, "scenario", confidence,
                     {name: (getattr(result, name), orientation) for name, orientation in SCENARIO_FIGURES.items()})


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
