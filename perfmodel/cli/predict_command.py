"""``perfmodel predict`` and ``perfmodel sweep``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from perfmodel.cli import confidence as intervals
from perfmodel.cli.overrides import (
    WORKLOAD_DTYPES,
    add_fanout_arguments,
    add_ideal_argument,
    add_mode_argument,
    add_set_argument,
    parse_overrides,
    spec_names,
    whole_number,
)
from perfmodel.errors import PerfmodelError
from perfmodel.jsonable import json_text
from perfmodel.tables import format_table
from perfmodel.units import format_quantity, parse_quantity
from perfmodel.yaml_source import check_output_path


def register(commands) -> None:
    predict = commands.add_parser("predict", help="predict a workload on one or more specs")
    predict.add_argument("workload", help="a workload file (YAML/JSON) or a shipped workload name")
    predict.add_argument("--on", required=True, type=spec_names, help="spec names or paths, comma-separated")
    add_set_argument(predict)
    add_ideal_argument(predict)
    add_mode_argument(predict)
    predict.add_argument("--overlap", choices=["max", "sum"], default="max")
    predict.add_argument("--compiled", action="store_true",
                         help="fuse element-wise and reduction chains as torch.compile/XLA do (in any mode)")
    predict.add_argument("--top", type=int, default=20, help="ops to list per spec in the table (default 20)")
    intervals.add_confidence_argument(predict)
    output = predict.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the JSON contract")
    output.add_argument("--csv", action="store_true", help="print one CSV row per op and spec")
    predict.set_defaults(handler=_predict, dtype_hint=WORKLOAD_DTYPES)

    sweep = commands.add_parser("sweep", help="evaluate a transformer block over a grid of scenario and spec values")
    sweep.add_argument("--on", required=True, help="one spec")
    sweep.add_argument("--grid", action="append", default=[], metavar="AXIS=V1,V2,...",
                       help="scenario axis (batch, seq, kv_len, hidden, heads, kv_heads, ffn, layers) or spec field "
                            "(memory.hbm.bandwidth=2TB/s,4TB/s); repeatable")
    add_mode_argument(sweep)
    add_ideal_argument(sweep)
    intervals.add_confidence_argument(sweep, parameter_sets=SWEEP_PARAMETER_SETS)
    sweep.add_argument("-o", "--output", type=Path,
                       help="write the table (.csv or .parquet), chunk by chunk; until it is written, the finished "
                            "chunks are kept in FILE.parts/, so that the same command, run again after an "
                            "interruption, computes only the others")
    sweep.add_argument("--json", action="store_true")
    sweep.add_argument("--max-points", type=whole_number(1), default=DEFAULT_MAX_POINTS, metavar="N",
                       help=f"refuse a grid of more points than this (default {DEFAULT_MAX_POINTS:,})")
    sweep.add_argument("--chunk-points", type=whole_number(1), default=DEFAULT_CHUNK_POINTS, metavar="N",
                       help=f"points evaluated at once, the unit of work and of memory (default {DEFAULT_CHUNK_POINTS:,})")
    sweep.add_argument("--restart", action="store_true",
                       help="discard the chunks an interrupted run of the same -o FILE kept in FILE.parts/ and start "
                            "over (without it, the same command resumes from them)")
    add_fanout_arguments(sweep)
    sweep.set_defaults(handler=_sweep)


def _predict(args) -> int:
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.roofline import evaluate
    from perfmodel.workload.io import load_graph

    graph = load_graph(args.workload)
    overrides = parse_overrides(args.set)
    specs = [load_for_prediction(name, overrides=overrides or None, ideal=args.ideal) for name in args.on]
    def total_s(on) -> float:
        return evaluate(graph, on, mode=args.mode, overlap=args.overlap, fuse=True if args.compiled else None).total_s

    evaluations = [evaluate(graph, hardware, mode=args.mode, overlap=args.overlap, fuse=True if args.compiled else None)
                   for hardware in specs]
    # A one-op graph is a kernel; a larger one is checked against whole-model passes (the scenario rows).
    kind = "kernel" if len(graph.ops) == 1 else "scenario"
    found = []
    for hardware, evaluation in zip(specs, evaluations, strict=True):
        runs, basis = intervals.sample_runs(hardware, kind, args.confidence, total_s,  # the fit's parameter sets
                                            intervals.sets_asked(args))
        sampled = intervals.Sampled(figures={"total_s": runs} if runs else {}, basis=basis)
        found.append(intervals.intervals(hardware, kind, args.confidence, {"total_s": (evaluation.total_s, "time")},
                                         sampled))
    if args.json:
        data = [{**evaluation.to_dict(), "intervals": intervals.to_json(bands)}
                for evaluation, bands in zip(evaluations, found, strict=True)]
        print(json_text(data[0] if len(data) == 1 else data, indent=1))
        return 0
    if args.csv:
        import pandas as pd

        frames = [pd.DataFrame(evaluation.rows()).assign(hardware=evaluation.hardware) for evaluation in evaluations]
        pd.concat(frames).to_csv(sys.stdout, index=False)
        return 0
    summary = []
    for evaluation, bands in zip(evaluations, found, strict=True):
        print(f"\n{graph.name} on {evaluation.hardware} ({evaluation.mode} mode, overlap {evaluation.overlap}, "
              f"{evaluation.parameters} parameters)")
        ops = sorted(evaluation.ops, key=lambda op: -op.total_s)[: args.top]
        rows = [[op.name, op.kind, op.count, format_quantity(op.flops, "flops_per_s").replace("/s", ""),
                 format_quantity(op.compute_s, "seconds"), format_quantity(max(op.memory_s.values(), default=0), "seconds"),
                 format_quantity(op.scheduling_s, "seconds"), format_quantity(op.total_s, "seconds"),
                 _share(op.total_s, evaluation.total_s, ".1f"), op.bound] for op in ops]
        print(format_table(["op", "kind", "count", "FLOP", "compute", "memory (max level)", "scheduling", "total",
                            "share", "bound"], rows))
        if len(evaluation.ops) > args.top:
            print(f"... {len(evaluation.ops) - args.top} more ops (--top N, --csv)")
        bounds = ", ".join(f"{bound} {_share(time, evaluation.total_s, '.0f')}"
                           for bound, time in evaluation.time_by_bound.items())
        total = bands["total_s"]
        band = total.basis if total.low is None else (
            f"{intervals.heading(args.confidence)} {intervals.text(total, lambda v: format_quantity(v, 'seconds'))}: "
            f"{total.basis}")
        print(f"total {format_quantity(evaluation.total_s, 'seconds')} ({band}); by bound: {bounds}")
        if not evaluation.fits:
            print(f"warning: the weights ({format_quantity(evaluation.weight_bytes, 'bytes')}) do not fit in "
                  f"{evaluation.hardware}'s memory ({format_quantity(evaluation.on_device_bytes, 'bytes')}): "
                  "the time assumes they are spread over enough chips (see perfmodel llm / size)")
        if evaluation.unsupported:
            print(f"estimated without a cost rule: {evaluation.unsupported}")
        summary.append([evaluation.hardware, evaluation.mode, format_quantity(evaluation.total_s, "seconds"),
                        f"{evaluation.flops_total / evaluation.total_s / 1e12:.2f}" if evaluation.total_s > 0 else "-",
                        evaluation.bound, evaluation.kernels])
    if len(evaluations) > 1:
        print()
        print(format_table(["spec", "mode", "total", "achieved TFLOP/s", "main bound", "kernels"], summary))
    return 0


def _share(time_s: float, total_s: float, style: str) -> str:
    """``time_s`` as a percentage of ``total_s``; '-' for a graph that takes no time (ops that move
    nothing on a device without launch overhead)."""
    return f"{100 * time_s / total_s:{style}}%" if total_s > 0 else "-"


SCENARIO_AXES = ("batch", "seq", "kv_len", "hidden", "heads", "kv_heads", "ffn", "layers")
TABLE_SUFFIXES = (".csv", ".parquet")  # what 'sweep -o' writes
DEFAULT_MAX_POINTS = 100_000_000
DEFAULT_CHUNK_POINTS = 250_000
# Parameter sets every chunk is evaluated again at (--parameter-sets): the sweep's time grows with them
# (1 + sets evaluations of each chunk's graph), so fewer than llm's 32 (as serve, train and search).
SWEEP_PARAMETER_SETS = 16


def parse_grid(items: list[str]) -> tuple[dict, dict]:
    from perfmodel.roofline.sweep import spec_axis_dimension

    scenario, spec = {}, {}
    for item in items:
        axis, sep, values = item.partition("=")
        if not sep or not values:
            raise PerfmodelError(f"--grid {item!r}: expected AXIS=V1,V2,..., e.g. batch=1,8,64")
        parts = [value.strip() for value in values.split(",") if value.strip()]
        if axis in SCENARIO_AXES:
            try:
                scenario[axis] = [int(value) for value in parts]
            except ValueError:
                raise PerfmodelError(f"--grid {axis}: values must be integers, got {values!r}") from None
            if any(value <= 0 for value in scenario[axis]):
                raise PerfmodelError(f"--grid {axis}: values must be more than zero")
        else:
            dimension = spec_axis_dimension(axis)
            spec[axis] = [parse_quantity(value, dimension) for value in parts]
    return scenario, spec


def _sweep(args) -> int:
    from perfmodel.chunkstore import resumed
    from perfmodel.fanout import mapper, progress
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.roofline.sweep import SweepResult, as_override, sweep_chunks, sweep_plan
    from perfmodel.workload.builders import transformer_block

    if args.output is not None:
        check_output_path(args.output, "-o/--output", TABLE_SUFFIXES)
    scenario, spec = parse_grid(args.grid)
    hardware = load_for_prediction(args.on, ideal=args.ideal)
    for axis, values in spec.items():  # the spec schema checks every swept value, exactly as --set does
        for value in values:
            load_for_prediction(args.on, overrides={axis: as_override(axis, value)}, ideal=args.ideal)
    if not scenario and not spec:
        raise PerfmodelError("give at least one --grid axis, e.g. --grid batch=1,8,64")
    plan = sweep_plan(transformer_block, hardware, scenario=scenario, spec=spec, mode=args.mode,
                      chunk_points=args.chunk_points)
    if plan.size > args.max_points:
        raise PerfmodelError(
            f"the grid has {plan.size:,} points (the product of the --grid axes' lengths, "
            f"{' x '.join(str(n) for n in plan.shape)}), more than --max-points {args.max_points:,}; narrow an axis "
            "or raise --max-points (the sweep streams in chunks of --chunk-points, so memory stays bounded, but the "
            "time and the output grow with the points)")
    band = _sweep_band(hardware, bool(spec), args.confidence)
    # Parameter uncertainty: each chunk's graph evaluated again at every set drawn from the fit's covariance
    # (no band, no sets: swept spec values are what-if devices).
    sets, spread_basis = intervals.parameter_sets(hardware, "scenario", args.confidence, intervals.sets_asked(args)) \
        if band.known else ([], "")
    plan = replace(plan, parameter_sets=tuple(sets), confidence=args.confidence)
    basis = f"{band.basis}; {'with ' if sets else ''}{spread_basis}" if band.known else band.basis
    parts = _sweep_parts(args, plan, hardware, replace(band, basis=basis))
    distributed = args.workers is not None or args.scheduler is not None
    try:
        with mapper(workers=args.workers, scheduler=args.scheduler) as where:
            results = sweep_chunks(plan, where) if parts is None else \
                resumed(parts, where, plan.evaluate, plan.spans(), keep=SweepResult.computed, restore=plan.restore)
            shown = progress(results, plan.size, "pt", count=lambda part: part.size,
                             enabled=not args.json and (distributed or plan.size >= 100_000))
            # closed inside the block however it ends: the bar is cleared before a message, and a Dask
            # mapper cancels what is in flight while its cluster is still up
            with contextlib.closing(results), contextlib.closing(shown):
                head, rows = stream_table((_with_interval(part.to_columns(), band, part.parameter_spread)
                                           for part in shown), args.output, as_json=args.json,
                                          fields={"confidence": band.confidence, "basis": basis})
    except BaseException:
        if parts is not None:
            kept = sum(1 for _ in parts.path.glob("chunk-*.npz"))
            if not kept:  # nothing to resume from: leave no empty directory behind
                parts.remove()
                raise
            print(f"perfmodel: {kept} of {parts.chunks} chunks of this sweep are kept in {parts.path}; run the same "
                  "command again to compute only the others (--restart: start over)", file=sys.stderr)
        raise
    if parts is not None:
        parts.remove()  # the table is written (atomically): its chunks are not needed any more
    if not args.json:
        print(head.to_string(index=False))
        if rows > len(head):
            print(f"... {rows - len(head)} more rows (-o FILE.csv)")
        print(f"interval (total_s_low - total_s_high): {basis}")
    return 0


def _sweep_parts(args, plan, hardware, band):
    """The parts directory beside ``-o FILE`` (``perfmodel.chunkstore``), where the run keeps every
    chunk it finishes; None without -o (the table goes to the terminal only: nothing to resume).
    Resuming needs no option: the manifest holds everything the chunks' numbers rest on, so chunks
    it matches are those this run would compute, bit for bit, and a rerun of the same command (by
    hand, or a batch system requeueing a preempted job) resumes; anything else is refused."""
    from perfmodel.chunkstore import open_parts, parts_path

    if args.output is None:
        if args.restart:
            raise PerfmodelError("--restart discards the chunks an interrupted run kept beside its -o FILE; give the "
                                 "-o FILE of that run")
        return None
    parts = open_parts(parts_path(args.output), _sweep_manifest(args, plan, hardware, band), len(plan.spans()),
                       restart=args.restart)
    if parts.done:
        print(f"perfmodel: resuming: {len(parts.done)} of {parts.chunks} chunks are kept in {parts.path}",
              file=sys.stderr)
    return parts


def _sweep_manifest(args, plan, hardware, band) -> dict:
    """What a sweep's chunks rest on, field by field (a mismatch names the field): the arguments that
    shape the table, as parsed (2TB/s and 2000GB/s are one value), the spec's content, the interval,
    and the code and numpy that compute them. Not --workers/--scheduler (the same bits anywhere), the
    output format or --json (the chunks are the table's columns, not its text)."""
    import numpy as np

    from perfmodel import __version__
    from perfmodel.chunkstore import content_digest, source_digest
    from perfmodel.jsonable import to_jsonable

    return {"command": "sweep", "on": args.on, "ideal": args.ideal, "mode": args.mode,
            "grid axes": list(plan.axes), **{f"grid {axis}": values.tolist() for axis, values in plan.axes.items()},
            "chunk_points": plan.chunk_points, "points": plan.size, "interval": to_jsonable(band),
            "spec content (sha256)": content_digest(to_jsonable(hardware)),
            "perfmodel sources (sha256)": source_digest(), "perfmodel": __version__, "numpy": np.__version__}


def _sweep_band(hardware, what_if: bool, confidence: float):
    """The band of every point's time (a transformer block: the scenario rows' residuals); none at swept
    spec values (what-if devices: no evidence)."""
    from perfmodel.intervals import band_for
    from perfmodel.uncertainty import Band

    level = f"{round(100 * confidence, 1):g}%"
    if what_if:
        return Band(confidence=confidence, basis=f"no {level} interval: swept spec values are what-if devices")
    return band_for(hardware, "scenario", confidence)


def _with_interval(columns: dict, band, spread=None) -> dict:
    """``columns`` with ``total_s_low``/``total_s_high`` right after ``total_s`` (NaN where the band has
    no evidence), as ``uncertainty.interval`` gives them point by point; ``spread``: each point's parameter
    spread (``SweepResult.parameter_spread``), which widens the band point by point as
    ``uncertainty.combine`` widens one (``combined_bounds``)."""
    import numpy as np

    from perfmodel.uncertainty import TIME, combined_bounds, interval

    total = np.asarray(columns["total_s"], dtype=float)
    if band.known and spread is not None:
        # A point whose sets gave no finite ratio (a zero time) keeps the model-form band there.
        low, high = combined_bounds(band.low, band.high, np.nan_to_num(spread[0], nan=0.0, posinf=0.0, neginf=0.0),
                                    np.nan_to_num(spread[1], nan=0.0, posinf=0.0, neginf=0.0))
        bounds = {"total_s_low": total * np.exp(-high), "total_s_high": total * np.exp(-low)}
    elif band.known:
        low, high = interval(1.0, band, TIME).low, interval(1.0, band, TIME).high
        bounds = {"total_s_low": total * low, "total_s_high": total * high}
    else:
        bounds = {"total_s_low": np.full_like(total, np.nan), "total_s_high": np.full_like(total, np.nan)}
    ordered: dict = {}
    for name, values in columns.items():
        ordered[name] = values
        if name == "total_s":
            ordered.update(bounds)
    return ordered


HEAD_ROWS = 50  # rows of a sweep printed to the terminal


def stream_table(chunks, output: Path | None, *, as_json: bool = False, fields: Mapping | None = None):
    """Write a table that arrives in chunks (column -> array each) to ``output`` (.csv or .parquet,
    atomically: nothing is left half-written) and, with ``as_json``, to stdout as a JSON object of
    ``fields`` (what the whole table rests on: the interval's confidence and basis) and ``rows`` (one
    record a row), holding no more than one chunk; returns (the first ``HEAD_ROWS`` rows as a DataFrame,
    the number of rows)."""
    import pandas as pd

    from perfmodel.yaml_source import atomic_output

    head, rows = None, 0
    with contextlib.ExitStack() as stack:
        write = None
        if output is not None:
            temporary = stack.enter_context(atomic_output(output, output.suffix))
            write = _parquet_writer(temporary, stack) if output.suffix.lower() == ".parquet" else \
                _csv_writer(temporary, stack)
        if as_json:
            sys.stdout.write(json_text({**(fields or {}), "rows": []}, indent=None).removesuffix("]}"))
        for columns in chunks:
            frame = pd.DataFrame(columns)
            if write is not None:
                write(frame)
            if as_json:
                sys.stdout.write(("," if rows else "") + frame.to_json(orient="records")[1:-1])
            if head is None or len(head) < HEAD_ROWS:
                head = frame.head(HEAD_ROWS) if head is None else pd.concat([head, frame]).head(HEAD_ROWS)
            rows += len(frame)
        if as_json:
            sys.stdout.write("]}\n")
    return head, rows


def _parquet_writer(path: Path, stack):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise PerfmodelError("writing Parquet needs pyarrow: pip install pyarrow, or write .csv") from None
    writer = None

    def write(frame) -> None:
        nonlocal writer
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if writer is None:
            writer = stack.enter_context(pq.ParquetWriter(path, table.schema))
        writer.write_table(table)

    return write


def _csv_writer(path: Path, stack):
    stream = stack.enter_context(path.open("w", encoding="utf-8", newline=""))
    first = True

    def write(frame) -> None:
        nonlocal first
        frame.to_csv(stream, index=False, header=first)
        first = False

    return write
