"""``perfmodel predict`` and ``perfmodel sweep``."""

from __future__ import annotations

import sys
from pathlib import Path

from perfmodel.cli import confidence as intervals
from perfmodel.cli.overrides import (
    WORKLOAD_DTYPES,
    add_ideal_argument,
    add_mode_argument,
    add_set_argument,
    parse_overrides,
    spec_names,
)
from perfmodel.errors import PerfmodelError
from perfmodel.jsonable import json_text
from perfmodel.tables import format_table
from perfmodel.units import format_quantity, parse_quantity


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
    intervals.add_confidence_argument(sweep)
    sweep.add_argument("-o", "--output", type=Path, help="write the table (.csv or .parquet)")
    sweep.add_argument("--json", action="store_true")
    sweep.set_defaults(handler=_sweep)


def _predict(args) -> int:
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.roofline import evaluate
    from perfmodel.workload.io import load_graph

    graph = load_graph(args.workload)
    overrides = parse_overrides(args.set)
    specs = [load_for_prediction(name, overrides=overrides or None, ideal=args.ideal) for name in args.on]
    evaluations = [evaluate(graph, hardware, mode=args.mode, overlap=args.overlap, fuse=True if args.compiled else None)
                   for hardware in specs]
    # A one-op graph is a kernel; a larger one is checked against whole-model passes (the scenario rows).
    kind = "kernel" if len(graph.ops) == 1 else "scenario"
    found = [intervals.intervals(hardware, kind, args.confidence, {"total_s": (evaluation.total_s, "time")})
             for hardware, evaluation in zip(specs, evaluations, strict=True)]
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


def _with_interval(frame, hardware, what_if: bool, confidence: float):
    """``total_s_low``/``total_s_high`` columns: the interval of each point's time (a transformer block: the
    scenario rows' residuals); empty at swept spec values (what-if devices: no evidence)."""
    from perfmodel.intervals import band_for
    from perfmodel.uncertainty import Band, interval

    level = f"{round(100 * confidence, 1):g}%"
    band = Band(confidence=confidence, basis=f"no {level} interval: swept spec values are what-if devices") \
        if what_if else band_for(hardware, "scenario", confidence)
    found = [interval(float(value), band, "time") for value in frame["total_s"]]
    position = list(frame.columns).index("total_s") + 1
    frame.insert(position, "total_s_high", [item.high for item in found])
    frame.insert(position, "total_s_low", [item.low for item in found])
    frame.attrs["interval"] = band.basis
    return frame


def _share(time_s: float, total_s: float, style: str) -> str:
    """``time_s`` as a percentage of ``total_s``; '-' for a graph that takes no time (ops that move
    nothing on a device without launch overhead)."""
    return f"{100 * time_s / total_s:{style}}%" if total_s > 0 else "-"


SCENARIO_AXES = ("batch", "seq", "kv_len", "hidden", "heads", "kv_heads", "ffn", "layers")
TABLE_SUFFIXES = (".csv", ".parquet")  # what 'sweep -o' writes


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
    import numpy as np

    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.roofline.sweep import as_override, grid_size, sweep
    from perfmodel.workload.builders import transformer_block
    from perfmodel.yaml_source import atomic_output, check_output_path, write_text_atomically

    if args.output is not None:
        check_output_path(args.output, "-o/--output", TABLE_SUFFIXES)
    scenario, spec = parse_grid(args.grid)
    hardware = load_for_prediction(args.on, ideal=args.ideal)
    for axis, values in spec.items():  # the spec schema checks every swept value, exactly as --set does
        for value in values:
            load_for_prediction(args.on, overrides={axis: as_override(axis, value)}, ideal=args.ideal)
    total = grid_size({**scenario, **spec})
    if total == 0:
        raise PerfmodelError("give at least one --grid axis, e.g. --grid batch=1,8,64")
    from tqdm import tqdm

    with tqdm(total=total, unit="pt", disable=args.json or total < 100_000, file=sys.stderr) as bar:
        result = sweep(lambda **axes: transformer_block(**{k: np.asarray(v) for k, v in axes.items()}), hardware,
                       scenario={k: np.asarray(v) for k, v in scenario.items()}, spec=spec, mode=args.mode,
                       progress=lambda done, _: bar.update(done - bar.n))
    import pandas as pd

    frame = _with_interval(pd.DataFrame(result.to_columns()), hardware, bool(spec), args.confidence)
    if args.output:
        if args.output.suffix.lower() == ".parquet":
            try:
                with atomic_output(args.output, ".parquet") as temporary:
                    frame.to_parquet(temporary)
            except ImportError:
                raise PerfmodelError("writing Parquet needs pyarrow: pip install pyarrow, or write .csv") from None
        else:
            write_text_atomically(args.output, frame.to_csv(index=False))
    if args.json:
        print(frame.to_json(orient="records"))
    else:
        print(frame.head(50).to_string(index=False))
        if len(frame) > 50:
            print(f"... {len(frame) - 50} more rows (-o FILE.csv)")
        print(f"interval (total_s_low - total_s_high): {frame.attrs['interval']}")
    return 0
