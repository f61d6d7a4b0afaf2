"""``perfmodel llm`` (one prediction) and ``perfmodel size`` (deployment sizing)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from perfmodel.cli.overrides import (
    add_dtype_arguments,
    add_ideal_argument,
    add_mode_argument,
    add_set_argument,
    parse_overrides,
)
from perfmodel.errors import PerfmodelError
from perfmodel.tables import format_table
from perfmodel.units import format_quantity, parse_quantity

DEFAULT_SYSTEMS = "h100-sxm,tpu-v5e,cerebras-wse-3,groq-lpu-v1,ibm-spyre"


def register(commands) -> None:
    llm = commands.add_parser("llm", help="predict LLM inference (TTFT, TPOT, throughput, memory) on a system")
    llm.add_argument("--model", required=True, help="a shipped model (perfmodel models list) or a config.json path")
    llm.add_argument("--on", required=True, help="spec name or path")
    llm.add_argument("--batch", type=_counts, default=[1], metavar="N[,N...]",
                     help="batch size; a comma list (with --prompt/--gen lists) prints one row per scenario")
    llm.add_argument("--prompt", type=_counts, default=[1024], metavar="N[,N...]", help="prompt tokens")
    llm.add_argument("--gen", type=_counts, default=[256], metavar="N[,N...]", help="generated tokens")
    llm.add_argument("--chips", type=int, help="chips (default tp x pp; with only --chips, tp = chips)")
    llm.add_argument("--tp", type=int)
    llm.add_argument("--pp", type=int)
    llm.add_argument("--ep", type=int, default=1)
    add_dtype_arguments(llm)
    add_mode_argument(llm)
    llm.add_argument("--concurrency", type=int, help="also report continuous-batching throughput at this concurrency")
    llm.add_argument("--max-tokens-per-step", type=int,
                     help="with --concurrency: token budget per scheduler step (chunked prefill); default unlimited")
    llm.add_argument("--graph-out", type=Path, metavar="FILE.yaml",
                     help="also write one pipeline stage's graph of --phase, as priced (the eager stream in eager mode), "
                          "for 'perfmodel predict' and 'perfmodel roofline' (.yaml, .yml or .json)")
    llm.add_argument("--phase", choices=["prefill", "decode"], default="decode",
                     help="the phase --graph-out writes (decode: one step at the middle of the generation)")
    llm.add_argument("--condensed", action="store_true",
                     help="in eager mode, price the condensed graph (~12 ops a layer) instead of the op stream "
                          "captured from the transformers model class (~43 kernels and ~40 views a layer)")
    add_set_argument(llm)
    add_ideal_argument(llm)
    llm.add_argument("--json", action="store_true")
    llm.set_defaults(handler=_llm)

    size = commands.add_parser("size", help="fewest chips per system that meet TTFT/TPOT targets at a request rate")
    size.add_argument("--model", required=True)
    size.add_argument("--on", default=DEFAULT_SYSTEMS, help=f"specs, comma-separated (default {DEFAULT_SYSTEMS})")
    size.add_argument("--ttft", required=True, help="target time to first token, e.g. 500ms")
    size.add_argument("--tpot", required=True, help="target time per output token, e.g. 50ms")
    size.add_argument("--rate", required=True, help="requests per second, e.g. 10/s")
    size.add_argument("--prompt", type=int, default=1024)
    size.add_argument("--gen", type=int, default=256)
    size.add_argument("--weights", default="bf16")
    size.add_argument("--kv", default=None)
    add_mode_argument(size)
    add_set_argument(size)
    add_ideal_argument(size)
    size.add_argument("--json", action="store_true")
    size.set_defaults(handler=_size)


def _parallelism(args):
    from perfmodel.llm import Parallelism

    _check_counts(args, ("tp", "pp", "ep", "chips"))
    tp, pp, chips = args.tp, args.pp, args.chips
    if chips is not None and tp is None and pp is None:
        tp, pp = chips, 1
    tp, pp = tp or 1, pp or 1
    if chips is not None and chips != tp * pp:
        raise PerfmodelError(f"--chips {chips} must equal tp x pp = {tp} x {pp}")
    return Parallelism(tp=tp, pp=pp, ep=args.ep)


def _llm(args) -> int:
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.llm import Scenario, continuous_batching_throughput, llm_predict, max_batch
    from perfmodel.llm.catalog import load_architecture, load_config
    from perfmodel.llm.eager import stage_graphs_for

    _check_counts(args, ("concurrency", "max_tokens_per_step"))
    architecture = load_architecture(args.model)
    hardware = load_for_prediction(args.on, overrides=parse_overrides(args.set) or None, ideal=args.ideal)
    scenarios = [(batch, prompt, gen) for batch in args.batch for prompt in args.prompt for gen in args.gen]
    if len(scenarios) > 1:
        return _llm_table(args, architecture, hardware, scenarios)
    args.batch, args.prompt, args.gen = scenarios[0]
    scenario = Scenario(batch=args.batch, prompt_tokens=args.prompt, generated_tokens=args.gen,
                        weight_dtype=args.weights, kv_dtype=args.kv or args.activations,
                        activation_dtype=args.activations)
    parallelism = _parallelism(args)
    graphs, note = stage_graphs_for(load_config(args.model), hardware, args.mode, condensed=args.condensed)
    if note:
        print(f"perfmodel: note: {note}", file=sys.stderr)
    result = llm_predict(architecture, hardware, scenario, parallelism, mode=args.mode, graphs=graphs)
    if args.graph_out is not None:
        _write_stage_graph(args, graphs, architecture, scenario, parallelism)
    if not result.fits:
        needed = format_quantity(result.memory_bytes.total, "bytes", binary=True)
        print(f"perfmodel: warning: {architecture.name} does not fit: its fullest pipeline stage needs {needed} "
              f"per chip, {hardware.name} holds {format_quantity(result.capacity_bytes, 'bytes', binary=True)}; "
              "add chips (--tp/--pp), or use smaller weights/KV dtypes or a smaller batch", file=sys.stderr)
    data = result.to_dict()
    data["max_batch"] = max_batch(architecture, hardware, scenario, parallelism)
    if args.concurrency:
        data["continuous_batching"] = {"concurrency": args.concurrency, "tokens_per_s": continuous_batching_throughput(
            architecture, hardware, scenario, parallelism, args.concurrency, mode=args.mode,
            max_tokens_per_step=args.max_tokens_per_step, graphs=graphs)}
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    mib = {key: format_quantity(value, "bytes", binary=True) for key, value in data["memory_bytes"].items()}
    rows = [
        ["TTFT", format_quantity(result.ttft_s, "seconds")],
        ["TPOT (mean over generation)", format_quantity(result.tpot_s, "seconds")],
        ["end-to-end", format_quantity(result.e2e_s, "seconds")],
        ["tokens/s per user", f"{result.tokens_per_s_per_user:.1f}"],
        ["tokens/s (batch)", f"{result.tokens_per_s:.1f}"],
        ["tokens/s per chip", f"{result.tokens_per_s_per_chip:.1f}"],
        ["memory per chip", ", ".join(f"{key} {value}" for key, value in mib.items())],
        ["capacity per chip", format_quantity(result.capacity_bytes, "bytes", binary=True)],
        ["fits", ("yes" if result.fits else "NO") + (" (weights streamed from the external store)"
                                                     if result.weights_streamed else "")],
        ["largest batch that fits", str(data["max_batch"])],
        ["bound (prefill / decode)", f"{result.bound_by_phase['prefill']} / {result.bound_by_phase['decode']}"],
        ["power", format_quantity(result.power_watts, "watts")],
        ["ops per decode step", "{ops:.0f} ({per_layer:.0f} a layer), {host_only:.0f} host-only views, "
                                "{kernels:.0f} kernels launched".format(**result.ops_per_decode_step)],
        ["graph", result.graph],
    ]
    if args.concurrency:
        rows.append([f"continuous batching at {args.concurrency}",
                     f"{data['continuous_batching']['tokens_per_s']:.1f} tokens/s"])
    print(f"{architecture.name} on {result.chips} x {hardware.name} (tp {parallelism.tp}, pp {parallelism.pp}, "
          f"{result.mode} mode; parameters: {result.parameters}), batch {args.batch}, prompt {args.prompt}, "
          f"gen {args.gen}, weights {args.weights}")
    print(format_table(["metric", "value"], rows))
    for phase, shares in result.time_by_bound_by_phase.items():
        total = sum(shares.values())
        print(f"{phase}: " + ", ".join(f"{bound} {100 * time / total:.0f}%" for bound, time in shares.items()))
    return 0


def _counts(text: str) -> list[int]:
    """A count or a comma list of counts, each at least 1 (argparse type)."""
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or a comma list of them (e.g. 1,8,64), "
                                         f"got {text!r}") from None
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return values


def _llm_table(args, architecture, hardware, scenarios) -> int:
    """One row per (batch, prompt, gen) scenario."""
    from perfmodel.llm import Scenario, llm_predict
    from perfmodel.llm.catalog import load_config
    from perfmodel.llm.eager import stage_graphs_for

    if args.graph_out is not None or args.concurrency:
        raise PerfmodelError("--graph-out and --concurrency take one scenario; give single --batch/--prompt/--gen")
    parallelism = _parallelism(args)
    graphs, note = stage_graphs_for(load_config(args.model), hardware, args.mode, condensed=args.condensed)
    if note:
        print(f"perfmodel: note: {note}", file=sys.stderr)
    results = [llm_predict(architecture, hardware, Scenario(
        batch=batch, prompt_tokens=prompt, generated_tokens=gen, weight_dtype=args.weights,
        kv_dtype=args.kv or args.activations, activation_dtype=args.activations), parallelism, mode=args.mode,
        graphs=graphs) for batch, prompt, gen in scenarios]
    if args.json:
        print(json.dumps([result.to_dict() for result in results], indent=1))
        return 0
    rows = [[result.scenario.batch, result.scenario.prompt_tokens, result.scenario.generated_tokens,
             format_quantity(result.ttft_s, "seconds"), format_quantity(result.tpot_s, "seconds"),
             f"{result.tokens_per_s:.1f}", f"{result.tokens_per_s_per_chip:.1f}", "yes" if result.fits else "NO",
             result.bound_by_phase["decode"]] for result in results]
    print(f"{architecture.name} on {parallelism.chips} x {hardware.name} (tp {parallelism.tp}, pp {parallelism.pp}, "
          f"{results[0].mode} mode; parameters: {results[0].parameters}), weights {args.weights}")
    print(format_table(["batch", "prompt", "gen", "TTFT", "TPOT", "tokens/s", "tokens/s/chip", "fits",
                        "decode bound"], rows))
    return 0


def _write_stage_graph(args, graphs, architecture, scenario, parallelism) -> None:
    from perfmodel.workload.io import save_graph

    if args.graph_out.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise PerfmodelError(f"--graph-out {args.graph_out}: expected a .yaml, .yml or .json file name")
    context = args.prompt if args.phase == "prefill" else args.prompt + max(args.gen // 2, 1)
    graph = graphs(architecture, scenario, parallelism, phase=args.phase, context=context)
    save_graph(graph, args.graph_out)
    print(f"perfmodel: wrote the {args.phase} graph of one pipeline stage ({len(graph.ops)} ops) to "
          f"{args.graph_out}", file=sys.stderr)


def _rate(text: str) -> float:
    match = re.match(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(/s|/min|rps)?\s*$", text)
    if not match or float(match.group(1)) <= 0:
        raise PerfmodelError(f"--rate {text!r}: expected a positive number of requests per second such as "
                             "'10/s' or '600/min'")
    value = float(match.group(1))
    return value / 60 if match.group(2) == "/min" else value


def _check_counts(args, names: tuple[str, ...]) -> None:
    """Counts given on the command line must be at least 1 (0 is never a silent 'default')."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise PerfmodelError(f"{flag} must be at least 1, got {value}")


def _size(args) -> int:
    from perfmodel.hardware.execution_models import resolve_mode
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.sizing import Targets, pareto, size_system

    _check_counts(args, ("prompt", "gen"))
    architecture = load_architecture(args.model)
    targets = Targets(ttft_s=parse_quantity(args.ttft, "seconds"), tpot_s=parse_quantity(args.tpot, "seconds"),
                      rate_per_s=_rate(args.rate), prompt_tokens=args.prompt, generated_tokens=args.gen)
    results, parameter_sets, unavailable = {}, {}, {}
    overrides = parse_overrides(args.set) or None
    for name in [item.strip() for item in args.on.split(",") if item.strip()]:
        hardware = load_for_prediction(name, overrides=overrides, ideal=args.ideal)
        parameter_sets[name] = hardware.efficiency.label if hardware.efficiency else "ideal (datasheet)"
        try:  # a system that does not offer the requested mode (eager on Groq) is reported, not sized
            resolve_mode(hardware, args.mode)
        except PerfmodelError as error:
            results[name], unavailable[name] = [], str(error)
            continue
        weights = args.weights
        options = size_system(architecture, hardware, targets, weight_dtype=weights, kv_dtype=args.kv or "bf16",
                              mode=args.mode) if _supports(hardware, weights) else []
        if not options and weights in ("bf16", "fp16"):
            alternative = "fp16" if weights == "bf16" else "bf16"
            options = size_system(architecture, hardware, targets, weight_dtype=alternative, kv_dtype=alternative,
                                  activation_dtype=alternative, mode=args.mode)
        results[name] = options
    if args.json:
        print(json.dumps({name: {"parameters": parameter_sets[name],
                                 "best": options[0].to_dict() if options and options[0].meets_targets else None,
                                 "pareto": [o.to_dict() for o in pareto(options)],
                                 "closest": min(options, key=lambda o: o.tpot_s).to_dict() if options else None,
                                 **({"unavailable": unavailable[name]} if name in unavailable else {})}
                          for name, options in results.items()}, indent=1))
        return 0
    rows, front = [], []
    for name, options in results.items():
        best = options[0] if options and options[0].meets_targets else None
        if best is None:
            closest = min(options, key=lambda o: o.tpot_s) if options else None
            note = unavailable.get(name, "no option fits") if closest is None else (
                f"misses the targets; fastest: TPOT {format_quantity(closest.tpot_s, 'seconds')}, "
                f"TTFT {format_quantity(closest.ttft_s, 'seconds')} on {closest.parallelism.chips} chips")
            rows.append([name, "-", "-", "-", "-", "-", "-", "-", note])
            continue
        rows.append([name, best.chips, f"{best.replicas} x (tp {best.parallelism.tp}, pp {best.parallelism.pp})",
                     format_quantity(best.ttft_s, "seconds"), format_quantity(best.tpot_s, "seconds"),
                     f"{best.tokens_per_s:.0f}", format_quantity(best.power_watts, "watts"),
                     "n/a" if best.cost_usd_per_hour is None else f"{best.cost_usd_per_hour:.2f}", "meets the targets"])
        front += [[name, o.chips, f"{o.replicas} x (tp {o.parallelism.tp}, pp {o.parallelism.pp})",
                   format_quantity(o.tpot_s, "seconds"), o.concurrency] for o in pareto(options)]
    print(f"{architecture.name}: TTFT <= {args.ttft}, TPOT <= {args.tpot}, {args.rate} requests, prompt {args.prompt}, "
          f"gen {args.gen}")
    print(format_table(["system", "chips", "replicas x parallelism", "TTFT", "TPOT", "tokens/s", "power",
                        "USD/h", "note"], rows))
    print("parameters: " + "; ".join(f"{name} {label}" for name, label in parameter_sets.items()))
    if front:
        print("\nPareto front (chips vs TPOT):")
        print(format_table(["system", "chips", "replicas x parallelism", "TPOT", "concurrency"], front))
    return 0


def _supports(hardware, dtype: str) -> bool:
    return any(dtype in engine.peak_flops_per_s for engine in hardware.compute.values())
