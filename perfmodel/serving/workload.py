"""Request streams for the serving simulator: arrival processes and token-length distributions (pure core).

Length distributions are written as text, ``kind:parameters``:

* ``fixed:512`` -- every request has 512 tokens;
* ``uniform:128-1024`` -- integers drawn uniformly from 128 to 1024, both included;
* ``lognormal:600,0.5`` -- a log-normal with mean 600 tokens and shape sigma 0.5 (the standard
  deviation of the underlying normal), rounded to whole tokens, at least 1.

Open-loop arrivals (``ArrivalProcess``): ``poisson`` (exponential gaps at a rate, from a seeded
numpy Generator), ``fixed`` (one request every 1/rate seconds) and ``burst`` (every request at t = 0).
Closed-loop users (``ClosedLoop``) each send one request, wait for its last token, think for a fixed
time, and send the next.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from perfmodel.errors import PerfmodelError

ARRIVAL_KINDS = ("poisson", "fixed", "burst")
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"


@dataclass(frozen=True, kw_only=True)
class LengthDistribution:
    """Token counts of prompts or outputs: ``kind`` is fixed, uniform or lognormal."""

    kind: str
    low: float = 0.0  # fixed: the value; uniform: the lower bound; lognormal: the mean
    high: float = 0.0  # uniform: the upper bound; lognormal: sigma

    @property
    def text(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{int(self.low)}"
        if self.kind == "uniform":
            return f"uniform:{int(self.low)}-{int(self.high)}"
        return f"lognormal:{self.low:g},{self.high:g}"

    @property
    def largest(self) -> int | None:
        """The largest value it can draw (None: unbounded)."""
        return None if self.kind == "lognormal" else int(self.high if self.kind == "uniform" else self.low)

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(count, int(self.low), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.low), int(self.high), endpoint=True, size=count).astype(np.int64)
        mean, sigma = self.low, self.high
        values = rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, size=count)
        return np.maximum(np.rint(values), 1).astype(np.int64)


def parse_length(text: str, what: str = "length") -> LengthDistribution:
    """``fixed:N``, ``uniform:LO-HI`` or ``lognormal:MEAN,SIGMA`` (see the module docstring)."""
    spec = str(text).strip().lower()
    expected = (f"{what} {text!r}: expected 'fixed:512', 'uniform:128-1024' or 'lognormal:600,0.5' "
                "(whole tokens of at least 1; lognormal: mean tokens, sigma > 0)")
    if match := re.fullmatch(r"fixed:\s*(\d+)", spec):
        value = int(match.group(1))
        if value < 1:
            raise PerfmodelError(expected)
        return LengthDistribution(kind="fixed", low=value)
    if match := re.fullmatch(r"uniform:\s*(\d+)\s*-\s*(\d+)", spec):
        low, high = int(match.group(1)), int(match.group(2))
        if low < 1 or high < low:
            raise PerfmodelError(expected)
        return LengthDistribution(kind="uniform", low=low, high=high)
    if match := re.fullmatch(rf"lognormal:\s*{_NUMBER}\s*,\s*{_NUMBER}", spec):
        mean, sigma = float(match.group(1)), float(match.group(2))
        if mean < 1 or sigma <= 0 or sigma > 5:
            raise PerfmodelError(expected)
        return LengthDistribution(kind="lognormal", low=mean, high=sigma)
    raise PerfmodelError(expected)


@dataclass(frozen=True, kw_only=True)
class ArrivalProcess:
    """Open-loop arrivals: ``kind`` poisson or fixed at ``rate_per_s``, or burst (all at t = 0)."""

    kind: str = "poisson"
    rate_per_s: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ARRIVAL_KINDS:
            raise PerfmodelError(f"arrival process {self.kind!r}: expected one of {', '.join(ARRIVAL_KINDS)}")
        if self.kind != "burst" and not (math.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise PerfmodelError(f"arrival rate must be a positive number of requests per second, got "
                                 f"{self.rate_per_s!r}")

    def times(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """Arrival times of ``count`` requests, the first at t = 0."""
        if self.kind == "burst":
            return np.zeros(count)
        if self.kind == "fixed":
            return np.arange(count) / self.rate_per_s
        gaps = rng.exponential(1 / self.rate_per_s, size=count)
        gaps[0] = 0.0
        return np.cumsum(gaps)


@dataclass(frozen=True, kw_only=True)
class ClosedLoop:
    """``users`` users; each sends a request at t = 0, and the next ``think_s`` after its last token."""

    users: int
    think_s: float

    def __post_init__(self) -> None:
        if self.users < 1:
            raise PerfmodelError(f"users must be at least 1, got {self.users}")
        if not (math.isfinite(self.think_s) and self.think_s >= 0):
            raise PerfmodelError(f"think time must be a finite time of at least 0 s, got {self.think_s!r}")
