"""Time of the deployment search (``perfmodel search``, issue 31): Llama-3.1-70B on 32 H200s.

Run:  python benchmarks/serving_search.py [--json benchmarks/results/serving_search.json]

Three engines' overlays x every layout (tp 1-8, pp 1-4) x batch limits 8-256 x aggregated and every
disaggregated split x speculation (none, EAGLE at its published default), prompt 1024 / output 256,
TTFT <= 1 s and TPOT <= 20 ms, six front points simulated. Prints the configurations searched, the
front's size, the time of each stage and in all, and writes JSON. A benchmark, not a test (times
depend on the machine and its load); issue 31 asks for at least 1,000 configurations in under 60 s.

``--workers 1,2`` (issue 34) times the same search (``--chips``, ``--simulate``) in this process and on a
Dask ``LocalCluster`` of each number of worker processes (``perfmodel.fanout``: each worker's step
costs a piece, then each simulated front point), in the same run, each place in turn ``--repeats``
times: the fastest wall time of each (the work runs in other processes) with the clusters' start and
the workers' first imports excluded, the speed-up from the first worker count to each (a ratio, which
the shared machine's load moves less than either time), and whether every result is identical to the
first in-process one (its JSON text).

Run:  python benchmarks/serving_search.py --workers 1,2 --chips 8 --json benchmarks/results/serving_search_workers.json
(2,268 configurations; the default --chips 32 searches 25,092)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from perfmodel.hardware.loader import SERVING_ENGINES, load_for_prediction
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving.search import search
from perfmodel.serving.speculation import DEFAULT_ACCEPTANCE, DEFAULT_TOKENS, Speculation
from perfmodel.tables import format_table
from perfmodel.yaml_source import write_text_atomically


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--simulate", type=int, default=6)
    parser.add_argument("--chips", type=int, default=32)
    parser.add_argument("--workers", help="comma-separated LocalCluster sizes to time the search on, e.g. 1,2")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each place in turn with --workers (default 3)")
    args = parser.parse_args(argv)
    if args.workers:
        return _workers(args, [int(part) for part in args.workers.split(",")])
    start = time.perf_counter()
    architecture, hardware, speculations = _problem()
    loaded = time.perf_counter()
    search(architecture, hardware, args.chips, prompt_tokens=1024, output_tokens=256, speculations=speculations,
                       ttft_slo_s=1.0, tpot_slo_s=0.02, simulate=0)
    enumerated = time.perf_counter()
    full = search(architecture, hardware, args.chips, prompt_tokens=1024, output_tokens=256, speculations=speculations,
                  ttft_slo_s=1.0, tpot_slo_s=0.02, simulate=args.simulate)
    done = time.perf_counter()
    rows = [["configurations", len(full.configurations)], ["workers priced", full.workers_built],
            ["front points", len(full.front)], ["front points simulated", len(full.simulated)],
            ["load specs (s)", f"{loaded - start:.2f}"], ["enumerate + estimate + front (s)", f"{enumerated - loaded:.2f}"],
            ["search with simulation (s)", f"{done - enumerated:.2f}"]]
    print(format_table([f"llama-3.1-70b on {args.chips} x h200-sxm", "value"], rows))
    best = full.best
    if best is not None:
        print(f"chosen: {best.label}: {best.tokens_per_s_per_user:.1f} tokens/s per user, "
              f"{best.tokens_per_s_per_chip:.1f} per chip")
    if args.json is not None:
        data = {"machine": platform.platform(), "python": sys.version.split()[0],
                "configurations": len(full.configurations), "workers_priced": full.workers_built,
                "front_points": len(full.front), "simulated": len(full.simulated),
                "estimate_s": enumerated - loaded, "with_simulation_s": done - enumerated,
                "chosen": None if best is None else best.to_dict()}
        write_text_atomically(args.json, json.dumps(data, indent=1) + "\n")
    return 0


def _problem():
    architecture = load_architecture("llama-3.1-70b")
    hardware = {engine: load_for_prediction("h200-sxm", engine=engine) for engine in SERVING_ENGINES}
    speculations = (None, Speculation(method="eagle", tokens=DEFAULT_TOKENS["eagle"],
                                      acceptance=DEFAULT_ACCEPTANCE["eagle"]))
    return architecture, hardware, speculations


def _warm() -> None:
    """A worker's first imports (perfmodel's serving core), done before the timed run."""
    import perfmodel.serving.search  # noqa: F401


def _workers(args, counts: list[int]) -> int:
    """The search in this process and on a LocalCluster of each of ``counts`` workers (module docstring)."""
    from perfmodel.fanout import mapper
    from perfmodel.jsonable import json_text

    architecture, hardware, speculations = _problem()

    def run(where):
        start = time.perf_counter()
        result = search(architecture, hardware, args.chips, prompt_tokens=1024, output_tokens=256,
                        speculations=speculations, ttft_slo_s=1.0, tpot_slo_s=0.02, simulate=args.simulate,
                        mapper=where)
        return result, time.perf_counter() - start

    with contextlib.ExitStack() as stack:
        places = [("in this process", 0, stack.enter_context(mapper()))]
        for count in counts:
            where = stack.enter_context(mapper(workers=count))
            where.client.run(_warm)  # type: ignore[attr-defined]  # a Dask mapper: every worker imports first
            places.append((f"LocalCluster, {count} worker{'s' if count > 1 else ''}", count, where))
        # Every place runs the search in turn, --repeats times (the machine's load moves them alike); the
        # fastest run of each is reported, every time kept in the JSON.
        times: dict[str, list[float]] = {label: [] for label, _, _ in places}
        identical = dict.fromkeys(times, True)
        local, reference = None, None
        for _ in range(args.repeats):
            for label, _, where in places:
                result, seconds = run(where)
                times[label].append(seconds)
                text = json_text(result.to_dict())
                if reference is None:  # the first run, in this process
                    local, reference = result, text
                identical[label] = identical[label] and text == reference
    assert local is not None
    rows = [{"where": label, "workers": count, "seconds": min(times[label]), "seconds_each_run": times[label],
             "identical": identical[label]} for label, count, _ in places]
    first = rows[1]["seconds"]
    for row in rows[1:]:
        row["speedup_vs_first"] = first / row["seconds"]
    title = (f"search of {len(local.configurations):,} configurations ({local.workers_built} workers priced, "
             f"{len(local.simulated)} front points simulated): llama-3.1-70b on {args.chips} x h200-sxm")
    print(format_table([title, "wall s", f"speed-up vs {counts[0]} worker(s)", "identical to in-process"],
                       [[row["where"], f"{row['seconds']:.2f}",
                         f"{row['speedup_vs_first']:.2f}x" if "speedup_vs_first" in row else "-",
                         "yes" if row["identical"] else "NO"] for row in rows]))
    if args.json is not None:
        data = {"machine": platform.platform(), "python": sys.version.split()[0], "cpus": os.cpu_count(),
                "load_average": os.getloadavg(), "repeats": args.repeats, "chips": args.chips,
                "configurations": len(local.configurations), "workers_priced": local.workers_built,
                "simulated": len(local.simulated), "rows": rows}
        write_text_atomically(args.json, json.dumps(data, indent=1) + "\n")
    return 0 if all(row["identical"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
