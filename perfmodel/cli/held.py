"""How ``perfmodel size`` (and the explorer's sizing view) holds a system's targets at a confidence.

A deployment meets a target ``L`` at confidence ``c`` when the upper end of the ``c`` interval of its
simulated time ``T`` is at most ``L``: ``T <= f L``. Two sources make ``f``:

* **model-form** (``intervals.time_factor``): ``f0 = exp(low)``, ``low`` the low end of the served
  rows' band; the screen (``serving.sizing``: steady-state options, replica floors) holds the
  targets at ``f0``;
* **parameters**: where the overlay stores its fit's covariance, the band's low end is widened by the
  spread of the step times (``uncertainty.combined_bounds``): for each parallelism the sizing
  simulates, ``llm_predict`` prices the mean request at ``SPREAD_BATCHES`` on the nominal parameters and
  at every set drawn from the covariance (the array path: one evaluation a set), and a TTFT target
  takes the prefill's (``ttft_s``) widest upper spread over the batches, a TPOT target the decode's
  (``tpot_s``). The simulated check of that parallelism then holds each target at
  ``f(metric) = exp(centre - hypot(centre - low, spread))`` (``<= f0``).

**Assumption:** a simulated statistic moves with the parameters as the step times do: queueing can
amplify a slower step near saturation, which the sized deployments (which meet their targets) are
not. ``at_median``: the median residual, no spread (a symmetric spread does not move a median).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

SPREAD_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # a replica runs 1..max_batch (256 by default) sequences
METRIC_FIGURES = {"ttft": "ttft_s", "tpot": "tpot_s"}  # a target's metric -> the step time it moves with


@dataclass(frozen=True, kw_only=True)
class HeldTargets:
    """A system's targets held at ``level`` (None: the median): ``factor`` (model-form) and, with
    parameter sets, ``extra(parallelism)`` (metric -> a further factor <= 1 for the simulated check)."""

    level: float | None
    factor: float
    basis: str
    extra: Callable[[object], Mapping[str, float]] | None = field(default=None, compare=False)
    spread_basis: str = ""

    def screened(self, targets: Sequence) -> list:
        """``targets`` as the screen holds them (the model-form factor)."""
        return [replace(target, limit_s=target.limit_s * self.factor) for target in targets]

    def block(self, parallelism, metrics: Sequence[str]) -> dict:
        """The JSON block of a sized system (``parallelism``: its deployment's, None if none): its level,
        its factor per targeted metric (the strictest as ``limit_factor``) and what they rest on."""
        factors = {metric: self.factor for metric in metrics}
        if self.extra is not None and parallelism is not None:
            extra = self.extra(parallelism)
            factors = {metric: self.factor * extra[metric] for metric in metrics}
        basis = self.basis + (f"; with {self.spread_basis}" if self.extra is not None else "")
        return {"level": self.level, "limit_factor": min(factors.values(), default=self.factor),
                "limit_factors": factors, "basis": basis}


def held_targets(architecture, hardware, level: float | None, samples: int, *, prompt_tokens: int,
                 output_tokens: int, weight_dtype: str, kv_dtype: str, activation_dtype: str,
                 expert_weight_dtype: str | None, mode: str | None) -> HeldTargets:
    """How ``size`` holds ``hardware``'s targets at ``level`` (module docstring); ``samples``: the
    parameter sets to draw (``cli.confidence.parameter_sets``)."""
    from perfmodel.cli.confidence import parameter_sets
    from perfmodel.intervals import band_for, time_factor

    factor, basis = time_factor(hardware, "served", level)
    if level is None:
        return HeldTargets(level=None, factor=factor, basis=basis)
    band = band_for(hardware, "served", level)
    if not band.known:  # no evidence: the point prediction, as time_factor's basis says
        return HeldTargets(level=level, factor=factor, basis=basis)
    sets, spread_basis = parameter_sets(hardware, "served", level, samples)
    if not sets:
        return HeldTargets(level=level, factor=factor, basis=f"{basis}; {spread_basis}")
    assert band.low is not None and band.high is not None
    ends = (band.low, band.high)
    scenario = _mean_request(prompt_tokens, output_tokens, weight_dtype, kv_dtype, activation_dtype,
                             expert_weight_dtype)
    cache: dict = {}

    def extra(parallelism) -> dict[str, float]:
        if parallelism not in cache:
            cache[parallelism] = _extra(architecture, hardware, scenario, parallelism, mode, sets, level,
                                        ends, factor)
        return cache[parallelism]

    return HeldTargets(level=level, factor=factor, basis=basis, extra=extra,
                       spread_basis=f"{spread_basis}: the step times' spread, llm at batch 1-256 per parallelism")


def _mean_request(prompt_tokens, output_tokens, weight_dtype, kv_dtype, activation_dtype, expert_weight_dtype):
    from perfmodel.llm import Scenario

    batches = np.asarray(SPREAD_BATCHES, dtype=np.int64)
    return Scenario(batch=batches, prompt_tokens=np.full(batches.size, prompt_tokens),
                    generated_tokens=np.full(batches.size, output_tokens), weight_dtype=weight_dtype,
                    kv_dtype=kv_dtype, activation_dtype=activation_dtype, expert_weight_dtype=expert_weight_dtype)


def _extra(architecture, hardware, scenario, parallelism, mode, sets, level: float, band: tuple[float, float],
           factor: float) -> dict[str, float]:
    """Each metric's further factor on ``parallelism``: the combined band's low end over the model-form one."""
    from perfmodel.llm import llm_predict
    from perfmodel.uncertainty import combined_bounds, parameter_bands

    nominal = llm_predict(architecture, hardware, scenario, parallelism, mode=mode)
    runs = [llm_predict(architecture, replace(hardware, efficiency=parameters), scenario, parallelism, mode=mode)
            for parameters in sets]
    out = {}
    for metric, name in METRIC_FIGURES.items():
        low, high = parameter_bands(np.asarray(getattr(nominal, name)),
                                    np.stack([np.asarray(getattr(run, name)) for run in runs]), level)
        finite = np.isfinite(high)
        spread = (float(np.min(low[finite])), float(np.max(high[finite]))) if finite.any() else (0.0, 0.0)
        combined, _ = combined_bounds(band[0], band[1], spread[0], spread[1])
        out[metric] = min(math.exp(float(combined)) / factor, 1.0)
    return out
