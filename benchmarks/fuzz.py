"""The fuzzer of tests/fuzzing.py with thousands of cases per input kind (tests/test_fuzz.py runs 4,000 over
all but llm-eager; the kinds are in tests/fuzz_inputs.py).

Run:  python benchmarks/fuzz.py [--cases 2000] [--kinds spec,ncu,...] [--start 0] [--full]
                                [--json benchmarks/results/fuzz.json]

Prints one row per kind: cases, exit 0 (accepted), exit 2 (refused with an error), crashes (a
traceback, an internal error, an escaping exception, a hang, or an accepted impossible value) and
the crashes by class (internal errors, hangs, silent wrong answers), the seconds the kind took; then
a reproducer of the first crash of each distinct kind of problem. Writes the table, the crashes and
the machine as JSON. Cases are seeded by (kind, index): rerun one with
``--kinds KIND --start INDEX --cases 1``. ``--full`` runs the fit of ``calibrate`` and every
simulation of ``serve``/``size`` instead of stopping where they start (much slower). The kind
``llm-eager`` (configs through the transformers capture, ~0.5 s a case) runs here only.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel import __version__  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402
from tests.fuzz_inputs import BENCHMARK_KINDS  # noqa: E402
from tests.fuzzing import run_case  # noqa: E402

REPRODUCERS_SHOWN = 3  # distinct problems printed per kind
CLASSES = ("internal_errors", "hangs", "wrong_answers")


def _signature(problem: str) -> str:
    """A problem without its numbers and quoted values: cases that hit the same bug group together."""
    return re.sub(r"'[^']*'|\"[^\"]*\"|[-+]?\d[\d.e+-]*", "_", problem)[:120]


def problem_class(problem: str) -> str:
    """The issue's three classes of a failed case: an internal error (exit 70, a traceback, an escaping
    exception), a hang (a case over the time limit), or a silent wrong answer (an impossible value
    accepted: a negative or null time, byte or FLOP count, an unphysical spec or record, an output
    written where it was not asked for)."""
    if problem.startswith("ran longer than"):
        return "hangs"
    if problem.startswith("exit ") or "traceback" in problem:
        return "internal_errors"
    return "wrong_answers"


def run_kind(kind: str, cases: int, start: int, full: bool, directory: Path) -> dict:
    codes: Counter = Counter()
    classes: Counter = Counter()
    crashes: dict[str, dict] = {}
    crashed = 0
    began = time.perf_counter()
    for index in range(start, start + cases):
        verdict = run_case(kind, index, directory / kind / str(index), full=full)
        codes[verdict.code] += 1
        if verdict.crashed:
            crashed += 1
            classes[problem_class(verdict.problems[0])] += 1
            entry = crashes.setdefault(_signature(verdict.problems[0]), {"count": 0, "first_case": index,
                                                                           "reproducer": verdict.reproducer()})
            entry["count"] += 1
    seconds = time.perf_counter() - began
    return {"kind": kind, "cases": cases, "exit_0": codes[0], "exit_2": codes[2], "crashes": crashed,
            **{name: classes[name] for name in CLASSES},
            "seconds": seconds, "ms_per_case": 1e3 * seconds / max(cases, 1),
            "distinct_problems": sorted(crashes.values(), key=lambda entry: -entry["count"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.splitlines()[:2]))
    parser.add_argument("--cases", type=int, default=2000, help="cases per kind (default 2000)")
    parser.add_argument("--start", type=int, default=0, help="index of the first case (default 0)")
    parser.add_argument("--kinds", default=",".join(BENCHMARK_KINDS),
                        help=f"comma-separated kinds (default all: {', '.join(BENCHMARK_KINDS)})")
    parser.add_argument("--full", action="store_true", help="run the fit and the simulations too (slow)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "fuzz.json")
    args = parser.parse_args()
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    unknown = [kind for kind in kinds if kind not in BENCHMARK_KINDS]
    if unknown or args.cases < 1 or args.start < 0:
        parser.error(f"unknown kind(s) {unknown}" if unknown else "--cases must be at least 1 and --start at least 0")
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfmodel-fuzz-") as scratch:
        for kind in kinds:
            row = run_kind(kind, args.cases, args.start, args.full, Path(scratch))
            rows.append(row)
            print(f"{kind}: {row['cases']} cases, {row['crashes']} crashes, {row['seconds']:.0f} s", file=sys.stderr)
    counted = ("cases", "exit_0", "exit_2", "crashes", *CLASSES)
    table = [[row["kind"], *(row[key] for key in counted), f"{row['seconds']:.1f}", f"{row['ms_per_case']:.0f}"]
             for row in rows]
    total = [sum(row[key] for row in rows) for key in counted]
    table.append(["total", *total, f"{sum(row['seconds'] for row in rows):.1f}", ""])
    print(format_table(["kind", "cases", "exit 0", "exit 2", "crashes", "internal errors", "hangs",
                        "wrong answers", "seconds", "ms/case"], table))
    for row in rows:
        for entry in row["distinct_problems"][:REPRODUCERS_SHOWN]:
            print(f"\n[{entry['count']} case(s)] {entry['reproducer']}")
    result = {"perfmodel": __version__, "python": platform.python_version(), "machine": platform.machine(),
              "processor": platform.processor(), "cases_per_kind": args.cases, "start": args.start, "full": args.full,
              "totals": dict(zip(counted, total, strict=True)), "kinds": rows}
    write_text_atomically(args.json, json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {args.json}")
    return 1 if total[3] else 0


if __name__ == "__main__":
    sys.exit(main())
