"""``perfmodel roofline``: classic, hierarchical and scheduling-aware roofline charts."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from perfmodel.cli import confidence as intervals
from perfmodel.cli.overrides import WORKLOAD_DTYPES, add_mode_argument, spec_names
from perfmodel.errors import PerfmodelError
from perfmodel.yaml_source import check_output_path, csv_failures, open_for_reading

CHART_SUFFIXES = (".png", ".svg", ".pdf")


def register(commands) -> None:
    roofline = commands.add_parser("roofline", help="draw a roofline chart of a workload on one or more specs")
    roofline.add_argument("workload", help="a workload file or a shipped workload name")
    roofline.add_argument("--on", required=True, type=spec_names,
                          help="spec names, comma-separated (several: side by side)")
    roofline.add_argument("--kind", choices=["classic", "hierarchical", "scheduling", "breakdown"], default="classic")
    roofline.add_argument("--measured", type=Path, help="CSV of measurements: name, flops, bytes, duration_s")
    roofline.add_argument("--dtype", help="dtype of the compute roof (default: the workload's)")
    add_mode_argument(roofline)
    roofline.add_argument("-o", "--output", type=Path, required=True, help="chart file: .png, .svg or .pdf")
    intervals.add_confidence_argument(roofline, parameter_sets=0)
    roofline.set_defaults(handler=_roofline, dtype_hint=WORKLOAD_DTYPES)


REQUIRED_COLUMNS = ("name", "flops", "bytes", "duration_s")


def read_measured(path: Path) -> list[dict]:
    """Rows of ``name, flops, bytes, duration_s`` (SI units, finite, more than zero); a clear error names
    the row and column."""
    with open_for_reading(path) as stream:
        reader = csv.DictReader(stream)
        with csv_failures(path, reader):
            missing = [column for column in REQUIRED_COLUMNS if column not in (reader.fieldnames or [])]
            if missing:
                raise PerfmodelError(f"{path}: missing column(s) {missing}; expected {', '.join(REQUIRED_COLUMNS)}")
            records = [_measured_row(path, number, row) for number, row in enumerate(reader, start=2)]
    if not records:
        raise PerfmodelError(f"{path}: no measurements (a header row, then one row per measurement)")
    return records


def _measured_row(path: Path, number: int, row: dict) -> dict:
    if None in row or None in row.values():
        raise PerfmodelError(f"{path}:{number}: the row has {'too many' if None in row else 'too few'} fields "
                             "for the header (a truncated file?)")
    record = {"name": row["name"], "kind": row.get("kind") or "measured"}
    for column in REQUIRED_COLUMNS[1:]:
        try:
            value = float(row[column])
        except (TypeError, ValueError):
            raise PerfmodelError(f"{path}:{number}: column {column!r}: {row[column]!r} is not a number") from None
        if not (value > 0 and math.isfinite(value)):
            raise PerfmodelError(f"{path}:{number}: column {column!r} must be more than zero and finite, got {value}")
        record[column] = value
    return record


def _roofline(args) -> int:
    from perfmodel import plotting
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.roofline import evaluate
    from perfmodel.roofline.charts import classic_roofline, hierarchical_roofline, measured_points, scheduling_roofline
    from perfmodel.workload.io import load_graph

    check_output_path(args.output, "-o/--output", CHART_SUFFIXES)
    graph = load_graph(args.workload)
    specs = [load_hardware(name) for name in args.on]
    evaluations = [evaluate(graph, hardware, mode=args.mode) for hardware in specs]
    if args.kind == "breakdown":
        # Each system's total with its interval (a one-op graph is a kernel, as predict prices it).
        kind = "kernel" if len(graph.ops) == 1 else "scenario"
        totals = [intervals.intervals(hardware, kind, args.confidence, {"total_s": (evaluation.total_s, "time")})["total_s"]
                  for hardware, evaluation in zip(specs, evaluations, strict=True)]
        plotting.save_figure(plotting.plot_time_breakdown(evaluations, total_intervals=totals), args.output)
        print(f"wrote {args.output}")
        return 0
    builders = {"classic": classic_roofline, "hierarchical": hierarchical_roofline, "scheduling": scheduling_roofline}
    datas = [builders[args.kind](hardware, evaluation, dtype=args.dtype)
             for hardware, evaluation in zip(specs, evaluations, strict=True)]
    measured = ()
    if args.measured:
        measured = measured_points(read_measured(args.measured), datas[0].roofs[0].label)
    if len(datas) == 1:
        if args.kind == "scheduling":
            axes = plotting.plot_scheduling_roofline(datas[0])
        else:
            axes = plotting.plot_roofline(datas[0], measured=measured)
    else:
        axes = plotting.plot_side_by_side(datas, kind=args.kind, measured=measured)
    plotting.save_figure(axes, args.output)
    print(f"wrote {args.output}")
    return 0
