"""``perfmodel search``: the Pareto front of deployments (layouts x engines x batch limits x
aggregated/disaggregated x speculation) on a number of chips, and launch settings for the chosen one."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from perfmodel.cli import confidence as intervals
from perfmodel.cli.overrides import (
    add_dtype_arguments,
    add_expert_weights_argument,
    add_fanout_arguments,
    fanout,
    resolve_checkpoint_dtypes,
)
from perfmodel.errors import PerfmodelError
from perfmodel.jsonable import json_text
from perfmodel.tables import format_table
from perfmodel.units import format_quantity, parse_quantity

CHART_SUFFIXES = (".png", ".svg", ".pdf")
# Parameter sets each front point is estimated again at (--parameter-sets): every set prices each of the
# front's workers' quick step costs again, so fewer than llm's 32 (as serve and train).
SEARCH_PARAMETER_SETS = 16


def register(commands) -> None:
    from perfmodel.hardware.loader import SERVING_ENGINES
    from perfmodel.serving.launch import ENGINES
    from perfmodel.serving.search import DEFAULT_BATCHES
    from perfmodel.serving.speculation import METHODS

    search = commands.add_parser(
        "search", help="the Pareto front of serving deployments (tokens/s per user vs per chip) on N chips: "
                       "layouts x engines x batch limits x aggregated/disaggregated x speculation; exports "
                       "launch settings")
    search.add_argument("--model", required=True, help="a shipped model (perfmodel models list) or a config.json path")
    search.add_argument("--on", required=True, help="a GPU spec name (its per-engine overlays are used)")
    search.add_argument("--chips", type=int, required=True, help="chips to deploy on (e.g. 32)")
    search.add_argument("--engines", default=",".join(SERVING_ENGINES),
                        help=f"comma-separated engines whose overlays price the chips (default {','.join(SERVING_ENGINES)})")
    search.add_argument("--prompt", type=int, default=1024, help="prompt tokens (default 1024)")
    search.add_argument("--output", type=int, default=256, help="output tokens (default 256)")
    search.add_argument("--batches", default=",".join(str(b) for b in DEFAULT_BATCHES),
                        help="comma-separated batch limits to try (default " + ",".join(map(str, DEFAULT_BATCHES)) + ")")
    search.add_argument("--speculative", default="none",
                        help="comma-separated speculation settings to try: none, "
                             + ", ".join(m for m in METHODS if m != "draft")
                             + " (published acceptance defaults) (default none)")
    search.add_argument("--acceptance", type=float, help="acceptance rate for every speculative method tried")
    search.add_argument("--no-disagg", action="store_true", help="aggregated deployments only")
    search.add_argument("--max-pp", type=int, default=4, help="largest pipeline parallelism tried (default 4)")
    search.add_argument("--ttft-slo", help="TTFT target of the SLO region, e.g. 1s")
    search.add_argument("--tpot-slo", help="TPOT target of the SLO region, e.g. 50ms (tokens/s per user >= 1/TPOT)")
    search.add_argument("--simulate", type=int, default=6, help="front points to check with the simulator (default 6)")
    search.add_argument("--seed", type=int, default=0)
    search.add_argument("--export", choices=ENGINES,
                        help="print launch settings of the chosen point (the SLO region's highest tokens/s per "
                             "chip, or --pick) for this engine")
    search.add_argument("--pick", type=int, metavar="N", help="the front's point N (1 = fewest tokens/s per user) to "
                                                              "export instead")
    search.add_argument("--top", type=int, default=20, help="front points to print (default 20; all with --json)")
    add_dtype_arguments(search)
    add_expert_weights_argument(search)
    intervals.add_confidence_argument(search, parameter_sets=SEARCH_PARAMETER_SETS)
    add_fanout_arguments(search)
    search.add_argument("--json", action="store_true")
    search.add_argument("--chart", type=Path, metavar="FILE.png",
                        help="plot the configurations, the front and the SLO region (.png, .svg or .pdf)")
    search.set_defaults(handler=_search)


def _speculations(text: str, acceptance: float | None):
    from perfmodel.serving.speculation import DEFAULT_ACCEPTANCE, DEFAULT_TOKENS, METHODS, Speculation

    out = []
    for item in (part.strip() for part in text.split(",")):
        if item == "none":
            out.append(None)
        elif item in METHODS and item != "draft":
            out.append(Speculation(method=item, tokens=DEFAULT_TOKENS[item],
                                   acceptance=DEFAULT_ACCEPTANCE[item] if acceptance is None else acceptance))
        else:
            raise PerfmodelError(f"--speculative {item!r}: expected none, mtp or eagle (comma-separated; a draft "
                                 "model is tried with perfmodel serve --speculative draft)")
    return list(dict.fromkeys(out))


def _counts(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise PerfmodelError(f"{flag} {text!r}: expected comma-separated whole numbers, e.g. 8,32,128") from None
    if not values or min(values) < 1:
        raise PerfmodelError(f"{flag} values must be at least 1, got {text!r}")
    return sorted(set(values))


def _search(args) -> int:
    from perfmodel.hardware.loader import SERVING_ENGINES, load_for_prediction
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.serving.search import search

    for name in ("chips", "prompt", "output", "max_pp"):
        if getattr(args, name) < 1:
            raise PerfmodelError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.simulate < 0:
        raise PerfmodelError(f"--simulate must be at least 0, got {args.simulate}")
    if args.chart is not None and args.chart.suffix.lower() not in CHART_SUFFIXES:
        raise PerfmodelError(f"--chart {args.chart}: the file must end in .png, .svg or .pdf")
    if args.pick is not None and args.export is None:
        raise PerfmodelError("--pick chooses the point --export writes; add --export vllm, sglang or trtllm")
    resolve_checkpoint_dtypes(args)
    if args.activations != "bf16":  # the search's step costs take bf16 activations (serving.search.search)
        raise PerfmodelError(f"search prices bf16 activations; {args.activations} ones (--activations, or --weights "
                             "checkpoint of a W8A8 checkpoint) are priced by llm, serve and size")
    engines = [part.strip() for part in args.engines.split(",")]
    unknown = [e for e in engines if e not in SERVING_ENGINES]
    if unknown:
        raise PerfmodelError(f"--engines {','.join(unknown)}: expected some of {', '.join(SERVING_ENGINES)}")
    batches = _counts(args.batches, "--batches")
    speculations = _speculations(args.speculative, args.acceptance)
    ttft = None if args.ttft_slo is None else parse_quantity(args.ttft_slo, "seconds")
    tpot = None if args.tpot_slo is None else parse_quantity(args.tpot_slo, "seconds")
    architecture = load_architecture(args.model)
    hardware = {engine: load_for_prediction(args.on, engine=engine) for engine in dict.fromkeys(engines)}
    with fanout(args, "piece") as mapper:  # each worker's step costs, then each front point's simulation
        result = search(architecture, hardware, args.chips, prompt_tokens=args.prompt, output_tokens=args.output,
                        batches=batches, speculations=speculations, disaggregation=not args.no_disagg,
                        ttft_slo_s=ttft, tpot_slo_s=tpot, weight_dtype=args.weights,
                        kv_dtype=args.kv or args.activations, expert_weight_dtype=args.expert_weights,
                        max_pp=args.max_pp, simulate=args.simulate, seed=args.seed, mapper=mapper)
    chosen = _chosen(result, args.pick)
    launch = None
    if args.export is not None:
        if chosen is None:
            raise PerfmodelError("no front point meets the SLO targets to export; relax --ttft-slo/--tpot-slo or "
                                 "choose one with --pick N")
        launch = export(chosen, args.export, architecture.name, args.kv or args.activations)
    bands = _front_bands(args, architecture, hardware, result, batches)
    if args.chart is not None:
        from perfmodel.plotting import plot_search, save_figure

        save_figure(plot_search(result, front_intervals=bands), args.chart)
    if args.json:
        data = result.to_dict()
        for point, (per_user, per_chip) in zip(data["front"], bands, strict=True):
            point["intervals"] = intervals.to_json({"tokens_per_s_per_user": per_user,
                                                    "tokens_per_s_per_chip": per_chip})
        data["chosen"] = None if chosen is None else chosen.to_dict()
        data["launch"] = None if launch is None else launch.to_dict()
        print(json_text(data, indent=1))
        return 0
    _print(result, args, chosen, launch, bands)
    return 0


def front_intervals(hardware, configuration, confidence: float, runs=(), basis: str = "") -> tuple:
    """(tokens/s per user, tokens/s per chip) of a searched deployment with their intervals on its
    engine's ``hardware``: full-load estimates of one scenario, so the scenario rows' residuals.
    ``runs``: the same deployment estimated at parameter sets drawn from its engine's fit covariance
    (``serving.search.reprice_front``), ``basis`` theirs (or why there are none)."""
    sampled = intervals.sampled_figures(runs, basis, {"per_user": lambda c: c.tokens_per_s_per_user,
                                                      "per_chip": lambda c: c.tokens_per_s_per_chip}) \
        if runs or basis else None
    found = intervals.intervals(hardware, "scenario", confidence, {
        "per_user": (configuration.tokens_per_s_per_user, "rate"),
        "per_chip": (configuration.tokens_per_s_per_chip, "rate")}, sampled)
    return found["per_user"], found["per_chip"]


def _front_bands(args, architecture, hardware, result, batches) -> list[tuple]:
    """Every front point's ``front_intervals``: each engine's points estimated again at the parameter sets
    drawn from that engine's fit covariance (its overlay's; an engine without one: model-form only)."""
    from dataclasses import replace

    from perfmodel.serving.search import reprice_front

    drawn = {engine: intervals.parameter_sets(on, "scenario", args.confidence, intervals.sets_asked(args))
             for engine, on in hardware.items()}
    sampled: dict[str, list] = {engine: [] for engine in hardware}
    with fanout(args, "piece") as mapper:  # each set's workers, spread as the search's were
        for engine, (sets, _) in drawn.items():
            front = [c for c in result.front if c.engine == engine]
            if not sets or not front:
                continue
            sampled[engine] = [reprice_front(
                architecture, {engine: replace(hardware[engine], efficiency=parameters)}, front,
                prompt_tokens=args.prompt, output_tokens=args.output, largest_batch=max(batches),
                weight_dtype=args.weights, kv_dtype=args.kv or args.activations,
                expert_weight_dtype=args.expert_weights, mapper=mapper) for parameters in sets]
    bands, seen = [], {engine: 0 for engine in hardware}
    for c in result.front:
        index = seen[c.engine]
        seen[c.engine] += 1
        bands.append(front_intervals(hardware[c.engine], c, args.confidence,
                                     [run[index] for run in sampled[c.engine]], drawn[c.engine][1]))
    return bands


def _chosen(result, pick):
    if pick is None:
        return result.best
    if not 1 <= pick <= len(result.front):
        raise PerfmodelError(f"--pick {pick}: the front has points 1 to {len(result.front)}")
    return result.front[pick - 1]


def export(configuration, engine: str, model: str, kv_dtype: str):
    """Launch settings of ``configuration`` for ``engine`` (``serving.launch``)."""
    from perfmodel.serving.launch import Worker, launch_settings

    common = dict(max_tokens_per_step=configuration.max_tokens_per_step, memory_utilization=0.9, block_size=16,
                  kv_dtype=kv_dtype)
    if configuration.disaggregated:
        workers = [Worker(role="prefill", parallelism=configuration.prefill_layout, max_batch=configuration.max_batch,
                          count=configuration.prefill_workers, **common),
                   Worker(role="decode", parallelism=configuration.layout, max_batch=configuration.max_batch,
                          speculation=configuration.speculation, count=configuration.workers, **common)]
    else:
        workers = [Worker(role="serve", parallelism=configuration.layout, max_batch=configuration.max_batch,
                          speculation=configuration.speculation, count=configuration.workers, **common)]
    return launch_settings(engine, model, workers)


def _print(result, args, chosen, launch, bands) -> None:
    slo = " and ".join(f"{name} <= {text}" for name, text in (("TTFT", args.ttft_slo), ("TPOT", args.tpot_slo))
                       if text is not None) or "none"
    print(f"{result.model} on {result.chips} chips of {args.on}: prompt {result.prompt_tokens}, output "
          f"{result.output_tokens} tokens; {len(result.configurations)} configurations from "
          f"{result.workers_built} workers; SLO region: {slo}")
    shown = list(result.front)
    if len(shown) > args.top:
        step = len(shown) / args.top
        shown = [shown[int(i * step)] for i in range(args.top)]
    rows = []
    for configuration in shown:
        per_dollar = configuration.tokens_per_dollar
        per_user, per_chip = bands[result.front.index(configuration)]
        rows.append([result.front.index(configuration) + 1, configuration.label, configuration.chips,
                     f"{configuration.tokens_per_s_per_user:.1f}", intervals.text(per_user, _rate),
                     f"{configuration.tokens_per_s_per_chip:.1f}", intervals.text(per_chip, _rate),
                     "-" if per_dollar is None else f"{per_dollar:,.0f}",
                     f"{configuration.tokens_per_s_per_watt:.3f}", _s(configuration.ttft_s),
                     _s(configuration.tpot_s), "yes" if configuration.meets_slo else "no",
                     "<- chosen" if configuration is chosen else ""])
    print(f"Pareto front ({len(result.front)} points{'' if len(shown) == len(result.front) else f', {len(shown)} shown'}; "
          "estimates at full load):")
    level = intervals.heading(args.confidence).split()[0]
    print(format_table(["#", "deployment", "chips", "tok/s/user", level, "tok/s/chip", level, "tok/$", "tok/s/W",
                        "TTFT", "TPOT", "in SLO", ""], rows))
    if result.simulated:
        print("simulated at 80% of the estimated request rate (Poisson):")
        sims = [[s.configuration.label, f"{s.rate_per_s:.3g}/s", _s(s.result.ttft.p99), _s(s.result.tpot.p99),
                 "-" if s.result.goodput is None else f"{100 * s.result.goodput:.0f}%",
                 "-" if s.result.steady_state is None else "yes" if s.result.steady_state else "no"]
                for s in result.simulated]
        print(format_table(["deployment", "rate", "TTFT p99", "TPOT p99", "goodput", "steady"], sims))
    if chosen is None and (result.ttft_slo_s is not None or result.tpot_slo_s is not None):
        print("no front point meets the SLO targets")
    if chosen is not None:
        print(f"chosen: #{result.front.index(chosen) + 1} {chosen.label} ({chosen.tokens_per_s_per_user:.1f} tokens/s "
              f"per user, {chosen.tokens_per_s_per_chip:.1f} per chip)")
        per_user, per_chip = bands[result.front.index(chosen)]
        print(f"{intervals.heading(args.confidence)}: {intervals.text(per_user, _rate)} tokens/s per user, "
              f"{intervals.text(per_chip, _rate)} per chip ({per_chip.basis})")
    if launch is not None:
        print(launch.text())
    if args.chart is not None:
        print(f"chart: {args.chart}")
    sys.stdout.flush()


def _s(value: float) -> str:
    return "-" if value is None or math.isnan(value) else format_quantity(value, "seconds")


def _rate(value: float) -> str:
    return f"{value:.1f}"
