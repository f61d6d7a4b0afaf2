"""Prediction intervals: model-form error from conformal residuals, parameter error from a fit's covariance.

Pure core (numpy and the standard library only). Conventions:

* A **residual** is ``log(predicted time / measured time)`` of one published measurement: a rate
  (tokens/s, TFLOP/s, GB/s, MFU) is a reciprocal time, so its residual is ``-log(predicted / measured)``.
  One orientation for every metric lets a throughput row and a latency row of the same family inform
  the same band.
* **Split-conformal band** at confidence ``c`` (``alpha = 1 - c``): the residuals' quantiles at
  ``alpha / 2`` and ``1 - alpha / 2`` taken at plotting position ``p (n + 1)`` (numpy's ``weibull``
  method): for exchangeable residuals the expected share of a new residual below the ``k``-th smallest
  is ``k / (n + 1)``, so the band covers a new row with probability ``c`` in expectation. The rank
  ``(n + 1) alpha / 2`` must be at least 1, else the band would extrapolate past the sample: fewer than
  ``minimum_residuals(c)`` residuals (9 at 80%) give no band, and the interval says so.
* **Sources, not rows, are exchangeable**: the bands the commands print are cross-conformal over
  sources (``cross_conformal_band``, CV+ with each source a fold), which measures how far a new source
  falls from the centre the other sources give; ``conformal_band`` is the plain split-conformal band of
  exchangeable residuals.
* A true **time** lies in ``[T exp(-high), T exp(-low)]`` for a predicted time ``T`` and a band
  ``[low, high]``; a true **rate** ``R`` in ``[R exp(low), R exp(high)]``.
* **Parameter error**: a sample of parameter sets is drawn from a fit's covariance (log-normal from the
  fit's Gauss-Newton log covariance; from the relative covariance an overlay stores, the fit's posterior
  one, ``hardware.model.FitCovariance``) and evaluated; the spread of ``log(sampled / nominal)`` at the
  same confidence is that source's band.
* **Combined**: the two sources are taken as independent and each side's log half-width adds in
  quadrature (``sqrt(a^2 + b^2)``), the band's centre (the model's bias) kept from the residuals. A
  sampled prediction ``T_s = T exp(p)`` is what the model would say with the true parameters, so the
  true time's residual against the nominal ``T`` is ``r - p``: the band's low end (the time's upper
  end) meets the spread's high end, and its high end the spread's low end. The
  residuals were measured with the shipped parameters, so they already hold the shipped fit's error at
  the validated points; the quadrature sum is therefore conservative (wider) where both apply.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from perfmodel.hardware.model import FIT_SECTIONS, Parameters

DEFAULT_CONFIDENCE = 0.8
RATE, TIME = "rate", "time"


def minimum_residuals(confidence: float) -> int:
    """The fewest residuals whose conformal band at ``confidence`` stays inside the sample:
    ``(n + 1) (1 - confidence) / 2 >= 1``."""
    check_confidence(confidence)
    return math.ceil(2 / (1 - confidence) - 1 - 1e-9)


def check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence!r}")


def conformal_band(residuals: Sequence[float] | np.ndarray, confidence: float) -> tuple[float, float] | None:
    """(low, high) log-residual quantiles covering ``confidence`` of new residuals; None when there are
    fewer than ``minimum_residuals(confidence)``."""
    values = np.asarray(residuals, dtype=float)
    if values.size < minimum_residuals(confidence):
        return None
    alpha = 1 - confidence
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2], method="weibull")
    return float(low), float(high)


def conformal_quantile(residuals: Sequence[float] | np.ndarray, level: float) -> float | None:
    """The residuals' one-sided conformal quantile at ``level`` (plotting position ``level (n + 1)``);
    None when that rank falls outside ``1..n`` (too few residuals for the level)."""
    values = np.asarray(residuals, dtype=float)
    rank = level * (values.size + 1)
    if values.size == 0 or rank < 1 - 1e-9 or rank > values.size + 1e-9:
        return None
    return float(np.quantile(values, level, method="weibull"))


def cross_conformal_band(residuals: Sequence[float] | np.ndarray, groups: Sequence[str], confidence: float
                         ) -> tuple[float, float] | None:
    """(low, high) covering ``confidence`` of a new residual from a new *group* (a source not in the sample):
    CV+ with the groups as folds (Barber, Candes, Ramdas and Tibshirani 2021, "Predictive inference with
    the jackknife+", K-fold CV+) and the median as the model. Each residual ``r_i`` is compared with the
    median ``m_i`` of the *other* groups' residuals; the band's ends are the ``floor(alpha (n + 1))``-th
    smallest of ``m_i - |r_i - m_i|`` and the ``ceil((1 - alpha) (n + 1))``-th smallest of ``m_i + |r_i - m_i|``.

    Why not the plain split-conformal band of the residuals: rows of one source share its setup (its
    software, its harness, its kind of measurement), so they are not exchangeable with another source's
    rows; a band from the pooled rows sees only the spread inside the sources it has and under-covers a
    new source. Comparing each source with the centre the others give measures the between-source
    spread (and the centre's own error) directly. None: fewer than two groups (nothing to compare a
    source with) or fewer than ``minimum_residuals(confidence)`` residuals."""
    values = np.asarray(residuals, dtype=float)
    labels = list(groups)
    if len(labels) != values.size:
        raise ValueError(f"{values.size} residuals but {len(labels)} group labels")
    if values.size < minimum_residuals(confidence) or len(set(labels)) < 2:
        return None
    centres = np.empty(values.size)
    for label in set(labels):
        inside = np.array([item == label for item in labels])
        centres[inside] = np.median(values[~inside])
    spread = np.abs(values - centres)
    alpha = 1 - confidence
    lows, highs = np.sort(centres - spread), np.sort(centres + spread)
    low_rank, high_rank = math.floor(alpha * (values.size + 1) + 1e-9), math.ceil((1 - alpha) * (values.size + 1) - 1e-9)
    if low_rank < 1 or high_rank > values.size:
        return None
    return float(lows[low_rank - 1]), float(highs[high_rank - 1])


def covers(band: tuple[float, float], residual: float) -> bool:
    return band[0] <= residual <= band[1]


@dataclass(frozen=True, kw_only=True)
class Band:
    """A band of log residuals (time orientation) at a confidence, with what it rests on.
    ``low``/``high`` None: no evidence (``basis`` says why)."""

    confidence: float
    basis: str
    low: float | None = None
    high: float | None = None
    residuals: int = 0

    @property
    def known(self) -> bool:
        return self.low is not None and self.high is not None


@dataclass(frozen=True, kw_only=True)
class Interval:
    """A predicted value with its ``low``-``high`` interval at ``confidence`` (None: no evidence)."""

    value: float
    confidence: float
    basis: str
    low: float | None = None
    high: float | None = None

    def to_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "confidence": self.confidence,
                "basis": self.basis}

    def scaled(self, factor: float) -> Interval:
        """The same interval of ``factor`` x the quantity (a per-chip rate from a total, say); factor > 0."""
        return replace(self, value=self.value * factor, low=None if self.low is None else self.low * factor,
                       high=None if self.high is None else self.high * factor)


def interval(value: float, band: Band, orientation: str) -> Interval:
    """``value`` (a time or a rate, ``orientation``) with ``band``'s interval."""
    if orientation not in (RATE, TIME):
        raise ValueError(f"orientation must be {RATE!r} or {TIME!r}, got {orientation!r}")
    if not band.known or not math.isfinite(value):
        return Interval(value=value, confidence=band.confidence, basis=band.basis)
    assert band.low is not None and band.high is not None
    if orientation == TIME:
        low, high = value * math.exp(-band.high), value * math.exp(-band.low)
    else:
        low, high = value * math.exp(band.low), value * math.exp(band.high)
    return Interval(value=value, confidence=band.confidence, basis=band.basis, low=low, high=high)


def combine(model_form: Band, parameter: tuple[float, float] | None, parameter_basis: str = "") -> Band:
    """``model_form`` widened by a parameter band ``(low, high)`` (log spread of the sampled predictions
    around the nominal one, time orientation: ``parameter_band``), by ``combined_bounds``. No
    model-form evidence stays no evidence: a parameter spread alone would claim a precision the model
    has not shown."""
    if not model_form.known or parameter is None:
        return model_form
    assert model_form.low is not None and model_form.high is not None
    low, high = combined_bounds(model_form.low, model_form.high, parameter[0], parameter[1])
    basis = model_form.basis + (f"; with {parameter_basis}" if parameter_basis else "")
    return replace(model_form, low=float(low), high=float(high), basis=basis)


def combined_bounds(low, high, parameter_low, parameter_high):
    """The model-form band ``(low, high)`` (residuals ``r``) widened by a parameter spread
    ``(parameter_low, parameter_high)`` of ``p = log(sampled / nominal)`` (floats, or arrays of sweep
    points): the truth's residual against the nominal prediction is ``r - p`` (module docstring), so
    each side's distance from the band's centre adds in quadrature with the spread's opposite end
    (``p``'s high end lowers the band's low end: a slower truth)."""
    centre = (np.asarray(low) + np.asarray(high)) / 2
    return (centre - np.hypot(centre - low, parameter_high), centre + np.hypot(high - centre, parameter_low))


# ---- parameter uncertainty -------------------------------------------------------------------

RELATIVE_FLOOR = 1e-3  # a relative draw below -100% keeps 0.1% of the value (an efficiency must stay above 0)


UNBOUND_LOG_VARIANCE = 100.0  # ``parameter_samples``: beyond it a parameter counts as unbound


def parameter_samples(nominal: Parameters, names: Sequence[str], log_covariance: np.ndarray, samples: int,
                      seed: int = 0, *, relative: bool = False) -> list[Parameters]:
    """``samples`` parameter sets drawn around ``nominal``: the fitted parameters ``names`` (``section:key``
    as ``hardware.model.FIT_SECTIONS`` spells them: ``compute:matmul``, ``memory:hbm``, ``latency:matmul``...)
    move together with ``log_covariance`` (their fit's covariance in log space: log-normal draws) or, with
    ``relative``, a covariance of relative changes (``value x (1 + draw)``, at least ``RELATIVE_FLOOR`` x
    the value: ``hardware.model.FitCovariance``); the others stay at ``nominal``. A name ``nominal`` does
    not carry, or with an infinite variance (the fit left it unbound), is skipped. The covariance may be
    semi-definite (values copied from one fitted parameter move together); eigenvalues below zero from
    rounding count as zero."""
    covariance = np.asarray(log_covariance, dtype=float)
    if covariance.shape != (len(names), len(names)):
        raise ValueError(f"covariance of shape {covariance.shape} for {len(names)} parameters")
    rng = np.random.default_rng(seed)
    finite = np.all(np.isfinite(covariance), axis=0) & np.all(np.isfinite(covariance), axis=1)
    if not relative:
        # A log variance this large (a standard error of a factor e^10) is a parameter the data do not bind,
        # whatever the optimizer reported: its draws would overflow a float (H100's attention start-up latency
        # fitted on FlashAttention rows that all hold 16k tokens: 7e7).
        finite &= np.diag(covariance) < UNBOUND_LOG_VARIANCE
    kept = [index for index, name in enumerate(names) if finite[index] and _field_of(nominal, name) is not None]
    if not kept:
        return [nominal] * samples
    block = covariance[np.ix_(kept, kept)]
    values, vectors = np.linalg.eigh((block + block.T) / 2)
    factor = vectors * np.sqrt(np.clip(values, 0, None))
    draws = rng.standard_normal((samples, len(kept))) @ factor.T
    result = []
    for draw in draws:
        tables: dict[str, dict[str, float]] = {}
        for offset, index in enumerate(kept):
            field_name, key = _field_of(nominal, names[index])  # type: ignore[misc]
            table = tables.setdefault(field_name, dict(getattr(nominal, field_name)))
            table[key] = table[key] * (max(1 + draw[offset], RELATIVE_FLOOR) if relative else math.exp(draw[offset]))
        result.append(replace(nominal, **tables))  # type: ignore[arg-type]
    return result


def fit_samples(parameters: Parameters, samples: int, seed: int = 0) -> list[Parameters]:
    """``samples`` parameter sets drawn from the covariance ``parameters`` carries (``Parameters.fit``, stored
    by the fitter in the overlay: relative changes); [] when it carries none."""
    if parameters.fit is None:
        return []
    return parameter_samples(parameters, parameters.fit.names, np.asarray(parameters.fit.relative_covariance),
                             samples, seed, relative=True)


def _field_of(parameters: Parameters, name: str) -> tuple[str, str] | None:
    """(Parameters field, key) a fit's parameter ``name`` is written to, if ``parameters`` carries it."""
    section, _, key = name.partition(":")
    field_name = FIT_SECTIONS.get(section)
    if field_name is None or key not in getattr(parameters, field_name):
        return None
    return field_name, key


def parameter_band(nominal: float, sampled: Sequence[float] | np.ndarray, confidence: float,
                   orientation: str) -> tuple[float, float]:
    """The log spread (time orientation) of ``sampled`` predictions around ``nominal`` at ``confidence``:
    central quantiles of ``log(sampled / nominal)`` (negated for a rate)."""
    low, high = parameter_bands(np.asarray(nominal, dtype=float), np.asarray(sampled, dtype=float), confidence,
                                orientation)
    return float(low), float(high)


def parameter_bands(nominal: np.ndarray, sampled: np.ndarray, confidence: float, orientation: str = TIME
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``parameter_band`` of every point at once: ``nominal`` of shape ``points`` and ``sampled`` of shape
    ``(sets, points)`` (each parameter set's prediction at every point)."""
    check_confidence(confidence)
    if orientation not in (RATE, TIME):
        raise ValueError(f"orientation must be {RATE!r} or {TIME!r}, got {orientation!r}")
    values = np.log(np.asarray(sampled, dtype=float) / nominal)
    if orientation == RATE:
        values = -values
    alpha = 1 - confidence
    low, high = np.quantile(values, [alpha / 2, 1 - alpha / 2], axis=0)
    return low, high


def propagate(evaluate: Callable[[Parameters], float], samples: Sequence[Parameters], nominal: Parameters,
              confidence: float, orientation: str) -> tuple[float, float]:
    """The parameter band of one prediction: ``evaluate`` at ``nominal`` and at every sampled set."""
    centre = evaluate(nominal)
    return parameter_band(centre, [evaluate(sample) for sample in samples], confidence, orientation)


def fit_covariance(names: Sequence[str], log_standard_errors: Mapping[str, float]) -> np.ndarray:
    """A diagonal log covariance from per-parameter log standard errors (when a fit reports no
    correlations); a missing or infinite error gives an infinite variance (the parameter is skipped)."""
    variances = [log_standard_errors.get(name, math.inf) ** 2 for name in names]
    return np.diag(variances)
