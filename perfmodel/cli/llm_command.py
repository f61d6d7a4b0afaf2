"""``perfmodel llm`` (one prediction) and ``perfmodel size`` (deployment sizing)."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from perfmodel.cli import confidence as intervals
from perfmodel.cli.overrides import (
    WEIGHTS_HELP,
    add_dtype_arguments,
    add_engine_argument,
    add_expert_weights_argument,
    add_fanout_arguments,
    add_ideal_argument,
    add_mode_argument,
    add_set_argument,
    fanout,
    parse_overrides,
    resolve_checkpoint_dtypes,
    seed,
    spec_names,
)
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import mode_choices, mode_help
from perfmodel.jsonable import json_text
from perfmodel.tables import format_table
from perfmodel.uncertainty import TIME
from perfmodel.units import format_quantity, parse_quantity

DEFAULT_SYSTEMS = "h100-sxm,tpu-v5e,cerebras-wse-3,groq-lpu-v1,ibm-spyre"
DEFAULT_SIZE_REQUESTS = 200
DEFAULT_SIZE_PROMPT, DEFAULT_SIZE_OUTPUT = 1024, 256
TARGET_STATISTICS = ("mean", "p50", "p90", "p99")
SIZE_RANKINGS = ("chips", "cost", "watts")
# Parameter sets whose step-time spread widens each simulated parallelism's factor (cli.held; one llm
# array evaluation a set and parallelism): fewer than llm's 32, as the other commands that repeat work.
SIZE_PARAMETER_SETS = 16


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
    add_expert_weights_argument(llm)
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
    add_engine_argument(llm)
    intervals.add_confidence_argument(llm)
    llm.add_argument("--json", action="store_true")
    llm.set_defaults(handler=_llm)

    size = commands.add_parser(
        "size", help="fewest chips per system that meet TTFT/TPOT percentile targets at a load (simulated)",
        description="Size a deployment on each system: a steady-state screen proposes parallelisms and replica\n"
                    "counts, the serving simulator checks the cheapest ones at the given load (one replica at its\n"
                    "share: rate / replicas, or users / replicas) and adds replicas until every target holds.",
        epilog=SIZE_EPILOG, formatter_class=_SizeHelpFormatter)
    size.add_argument("--model", required=True, help="a shipped model (perfmodel models list) or a config.json path")
    size.add_argument("--on", default=DEFAULT_SYSTEMS, type=spec_names,
                      help=f"specs, comma-separated (default {DEFAULT_SYSTEMS})")
    size.add_argument("--rate", help="open loop: Poisson arrivals of all replicas together, e.g. 10/s or 600/min")
    size.add_argument("--users", type=int, help="closed loop: users in all, each waiting for its answer and then "
                                                "thinking --think before the next request")
    size.add_argument("--think", help="closed loop: think time between a user's requests, e.g. 5s (default 0s)")
    for metric, words in (("ttft", "time to first token"), ("tpot", "time per output token")):
        for statistic in TARGET_STATISTICS:
            flags = [f"--{metric}", f"--{metric}-mean"] if statistic == "mean" else [f"--{metric}-{statistic}"]
            what = "mean" if statistic == "mean" else f"{statistic[1:]}th percentile of the"
            size.add_argument(*flags, dest=f"{metric}_{statistic}", metavar="TIME",
                              help=f"target: the {what} {words} over the simulated requests, e.g. "
                                   f"{'500ms' if metric == 'ttft' else '50ms'}")
    size.add_argument("--prompt", type=int, help="prompt tokens, every request (default 1024; or --prompt-dist)")
    size.add_argument("--gen", type=int, help="output tokens, every request (default 256; or --output-dist)")
    size.add_argument("--prompt-dist", help="prompt tokens: fixed:1024, uniform:128-1024, lognormal:MEAN,SIGMA, a "
                                            "public dataset's name or a CSV file of lengths (as perfmodel serve)")
    size.add_argument("--output-dist", help="output tokens, as --prompt-dist")
    size.add_argument("--requests", type=int, default=DEFAULT_SIZE_REQUESTS,
                      help=f"requests per simulation (default {DEFAULT_SIZE_REQUESTS})")
    size.add_argument("--seed", type=seed, default=0, help="seed of the simulated arrivals and lengths (default 0)")
    size.add_argument("--price", metavar="USD|SPEC=USD,...",
                      help="price per chip-hour in USD, one number for every system or per spec "
                           "(h100-sxm=2.5,tpu-v5e=1.2); overrides the spec's price; without one, cost is n/a")
    size.add_argument("--rank", choices=SIZE_RANKINGS, default="chips",
                      help="order of the systems: by chips (default), cost per million output tokens or watts, "
                           "ties broken by the other two in the order chips, cost, watts")
    size.add_argument("--weights", default="bf16", help=WEIGHTS_HELP + " (activations: bf16 unless the checkpoint "
                                                           "says otherwise)")
    size.add_argument("--kv", default=None)
    add_expert_weights_argument(size)
    size.set_defaults(dtype_hint="--weights and --kv set the dtypes (e.g. --weights bf16)")
    size.add_argument("--mode", choices=mode_choices(), help=mode_help() + " " + FAMILY_MODES_PLACEHOLDER)
    add_set_argument(size)
    add_ideal_argument(size)
    add_engine_argument(size)
    add_fanout_arguments(size)
    intervals.add_confidence_argument(size, parameter_sets=SIZE_PARAMETER_SETS)
    size.add_argument("--at-median", action="store_true",
                      help="size so that the targets hold at the median of the model's error instead of at "
                           "--confidence")
    size.add_argument("--chart", type=Path, metavar="FILE.png",
                      help="also draw every deployment the screen considered, chips against TPOT per system (Pareto "
                           "fronts joined), each system's sized deployment as a star with its simulated p50 TPOT's "
                           "--confidence interval as an error bar where there is evidence, and the TPOT targets "
                           "(.png, .svg or .pdf)")
    size.add_argument("--json", action="store_true")
    size.set_defaults(handler=_size)


SIZE_EPILOG = """\
targets: --ttft/--tpot (also --ttft-mean/--tpot-mean) are means over the simulated requests, as the
  steady-state sizing reported them; --ttft-p50/-p90/-p99 and --tpot-p50/-p90/-p99 are percentiles.
  Give any combination; every one must hold. TPOT is a request's mean gap between its output tokens.
ranking (--rank): chips, then cost per million output tokens, then watts (a system without a price
  ranks after those with one on cost). Systems that cannot meet the targets come last, with the reason.
each row: chips = replicas x tp x pp; TTFT/TPOT percentiles of one simulated replica at its share of
  the load; tokens/s of all replicas; power = TDP x chips; USD/h = price per chip-hour x chips;
  USD/M tokens = USD/h / (tokens/s x 3600) x 1e6; mode = the execution mode used; 'parameters:'
  names the parameter set of each system (its achievable overlay, or ideal (datasheet); --ideal).
"""
FAMILY_MODES_PLACEHOLDER = "(default per family: see the specs)"


class _SizeHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Fills in the bundled specs' default execution mode per family when the help is printed (loading
    every spec takes a second or two, which only --help should pay)."""

    def _get_help_string(self, action) -> str | None:
        text = action.help
        if text and FAMILY_MODES_PLACEHOLDER in text:
            text = text.replace(FAMILY_MODES_PLACEHOLDER, _family_default_modes())
        return text


def _family_default_modes() -> str:
    from perfmodel.hardware.execution_models import execution_model
    from perfmodel.hardware.loader import catalog, load_hardware

    try:
        modes: dict[str, set[str]] = {}
        for entry in catalog():
            modes.setdefault(entry.family, set()).add(load_hardware(entry.path).scheduling.default_mode)
    except (PerfmodelError, FileNotFoundError):
        return FAMILY_MODES_PLACEHOLDER
    described = "; ".join(f"{family} {' or '.join(f'{mode} ({execution_model(mode).style})' for mode in sorted(names))}"
                          for family, names in sorted(modes.items()))
    return f"Default per family (the bundled specs' scheduling.default_mode): {described}."


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
    from perfmodel.llm.caveats import engine_caveats
    from perfmodel.llm.eager import stage_graphs_for

    _check_counts(args, ("concurrency", "max_tokens_per_step"))
    resolve_checkpoint_dtypes(args)
    architecture = load_architecture(args.model)
    hardware = load_for_prediction(args.on, overrides=parse_overrides(args.set) or None, ideal=args.ideal,
                                   engine=args.engine)
    scenarios = [(batch, prompt, gen) for batch in args.batch for prompt in args.prompt for gen in args.gen]
    if len(scenarios) > 1:
        return _llm_table(args, architecture, hardware, scenarios)
    args.batch, args.prompt, args.gen = scenarios[0]
    scenario = Scenario(batch=args.batch, prompt_tokens=args.prompt, generated_tokens=args.gen,
                        weight_dtype=args.weights, kv_dtype=args.kv or args.activations,
                        activation_dtype=args.activations, expert_weight_dtype=args.expert_weights)
    parallelism = _parallelism(args)
    graphs, note = stage_graphs_for(load_config(args.model), hardware, args.mode, condensed=args.condensed)
    for said in ([note] if note else []) + engine_caveats(architecture, hardware):
        print(f"perfmodel: note: {said}", file=sys.stderr)
    result = llm_predict(architecture, hardware, scenario, parallelism, mode=args.mode, graphs=graphs)
    if args.graph_out is not None:
        _write_stage_graph(args, graphs, architecture, scenario, parallelism)
    if not result.fits:
        needed = format_quantity(result.memory_bytes.total, "bytes", binary=True)
        print(f"perfmodel: warning: {architecture.name} does not fit: its fullest pipeline stage needs {needed} "
              f"per chip, {hardware.name} holds {format_quantity(result.capacity_bytes, 'bytes', binary=True)}; "
              "add chips (--tp/--pp), or use smaller weights/KV dtypes or a smaller batch", file=sys.stderr)
    data = result.to_dict()
    runs, basis = intervals.sample_runs(hardware, "scenario", args.confidence, lambda sampled: llm_predict(
        architecture, sampled, scenario, parallelism, mode=args.mode, graphs=graphs), intervals.sets_asked(args))
    found = intervals.scenario_intervals(hardware, result, args.confidence, runs, basis)
    data["intervals"] = intervals.to_json(found)
    data["max_batch"] = max_batch(architecture, hardware, scenario, parallelism)
    if args.concurrency:
        data["continuous_batching"] = {"concurrency": args.concurrency, "tokens_per_s": continuous_batching_throughput(
            architecture, hardware, scenario, parallelism, args.concurrency, mode=args.mode,
            max_tokens_per_step=args.max_tokens_per_step, graphs=graphs)}
    if args.json:
        print(json_text(data, indent=1))
        return 0
    mib = {key: format_quantity(value, "bytes", binary=True) for key, value in data["memory_bytes"].items()}
    def seconds(value: float) -> str:
        return format_quantity(value, "seconds")

    def rate(value: float) -> str:
        return f"{value:.1f}"

    rows = [
        ["TTFT", seconds(result.ttft_s), intervals.text(found["ttft_s"], seconds)],
        ["TPOT (mean over generation)", seconds(result.tpot_s), intervals.text(found["tpot_s"], seconds)],
        ["end-to-end", seconds(result.e2e_s), intervals.text(found["e2e_s"], seconds)],
        ["tokens/s per user", rate(result.tokens_per_s_per_user), intervals.text(found["tokens_per_s_per_user"], rate)],
        ["tokens/s (batch)", rate(result.tokens_per_s), intervals.text(found["tokens_per_s"], rate)],
        ["tokens/s per chip", rate(result.tokens_per_s_per_chip), intervals.text(found["tokens_per_s_per_chip"], rate)],
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
          f"gen {args.gen}, weights {args.weights}" + (f" (experts {args.expert_weights})" if args.expert_weights else ""))
    print(format_table(["metric", "value", intervals.heading(args.confidence)], [row + [""] * (3 - len(row))
                                                                                 for row in rows]))
    print(f"interval: {found['ttft_s'].basis}")
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
    import numpy as np

    from perfmodel.llm import Scenario, llm_predict
    from perfmodel.llm.catalog import load_config
    from perfmodel.llm.caveats import engine_caveats
    from perfmodel.llm.eager import stage_graphs_for

    if args.graph_out is not None or args.concurrency:
        raise PerfmodelError("--graph-out and --concurrency take one scenario; give single --batch/--prompt/--gen")
    parallelism = _parallelism(args)
    graphs, note = stage_graphs_for(load_config(args.model), hardware, args.mode, condensed=args.condensed)
    for said in ([note] if note else []) + engine_caveats(architecture, hardware):
        print(f"perfmodel: note: {said}", file=sys.stderr)
    batches, prompts, gens = (np.asarray(column) for column in zip(*scenarios, strict=True))
    every = Scenario(batch=batches, prompt_tokens=prompts, generated_tokens=gens, weight_dtype=args.weights,
                     kv_dtype=args.kv or args.activations, activation_dtype=args.activations,
                     expert_weight_dtype=args.expert_weights)

    def predict(on):  # one evaluation per phase for every scenario (the condensed graphs take arrays)
        return llm_predict(architecture, on, every, parallelism, mode=args.mode, graphs=graphs)

    swept = predict(hardware)
    results = [swept.at(index) for index in range(len(scenarios))]
    # Each sampled parameter set is one more array evaluation of every scenario at once.
    runs, basis = intervals.sample_runs(hardware, "scenario", args.confidence, predict, intervals.sets_asked(args))
    found = [intervals.scenario_intervals(hardware, result, args.confidence, [run.at(index) for run in runs], basis)
             for index, result in enumerate(results)]
    if args.json:
        print(json_text([{**result.to_dict(), "intervals": intervals.to_json(bands)}
                         for result, bands in zip(results, found, strict=True)], indent=1))
        return 0

    def seconds(value: float) -> str:
        return format_quantity(value, "seconds")

    rows = [[result.scenario.batch, result.scenario.prompt_tokens, result.scenario.generated_tokens,
             seconds(result.ttft_s), seconds(result.tpot_s), intervals.text(bands["tpot_s"], seconds),
             f"{result.tokens_per_s:.1f}", f"{result.tokens_per_s_per_chip:.1f}", "yes" if result.fits else "NO",
             result.bound_by_phase["decode"]] for result, bands in zip(results, found, strict=True)]
    print(f"{architecture.name} on {parallelism.chips} x {hardware.name} (tp {parallelism.tp}, pp {parallelism.pp}, "
          f"{results[0].mode} mode; parameters: {results[0].parameters}), weights {args.weights}"
          + (f" (experts {args.expert_weights})" if args.expert_weights else ""))
    print(format_table(["batch", "prompt", "gen", "TTFT", "TPOT", f"TPOT {intervals.heading(args.confidence)}",
                        "tokens/s", "tokens/s/chip", "fits", "decode bound"], rows))
    print(f"interval: {found[0]['tpot_s'].basis}")
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
    from perfmodel.llm.caveats import engine_caveats
    from perfmodel.serving.sizing import SystemSizing, parameter_set, rank, size_deployment
    from perfmodel.yaml_source import check_output_path

    if args.chart is not None:  # before any work: a bad path costs nothing
        check_output_path(args.chart, "--chart", (".png", ".svg", ".pdf"))
    _check_counts(args, ("prompt", "gen", "users", "requests"))
    resolve_checkpoint_dtypes(args)
    targets, load = _size_targets(args), _size_load(args)
    prompt, output = _size_lengths(args)
    names = args.on
    prices = _prices(args.price, names)
    architecture = load_architecture(args.model)
    _check_lengths(args, architecture, prompt, output)
    overrides = parse_overrides(args.set) or None
    from perfmodel.cli.held import held_targets

    metrics = list(dict.fromkeys(target.metric for target in targets))

    def size_on(name: str) -> tuple[SystemSizing, str | None, dict | None, object]:
        """One system's sizing, why it could not be sized (None: it was), the confidence its targets
        were held at (None: not sized), and for --chart the interval of its deployment's p50 TPOT (None:
        no deployment or no chart)."""
        hardware = load_for_prediction(name, overrides=overrides, ideal=args.ideal, engine=args.engine)
        for said in engine_caveats(architecture, hardware):
            print(f"perfmodel: note: {said}", file=sys.stderr)
        try:  # a system that does not offer the requested mode (eager on Groq) is reported, not sized
            mode = resolve_mode(hardware, args.mode)
        except PerfmodelError as error:
            return SystemSizing(hardware=name, parameters=parameter_set(hardware), mode="-", best=None, note=str(error),
                                closest=None, simulations=0), str(error), None, None
        weights, kv, activations = args.weights, args.kv or "bf16", args.activations
        if not _supports(hardware, weights) and weights in ("bf16", "fp16"):  # the spec offers the other one
            weights = kv = activations = "fp16" if weights == "bf16" else "bf16"
        if not (_supports(hardware, weights) and _supports(hardware, activations)):
            reason = f"{hardware.name} has no engine for {weights} weights with {activations} activations"
            return SystemSizing(hardware=name, parameters=parameter_set(hardware), mode=mode, best=None, note=reason,
                                closest=None, simulations=0), reason, None, None
        held = held_targets(architecture, hardware, None if args.at_median else args.confidence,
                            intervals.sets_asked(args), prompt_tokens=max(round(prompt.mean), 1),
                            output_tokens=max(round(output.mean), 1), weight_dtype=weights, kv_dtype=kv,
                            activation_dtype=activations, expert_weight_dtype=args.expert_weights, mode=args.mode)
        sizing = size_deployment(architecture, hardware, held.screened(targets), load, prompt, output,
                                 requests=args.requests, seed=args.seed, weight_dtype=weights, kv_dtype=kv,
                                 activation_dtype=activations, expert_weight_dtype=args.expert_weights, mode=args.mode,
                                 price_usd_per_chip_hour=prices.get(name, prices.get("")), limit_factor=held.extra)
        block = held.block(None if sizing.best is None else sizing.best.parallelism, metrics)
        tpot = None
        if args.chart is not None and sizing.best is not None:  # the served rows' band, as serve prints it
            tpot = intervals.intervals(hardware, "served", args.confidence,
                                       {"tpot": (sizing.best.tpot.p50, TIME)})["tpot"]
        return (replace(sizing, hardware=name), None, {key: value for key, value in block.items() if key != "level"},
                tpot)

    sizings, unavailable, confidence, tpot_intervals = [], {}, {}, {}
    with fanout(args, "system") as mapper:  # each system is sized on its own: one piece of work
        for name, (sizing, reason, held_at, tpot) in zip(names, mapper(size_on, names), strict=True):
            sizings.append(sizing)
            tpot_intervals[name] = tpot
            if reason is not None:
                unavailable[name] = reason
            if held_at is not None:
                confidence[name] = held_at
    ranked = rank(sizings, by=args.rank)
    if args.chart is not None:
        _size_chart(args.chart, architecture, ranked, tpot_intervals, targets)
    if args.json:
        data = {}
        for place, sizing in enumerate(ranked, start=1):
            data[sizing.hardware] = {"rank": place if sizing.best is not None else None, **sizing.to_dict(),
                                     "targets": [target.to_dict() for target in targets],
                                     **({"confidence": {"level": None if args.at_median else args.confidence,
                                                        **confidence[sizing.hardware]}}
                                        if sizing.hardware in confidence else {}),
                                     **({"unavailable": unavailable[sizing.hardware]}
                                        if sizing.hardware in unavailable else {})}
        print(json_text(data, indent=1))
        return 0
    _print_sizing(args, architecture, targets, load, prompt, output, ranked)
    level = "the median" if args.at_median else f"{intervals.heading(args.confidence).split()[0]} confidence"
    print(f"targets held at {level} (each system's simulated times must stay under the target x its factor): "
          + "; ".join(f"{name} {_factors(item['limit_factors'])} ({item['basis']})" for name, item in confidence.items()))
    return 0


def _size_chart(path: Path, architecture, ranked, tpot_intervals: dict, targets) -> None:
    """``--chart``: the screen's options of every system (chips against TPOT), each sized deployment at its
    simulated p50 TPOT with that figure's interval, the TPOT targets (``plotting.plot_pareto``)."""
    from perfmodel.plotting import plot_pareto, save_figure

    options = {sizing.hardware: list(sizing.considered) for sizing in ranked}
    chosen = {sizing.hardware: (sizing.best.chips, sizing.best.tpot.p50) for sizing in ranked
              if sizing.best is not None}
    lines = [(f"target: {target.label} <= {format_quantity(target.limit_s, 'seconds')}", target.limit_s)
             for target in targets if target.metric == "tpot"]
    title = (f"{architecture.name}: deployments considered and sized\n"
             "dots: the steady-state screen (TPOT at the largest batch that meets the targets); line: its Pareto front\n"
             "star: each system's sized deployment at its simulated p50 TPOT")
    save_figure(plot_pareto(options, chosen=chosen, chosen_intervals=tpot_intervals, tpot_targets_s=lines,
                            title=title), path)


def _factors(factors: dict) -> str:
    """``x 0.682`` (one factor for every target), or ``TTFT x 0.671, TPOT x 0.676``."""
    if len(set(factors.values())) <= 1:
        return f"x {next(iter(factors.values())):.3g}"
    return ", ".join(f"{metric.upper()} x {value:.3g}" for metric, value in factors.items())


def _print_sizing(args, architecture, targets, load, prompt, output, ranked) -> None:
    from perfmodel.serving import ClosedLoop

    statistics = {metric: [s for s in ("p50", "p90", "p99", "mean")
                           if s in ("p50", "p99") or any(t.metric == metric and t.statistic == s for t in targets)]
                  for metric in ("ttft", "tpot")}
    header = ["rank", "system", "chips", "replicas x parallelism", "mode",
              *(f"{metric.upper()} {s}" for metric, names in statistics.items() for s in names),
              "tokens/s", "power", "USD/h", "USD/M tokens"]
    rows, notes = [], []
    for place, sizing in enumerate(ranked, start=1):
        best = sizing.best
        if best is None:
            rows.append(["-", sizing.hardware, "-", "-", sizing.mode, *(["-"] * (len(header) - 5))])
            notes.append(f"{sizing.hardware}: {sizing.note}")
            continue
        latencies = [format_quantity(getattr(getattr(best, metric), s), "seconds")
                     for metric, names in statistics.items() for s in names]
        rows.append([place, sizing.hardware, best.chips,
                     f"{best.replicas} x (tp {best.parallelism.tp}, pp {best.parallelism.pp})", best.mode, *latencies,
                     f"{best.tokens_per_s:.0f}", format_quantity(best.power_watts, "watts"),
                     _usd(best.cost_usd_per_hour), _usd(best.usd_per_million_tokens)])
    wanted = ", ".join(f"{target.label} <= {format_quantity(target.limit_s, 'seconds')}" for target in targets)
    how = (f"{load.users} closed-loop users, think {format_quantity(load.think_s, 'seconds')}"
           if isinstance(load, ClosedLoop) else f"Poisson arrivals at {load.rate_per_s:g}/s")
    print(f"{architecture.name}: {wanted}; {how}; prompt {prompt.text}, output {output.text}; {args.requests} "
          f"requests a simulation, seed {args.seed}; ranked by {args.rank}")
    print(format_table(header, rows))
    for note in notes:
        print(note)
    print("parameters: " + "; ".join(f"{sizing.hardware} {sizing.parameters}" for sizing in ranked))


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _size_targets(args) -> list:
    from perfmodel.serving.sizing import Target

    targets = []
    for metric in ("ttft", "tpot"):
        for statistic in TARGET_STATISTICS:
            text = getattr(args, f"{metric}_{statistic}")
            if text is None:
                continue
            flag = f"--{metric}" if statistic == "mean" else f"--{metric}-{statistic}"
            value = _seconds(text, flag)
            if value <= 0:
                raise PerfmodelError(f"{flag} {text!r}: a target must be a positive time, e.g. 500ms")
            targets.append(Target(metric=metric, statistic=statistic, limit_s=value))
    if not targets:
        raise PerfmodelError("give at least one target: --ttft-p99 1s, --tpot-p99 50ms (percentiles p50, p90, p99), "
                             "or --ttft 500ms / --tpot 50ms (means)")
    return targets


def _seconds(text: str, flag: str) -> float:
    try:
        value = parse_quantity(text, "seconds")
    except PerfmodelError as error:
        raise PerfmodelError(f"{flag} {text!r}: {error}") from None
    if not math.isfinite(value):
        raise PerfmodelError(f"{flag} {text!r}: expected a finite time, e.g. 500ms")
    return value


def _size_load(args):
    from perfmodel.serving import ArrivalProcess, ClosedLoop

    if args.rate is not None and args.users is not None:
        raise PerfmodelError("give --rate (open-loop arrivals) or --users (closed loop), not both")
    if args.users is not None:
        think = 0.0 if args.think is None else _seconds(args.think, "--think")
        if think < 0:
            raise PerfmodelError(f"--think {args.think!r}: a think time must be at least 0 s, e.g. 5s")
        return ClosedLoop(users=args.users, think_s=think)
    if args.think is not None:
        raise PerfmodelError("--think goes with --users (closed-loop users); with --rate there is no think time")
    if args.rate is None:
        raise PerfmodelError("give the load: --rate 10/s (open-loop Poisson arrivals) or --users 64 --think 5s "
                             "(closed-loop users)")
    return ArrivalProcess(kind="poisson", rate_per_s=_rate(args.rate))


def _size_lengths(args):
    from perfmodel.serving import parse_length

    lengths = []
    for count, dist, default in (("prompt", "prompt_dist", DEFAULT_SIZE_PROMPT),
                                 ("gen", "output_dist", DEFAULT_SIZE_OUTPUT)):
        given, text = getattr(args, count), getattr(args, dist)
        flag = "--" + dist.replace("_", "-")
        if given is not None and text is not None:
            raise PerfmodelError(f"give --{count} (every request alike) or {flag}, not both")
        lengths.append(parse_length(text, flag) if text is not None else parse_length(f"fixed:{given or default}"))
    return lengths[0], lengths[1]


def _check_lengths(args, architecture, prompt, output) -> None:
    """Requests must fit the model's context (a distribution without a largest value is clipped)."""
    limit, name = architecture.max_positions, architecture.name
    prompt_flag = "--prompt-dist" if args.prompt_dist is not None else "--prompt"
    output_flag = "--output-dist" if args.output_dist is not None else "--gen"
    prompt.check_context(limit, name, prompt_flag)
    output.check_context(limit, name, output_flag)
    if prompt.largest is not None and output.largest is not None and prompt.largest + output.largest > limit:
        raise PerfmodelError(f"{prompt_flag} {prompt.text} and {output_flag} {output.text} make requests of up to "
                             f"{prompt.largest + output.largest} tokens, beyond {name}'s context of {limit} tokens; "
                             "use shorter prompts or outputs")


def _prices(text: str | None, names: Sequence[str]) -> dict[str, float]:
    """``--price``: one number for every system (key "") or SPEC=USD pairs naming systems of --on."""
    if text is None:
        return {}
    usage = "expected USD per chip-hour, one number (2.5) or per spec (h100-sxm=2.5,tpu-v5e=1.2)"
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise PerfmodelError(f"--price {text!r}: {usage}")
    prices = {}
    for item in items:
        name, sep, value = item.rpartition("=") if "=" in item else ("", "", item)
        name = name.strip()
        if sep and name not in names:
            raise PerfmodelError(f"--price {item!r}: {name!r} is not a system of --on ({', '.join(names)})")
        if not sep and len(items) > 1:
            raise PerfmodelError(f"--price {text!r}: {usage}")
        try:
            number = float(value.strip().lstrip("$"))
        except ValueError:
            raise PerfmodelError(f"--price {item!r}: {usage}") from None
        if not (math.isfinite(number) and number > 0):
            raise PerfmodelError(f"--price {item!r}: a price must be a positive number of USD per chip-hour")
        prices[name] = number
    return prices


def _supports(hardware, dtype: str) -> bool:
    """Whether an engine of ``hardware`` computes with ``dtype`` weights: at their own format's peak, or for a
    block-scaled format (fp8_block, mxfp4...) at its element format's (its native kernels) or bf16's (the
    weights dequantized in the kernel)."""
    from perfmodel.dtypes import get_dtype

    element = get_dtype(dtype).element
    wanted = (dtype,) if element is None else (dtype, element, "bf16")
    return any(name in engine.peak_flops_per_s for engine in hardware.compute.values() for name in wanted)
