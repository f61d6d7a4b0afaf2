"""A seeded mutation fuzzer of every input kind of the command line, shared by ``tests/test_fuzz.py``
(a few hundred cases per kind) and ``benchmarks/fuzz.py`` (thousands).

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
import gzip
import io
import json
import math
import os
import random
import re
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


def _load_yaml(text: str):
    return yaml.load(text, Loader=_LOADER)


def _dump_yaml(data) -> str:
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


def _csv_rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _csv_text(rows: list[list[str]], quote_all: bool) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def mutate_csv(text: str, rng: random.Random, *, header_row: int = 0, quote_all: bool = False) -> str:
    """One mutation of a CSV table: a bad cell, a deleted or renamed column, a deleted, repeated, short or
    long row, a mutated JSON cell."""
    rows = _csv_rows(text)
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
    return _csv_text(rows, quote_all)


def _trace_focus(data, rng: random.Random):
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
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]", name)
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            must_be_positive = any(word in name for word in positive)
            if not math.isfinite(node) or node < 0 or (must_be_positive and node == 0):
                problems.append(f"accepted spec value {path} = {node!r}")

    walk(hardware, hardware.name, "")
    return problems[:3]


def record_problems(records, parts=None) -> list[str]:
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


def run_case(kind: str, index: int, directory: Path, *, full: bool = False) -> Verdict:
    """Build case ``index`` of ``kind`` in ``directory`` (created), run it, judge it."""
    import time

    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{kind}:{index}")
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


# ----------------------------------------------------------------------------------------- the kinds
SPEC_SEEDS = ["gpu/h100-sxm", "gpu/h100-sxm-achievable", "tpu/tpu-v5e", "lpu/groq-lpu-v1", "wafer/cerebras-wse-3",
              "spyre/ibm-spyre", "cpu/epyc-zen4-2vcpu", "gpu/l4", "gpu/a100-sxm-80gb-achievable",
              "cpu/epyc-zen4-2vcpu-fitted"]
WORKLOAD_SEEDS = ["elementwise_chain", "transformer_block", "small_cnn", "attention_naive", "attention_flash",
                  "gemm_sweep"]
LLM_SEEDS = ["llama-3.1-8b", "mixtral-8x7b", "gpt-j-6b", "gemma-7b", "mistral-7b", "maxtext-32b"]


def _read(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _mutations(rng: random.Random) -> int:
    return rng.choice((1, 1, 1, 2, 2, 3))


def _spec_case(rng: random.Random, directory: Path) -> Case:
    seed = rng.choice(SPEC_SEEDS)
    text = (ROOT / "hardware_specs" / f"{seed}.yaml").read_text(encoding="utf-8")
    for _ in range(_mutations(rng)):
        choice = rng.random()
        if choice < 0.45:
            try:
                data = _load_yaml(text) if text.strip() else {}
                text = _dump_yaml(mutate_tree(data, rng, UNIT_VALUES + JSON_VALUES))
            except yaml.YAMLError:
                text = mutate_lines(text, rng, UNIT_VALUES)
        elif choice < 0.95:
            text = mutate_lines(text, rng, UNIT_VALUES)
        else:
            return Case(argv=["specs", "validate", "spec.yaml"],
                        files={"spec.yaml": mutate_bytes(text.encode(), rng)}, check=_spec_check)
        with contextlib.suppress(yaml.YAMLError):
            _load_yaml(text)
            continue
        break  # not YAML any more: further structural mutations cannot parse it
    return Case(argv=["specs", "validate", "spec.yaml"], files={"spec.yaml": text.encode()}, check=_spec_check)


def _spec_check(directory: Path, out: str) -> list[str]:
    """An accepted spec loads with physical numbers, and a workload predicts on it (exit 0 or 2)."""
    from perfmodel.hardware.loader import load_hardware

    try:
        hardware = load_hardware(directory / "spec.yaml")
    except PerfmodelError as error:
        return [f"'specs validate' accepted a spec that load_hardware refuses: {str(error)[:200]}"]
    problems = hardware_problems(hardware)
    code, out, err = run_cli(["predict", "transformer_block", "--on", str(directory / "spec.yaml"), "--json"])
    problems += [f"predict on the accepted spec: {problem}" for problem in judge(code, out, err)]
    if code == 0:
        problems += json_problems(out)
    return problems


def _workload_case(rng: random.Random, directory: Path) -> Case:
    name = rng.choice(WORKLOAD_SEEDS)
    text = (ROOT / "workloads" / f"{name}.yaml").read_text(encoding="utf-8")
    for _ in range(_mutations(rng)):
        if rng.random() < 0.5:
            try:
                text = _dump_yaml(mutate_tree(_load_yaml(text), rng, TEXT_TOKENS + JSON_VALUES))
            except (yaml.YAMLError, AttributeError):
                text = mutate_lines(text, rng, TEXT_TOKENS)
        else:
            text = mutate_lines(text, rng, TEXT_TOKENS)
    suffix = rng.choice([".yaml", ".yaml", ".json"])
    raw = text.encode()
    if suffix == ".json":
        with contextlib.suppress(yaml.YAMLError, TypeError, ValueError):
            raw = json.dumps(_load_yaml(text)).encode()
    if rng.random() < 0.05:
        raw = mutate_bytes(raw, rng)
    mode = rng.choice([[], [], ["--mode", "graph"], ["--compiled"], ["--mode", "spatial"]])
    spec = rng.choice(["h100-sxm", "h100-sxm", "tpu-v5e", "cerebras-wse-3", "groq-lpu-v1"])
    return Case(argv=["predict", f"workload{suffix}", "--on", spec, "--json", *mode],
                files={f"workload{suffix}": raw})


def _llm_case(rng: random.Random, directory: Path) -> Case:
    name = rng.choice(LLM_SEEDS)
    data = json.loads((ROOT / "workloads" / "llm" / f"{name}.json").read_text(encoding="utf-8"))
    for _ in range(_mutations(rng)):
        if isinstance(data, dict) and rng.random() < 0.6:
            data = copy.deepcopy(data)
            key = rng.choice([key for key in data if not key.startswith("_")] or ["hidden_size"])
            data[key] = copy.deepcopy(rng.choice(JSON_VALUES + [2**31, 3, 7, 1, 2.5, "32", "silu", "gelu", "bogus"]))
        else:
            data = mutate_tree(data, rng, JSON_VALUES)
    raw = json.dumps(data, indent=1).encode()
    if rng.random() < 0.1:
        raw = mutate_bytes(raw, rng)
    extra = rng.choice([[], [], [], ["--mode", "graph"], ["--batch", "4", "--prompt", "256", "--gen", "32"],
                        ["--tp", "2"]])
    return Case(argv=["llm", "--model", "config.json", "--on", "h100-sxm", "--condensed", "--json", *extra],
                files={"config.json": raw})


def _llm_eager_case(rng: random.Random, directory: Path) -> Case:
    """A mutated config through the eager capture (transformers on the meta device, ~0.5 s a case: the
    benchmark's, not the suite's)."""
    case = _llm_case(rng, directory)
    case.argv = [item for item in case.argv if item not in ("--condensed",)]
    if "--mode" in case.argv:
        del case.argv[case.argv.index("--mode"): case.argv.index("--mode") + 2]
    return case


MEASUREMENT_SEEDS = {  # kind -> [(fixture, spec, events kept (traces) or rows kept (CSVs); None: all)]
    "ncu": [("ncu_counters.csv", "h100-sxm", None), ("ncu_details_2023.csv", "h100-sxm", None),
            ("ncu_details_recent.csv", "h100-sxm", None), ("ncu_raw.csv", "h100-sxm", None)],
    "torch-trace": [("torch_cpu_ops_trace.json", "epyc-zen4-2vcpu", 40), ("torch_cpu_trace.json", "epyc-zen4-2vcpu",
                                                                            None),
                    ("torch_gpu_trace.json.gz", "h100-sxm", None), ("torch_cuda_ops_trace.json.gz", "h100-sxm", 40)],
    "spyre": [("spyre_ops_trace.json", "ibm-spyre", None), ("spyre_torch_trace.json", "ibm-spyre", None),
              ("spyre_flex_trace.json", "ibm-spyre", None)],
    "generic": [("generic_ops.csv", "tpu-v5e", None), ("generic_counters.csv", "tpu-v5e", None)],
    "bench": [("../../calibration/data/cpu_measurements.csv", "epyc-zen4-2vcpu", 6)],
}


def _trace_seed(path: Path, keep: int | None):
    data = json.loads(_read(path))
    if keep is not None and isinstance(data, dict):
        data["traceEvents"] = data["traceEvents"][:keep]
    return data


def _measurement_case(kind: str) -> Callable[[random.Random, Path], Case]:
    def make(rng: random.Random, directory: Path) -> Case:
        fixture, spec, keep = rng.choice(MEASUREMENT_SEEDS[kind])
        path = FIXTURES / fixture
        if kind in ("torch-trace", "spyre"):
            data = _trace_seed(path, keep)
            for _ in range(_mutations(rng)):
                data = _trace_focus(data, rng) if rng.random() < 0.6 else mutate_tree(data, rng, JSON_VALUES)
            raw = json.dumps(data).encode()
            name = "trace.json"
            if rng.random() < 0.2:
                raw, name = gzip.compress(raw), "trace.json.gz"
        else:
            text = path.read_text(encoding="utf-8")
            if keep is not None:
                rows = _csv_rows(text)
                text = _csv_text(rows[: keep + 1], False)
            header_row = next((number for number, row in enumerate(_csv_rows(text)) if row[:1] == ["ID"]), 0)
            for _ in range(_mutations(rng)):
                text = mutate_csv(text, rng, header_row=header_row, quote_all=kind == "ncu")
            raw = text.encode()
            name = "measurements.csv"
        if rng.random() < 0.08:
            raw = mutate_bytes(raw, rng)
        argv = ["calibrate", "--spec", spec, "--measurements", name, "-o", "fitted.yaml", "--json", "--force"]
        if rng.random() < 0.15:
            argv += ["--format", rng.choice(["ncu", "torch-trace", "spyre", "generic", "bench"])]
        return Case(argv=argv, files={name: raw}, stub="fit")

    return make


SERVE_BASE = ["serve", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--mode", "graph", "--json"]


def _serve_trace_case(rng: random.Random, directory: Path) -> Case:
    text = (ROOT / "workloads" / "serving" / "example_trace.csv").read_text(encoding="utf-8")
    rows = _csv_rows(text)
    text = _csv_text(rows[:12], False)  # the comment line, the header and ten requests
    for _ in range(_mutations(rng)):
        text = mutate_csv(text, rng, header_row=1)
    raw = text.encode()
    if rng.random() < 0.08:
        raw = mutate_bytes(raw, rng)
    extra = rng.choice([[], [], ["--requests", "4"], ["--requests", "40"]])
    return Case(argv=[*SERVE_BASE, "--trace", "trace.csv", *extra], files={"trace.csv": raw}, stub="simulator")


def _length_case(rng: random.Random, directory: Path) -> Case:
    name = rng.choice(["prompt_lengths.csv", "output_lengths.csv"])
    text = (ROOT / "workloads" / "serving" / name).read_text(encoding="utf-8")
    header_row = 1
    for _ in range(_mutations(rng)):
        text = mutate_csv(text, rng, header_row=header_row)
    raw = text.encode()
    if rng.random() < 0.08:
        raw = mutate_bytes(raw, rng)
    flag = rng.choice(["--prompt-dist", "--output-dist"])
    value = rng.choice(["lengths.csv", "empirical:lengths.csv"])
    command = rng.choice([SERVE_BASE + ["--rate", "2/s", "--requests", "8"]] * 3 + [
                          ["size", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--mode", "graph", "--rate", "2/s",
                           "--ttft-p99", "1s", "--requests", "8", "--json"]])
    return Case(argv=[*command, flag, value], files={"lengths.csv": raw}, stub="simulator")


# Command lines: a valid base, optional flags with valid values, and bad values to put in their place.
COUNT_BAD = ["0", "-1", "1.5", "abc", "", "1e400", "nan", "inf", " 1", "1,,2", "2**3", "0x10"]
RATE_BAD = ["1.2.3/s", "-2/s", "0/s", "inf/s", "nan/s", "2/fortnight", "/s", "2", "abc", "", "1e400/s", "2/s/s"]
TIME_BAD = ["-5s", "0s", "nan s", "1e400 s", "5", "abc", "", "inf s", "5 GB", "-0 s"]
LIST_BAD = ["0", "-1", "1.5", "abc", "", "1,,2", "1,-8", "0,1", "1,x", ",", "1e400", TOO_BIG_COUNT]
DIST_BAD = ["fixed:0", "uniform:5-1", "lognormal:0,0", "lognormal:1e400,1", "lognormal:600,nan", "fixed:-3",
            "empirical:missing.csv", "missing.csv", "", "fixed:", "zipf:3", "fixed:1e3", "fixed:" + TOO_BIG_COUNT]
SET_VALUES = ["memory.hbm.bandwidth=4TB/s", "memory.hbm.bandwidth=-1TB/s", "memory.hbm.bandwidth=0TB/s",
              "memory.hbm.bandwidth=nan TB/s", "memory.hbm.bandwidth=inf TB/s", "compute.tensor_cores.units=108",
              "compute.tensor_cores.units=0", "compute.tensor_cores.units=1.5",
              "compute.tensor_cores.peak.bf16=500TFLOP/s", "compute.tensor_cores.peak.bf16=-5TFLOP/s",
              "nonexistent.field=1", "=", "memory.hbm.bandwidth", "scheduling.default_mode=bogus",
              "scheduling.default_mode=graph", "memory.hbm.capacity=1e400 GB", "power.tdp=0 W"]
OUTPUT_BAD = ["", ".", "out", "out.txt", "out.PNG", "sub/dir/out.png", "/", "out.yaml", "out.csv", "out.parquet",
              "out.json", "out.svg", "measured.csv/out.png", "measured.csv/out.csv", "x" * 300 + ".png"]
DTYPE_VALUES = ["bf16", "fp16", "fp8", "int8", "int4", "fp32", "bf17", "", "BF16", "tf32", "fp64"]
MODE_VALUES = ["graph", "eager", "compiled", "static", "spatial", "dynamic", "bogus", ""]
SPEC_VALUES = ["h100-sxm", "tpu-v5e", "groq-lpu-v1", "ibm-spyre", "cerebras-wse-3", "nope", "", "h100-sxm,tpu-v5e",
               "H100-SXM", "missing.yaml"]


@dataclass(frozen=True)
class Command:
    base: list[str]
    options: dict[str, tuple[list[str] | None, list[str]]]  # flag -> (valid values or None: a switch, bad values)
    outputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stub: str = ""


def _counts(valid: list[str], *, work: bool = False) -> tuple[list[str], list[str]]:
    return valid, COUNT_BAD + ([] if work else [TOO_BIG_COUNT, "99999999"])


COMMANDS = {
    "llm": Command(["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--condensed", "--json"], {
        "--batch": (["1", "8", "1,8"], LIST_BAD), "--prompt": (["128", "128,512"], LIST_BAD),
        "--gen": (["16", "1"], LIST_BAD), "--chips": _counts(["1", "2"]), "--tp": _counts(["1", "2"]),
        "--pp": _counts(["1", "2"]), "--ep": _counts(["1"]), "--weights": (DTYPE_VALUES[:5], DTYPE_VALUES),
        "--kv": (["bf16", "fp8"], DTYPE_VALUES), "--activations": (["bf16"], DTYPE_VALUES),
        "--mode": (MODE_VALUES[:3], MODE_VALUES), "--concurrency": _counts(["4"], work=True),
        "--max-tokens-per-step": _counts(["256"], work=True), "--graph-out": (["graph.yaml", "graph.json"], OUTPUT_BAD),
        "--phase": (["decode", "prefill"], ["", "train", "DECODE"]), "--set": (SET_VALUES[:1], SET_VALUES),
        "--ideal": (None, []), "--on": (["h100-sxm", "tpu-v5e"], SPEC_VALUES), "--model": (["mistral-7b"],
                                                                                      ["nope", "", "LLAMA-3.1-8B"])},
        outputs={"--graph-out": (".yaml", ".yml", ".json")}),
    "serve": Command(SERVE_BASE + ["--requests", "6"], {
        "--rate": (["2/s", "120/min"], RATE_BAD), "--rates": (["1,2"], RATE_BAD + ["1,,2", "1,-2", "0,1"]),
        "--arrival": (["poisson", "fixed", "burst"], ["", "bogus"]), "--scenario": (["offline"], ["", "bogus"]),
        "--users": _counts(["2"], work=True), "--think": (["1s", "0s"], TIME_BAD), "--tp": _counts(["1", "2"]),
        "--pp": _counts(["1"]), "--requests": _counts(["6"], work=True), "--prompt-dist": (["fixed:256",
                                                                                            "uniform:16-64"], DIST_BAD),
        "--output-dist": (["fixed:16", "lognormal:32,0.5"], DIST_BAD),
        "--prefix-share": (["0.5", "0"], ["1", "-0.1", "nan", "inf", "abc", "", "1.5"]),
        "--max-batch": _counts(["8"], work=True), "--max-tokens-per-step": _counts(["512"], work=True),
        "--block-size": _counts(["16"], work=True), "--memory-utilization": (["0.9"], ["0", "-1", "1.5", "nan", "abc"]),
        "--kv-admission": (["reserve", "on-demand"], ["", "bogus"]), "--seed": (["1"], ["-1", "1.5", "abc", ""]),
        "--ttft-slo": (["1s"], TIME_BAD), "--tpot-slo": (["50ms"], TIME_BAD), "--weights": (["bf16", "int4"],
                                                                                           DTYPE_VALUES),
        "--set": (SET_VALUES[:1], SET_VALUES), "--chart": (["chart.png", "chart.svg"], OUTPUT_BAD),
        "--on": (["h100-sxm"], SPEC_VALUES)},
        outputs={"--chart": (".png", ".svg", ".pdf")}, stub="simulator"),
    "size": Command(["size", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--mode", "graph", "--rate", "2/s",
                     "--ttft-p99", "1s", "--requests", "6", "--json"], {
        "--rate": (["4/s"], RATE_BAD), "--users": _counts(["4"], work=True), "--think": (["2s"], TIME_BAD),
        "--ttft": (["500ms"], TIME_BAD), "--tpot-p99": (["50ms"], TIME_BAD), "--tpot": (["60ms"], TIME_BAD),
        "--prompt": _counts(["256"], work=True), "--gen": _counts(["16"], work=True),
        "--prompt-dist": (["fixed:256"], DIST_BAD), "--output-dist": (["fixed:16"], DIST_BAD),
        "--requests": _counts(["6"], work=True), "--seed": (["2"], ["-1", "1.5", "abc"]),
        "--price": (["2.5", "h100-sxm=2.5"], ["-2.5", "abc", "", "h100-sxm=x", "nan", "inf", "h100-sxm=", "=2"]),
        "--rank": (["cost", "watts"], ["", "bogus"]), "--weights": (["bf16"], DTYPE_VALUES),
        "--set": (SET_VALUES[:1], SET_VALUES), "--on": (["h100-sxm"], SPEC_VALUES)}, stub="simulator"),
    "train": Command(["train", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "8", "--global-batch", "16",
                      "--seq", "1024", "--json"], {
        "--chips": _counts(["8", "16"]), "--global-batch": _counts(["16", "32"]), "--seq": _counts(["1024"]),
        "--dp": _counts(["2"]), "--fsdp": _counts(["4"]), "--tp": _counts(["2"]), "--pp": _counts(["2"]),
        "--cp": _counts(["1"]), "--ep": _counts(["1"]), "--zero": (["1", "2"], ["3", "-1", "abc"]),
        "--micro-batch": _counts(["1", "2"]), "--virtual-stages": _counts(["2"]),
        "--recompute": (["full", "selective"], ["", "bogus"]), "--compute-dtype": (["bf16", "fp8"], DTYPE_VALUES),
        "--master-dtype": (["fp32", "bf16"], DTYPE_VALUES), "--domain-chips": _counts(["8"]),
        "--no-overlap": (None, []), "--chart": (["chart.png"], OUTPUT_BAD), "--set": (SET_VALUES[:1], SET_VALUES),
        "--on": (["h100-sxm", "tpu-v5e"], SPEC_VALUES)},
        outputs={"--chart": (".png", ".svg", ".pdf")}),
    "sweep": Command(["sweep", "--on", "h100-sxm", "--grid", "batch=1,8", "--json"], {
        "--grid": (["seq=128,512", "memory.hbm.bandwidth=2TB/s,4TB/s",
                    "compute.tensor_cores.peak.bf16=500TFLOP/s,1000TFLOP/s"],
                   ["batch=0", "batch=1,x", "batch=", "memory.hbm.bandwidth=2TB/s,-4TB/s", "heads=1.5", "=1",
                    "memory.hbm.bandwidth=nan TB/s", "bogus=1,2", "batch", "layers=-1", "compute.tensor_cores.units=0,8",
                    "batch=" + TOO_BIG_COUNT, "seq=1e400"]),
        "--mode": (MODE_VALUES[:3], MODE_VALUES), "-o": (["table.csv", "table.parquet"], OUTPUT_BAD),
        "--on": (["tpu-v5e"], SPEC_VALUES)},
        outputs={"-o": (".csv", ".parquet")}),
    "roofline": Command(["roofline", "attention_naive", "--on", "h100-sxm", "-o", "chart.svg"], {
        "--kind": (["classic", "breakdown"], ["", "bogus"]), "--dtype": (["bf16", "fp32"], DTYPE_VALUES),
        "--mode": (["graph"], MODE_VALUES), "-o": (["chart.png"], OUTPUT_BAD),
        "--measured": (["measured.csv"], ["missing.csv", "", "measured.txt", "bad.csv"]),
        "--on": (["tpu-v5e"], SPEC_VALUES)},
        outputs={"-o": (".png", ".svg", ".pdf")}),
}
COMMAND_WEIGHTS = {"llm": 4, "serve": 4, "size": 2, "train": 4, "sweep": 3, "roofline": 0.5}  # a chart: ~0.4 s
MEASURED_CSV = b"name,flops,bytes,duration_s\nmm,2e9,1e6,1e-4\nadd,1e6,3e6,2e-5\n"
BAD_MEASURED_CSV = b"name,flops,bytes,duration_s\nmm,nan,-1e6,0\nadd,x,inf,-2e-5\n"


def _set_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """``argv`` with ``flag`` given ``value`` (replacing its value in the base, if there)."""
    if flag in argv and value is not None:
        position = argv.index(flag)
        if position + 1 < len(argv):
            return [*argv[: position + 1], value, *argv[position + 2:]]
    return [*argv, flag] + ([] if value is None else [value])


def _args_case(rng: random.Random, directory: Path) -> Case:
    name = rng.choices(list(COMMAND_WEIGHTS), weights=list(COMMAND_WEIGHTS.values()))[0]
    command = COMMANDS[name]
    argv = list(command.base)
    flags = list(command.options)
    for flag in rng.sample(flags, rng.randrange(0, 3)):
        valid, _ = command.options[flag]
        argv = _set_flag(argv, flag, None if valid is None else rng.choice(valid))
    for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
        operation = rng.randrange(10)
        flag = rng.choice(flags)
        valid, bad = command.options[flag]
        if operation < 6 and bad:
            argv = _set_flag(argv, flag, rng.choice(bad))
        elif operation == 6:
            required = [item for item in argv if item.startswith("--") and item not in ("--json", "--condensed")]
            if required:
                position = argv.index(rng.choice(required))
                del argv[position: position + 2]
        elif operation == 7:
            argv.append(rng.choice(["--bogus", "--bogus=1", "-x", "--", "extra"]))
        elif operation == 8:
            argv.append(flag)  # a flag without its value (or a repeated switch)
        elif valid is not None:
            argv = [*argv, flag, rng.choice(valid + bad)]  # a repeated option: the last one wins
    files = {"measured.csv": MEASURED_CSV, "bad.csv": BAD_MEASURED_CSV}  # inputs, and files in the way of outputs
    return Case(argv=argv, files=files, stub=command.stub, outputs=command.outputs)


KINDS: dict[str, Callable[[random.Random, Path], Case]] = {
    "spec": _spec_case,
    "workload": _workload_case,
    "llm-config": _llm_case,
    "ncu": _measurement_case("ncu"),
    "torch-trace": _measurement_case("torch-trace"),
    "spyre": _measurement_case("spyre"),
    "generic": _measurement_case("generic"),
    "bench": _measurement_case("bench"),
    "serve-trace": _serve_trace_case,
    "length-csv": _length_case,
    "args": _args_case,
}
# Kinds too slow for the suite's time budget, run by benchmarks/fuzz.py only.
BENCHMARK_KINDS: dict[str, Callable[[random.Random, Path], Case]] = {**KINDS, "llm-eager": _llm_eager_case}
