"""``perfmodel bench`` and ``perfmodel calibrate`` (registered by perfmodel's CLI at run time, so that
perfmodel itself never imports calibration)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from perfmodel.errors import PerfmodelError
from perfmodel.jsonable import json_text

DEFAULT_CPU_SPEC = "epyc-zen4-2vcpu"
UNMAPPED_SHOWN = 10  # unmapped entries printed in the text report (--json lists them all)


def register(commands) -> None:
    from calibration.harness import ALLOCATOR_NOTES, DEFAULT_THREADS, NOISE_LIMIT, available_cpus
    from calibration.readers.detect import FORMATS
    from perfmodel.cli.overrides import add_fanout_arguments

    bench = commands.add_parser("bench", help="time the standard measurement suite on this machine")
    bench.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    bench.add_argument("--spec", default=DEFAULT_CPU_SPEC,
                       help=f"spec whose memory levels the records' modeled bytes refer to (default {DEFAULT_CPU_SPEC}; "
                            "use 'perfmodel specs detect' for another machine)")
    bench.add_argument("--quick", action="store_true", help="a subset that runs in about a minute")
    bench.add_argument("--rounds", type=int, help="interleaved rounds per case (default 3; 2 with --quick)")
    bench.add_argument("--threads", type=int,
                       help=f"torch intra-op threads (default {DEFAULT_THREADS}: a core's calibration, and data quiet "
                            f"enough to fit on a small shared machine; {available_cpus()} here for all of this "
                            "process's CPUs, the machine's calibration); 1 thread and all cores are different "
                            "calibrations")
    bench.add_argument("--allocator", choices=sorted(ALLOCATOR_NOTES), default="reused",
                       help="reused (default): freed memory stays mapped, kernels are timed without page faults; "
                            "page-faulted: large outputs are mapped and faulted in on every call")
    bench.add_argument("-o", "--output", type=Path, required=True, help="measurements CSV to write")
    bench.set_defaults(handler=_bench)

    calibrate = commands.add_parser("calibrate", help="fit a spec's efficiencies and overheads to measurements")
    calibrate.add_argument("--spec", required=True, help="the datasheet spec to calibrate (name or path)")
    calibrate.add_argument("--measurements", type=Path, nargs="+", required=True, metavar="FILE",
                           help="Nsight Compute CSV, torch.profiler trace (record_shapes=True), Spyre trace, generic "
                                "CSV or 'perfmodel bench' CSV; the format is read from the content")
    calibrate.add_argument("--format", choices=FORMATS, help="the files' format, when detection cannot tell")
    calibrate.add_argument("-o", "--output", type=Path, required=True, help="fitted spec (YAML) to write")
    calibrate.add_argument("--chart", type=Path, help="residual chart (default: beside the output, .png)")
    calibrate.add_argument("--report", type=Path, help="also write the text report here")
    calibrate.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    calibrate.add_argument("--force", action="store_true",  # '%%': argparse formats help with %
                           help=f"fit even when the measurements' median spread across rounds exceeds "
                                f"{NOISE_LIMIT:.0%}%")
    calibrate.add_argument("--clock-hz", type=float,
                           help="Spyre SoC clock that converts cycle counters to seconds (default 1 GHz)")
    calibrate.add_argument("--tensor-flops-per-instruction", type=float,
                           help="Nsight Compute: FLOPs per sm__inst_executed_pipe_tensor instruction (512 on V100)")
    calibrate.add_argument("--json", action="store_true")
    add_fanout_arguments(calibrate)
    calibrate.set_defaults(handler=_calibrate)


def _bench(args) -> int:
    from tqdm import tqdm

    from calibration.harness import (
        DEFAULT_THREADS,
        NOISE_LIMIT,
        QUICK_ROUNDS,
        ROUNDS,
        available_cpus,
        noise,
        quantization_warning,
        run_suite,
        suite,
    )
    from calibration.records import write_records
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.yaml_source import check_output_path

    check_output_path(args.output, "-o/--output", (".csv",))
    if args.rounds is not None and args.rounds < 1:
        raise PerfmodelError(f"--rounds must be at least 1, got {args.rounds}")
    spec = load_hardware(args.spec)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    if args.threads is not None and args.threads < 1:
        raise PerfmodelError(f"--threads must be at least 1, got {args.threads}")
    threads = DEFAULT_THREADS if args.threads is None else args.threads
    print(f"threads: {threads} of {available_cpus()} CPUs "
          + ("(the default: a core's calibration; --threads N for more)" if args.threads is None else "(--threads)"),
          file=sys.stderr)
    total = len(suite(args.quick)) * rounds
    with tqdm(total=total, unit="case", file=sys.stderr) as bar:
        records = run_suite(spec, device=args.device, quick=args.quick, rounds=rounds, threads=threads,
                            allocator=args.allocator,
                            progress=lambda name: (bar.set_postfix_str(name[:40]), bar.update(1)))
    write_records(records, args.output)
    spread = noise(records)
    print(f"wrote {len(records)} measurements to {args.output} ({records[0].device}; {records[0].tool_version}; "
          f"allocator {records[0].allocator or 'unknown'}; minor page faults per call: median "
          f"{statistics.median(record.page_faults_per_call or 0.0 for record in records):.3g})")
    verdict = "within" if spread <= NOISE_LIMIT else "ABOVE"
    print(f"noise: median spread across rounds {spread:.1%}, {verdict} the {NOISE_LIMIT:.0%} limit of "
          "'perfmodel calibrate'" + ("" if spread <= NOISE_LIMIT else " (it will refuse these data without --force; "
                                                                         "re-measure on a quieter machine)"))
    warning = quantization_warning(records)
    if warning:
        print(f"perfmodel: warning: {warning}", file=sys.stderr)
    return 0


def _load_all(args, spec):
    from calibration.readers.detect import load_measurements

    loaded = []
    for path in args.measurements:
        if not path.exists():
            raise PerfmodelError(f"{path}: no such measurements file")
        loaded.append(load_measurements(path, args.format, spec, clock_hz=args.clock_hz,
                                        tensor_flops_per_instruction=args.tensor_flops_per_instruction))
    routes = {item.route for item in loaded}
    if len(routes) > 1:
        described = ", ".join(f"{item.source_file} ({item.format}: {item.route} route)" for item in loaded)
        raise PerfmodelError(f"cannot fit counter-route and shape-route files together: {described}; calibrate them "
                             "separately")
    records = [record for item in loaded for record in item.records]
    if not records and all(item.format == "bench" for item in loaded):
        names = [entry.name for item in loaded for entry in item.unmapped]
        raise PerfmodelError(f"{', '.join(str(path) for path in args.measurements)}: {len(names)} measurement(s) carry "
                             f"no workload graph (e.g. {names[0]!r}); fitting a bench CSV needs records from "
                             "'perfmodel bench'. Records read from profiler files can be compared on a chart with "
                             "'perfmodel roofline --measured'.")
    if not records:
        top = [f"{entry.name} ({entry.reason})" for item in loaded for entry in item.unmapped][:3]
        files = ", ".join(str(path) for path in args.measurements)
        raise PerfmodelError(f"{files}: no measurement could be priced by the model, so there is nothing to fit"
                             + (f"; unmapped: {'; '.join(top)}" if top else ""))
    return loaded, records


def _explained(loaded) -> dict:
    """What share of the measured time the fit's records explain, and the rest by kernel or op name
    (summed over the files, largest first)."""
    total = sum(item.total_s for item in loaded)
    mapped = sum(item.mapped_s for item in loaded)
    merged: dict[tuple[str, str], dict] = {}
    for item in loaded:
        for entry in item.unmapped:
            row = merged.setdefault((entry.name, entry.reason), {"name": entry.name, "reason": entry.reason, "count": 0,
                                                                  "time_s": 0.0, "files": []})
            row["count"] += entry.count
            row["time_s"] += entry.time_s
            if item.source_file not in row["files"]:
                row["files"].append(item.source_file)
    unmapped = sorted(merged.values(), key=lambda row: (-row["time_s"], row["name"]))
    for row in unmapped:
        row["share"] = row["time_s"] / total if total > 0 else 0.0
    return {
        "measured_time_s": total,
        "explained_time_s": mapped,
        "explained_share": mapped / total if total > 0 else 0.0,
        "files": [{"file": item.source_file, "format": item.format, "route": item.route, "records": len(item.records),
                   "measured_time_s": item.total_s, "explained_share": item.explained_share} for item in loaded],
        "unmapped": unmapped,
    }


def _explained_text(explained: dict) -> str:
    from perfmodel.tables import format_table
    from perfmodel.units import format_quantity

    lines = [f"the fit explains {explained['explained_share']:.1%} of the measured time "
             f"({format_quantity(explained['explained_time_s'], 'seconds')} of "
             f"{format_quantity(explained['measured_time_s'], 'seconds')})"]
    if len(explained["files"]) > 1:
        lines += [f"  {item['file']} ({item['format']}, {item['route']} route): {item['explained_share']:.1%} "
                  f"in {item['records']} records" for item in explained["files"]]
    entries = explained["unmapped"]
    if entries:
        lines.append(f"unmapped (not in the fit): {len(entries)} kernel/op name(s), "
                     f"{sum(entry['share'] for entry in entries):.1%} of the time")
        rows = [[entry["name"][:70], str(entry["count"]), format_quantity(entry["time_s"], "seconds"),
                 f"{entry['share']:.1%}", entry["reason"][:80]] for entry in entries[:UNMAPPED_SHOWN]]
        lines.append(format_table(["kernel or op", "count", "time", "share", "why"], rows))
        if len(entries) > UNMAPPED_SHOWN:
            lines.append(f"... and {len(entries) - UNMAPPED_SHOWN} more (--json lists them all)")
    return "\n".join(lines)


def _components(loaded, records, spec):
    if loaded[0].route == "counter":
        from calibration.counters import counter_components

        return counter_components(records, spec)
    from calibration.shapes import shape_components

    return shape_components(records, spec)


def _write_spec(text: str, output: Path) -> None:
    """Write the fitted spec only once it loads like any other (beside its base, so that ``extends``
    resolves): a bad fit leaves no file behind."""
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.yaml_source import atomic_output

    with atomic_output(output, ".yaml") as temporary:
        temporary.write_text(text, encoding="utf-8")
        load_hardware(temporary)


def _check_calibrate_arguments(args) -> None:
    """Every output and number of ``calibrate`` checked before anything is read or written."""
    import math

    from perfmodel.yaml_source import check_output_path

    check_output_path(args.output, "-o/--output", (".yaml", ".yml"))
    if args.chart is not None:
        check_output_path(args.chart, "--chart", (".png", ".svg", ".pdf"))
    if args.report is not None:
        check_output_path(args.report, "--report")
    if args.seed < 0:
        raise PerfmodelError(f"--seed must be 0 or more (it seeds the held-out split), got {args.seed}")
    for flag, value in (("--clock-hz", args.clock_hz), ("--tensor-flops-per-instruction",
                                                         args.tensor_flops_per_instruction)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise PerfmodelError(f"{flag} must be a finite number more than zero, got {value}")


def _calibrate(args) -> int:
    from calibration.fit import fit
    from calibration.harness import NOISE_LIMIT, noise, quantization_warning
    from calibration.report import fitted_spec_yaml, save_residual_chart, text_report, to_dict
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.yaml_source import write_text_atomically

    _check_calibrate_arguments(args)
    spec = load_hardware(args.spec)
    loaded, records = _load_all(args, spec)
    spread = noise(records)
    if spread > NOISE_LIMIT and not args.force:
        files = ", ".join(str(path) for path in args.measurements)
        raise PerfmodelError(f"{files}: the measurements' median spread across rounds is {spread:.1%}, above the "
                             f"{NOISE_LIMIT:.0%} limit: a fit would chase noise. Re-measure on a quieter machine "
                             "(fewer --threads than CPUs, nothing else running), or pass --force to fit anyway.")
    warning = quantization_warning(records)
    if warning:
        print(f"perfmodel: warning: {warning}", file=sys.stderr)
    explained = _explained(loaded)
    from perfmodel.cli.overrides import fanout

    with fanout(args, "held-out fit") as mapper:
        result = fit(records, spec, seed=args.seed, parts=_components(loaded, records, spec), mapper=mapper)
    for flag in result.flags:  # an efficiency above 1: the datasheet figure beneath it is wrong
        print(f"perfmodel: warning: {flag}", file=sys.stderr)
    text = fitted_spec_yaml(result, spec, args.spec, args.measurements[0], args.output, records)
    _write_spec(text, args.output)
    chart = args.chart or args.output.with_suffix(".residuals.png")
    save_residual_chart(result, chart)
    report = text_report(result, records, spec) + "\n" + _explained_text(explained)
    if spread > NOISE_LIMIT:
        report += f"\nforced: the measurements' median spread {spread:.1%} exceeds the {NOISE_LIMIT:.0%} limit"
    if args.report:
        write_text_atomically(args.report, report + "\n")
    if args.json:
        data = to_dict(result, records)
        data.update(explained)
        data.update({"fitted_spec": str(args.output), "chart": str(chart), "route": loaded[0].route,
                     "noise": {"median_spread": spread, "limit": NOISE_LIMIT, "forced": spread > NOISE_LIMIT}})
        print(json_text(data, indent=1))
    else:
        print(report)
        print(f"\nwrote {args.output} and {chart}")
    return 0
