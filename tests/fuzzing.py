"""A seeded mutation fuzzer of every input kind of the command line, shared by ``tests/test_fuzz.py``
(a few hundred cases per kind) and ``benchmarks/fuzz.py`` (thousands): the mutations, the run of one
case and its judgement. The input kinds (seed files, command lines) are in ``tests/fuzz_inputs.py``.

A case mutates a shipped seed file (a spec, a workload, an LLM config, a measurements file, a serving
trace or length CSV) or a valid command line, runs ``perfmodel.cli.main`` on it in a directory of its
own, and judges what came back:

* the exit code is 0 or 2: no escaping exception, no internal error (70), no traceback on stderr;
  exit 2 says ``perfmodel: error:``;
* exit 0 accepted nothing impossible: ``--json`` output parses with a strict parser (no NaN or
  Infinity) and its times, bytes and FLOPs are finite and not negative; an accepted spec loads with
  finite, positive peaks, bandwidths and capacities (and predicts a workload the same way); accepted
  measurement records have finite, positive durations and finite, non-negative counters; an output
  path with an extension the command does not write is not accepted; nothing is written into the
  working directory unasked.

Every case is seeded by ``(kind, index)`` alone, so one case reruns by itself: ``run_case(kind, index)``.

Speed: ``perfmodel calibrate`` stops where the fit would start (the records and the fit's components
are built and checked; the fit itself takes seconds and is covered by tests/test_calibrate_routes.py);
``serve`` and ``size`` stop where the simulator is built, except every ``FULL_EVERY``-th case, which
simulates. ``full=True`` (``benchmarks/fuzz.py --full``) runs everything.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import math
import os
import random
import re
import shutil
import signal
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import yaml

from perfmodel.errors import PerfmodelError

# The fuzzer's own YAML reading and writing (not perfmodel's): libyaml where installed, for speed.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_yaml(text: str):
    return yaml.load(text, Loader=_LOADER)


def dump_yaml(data) -> str:
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
FULL_EVERY = 16         # serve/size cases that run the simulator (the rest stop before it)
CASE_TIME_LIMIT_S = 60  # a case that runs longer hangs on its input: a failure
ACCEPTED = "fuzz: input accepted"  # what the stand-ins of the fit and the simulator raise

NAN, INF = float("nan"), float("inf")
JSON_VALUES = [None, True, False, 0, -1, -0.0, 0.5, 1.5, 1e308, -1e308, 1e-320, 10**30, -(10**30), NAN, INF, -INF,
               "", "text", "12", "-3", "nan", "1e400", [], [1, 2], [[1, 2], "x"], {}, {"a": 1}, [None], [-1, 0]]
UNIT_VALUES = ["-1 GB/s", "0 TB/s", "nan TB/s", "inf GB", "1e400 TB/s", "1e-300 B/s", "1e30 TB/s", "3.35", "80 GB",
               "4 us", "-4 us", "0 us", "12 TFLOP/s", "0 TFLOP/s", "1 GHz", "-700 W", "0 W", "1e9 W", "1 fortnight",
               "GB", "1 GiB/s", "1e30 FLOP/s", "0 B", "bf17", "matmul", "graph", "!!python/name:os.system", "&a x",
               "*missing", "{a: 1}", "[", "'unterminated"]
CELL_VALUES = ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "-1", "-0.5", "0", "-0", "1e308", "1e-320",
               "9" * 30, "1.5", "abc", "", " ", "1.2.3", "0x10", "null", "true", "1,5", "1 000", "\u00bd", "-7",
               "[1, 2]", "{}", '{"dram": -1}', '{"dram": "x"}', "[[1, -4]]", "[[1.5, 2]]", "[[]]"]
TEXT_TOKENS = ["", "0", "-1", "3.5", "nan", "1e400", "[1, 2]", "{a: 1}", "~", "true", "'x'", "bf17", "-7", "1.5",
               "9999999999999999999999", "&a x", "*missing", "[", "'unterminated", "-1 GB", "1e400 TB/s"]
TOO_BIG_COUNT = "9" * 24
QUANTITY = re.compile(r"^\s*([-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*[A-Za-z/%]")
SCALES = ["0", "-1", "-0", "1e-30", "1e30", "nan", "inf", "1e400", "0.001", "1e12"]


# ----------------------------------------------------------------------------------------- mutations
def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


def _get(node, path):
    for key in path:
        node = node[key]
    return node


def mutate_tree(data, rng: random.Random, values: list):
    """One structural mutation of JSON-like data: replace, delete, rescale, retype, duplicate or add."""
    data = copy.deepcopy(data)
    paths = list(_paths(data))
    leaves = [path for path in paths if not isinstance(_get(data, path), (dict, list))]
    path = rng.choice(leaves if leaves and rng.random() < 0.7 else paths)
    node = _get(data, path)
    parent = _get(data, path[:-1]) if path else None
    operation = rng.randrange(6)
    if not path:
        return rng.choice(values + [[data], "text"])
    quantity = QUANTITY.match(node) if isinstance(node, str) else None
    if quantity and rng.random() < 0.6:  # the same unit, an impossible (or implausible) number
        parent[path[-1]] = rng.choice(SCALES) + node[quantity.end(1):]
        return data
    if isinstance(node, (int, float)) and not isinstance(node, bool) and rng.random() < 0.4:
        parent[path[-1]] = rng.choice([0, -1, -node, 1e30, 1e-30, NAN, INF, node + 0.5, 10**30, 2**63])
        return data
    if operation == 0:
        parent[path[-1]] = copy.deepcopy(rng.choice(values))
    elif operation == 1:
        del parent[path[-1]]
    elif operation == 2 and isinstance(node, (int, float)) and not isinstance(node, bool):
        parent[path[-1]] = rng.choice([-node, 0, node * 1e30, node / 1e30, node + 0.5, -1])
    elif operation == 3:
        parent[path[-1]] = rng.choice([str(node), [node], {"value": node}])
    elif operation == 4 and isinstance(parent, list):
        parent.insert(path[-1], copy.deepcopy(node))
    elif isinstance(parent, dict):
        parent[rng.choice(["extra", "source", "peak", "args", "dur", "name"]) + "_x"] = rng.choice(values)
    else:
        parent[path[-1]] = copy.deepcopy(rng.choice(values))
    return data


def mutate_lines(text: str, rng: random.Random, tokens: list[str]) -> str:
    """One line-level mutation of YAML-like text (delete, duplicate, re-indent, new value, truncate)."""
    lines = text.splitlines() or [""]
    index = rng.randrange(len(lines))
    operation = rng.randrange(7)
    if operation == 0:
        del lines[index]
    elif operation == 1:
        lines.insert(index, lines[index])
    elif operation == 2 and ":" in lines[index]:
        key, _, _ = lines[index].partition(":")
        lines[index] = f"{key}: {rng.choice(tokens)}"
    elif operation == 3:
        lines[index] = " " * rng.randrange(6) + lines[index].lstrip()
    elif operation == 4:
        return text[: rng.randrange(len(text) + 1)]
    elif operation == 5 and "[" in lines[index]:
        lines[index] = lines[index].replace("[", f"[{rng.choice(tokens)}, ", 1)
    else:
        lines[index] = lines[index].replace(":", rng.choice(["", "::", ": :"]), 1)
    return "\n".join(lines) + "\n"


ALIAS_BOMB = ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]\n" for level in range(1, 9))).encode()


def mutate_bytes(raw: bytes, rng: random.Random) -> bytes:
    """A damaged or hostile file: truncated, emptied, not UTF-8, a NUL, a very long line, YAML aliases
    that expand to 10^9 values ("billion laughs"), nesting 5,000 levels deep."""
    operation = rng.randrange(7)
    if operation == 0:
        return raw[: rng.randrange(len(raw) + 1)]
    if operation == 1:
        return b""
    position = rng.randrange(len(raw) + 1)
    if operation == 2:
        return raw[:position] + b"\xff\xfe\x80" + raw[position:]
    if operation == 3:
        return raw[:position] + b"\x00" + raw[position:]
    if operation == 4:
        return ALIAS_BOMB + raw
    if operation == 5:
        return b"[" * 5000 + raw + b"]" * 5000
    return raw[:position] + b"x" * 200_000 + raw[position:]


def csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def csv_text(rows: list[list[str]], quote_all: bool) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def mutate_csv(text: str, rng: random.Random, *, header_row: int = 0, quote_all: bool = False) -> str:
    """One mutation of a CSV table: a bad cell, a deleted or renamed column, a deleted, repeated, short or
    long row, a mutated JSON cell."""
    rows = csv_rows(text)
    width = len(rows[header_row]) if len(rows) > header_row else 0
    data = [index for index in range(header_row + 1, len(rows)) if rows[index]]
    operation = rng.randrange(8)
    if not data or not width:
        return text[: rng.randrange(len(text) + 1)]
    row = rng.choice(data)
    column = rng.randrange(min(width, len(rows[row])) or 1)
    if operation in (0, 1, 2):
        if column < len(rows[row]):
            cell = rows[row][column]
            if cell[:1] in "[{" and rng.random() < 0.5:
                with contextlib.suppress(ValueError):
                    rows[row][column] = json.dumps(mutate_tree(json.loads(cell), rng, JSON_VALUES))
            else:
                rows[row][column] = rng.choice(CELL_VALUES)
    elif operation == 3:
        for index in range(header_row, len(rows)):
            if column < len(rows[index]):
                del rows[index][column]
    elif operation == 4:
        rows[header_row][column] = rng.choice(["", "name", "duration", "Duration", "bytes", "ID", "x"])
    elif operation == 5:
        del rows[row]
    elif operation == 6:
        rows.insert(row, list(rows[row]))
    else:
        rows[row] = rows[row][: rng.randrange(len(rows[row]) + 1)] if rng.random() < 0.5 else rows[row] + ["extra"]
    return csv_text(rows, quote_all)


def mutate_trace(data, rng: random.Random):
    """A mutation aimed at what trace readers trust: args, ids, shapes, durations, counters."""
    data = copy.deepcopy(data)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    candidates = [event for event in events if isinstance(event, dict)] if isinstance(events, list) else []
    if not candidates:
        return mutate_tree(data, rng, JSON_VALUES)
    event = rng.choice(candidates)
    args = event.get("args") if isinstance(event.get("args"), dict) else event.get("attr")
    operation = rng.randrange(8)
    if operation == 0:
        event[rng.choice(["args", "attr"]) if "attr" in event else "args"] = rng.choice(
            [None, [], "x", 3, [["External id", 1]], True, {"args": {}}])
    elif operation == 1 and isinstance(args, dict):
        args[rng.choice(["External id", "correlation"])] = rng.choice(
            ["1", 1.5, [1], {"id": 1}, None, True, -1, 10**30, NAN, "x"])
    elif operation == 2 and isinstance(args, dict):
        args["Input Dims"] = rng.choice([None, "x", [1, 2], [[-1, 4]], [[1.5, 2]], [["a"]], [[10**30, 10**30],
                                         [10**30, 10**30]], [[]], [[0, 0], [0, 0]], [[2**62, 2**62], [2**62, 2**62]],
                                         {"a": 1}, [[[1]]], [[True, 4]], [[NAN, 4]], [[4, 4]] * 9])
    elif operation == 3:
        event[rng.choice(["dur", "ts"])] = rng.choice([None, "12", "x", -1, 0, NAN, INF, -INF, 1e308, True, [1], 10**30])
    elif operation == 4:
        event[rng.choice(["cat", "ph", "name", "pid", "tid"])] = rng.choice(
            [None, 1, "", "kernel", "cpu_op", "X", "B", [], {"a": 1}, "aten::mm", "aten::addmm", "aten::linear"])
    elif operation == 5 and isinstance(args, dict):
        args[rng.choice(["Input type", "Concrete Inputs"])] = rng.choice(
            [None, "x", [1], ["c10::Half"] * 9, [["x"]], [None, None], ["bogus", "bogus"], {"a": 1}])
    elif operation == 6 and isinstance(args, dict):
        key = rng.choice(["cycles_ts", "TS1", "TS5", "bytes", "Bytes"])
        args[key] = rng.choice([[0, 0, 0, 0, 0], ["0x", 1, 2, 3, 4], [1, 2], [1, 2, 3, 4, "zz"], [-1, 0, 0, 0, 5],
                                [2**40] * 5, "0xzz", "-1", -5, NAN, "1e400", None, [None] * 5, "x", 10**30, "-3"])
    else:
        return mutate_tree(data, rng, JSON_VALUES)
    return data


# ----------------------------------------------------------------------------------------- a case
@dataclass
class Case:
    """What one case runs: files to write (name -> bytes), the command line, and what else to check."""

    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    check: Callable[[Path, str], list[str]] | None = None  # (directory, stdout) -> problems, on exit 0
    stub: str = ""                                          # "fit" or "simulator": stop there (see above)
    outputs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # output flag -> extensions it writes


@dataclass(frozen=True)
class Verdict:
    kind: str
    index: int
    code: int            # exit code; 0 also when a stand-in reported the input accepted
    problems: tuple[str, ...]
    argv: tuple[str, ...]
    files: tuple[tuple[str, str], ...]
    seconds: float
    warnings: tuple[str, ...] = ()
    message: str = ""    # the first line of stderr (the error, on exit 2)

    @property
    def crashed(self) -> bool:
        return bool(self.problems)

    def reproducer(self, limit: int = 1500) -> str:
        files = "".join(f"\n--- {name} ---\n{text[:limit]}" for name, text in self.files)
        return f"{self.kind} case {self.index}: perfmodel {' '.join(repr(a) for a in self.argv)}\n" \
               f"problems: {'; '.join(self.problems)}{files}"


class _CaseTimeout(BaseException):
    """Raised by the alarm in a case that runs too long (not an Exception: main() must not catch it)."""


class _Accepted(PerfmodelError):
    pass


def _strict_json(text: str):
    def refuse(constant: str):
        raise ValueError(f"{constant} in --json output")

    return json.loads(text, parse_constant=refuse)


PHYSICAL_SUFFIXES = ("_s", "bytes", "flops", "_seconds", "time")
# Physical fields that may be null: an interval's bounds where the spec has no evidence for one (NaN by
# design). Any other null time, byte or FLOP count is a NaN or an infinity that ``perfmodel.jsonable``
# wrote as null: a silent wrong answer.
NULL_ALLOWED = (".low", ".high", "_low", "_high",
                # serve/size without --ttft-slo/--tpot-slo: no SLO, so no goodput (None, not NaN)
                ".ttft_slo_s", ".tpot_slo_s", ".goodput_requests_per_s",
                # serve --rates: no knee (throughput keeps growing, or no rate meets the SLO)
                ".knee_rate_per_s")


def json_problems(text: str) -> list[str]:
    """Strict parse; times, bytes and FLOPs finite and not negative."""
    try:
        data = _strict_json(text)
    except ValueError as error:
        return [f"--json output is not strict JSON: {error}"]
    problems: list[str] = []

    def walk(node, path: str, physical: bool) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}", physical or str(key).endswith(PHYSICAL_SUFFIXES))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]", physical)
        elif physical and isinstance(node, (int, float)) and not isinstance(node, bool) and node < 0:
            problems.append(f"--json output {path} = {node} (negative)")
        elif physical and node is None and not str(path).endswith(NULL_ALLOWED):
            problems.append(f"--json output {path} = null (a NaN or an infinity, written as null)")

    walk(data, "", False)
    return problems[:3]


def hardware_problems(hardware) -> list[str]:
    """Every number of a loaded spec finite and not negative; peaks, bandwidths, capacities, clocks,
    unit counts and efficiencies above zero."""
    import dataclasses

    problems: list[str] = []
    positive = ("bandwidth", "peak", "capacity", "units", "instances", "clock", "tdp", "efficiency", "scale",
                "links_per_chip", "max_chips", "granule")

    def walk(node, path: str, name: str) -> None:  # name: the innermost field (a dict's keys are not fields)
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            for item in dataclasses.fields(node):
                walk(getattr(node, item.name), f"{path}.{item.name}", item.name)
        elif isinstance(node, dict) or hasattr(node, "items"):
            for key, value in node.items():
                walk(value, f"{path}.{key}", name)
        elif name == "relative_covariance":  # off-diagonal covariances may be negative; variances may not
            for index, row in enumerate(node):
                if not all(math.isfinite(value) for value in row) or row[index] < 0:
                    problems.append(f"accepted spec value {path}[{index}] = {row!r}")
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]", name)
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            must_be_positive = any(word in name for word in positive)
            if not math.isfinite(node) or node < 0 or (must_be_positive and node == 0):
                problems.append(f"accepted spec value {path} = {node!r}")

    walk(hardware, hardware.name, "")
    return problems[:3]


def record_problems(records) -> list[str]:
    """Accepted measurement records: durations finite and positive, counts whole and positive, FLOPs
    and bytes finite (or NaN: not measured) and not negative."""
    problems = []
    for record in records:
        where = f"record {record.name[:40]!r} ({record.source_file}:{record.source_row})"
        if not (math.isfinite(record.duration_s) and record.duration_s > 0):
            problems.append(f"{where}: accepted duration_s = {record.duration_s!r}")
        if not (math.isfinite(record.spread_s) and record.spread_s >= 0):
            problems.append(f"{where}: accepted spread_s = {record.spread_s!r}")
        if record.count < 1 or record.launches < 0:
            problems.append(f"{where}: accepted count {record.count!r}, launches {record.launches!r}")
        numbers = {"flops": record.flops, **{f"bytes_by_level.{k}": v for k, v in record.bytes_by_level.items()},
                   **{f"flops_by_engine.{k}": v for k, v in record.flops_by_engine.items()}}
        for name, value in numbers.items():
            if math.isinf(value) or value < 0 or (name != "flops" and math.isnan(value)):
                problems.append(f"{where}: accepted {name} = {value!r}")
        if record.page_faults_per_call is not None and not (math.isfinite(record.page_faults_per_call)
                                                            and record.page_faults_per_call >= 0):
            problems.append(f"{where}: accepted page_faults_per_call = {record.page_faults_per_call!r}")
    return problems[:3]


@contextlib.contextmanager
def _stand_ins(stub: str, verdict_problems: list[str]):
    """Stop ``calibrate`` at the fit, or ``serve``/``size`` at the simulator, checking what got there."""
    if stub == "fit":
        def fit(records, spec, **keywords):
            verdict_problems.extend(record_problems(records))
            raise _Accepted(f"{ACCEPTED}: {len(records)} records")

        with mock.patch("calibration.fit.fit", fit):
            yield
    elif stub == "simulator":
        class Server:
            def __init__(self, *args, **keywords):
                raise _Accepted(ACCEPTED)

        def size_deployment(*args, **keywords):
            raise _Accepted(ACCEPTED)

        with mock.patch("perfmodel.serving.Server", Server), \
                mock.patch("perfmodel.serving.sizing.size_deployment", size_deployment):
            yield
    else:
        yield


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``perfmodel.cli.main(argv)`` with stdout and stderr captured; an escaping exception is exit -1
    with its name on stderr."""
    from perfmodel.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except _CaseTimeout:
            raise
        except BaseException as error:  # noqa: BLE001 (what escapes main() is the finding)
            import traceback

            err.write(f"escaped: {type(error).__name__}: {error}\n{traceback.format_exc()}")
            code = -1
    return code, out.getvalue(), err.getvalue()


def judge(code: int, out: str, err: str) -> list[str]:
    problems = []
    if code not in (0, 2):
        problems.append(f"exit {code}: {err.strip().splitlines()[-1] if err.strip() else ''}"[:400])
    if "Traceback" in err:
        problems.append("a traceback on stderr")
    if code == 2 and "perfmodel: error:" not in err and not out.strip():  # specs validate reports on stdout
        problems.append(f"exit 2 without 'perfmodel: error:' or a report: {err[:200]!r}")
    return problems


def run_case(kind: str, index: int, directory: Path, *, full: bool = False, keep: bool = False) -> Verdict:
    """Build case ``index`` of ``kind`` in ``directory`` (created), run it, judge it; the directory is
    removed afterwards unless ``keep`` (the verdict carries the files, for its reproducer)."""
    import time

    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{kind}:{index}")
    from tests.fuzz_inputs import BENCHMARK_KINDS

    case = BENCHMARK_KINDS[kind](rng, directory)
    for name, raw in case.files.items():
        (directory / name).write_bytes(raw)
    before = set(os.listdir(directory))
    stub = "" if full or (case.stub == "simulator" and index % FULL_EVERY == 0) else case.stub
    problems: list[str] = []
    caught: list[str] = []
    message = ""
    start = time.perf_counter()
    previous_directory = os.getcwd()
    handler = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_TIME_LIMIT_S)
    try:
        os.chdir(directory)
        with warnings.catch_warnings(record=True) as recorded, _stand_ins(stub, problems):
            warnings.simplefilter("always")
            code, out, err = run_cli(case.argv)
            if code == 2 and ACCEPTED in err:
                code, err = 0, ""
            message = next((line for line in err.splitlines() if line.startswith("perfmodel: error:")), "")[:300]
            problems += judge(code, out, err)
            if code == 0 and not problems:
                problems += _accepted_problems(case, directory, out, before)
        caught = sorted({f"{w.category.__name__}: {w.message}"[:160] for w in recorded
                         if issubclass(w.category, RuntimeWarning)})
    except _CaseTimeout:
        problems.append(f"ran longer than {CASE_TIME_LIMIT_S} s")
        code = -1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        os.chdir(previous_directory)
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
    files = tuple((name, raw.decode("utf-8", errors="replace")) for name, raw in case.files.items())
    return Verdict(kind=kind, index=index, code=code, problems=tuple(problems), argv=tuple(case.argv), files=files,
                   seconds=time.perf_counter() - start, warnings=tuple(caught), message=message)


def _alarm(signum, frame):
    raise _CaseTimeout()


def _accepted_problems(case: Case, directory: Path, out: str, before: set[str]) -> list[str]:
    problems = []
    if "--json" in case.argv and out.strip():
        problems += json_problems(out)
    for flag, suffixes in case.outputs.items():
        if flag in case.argv:
            value = case.argv[case.argv.index(flag) + 1] if case.argv.index(flag) + 1 < len(case.argv) else ""
            if Path(value).suffix.lower() not in suffixes:
                problems.append(f"accepted {flag} {value!r}: not one of {', '.join(suffixes)}")
    mentioned = " ".join(case.argv)
    for name in set(os.listdir(directory)) - before:
        if name not in mentioned and not name.startswith("fitted"):
            problems.append(f"wrote {name!r} into the working directory unasked")
    if case.check is not None:
        problems += case.check(directory, out)
    return problems
