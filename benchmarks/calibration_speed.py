"""Calibration cost and the CPU fit's error on an independent second run.

Run:  python benchmarks/calibration_speed.py [--json benchmarks/results/calibration_speed.json]

1. Time of one fit (with its held-out splits) for the shipped CPU bench data and for each achievable
   overlay's published microbenchmarks, and the records per second it handles.
2. The issue-12 protocol on the CPU: for each split seed, fit on a random half of the shapes (per
   class) of one bench run (``cpu_measurements.csv``) and predict the other half of the shapes as
   measured in an independent second run (``cpu_measurements_repeat.csv``); report the median
   |error|, the worst class and every class's median |error| per seed. Run on the shipped data (a Zen 4
   VM) and on a second machine's pair of runs (``calibration/data/zen5``), with the same fit rules.
Prints tables and writes JSON. A benchmark, not a test (times depend on the machine and its load).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from calibration.achievable import OVERLAYS, device_time_hardware, published_records
from calibration.fit import components, fit, heldout_errors, split_half, spread_weights
from calibration.records import read_records
from perfmodel.hardware.loader import load_hardware
from perfmodel.yaml_source import write_text_atomically

DATA = Path(__file__).resolve().parent.parent / "calibration" / "data"
SEEDS = 5


def timed_fit(records, hardware, mode=None) -> tuple[float, object]:
    start = time.perf_counter()
    result = fit(records, hardware, mode=mode)
    return time.perf_counter() - start, result


def independent_run_errors(first, second, hardware, seed: int) -> tuple[float, dict[str, float]]:
    """Fit on half of the shapes of ``first``; predict the other half as measured in ``second``."""
    by_name = {record.name: record for record in second}
    paired = [record for record in first if record.name in by_name]
    classes = np.asarray([record.op_class for record in paired])
    train, test = split_half(classes, seed)
    measured = np.asarray([record.duration_s for record in paired])
    observed = np.asarray([by_name[record.name].duration_s for record in paired])
    errors = np.abs(heldout_errors(components(paired, hardware), measured, train, test, spread_weights(paired),
                                   observed))
    per_class = {name: float(statistics.median(errors[classes[test] == name])) for name in sorted(set(classes[test]))}
    return float(np.median(errors)), per_class


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/calibration_speed.json"))
    args = parser.parse_args(argv)
    rows = []
    cpu = load_hardware("epyc-zen4-2vcpu")
    first = read_records(DATA / "cpu_measurements.csv")
    seconds, result = timed_fit(first, cpu)
    rows.append({"data": "CPU bench (cpu_measurements.csv)", "records": len(first), "fit_s": seconds,
                 "heldout_median": result.heldout_median_abs_error, "parameters": len(result.params),
                 "unidentified": len(result.unidentified)})
    for overlay in OVERLAYS:
        spec = load_hardware(overlay)
        records = published_records(overlay, spec).records
        seconds, result = timed_fit(records, device_time_hardware(spec), mode="graph")
        rows.append({"data": f"published microbenchmarks, {overlay}", "records": len(records), "fit_s": seconds,
                     "heldout_median": result.heldout_median_abs_error, "parameters": len(result.params),
                     "unidentified": len(result.unidentified)})
    print(f"{'data':<44} {'records':>7} {'fit + held-out':>15} {'records/s':>10} {'held-out':>9} {'unidentified':>13}")
    for row in rows:
        print(f"{row['data']:<44} {row['records']:>7} {row['fit_s']:>13.2f} s {row['records'] / row['fit_s']:>10.0f} "
              f"{100 * row['heldout_median']:>8.1f}% {row['unidentified']:>6} of {row['parameters']}")
    protocols = {
        "cpu_independent_run": ("Zen 4 VM, spec epyc-zen4-2vcpu (the shipped calibration data)", first,
                                read_records(DATA / "cpu_measurements_repeat.csv"), cpu),
        "cpu_independent_run_zen5": ("Zen 5 VM, calibration/data/zen5 (a second machine, same rules)",
                                     read_records(DATA / "zen5" / "cpu_measurements.csv"),
                                     read_records(DATA / "zen5" / "cpu_measurements_repeat.csv"),
                                     load_hardware(DATA / "zen5" / "epyc-zen5-2vcpu-detected.yaml")),
    }
    results = {}
    for key, (label, run_1, run_2, spec) in protocols.items():
        print(f"\nCPU, {label}: fit on half the shapes of run 1, predict the other half as measured in run 2")
        print(f"{'seed':>4} {'median |error|':>15}  worst class   median |error| by class")
        protocol = []
        for seed in range(SEEDS):
            median, per_class = independent_run_errors(run_1, run_2, spec, seed)
            worst = max(per_class, key=per_class.get)
            protocol.append({"seed": seed, "median_abs_error": median, "by_class": per_class, "worst_class": worst})
            print(f"{seed:>4} {100 * median:>14.1f}%  {worst} {100 * per_class[worst]:.0f}%   "
                  + " ".join(f"{name} {100 * error:.0f}%" for name, error in per_class.items()))
        within = sum(1 for item in protocol if item["median_abs_error"] <= 0.15)
        print(f"seeds within 15%: {within} of {SEEDS}; classes above 40%: "
              f"{sorted({str(name) for item in protocol for name, error in item['by_class'].items() if error > 0.4})}")
        results[key] = protocol
    write_text_atomically(args.json, json.dumps({"fits": rows, **results, "python": platform.python_version(),
                                                 "machine": platform.machine()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
