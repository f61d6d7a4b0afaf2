"""The residual table behind every interval, and the band a prediction gets from it (edge module).

``workloads/validation/interval_residuals.json`` holds, for each parameter set (``achievable``: what
``perfmodel validate`` prices with; ``ideal``: ``validate --ideal``, the datasheet), every reproduced
published measurement's family, kind of prediction (``validation.PREDICTION_KINDS``), device, source
and residual (``perfmodel.uncertainty``: ``log(predicted time / measured time)``). It is stored, not
computed at run time, because reproducing the rows takes about 30 s per parameter set (the served
rows simulate tens of thousands of requests); ``python -m perfmodel.intervals --write`` regenerates it,
and ``tests/test_intervals.py`` fails when it no longer matches what ``validate`` predicts.

A prediction's band (``band_for``): the cross-conformal band over sources
(``uncertainty.cross_conformal_band``: each source compared with the centre of the others, so the band
holds the between-source spread a new setup meets) of the residuals of its family and kind under its
parameter set; where that kind has too few residuals (``uncertainty.minimum_residuals``) or only one
source (``source_group``: a repository at a commit is one source), the family's residuals of every kind,
saying so; where the device itself has no reproduced measurement, or
the spec is a what-if (``--set``), no band: there is no evidence for it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import ACHIEVABLE_SUFFIX, SERVING_ENGINES, WHAT_IF_SCALED_SOURCE, WHAT_IF_SOURCE
from perfmodel.hardware.model import Hardware
from perfmodel.paths import data_directory
from perfmodel.uncertainty import RATE, TIME, Band, conformal_quantile, cross_conformal_band, minimum_residuals

PARAMETER_SETS = ("achievable", "ideal")
TIME_UNITS = ("ms", "ms/token", "s", "us", "hours")
GENERATED_BY = "python -m perfmodel.intervals --write"


@dataclass(frozen=True, kw_only=True)
class Residual:
    """One reproduced published measurement, as the intervals use it."""

    line: int
    family: str
    kind: str
    device: str        # the catalog device (overlay suffixes removed)
    source: str
    predicted: float
    measured: float
    orientation: str   # "time" or "rate"
    residual: float    # log(predicted time / measured time)


def orientation(unit: str) -> str | None:
    """Whether a row's unit is a time or a rate (a reciprocal time); None for anything else (watts...)."""
    text = unit.strip()
    if text in TIME_UNITS:
        return TIME
    if "/s" in text or text == "%":  # % is MFU/HFU: FLOPs per second over the peak
        return RATE
    return None


def device_of(name: str) -> str:
    """The catalog device a spec name belongs to: ``h100-sxm-trtllm`` and ``h100-sxm-achievable`` -> ``h100-sxm``."""
    for suffix in (ACHIEVABLE_SUFFIX, *[f"-{engine}" for engine in SERVING_ENGINES]):
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def residuals_of(rows: Iterable) -> list[Residual]:
    """The residuals of ``validation.ValidationRow``s that were predicted, with a time or rate unit."""
    result = []
    for row in rows:
        if row.predicted is None or not row.measured or row.predicted <= 0 or row.measured <= 0:
            continue
        sense = orientation(row.unit)
        if sense is None:
            continue
        ratio = math.log(row.predicted / row.measured)
        result.append(Residual(line=row.line, family=row.family, kind=row.kind, device=device_of(row.hardware),
                               source=row.source, predicted=row.predicted, measured=row.measured, orientation=sense,
                               residual=ratio if sense == TIME else -ratio))
    return result


def build_table(csv_path: str | Path | None = None) -> dict:
    """Every parameter set's residuals, from ``validation.validate`` (about a minute)."""
    from perfmodel.validation import validate

    sets = {name: [asdict(item) for item in residuals_of(validate(csv_path, ideal=name == "ideal"))]
            for name in PARAMETER_SETS}
    return {"generated_by": GENERATED_BY, "residual": "log(predicted time / measured time); rates are reciprocal times",
            "sets": sets}


def table_path() -> Path:
    return data_directory("workloads") / "validation" / "interval_residuals.json"


def write_table(path: str | Path | None = None) -> Path:
    from perfmodel.yaml_source import write_text_atomically

    target = Path(path) if path else table_path()
    write_text_atomically(target, json.dumps(build_table(), indent=1, sort_keys=True) + "\n")
    load_table.cache_clear()
    return target


@functools.lru_cache(maxsize=4)
def load_table(path: str | None = None) -> dict[str, tuple[Residual, ...]]:
    """The stored residuals per parameter set."""
    target = Path(path) if path else table_path()
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
        return {name: tuple(Residual(**item) for item in data["sets"][name]) for name in PARAMETER_SETS}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise PerfmodelError(f"cannot read the interval residuals {target}: {error}; regenerate them with "
                             f"'{GENERATED_BY}'") from None


def parameter_set_of(hardware: Hardware) -> str:
    """``ideal`` for the datasheet parameters, else ``achievable`` (the residuals of the shipped overlays)."""
    return "ideal" if hardware.efficiency is None or hardware.efficiency.kind == "ideal" else "achievable"


def is_what_if(hardware: Hardware) -> bool:
    return any(source in (WHAT_IF_SOURCE, WHAT_IF_SCALED_SOURCE) for source in hardware.field_sources.values())


def percent(confidence: float) -> str:
    return f"{round(100 * confidence, 1):g}%"


_GITHUB_SNAPSHOT = re.compile(r"^https?://github\.com/([^/\s]+)/([^/\s]+)/(?:blob|tree|raw)/([0-9a-fA-F]{7,40})/")


def source_group(source: str) -> str:
    """The publication a row's source belongs to, the unit the bands treat as exchangeable: a file of a
    GitHub repository at a commit is that repository at that commit (its files were published together,
    by one team, with one harness and one software stack: tpu-recipes' eight per-slice READMEs at e83b691
    are one source, not eight), any other URL itself without its #fragment."""
    text = source.strip()
    found = _GITHUB_SNAPSHOT.match(text)
    if found:
        owner, repository, commit = found.groups()
        return f"github.com/{owner}/{repository}@{commit}"
    return text.split("#", 1)[0]


def _sources(rows: Sequence[Residual]) -> int:
    return len({source_group(item.source) for item in rows})


def _evidence(residuals: Sequence[Residual], family: str, kind: str, confidence: float
              ) -> tuple[list[Residual], str]:
    """The residuals a ``family``/``kind`` band rests on and what they are ([] and why not, when too few).
    A pool needs ``minimum_residuals`` residuals from at least two sources (``source_group``): the band
    compares each source with the others (``uncertainty.cross_conformal_band``), so one source alone
    cannot say how far the next one falls."""
    family_rows = [item for item in residuals if item.family == family]
    kind_rows = [item for item in family_rows if item.kind == kind]
    needed = minimum_residuals(confidence)

    def enough(rows: Sequence[Residual]) -> bool:
        return len(rows) >= needed and _sources(rows) >= 2

    if enough(kind_rows):
        return kind_rows, f"{len(kind_rows)} residuals of {family} {kind} predictions from {_sources(kind_rows)} sources"
    if enough(family_rows):
        return family_rows, (f"{len(family_rows)} residuals of {family} predictions of every kind from "
                             f"{_sources(family_rows)} sources ({kind}: {len(kind_rows)} from "
                             f"{_sources(kind_rows)} source(s); a pool needs at least {needed} from 2 sources)")
    return [], (f"no interval: {len(family_rows)} reproduced measurement(s) of {family} from "
                f"{_sources(family_rows)} source(s), a {percent(confidence)} interval needs at least {needed} "
                "from 2 sources")


def _bounds(rows: Sequence[Residual], confidence: float) -> tuple[float, float] | None:
    return cross_conformal_band([item.residual for item in rows], [source_group(item.source) for item in rows],
                                confidence)


def band_of(residuals: Sequence[Residual], family: str, kind: str, confidence: float, parameter_set: str) -> Band:
    """The band of ``family``'s ``kind`` predictions from ``residuals`` (see the module docstring)."""
    chosen, what = _evidence(residuals, family, kind, confidence)
    level = percent(confidence)
    bounds = _bounds(chosen, confidence) if chosen else None
    if bounds is None:
        return Band(confidence=confidence, basis=what)
    return Band(confidence=confidence, low=bounds[0], high=bounds[1], residuals=len(chosen),
                basis=f"{level} cross-conformal over sources on {what} ({parameter_set} parameters)")


def _residuals_for(hardware: Hardware, confidence: float, path: str | None) -> tuple[Sequence[Residual], str]:
    """The residuals of ``hardware``'s parameter set, or () and why there is no evidence for it."""
    level = percent(confidence)
    if is_what_if(hardware):
        return (), f"no {level} interval: a what-if spec (--set), never measured"
    parameter_set = parameter_set_of(hardware)
    residuals = load_table(path)[parameter_set]
    device = device_of(hardware.name)
    if not any(item.device == device for item in residuals):
        return (), f"no {level} interval: no published measurement of {device} is reproduced ({parameter_set} parameters)"
    return residuals, parameter_set


def band_for(hardware: Hardware, kind: str, confidence: float, path: str | None = None) -> Band:
    """The band of a prediction of ``kind`` on ``hardware`` (its family, device and parameter set)."""
    residuals, parameter_set = _residuals_for(hardware, confidence, path)
    if not residuals:
        return Band(confidence=confidence, basis=parameter_set)
    return band_of(residuals, hardware.family, kind, confidence, parameter_set)


def time_factor(hardware: Hardware, kind: str, confidence: float | None, path: str | None = None) -> tuple[float, str]:
    """(f, basis): a predicted time ``T`` meets a target ``L`` at ``confidence`` when ``T <= f L``, i.e. when
    the upper end of the time's interval at ``confidence`` (``T exp(-low)``, the band ``band_for`` prints)
    is at most ``L``: ``f = exp(low)``. As a one-sided statement that holds with probability about
    ``(1 + confidence) / 2`` (the band's misses fall on both sides); it is the printed interval's end so
    that a deployment said to meet a target at 80% meets it at the end of the 80% interval the user reads.
    ``confidence`` None: at the median (``low`` replaced by the median residual). No evidence: f = 1 (the
    point prediction) and the basis says so."""
    check = 0.8 if confidence is None else confidence  # which residuals: as the displayed intervals choose them
    residuals, parameter_set = _residuals_for(hardware, check, path)
    if not residuals:
        return 1.0, parameter_set + "; point prediction used"
    chosen, what = _evidence(residuals, hardware.family, kind, check)
    if not chosen:
        return 1.0, what + "; point prediction used"
    if confidence is None:
        quantile = conformal_quantile([item.residual for item in chosen], 0.5)
    else:
        bounds = _bounds(chosen, confidence)
        quantile = None if bounds is None else bounds[0]
    if quantile is None:
        return 1.0, what + "; point prediction used"
    at = "the median" if confidence is None else (
        f"the upper end of the {percent(confidence)} interval (one-sided about {percent((1 + confidence) / 2)}; "
        "cross-conformal over sources)")
    return math.exp(quantile), f"{at} of {what} ({parameter_set} parameters)"


# ---- held-out coverage -----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Coverage:
    family: str
    rows: int          # residuals of the family
    banded: int        # rows that got a band with their source held out
    covered: int       # of those, rows whose residual the band covers
    median_width: float | None  # median of exp(high - low): the ratio of an interval's ends

    @property
    def share(self) -> float | None:
        return self.covered / self.banded if self.banded else None


def heldout_coverage(residuals: Sequence[Residual], confidence: float) -> list[Coverage]:
    """Each row's residual against the band built without its source's rows (every row of the same
    source, ``source_group``, held out together), per family."""
    result = []
    for family in sorted({item.family for item in residuals}):
        members = [item for item in residuals if item.family == family]
        covered, banded, widths = 0, 0, []
        for item in members:
            kept = [other for other in residuals if source_group(other.source) != source_group(item.source)]
            band = band_of(kept, family, item.kind, confidence, "")
            if not band.known:
                continue
            assert band.low is not None and band.high is not None
            banded += 1
            covered += band.low <= item.residual <= band.high
            widths.append(math.exp(band.high - band.low))
        result.append(Coverage(family=family, rows=len(members), banded=banded, covered=covered,
                               median_width=float(np.median(widths)) if widths else None))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfmodel.intervals",
                                     description="regenerate the residual table behind perfmodel's intervals")
    parser.add_argument("--write", nargs="?", const="", metavar="PATH",
                        help=f"write the table (default {table_path()})")
    args = parser.parse_args(argv)
    if args.write is None:
        parser.print_help()
        return 2
    target = write_table(args.write or None)
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
