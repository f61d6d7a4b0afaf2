"""Request streams for the serving simulator: arrival processes and token-length distributions (pure core).

Length distributions are written as text, ``kind:parameters``:

* ``fixed:512`` -- every request has 512 tokens;
* ``uniform:128-1024`` -- integers drawn uniformly from 128 to 1024, both included;
* ``lognormal:600,0.5`` -- a log-normal with mean 600 tokens and shape sigma 0.5 (the standard
  deviation of the underlying normal), rounded to whole tokens, at least 1;
* ``sharegpt-8k``, ``arxiv-summarization-4k`` (``LENGTH_DATASETS``) -- a public dataset's lengths, shipped
  as histograms under ``workloads/lengths/`` (its README gives each one's source and statistics): the
  prompt side for a prompt distribution, the output side for an output one (``NAME:prompt`` or
  ``NAME:output`` to choose); prompts and outputs are drawn independently (the pairing is not kept);
* ``lengths.csv`` (any path ending in ``.csv``, or ``empirical:PATH``) -- an empirical distribution
  read from a file (``read_length_csv``): one column of lengths (each row one observation), or two
  columns ``value,weight`` (a length and its weight or count); an optional header row; blank lines and
  lines starting with ``#`` are skipped.

Request traces (``read_trace``) are CSV files with a header row and one request a row: an arrival
column (``arrival_s``, ``arrival_time_s``, ``arrival_time`` or ``arrival``: seconds, replayed as
written; or ``timestamp``: seconds since any epoch, or ISO 8601 date-times, replayed relative to the
first row), a prompt-length column (``prompt_tokens``, ``input_tokens``, ``input_len``,
``prompt_len``, ``context_tokens``) and an output-length column (``output_tokens``, ``output_len``,
``generated_tokens``, ``completion_tokens``). Names are matched ignoring case, spaces and
underscores (so the Azure LLM inference traces' ``TIMESTAMP,ContextTokens,GeneratedTokens`` read
as they are); other columns are ignored. Rows must be sorted by arrival.

Open-loop arrivals (``ArrivalProcess``): ``poisson`` (exponential gaps at a rate, from a seeded
numpy Generator), ``fixed`` (one request every 1/rate seconds) and ``burst`` (every request at t = 0).
Closed-loop users (``ClosedLoop``) each send one request, wait for its last token, think for a fixed
time, and send the next.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.paths import data_directory

ARRIVAL_KINDS = ("poisson", "fixed", "burst")
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
#: Named request-length datasets: ``workloads/lengths/NAME_prompt.csv`` and ``NAME_output.csv`` (README
#: there: the upstream files, their processing and the statistics each histogram keeps).
LENGTH_DATASETS = ("sharegpt-8k", "arxiv-summarization-4k")
LENGTH_SIDES = ("prompt", "output")
#: Datasets a planner may name whose lengths are not shipped, and why (no histogram or summary statistics
#: that fix a distribution are available to this project).
UNSHIPPED_DATASETS = {
    "openorca": "MLPerf's Llama-2-70B OpenOrca set (24,576 samples) is documented only by its filter (input and "
                "output below 1,024 tokens, language/llama2-70b/processorca.py) and the reference run's mean of "
                "294.45 output tokens (language/llama2-70b/README.md, mlcommons/inference); no input-length "
                "statistic is published there, so no distribution is shipped",
    "sharegpt": "vLLM's and SGLang's '--dataset-name sharegpt' sampling (the first turn of "
                "ShareGPT_V3_unfiltered_cleaned_split.json, prompts up to 1,024 tokens) is not shipped; "
                "'sharegpt-8k' is Sarathi-Serve's processed ShareGPT (whole conversations, up to 8k tokens)",
}


@dataclass(frozen=True, kw_only=True)
class LengthDistribution:
    """Token counts of prompts or outputs: ``kind`` is fixed, uniform, lognormal or empirical."""

    kind: str
    low: float = 0.0  # fixed: the value; uniform: the lower bound; lognormal: the mean
    high: float = 0.0  # uniform: the upper bound; lognormal: sigma
    # empirical: the distinct lengths, their probabilities, the file and the line of each length's
    # first row (for error messages)
    values: tuple[int, ...] = ()
    probabilities: tuple[float, ...] = ()
    source: str = ""
    lines: tuple[int, ...] = field(default=(), compare=False, repr=False)
    column: str = field(default="value", compare=False, repr=False)

    @property
    def text(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{int(self.low)}"
        if self.kind == "uniform":
            return f"uniform:{int(self.low)}-{int(self.high)}"
        if self.kind == "empirical":
            return f"{Path(self.source).name} ({len(self.values)} lengths, mean {self.mean:.0f})"
        return f"lognormal:{self.low:g},{self.high:g}"

    @property
    def mean(self) -> float:
        """The distribution's mean (before rounding, for lognormal)."""
        if self.kind == "empirical":
            return float(np.dot(self.values, self.probabilities))
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        return self.low

    @property
    def largest(self) -> int | None:
        """The largest value it can draw (None: unbounded)."""
        if self.kind == "empirical":
            return max(self.values)
        return None if self.kind == "lognormal" else int(self.high if self.kind == "uniform" else self.low)

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(count, int(self.low), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.low), int(self.high), endpoint=True, size=count).astype(np.int64)
        if self.kind == "empirical":
            return rng.choice(np.asarray(self.values, dtype=np.int64), size=count,
                              p=np.asarray(self.probabilities))
        mean, sigma = self.low, self.high
        values = rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, size=count)
        return np.maximum(np.rint(values), 1).astype(np.int64)

    def check_context(self, limit: int, model: str, what: str = "length") -> None:
        """An empirical distribution with a length of ``limit`` tokens or more is an error (the
        parametric ones are clipped to the context when drawn)."""
        if self.kind != "empirical":
            return
        for value, line in zip(self.values, self.lines, strict=True):
            if value >= limit:
                raise PerfmodelError(
                    f"{what} file {self.source}, line {line}, column {self.column!r}: {value} tokens do not fit "
                    f"{model}'s context of {limit} tokens (a sequence needs its prompt and at least one output "
                    f"token); drop the row or cap the lengths below {limit}")


def parse_length(text: str, what: str = "length") -> LengthDistribution:
    """``fixed:N``, ``uniform:LO-HI``, ``lognormal:MEAN,SIGMA``, a shipped dataset's name (``NAME`` or
    ``NAME:prompt|output``; a bare name takes the side ``what`` names) or a CSV file of lengths (see the
    module docstring)."""
    raw = str(text).strip()
    spec = raw.lower()
    name, _, side = spec.partition(":")
    if name in LENGTH_DATASETS or name in UNSHIPPED_DATASETS:
        return dataset_lengths(name, side or _side(what), what)
    if spec.startswith("empirical:"):
        return read_length_csv(raw.split(":", 1)[1].strip(), what)
    if spec.endswith(".csv"):
        return read_length_csv(raw, what)
    expected = (f"{what} {text!r}: expected 'fixed:512', 'uniform:128-1024', 'lognormal:600,0.5', a dataset's "
                f"name ({', '.join(LENGTH_DATASETS)}) or a CSV file of lengths, 'lengths.csv' (whole tokens of at "
                "least 1; lognormal: mean tokens, sigma > 0)")
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


def _side(what: str) -> str:
    """The side of a request a flag or label names: output for '--output-dist', 'output', '--gen', else prompt."""
    lowered = what.lower()
    return "output" if "output" in lowered or "gen" in lowered else "prompt"


def dataset_lengths(name: str, side: str, what: str = "length") -> LengthDistribution:
    """A shipped dataset's prompt or output lengths (``LENGTH_DATASETS``), an empirical distribution read
    from ``workloads/lengths/NAME_SIDE.csv``."""
    if name in UNSHIPPED_DATASETS:
        raise PerfmodelError(f"{what} {name!r}: {UNSHIPPED_DATASETS[name]}; shipped datasets: "
                             f"{', '.join(LENGTH_DATASETS)} (workloads/lengths/README.md), or give a CSV file of the "
                             "lengths you have")
    if name not in LENGTH_DATASETS:
        raise PerfmodelError(f"{what} {name!r}: no such dataset; expected one of {', '.join(LENGTH_DATASETS)}")
    if side not in LENGTH_SIDES:
        raise PerfmodelError(f"{what} '{name}:{side}': expected '{name}', '{name}:prompt' or '{name}:output'")
    return read_length_csv(data_directory("workloads") / "lengths" / f"{name}_{side}.csv", what)


# ------------------------------------------------------------------------------------------ CSV files

def _rows(path: str | Path, what: str) -> list[tuple[int, list[str]]]:
    """The non-blank, non-comment rows of a CSV file with their line numbers (1-based)."""
    path = Path(path)
    if not path.is_file():
        raise PerfmodelError(f"{what} file {path} does not exist (or is not a file)")
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            rows: list[tuple[int, list[str]]] = []
            line = 1
            for row in reader:
                cells = [cell.strip() for cell in row]
                if any(cells) and not cells[0].startswith("#"):
                    rows.append((line, cells))
                line = reader.line_num + 1
    except UnicodeDecodeError as error:
        raise PerfmodelError(f"{path}: not a UTF-8 text file ({error.reason} at byte {error.start}); save it as "
                             "UTF-8 CSV") from None
    except csv.Error as error:
        raise PerfmodelError(f"{path}, line {line}: not valid CSV ({error}); check its quotes") from None
    return rows


def _number(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _tokens(cell: str, where: str, column: str, minimum: int = 1) -> int:
    value = _number(cell)
    if value is not None and value == int(value) and value >= minimum:
        return int(value)
    problem = ("is not a number" if value is None else "is negative" if value < 0
               else "is not a whole number" if value != int(value) else f"is below {minimum}")
    raise PerfmodelError(f"{where}, column {column!r}: {cell!r} {problem}; token counts are whole numbers of at "
                         f"least {minimum} (fix or delete the row)")


def read_length_csv(path: str | Path, what: str = "length") -> LengthDistribution:
    """An empirical length distribution from a CSV file: one column of lengths, or ``value,weight``
    rows (a header row is optional: a first row whose first cell is not a number)."""
    rows = _rows(path, what)
    usage = ("one length a row (e.g. '512'), or 'value,weight' rows (e.g. '512,3'), an optional header row "
             "first")
    if not rows:
        raise PerfmodelError(f"{what} file {path} is empty: expected {usage}")
    header = ["value", "weight"]
    if _number(rows[0][1][0]) is None:
        line, header = rows[0]
        rows = rows[1:]
        if not rows:
            raise PerfmodelError(f"{what} file {path} has a header (line {line}) but no lengths: expected {usage}")
    width = len(rows[0][1])
    if width > 2:
        raise PerfmodelError(f"{what} file {path}, line {rows[0][0]}: {width} columns; expected {usage}")
    weights: dict[int, float] = {}
    first_line: dict[int, int] = {}
    for line, cells in rows:
        where = f"{what} file {path}, line {line}"
        if len(cells) != width:
            raise PerfmodelError(f"{where}: {len(cells)} cell{'s' if len(cells) != 1 else ''} where the first row "
                                 f"has {width}; expected {usage}")
        value = _tokens(cells[0], where, header[0])
        weight = 1.0
        if width == 2:
            number = _number(cells[1])
            column = header[1] if len(header) > 1 else "weight"
            if number is None or number < 0:
                raise PerfmodelError(f"{where}, column {column!r}: {cells[1]!r} is "
                                     f"{'not a number' if number is None else 'negative'}; a weight is a count or "
                                     "probability of at least 0 (fix or delete the row)")
            weight = number
        weights[value] = weights.get(value, 0.0) + weight
        first_line.setdefault(value, line)
    total = sum(weights.values())
    if total <= 0:
        raise PerfmodelError(f"{what} file {path}: every weight is 0; give at least one length a positive weight")
    values = sorted(value for value, weight in weights.items() if weight > 0)
    return LengthDistribution(kind="empirical", values=tuple(values),
                              probabilities=tuple(weights[value] / total for value in values),
                              source=str(path), lines=tuple(first_line[value] for value in values),
                              column=header[0])


ARRIVAL_COLUMNS = ("arrival_s", "arrival_time_s", "arrival_time", "arrival")
TIMESTAMP_COLUMNS = ("timestamp", "timestamp_s")
PROMPT_COLUMNS = ("prompt_tokens", "input_tokens", "input_len", "prompt_len", "context_tokens")
OUTPUT_COLUMNS = ("output_tokens", "output_len", "generated_tokens", "completion_tokens")


def _key(name: str) -> str:
    return re.sub(r"[\s_]", "", name.lower())


@dataclass(frozen=True, kw_only=True)
class Trace:
    """Requests read from a file: arrival times (seconds), prompt and output tokens, and each row's
    line in ``source``."""

    source: str
    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    lines: tuple[int, ...] = field(compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def head(self, count: int) -> Trace:
        """The first ``count`` requests."""
        return Trace(source=self.source, arrival_s=self.arrival_s[:count], prompt_tokens=self.prompt_tokens[:count],
                     output_tokens=self.output_tokens[:count], lines=self.lines[:count])

    @property
    def longest(self) -> int:
        return max(p + o for p, o in zip(self.prompt_tokens, self.output_tokens, strict=True))

    def check_context(self, limit: int, model: str) -> None:
        """Every request's prompt + output tokens must fit the model's context of ``limit`` tokens."""
        for line, prompt, output in zip(self.lines, self.prompt_tokens, self.output_tokens, strict=True):
            if prompt + output > limit:
                raise PerfmodelError(
                    f"{self.source}, line {line}: prompt {prompt} + output {output} = {prompt + output} tokens is "
                    f"beyond {model}'s context of {limit} tokens; drop or truncate the row, or pick a model with a "
                    "longer context")


def _timestamp(cell: str) -> float | None:
    """Seconds: a number as it is, or an ISO 8601 date-time as seconds since the epoch (UTC when it
    has no zone)."""
    number = _number(cell)
    if number is not None:
        return number
    try:
        moment = datetime.fromisoformat(cell)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def read_trace(path: str | Path) -> Trace:
    """A request trace (see the module docstring): PerfmodelError naming the file, line and column of
    the first bad cell."""
    rows = _rows(path, "trace")
    example = "arrival_s,prompt_tokens,output_tokens then rows like 0.25,512,128"
    if not rows:
        raise PerfmodelError(f"trace file {path} is empty: expected a header row and one request a row ({example})")
    header_line, header = rows[0]
    keys = [_key(name) for name in header]

    def find(names: tuple[str, ...]) -> int | None:
        for name in names:
            if _key(name) in keys:
                return keys.index(_key(name))
        return None

    arrival, stamped = find(ARRIVAL_COLUMNS), False
    if arrival is None and (arrival := find(TIMESTAMP_COLUMNS)) is not None:
        stamped = True
    columns = {"arrival": arrival, "prompt": find(PROMPT_COLUMNS), "output": find(OUTPUT_COLUMNS)}
    names = {"arrival": ARRIVAL_COLUMNS + TIMESTAMP_COLUMNS, "prompt": PROMPT_COLUMNS, "output": OUTPUT_COLUMNS}
    for role, index in columns.items():
        if index is None:
            found = ", ".join(repr(name) for name in header)
            hint = (" (it has no header row: add one)" if _number(header[0]) is not None else "")
            raise PerfmodelError(
                f"{path}, line {header_line} (header): no {role} column{hint}; found {found}; name a column "
                f"{' or '.join(repr(name) for name in names[role])} ({example})")
    a, p, o = columns["arrival"], columns["prompt"], columns["output"]
    assert a is not None and p is not None and o is not None
    rows = rows[1:]
    if not rows:
        raise PerfmodelError(f"trace file {path} has a header (line {header_line}) but no requests ({example})")
    times: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    lines: list[int] = []
    previous = ""
    for line, cells in rows:
        where = f"{path}, line {line}"
        if len(cells) <= max(a, p, o):
            missing = header[min(index for index in (a, p, o) if index >= len(cells))]
            raise PerfmodelError(f"{where}, column {missing!r}: missing ({len(cells)} cells where the header has "
                                 f"{len(header)}); fill the row or delete it")
        cell = cells[a]
        moment = _timestamp(cell) if stamped else _number(cell)
        if moment is None:
            kind = "a number of seconds or an ISO 8601 date-time" if stamped else "a number of seconds"
            raise PerfmodelError(f"{where}, column {header[a]!r}: {cell!r} is not {kind}; fix or delete the row")
        if moment < 0:
            raise PerfmodelError(f"{where}, column {header[a]!r}: {cell!r} is negative; arrival times are seconds of "
                                 "at least 0 (shift them so the first is 0)")
        if times and moment < times[-1]:
            raise PerfmodelError(f"{where}, column {header[a]!r}: {cell!r} is before the previous row's arrival "
                                 f"(line {lines[-1]}: {previous!r}); sort the rows by arrival time (the header "
                                 "stays first)")
        times.append(moment)
        previous = cell
        prompts.append(_tokens(cells[p], where, header[p]))
        outputs.append(_tokens(cells[o], where, header[o]))
        lines.append(line)
    if stamped:
        times = [t - times[0] for t in times]
    return Trace(source=str(path), arrival_s=tuple(times), prompt_tokens=tuple(prompts),
                 output_tokens=tuple(outputs), lines=tuple(lines))


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
