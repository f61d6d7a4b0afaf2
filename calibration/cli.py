"""``perfmodel bench`` and ``perfmodel calibrate`` (registered by perfmodel's CLI at run time, so that
perfmodel itself never imports calibration)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from perfmodel.errors import PerfmodelError

DEFAULT_CPU_SPEC = "epyc-zen4-2vcpu"


def register(commands) -> None:
    bench = commands.add_parser("bench", help="time the standard measurement suite on this machine")
    bench.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    bench.add_argument("--spec", default=DEFAULT_CPU_SPEC,
                       help=f"spec whose memory levels the records' modeled bytes refer to (default {DEFAULT_CPU_SPEC}; "
                            "use 'perfmodel specs detect' for another machine)")
    bench.add_argument("--quick", action="store_true", help="a subset that runs in about a minute")
    bench.add_argument("--rounds", type=int, help="interleaved rounds per case (default 3; 2 with --quick)")
    bench.add_argument("-o", "--output", type=Path, required=True, help="measurements CSV to write")
    bench.set_defaults(handler=_bench)

    calibrate = commands.add_parser("calibrate", help="fit a spec's efficiencies and overheads to measurements")
    calibrate.add_argument("--spec", required=True, help="the datasheet spec to calibrate (name or path)")
    calibrate.add_argument("--measurements", type=Path, required=True, help="CSV written by perfmodel bench")
    calibrate.add_argument("-o", "--output", type=Path, required=True, help="fitted spec (YAML) to write")
    calibrate.add_argument("--chart", type=Path, help="residual chart (default: beside the output, .png)")
    calibrate.add_argument("--report", type=Path, help="also write the text report here")
    calibrate.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    calibrate.add_argument("--json", action="store_true")
    calibrate.set_defaults(handler=_calibrate)


def _bench(args) -> int:
    from tqdm import tqdm

    from calibration.harness import QUICK_ROUNDS, ROUNDS, run_suite, suite
    from calibration.records import write_records
    from perfmodel.hardware.loader import load_hardware

    spec = load_hardware(args.spec)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    if rounds < 1:
        raise PerfmodelError("--rounds must be at least 1")
    total = len(suite(args.quick)) * rounds
    with tqdm(total=total, unit="case", file=sys.stderr) as bar:
        records = run_suite(spec, device=args.device, quick=args.quick, rounds=rounds,
                            progress=lambda name: (bar.set_postfix_str(name[:40]), bar.update(1)))
    write_records(records, args.output)
    print(f"wrote {len(records)} measurements to {args.output} ({records[0].device}; {records[0].tool_version})")
    return 0


def _calibrate(args) -> int:
    from calibration.fit import fit
    from calibration.records import read_records
    from calibration.report import fitted_spec_yaml, save_residual_chart, text_report, to_dict
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.yaml_source import write_text_atomically

    spec = load_hardware(args.spec)
    records = read_records(args.measurements)
    missing = [record.name for record in records if not record.workload_json]
    if missing:
        raise PerfmodelError(f"{args.measurements}: {len(missing)} measurement(s) carry no workload graph "
                             f"(e.g. {missing[0]!r}); fitting needs records from 'perfmodel bench'. Records read from "
                             "profiler files can be compared on a chart with 'perfmodel roofline --measured'.")
    result = fit(records, spec, seed=args.seed)
    text = fitted_spec_yaml(result, spec, args.spec, args.measurements, args.output, records)
    write_text_atomically(args.output, text)
    load_hardware(args.output)  # the fitted spec must load like any other
    chart = args.chart or args.output.with_suffix(".residuals.png")
    save_residual_chart(result, chart)
    report = text_report(result, records, spec)
    if args.report:
        write_text_atomically(args.report, report + "\n")
    if args.json:
        data = to_dict(result, records)
        data.update({"fitted_spec": str(args.output), "chart": str(chart)})
        print(json.dumps(data, indent=1))
    else:
        print(report)
        print(f"\nwrote {args.output} and {chart}")
    return 0
