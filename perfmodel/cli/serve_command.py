"""``perfmodel serve``: request-level serving simulation (an iteration-level scheduler, paged KV cache)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from perfmodel.cli import confidence as intervals
from perfmodel.cli.llm_command import _check_counts, _rate
from perfmodel.cli.overrides import (
    add_dtype_arguments,
    add_engine_argument,
    add_expert_weights_argument,
    add_ideal_argument,
    add_mode_argument,
    add_set_argument,
    parse_overrides,
    resolve_checkpoint_dtypes,
    seed,
)
from perfmodel.cli.serve_options import (
    add_disagg_arguments,
    add_speculation_arguments,
    check_disagg_arguments,
    run_disaggregated,
    speculation_from,
)
from perfmodel.errors import PerfmodelError
from perfmodel.jsonable import json_text
from perfmodel.serving.workload import LENGTH_DATASETS
from perfmodel.tables import format_table
from perfmodel.units import format_quantity, parse_quantity

DEFAULT_REQUESTS = 200
DEFAULT_PROMPT, DEFAULT_OUTPUT = "fixed:512", "fixed:128"
PROGRESS_REQUESTS = 2000  # a progress bar (stderr, a terminal only) above this many simulated requests...
PROGRESS_RUNS = 3  # ...or from this many rates
CHART_SUFFIXES = (".png", ".svg", ".pdf")


# Parameter sets each run is simulated again at (--parameter-sets): each reprices the step costs and
# replays the run, so the cost grows with them. The spread (H100 vLLM: ~+-7%) adds in quadrature to a
# model-form band of ~+-37%, so its sampling noise hardly reaches the printed ends: Llama-3.1-8B on
# h100-sxm-vllm at 4/s gives ends within 0.2% of each other at 16 and at 32 sets, at half the cost.
SERVED_PARAMETER_SETS = 16
RATE_SEARCH_RUNS = 12  # the progress bar's estimate of the server scenario's runs
UNSETTLED = ("the time to first token kept growing with the arrival time (the last quarter's median over 1.5x "
             "the second quarter's, and by over 5% of the time between them): the replica serves less than "
             "the offered rate, so the latencies grow with --requests and describe no steady state; lower the "
             "rate or add replicas (perfmodel size)")


def register(commands) -> None:
    serve = commands.add_parser("serve", help="simulate serving a request stream: TTFT/TPOT percentiles, "
                                              "throughput, goodput, queueing, KV-cache use")
    serve.add_argument("--model", required=True, help="a shipped model (perfmodel models list) or a config.json path")
    serve.add_argument("--on", required=True, help="spec name or path (one replica runs on tp x pp of its chips)")
    serve.add_argument("--tp", type=int, default=1)
    serve.add_argument("--pp", type=int, default=1)
    serve.add_argument("--rate", help="open-loop arrival rate, e.g. 2/s or 120/min")
    serve.add_argument("--rates", help="comma-separated rates: one simulation each, a throughput/latency table "
                                       "and the knee, e.g. 1,2,4,8")
    serve.add_argument("--arrival", choices=["poisson", "fixed", "burst"],
                       help="open-loop arrivals: poisson (default), fixed gaps, or burst (every request at t = 0)")
    serve.add_argument("--scenario", choices=["offline", "server"],
                       help="MLPerf Inference scenarios: offline = every request at once (--arrival burst), the "
                            "throughput; server = the highest Poisson rate whose p99 TTFT and p99 TPOT meet "
                            "--ttft-slo/--tpot-slo (and whose run settles), by bisection below the offline rate")
    serve.add_argument("--users", type=int, help="closed loop: this many users, each waiting for its answer")
    serve.add_argument("--think", default="0s", help="closed loop: think time between a user's requests, e.g. 5s")
    serve.add_argument("--trace", type=Path, metavar="FILE.csv",
                       help="replay a request trace: a CSV with a header row and one request a row, columns "
                            "arrival_s (seconds; or timestamp: epoch seconds or ISO 8601, replayed from the first "
                            "row), prompt_tokens (or input_tokens, input_len) and output_tokens (or output_len); "
                            "rows sorted by arrival")
    serve.add_argument("--requests", type=int,
                       help=f"requests to simulate (default {DEFAULT_REQUESTS}; with --trace: the first N rows, "
                            "default all)")
    serve.add_argument("--prompt-dist",
                       help=f"prompt tokens: fixed:512, uniform:128-1024, lognormal:MEAN,SIGMA, a public dataset's "
                            f"lengths ({', '.join(LENGTH_DATASETS)}: workloads/lengths/README.md), or a CSV file "
                            f"of lengths (one column, or value,weight rows) (default {DEFAULT_PROMPT})")
    serve.add_argument("--output-dist", help=f"output tokens, as --prompt-dist (default {DEFAULT_OUTPUT})")
    serve.add_argument("--prefix-share", type=float, default=0.0, metavar="F",
                       help="prefix caching: the fraction (0 <= F < 1) of each prompt found in a shared cached "
                            "prefix, whose prefill is skipped (default 0: no prefix caching)")
    serve.add_argument("--max-batch", type=int, default=256, help="most running sequences (default 256)")
    serve.add_argument("--max-tokens-per-step", type=int, default=8192,
                       help="token budget of a scheduler step: prefill chunks + one per decoding sequence")
    serve.add_argument("--block-size", type=int, default=16, help="paged-KV block size in tokens (default 16)")
    serve.add_argument("--memory-utilization", type=float, default=0.9,
                       help="share of the chip's memory for weights, activations and KV cache (default 0.9)")
    serve.add_argument("--max-kv-blocks", type=int, metavar="N",
                       help="cap the KV cache at N blocks, as an engine configured to (LMDeploy's "
                            "cache_max_entry_count >= 1, vLLM's --num-gpu-blocks-override); default: what "
                            "--memory-utilization of the memory holds")
    serve.add_argument("--first-token", choices=["prefill", "decode"], default="prefill",
                       help="the step that emits a request's first token: prefill (vLLM, SGLang, TensorRT-LLM, "
                            "default): the one completing its prompt; decode (LMDeploy TurboMind, FasterTransformer): "
                            "the prefill leaves the prompt's last token to the next decode step, which emits it")
    serve.add_argument("--kv-admission", choices=["on-demand", "reserve"], default="on-demand",
                       help="on-demand (vLLM, default): KV blocks as tokens arrive, the newest sequence preempted "
                            "and recomputed when none are free; reserve (TensorRT-LLM's GUARANTEED_NO_EVICT): a "
                            "request is admitted only when its whole sequence's blocks are free, never preempted")
    serve.add_argument("--seed", type=seed, default=0)
    serve.add_argument("--ttft-slo", help="SLO on time to first token, e.g. 1s (goodput, the knee)")
    serve.add_argument("--tpot-slo", help="SLO on time per output token, e.g. 50ms (goodput)")
    add_dtype_arguments(serve)
    add_expert_weights_argument(serve)
    add_mode_argument(serve)
    add_set_argument(serve)
    add_ideal_argument(serve)
    add_engine_argument(serve)
    add_speculation_arguments(serve)
    add_disagg_arguments(serve)
    intervals.add_confidence_argument(serve, parameter_sets=SERVED_PARAMETER_SETS)
    serve.add_argument("--json", action="store_true")
    serve.add_argument("--chart", type=Path, metavar="FILE.png",
                       help="write a chart (.png, .svg or .pdf): the TTFT, TPOT and inter-token latency "
                            "distributions; with --rates, throughput and p99 latency against the rate, knee marked")
    serve.set_defaults(handler=_serve)


def _arrivals(args):
    from perfmodel.serving import ArrivalProcess, ClosedLoop

    given = [name for name, value in (("--rate", args.rate), ("--rates", args.rates), ("--users", args.users),
                                      ("--trace", args.trace)) if value is not None]
    if args.scenario is not None:
        if given or args.arrival is not None:
            raise PerfmodelError(f"--scenario {args.scenario} sets the arrivals itself; drop "
                                 f"{' and '.join(given or ['--arrival'])}")
        if args.scenario == "server" and args.ttft_slo is None and args.tpot_slo is None:
            raise PerfmodelError("--scenario server needs a p99 constraint: --ttft-slo and/or --tpot-slo "
                                 "(MLPerf Llama-2-70B: --ttft-slo 2s --tpot-slo 200ms)")
        return [ArrivalProcess(kind="burst")], None
    if len(given) > 1:
        raise PerfmodelError(f"give one of --rate, --rates, --users and --trace, not {' and '.join(given)}")
    arrival = args.arrival or "poisson"
    if args.trace is not None:
        extra = [name for name, value in (("--arrival", args.arrival), ("--prompt-dist", args.prompt_dist),
                                          ("--output-dist", args.output_dist)) if value is not None]
        if extra:
            raise PerfmodelError(f"--trace gives the arrival times and lengths; drop {' and '.join(extra)}")
        return [], None
    if args.users is not None:
        return [ClosedLoop(users=args.users, think_s=parse_quantity(args.think, "seconds"))], None
    if args.rates is not None:
        rates = [_rate(item) for item in args.rates.split(",")]
        if arrival == "burst":
            raise PerfmodelError("--rates needs timed arrivals (poisson or fixed), not --arrival burst")
        return [ArrivalProcess(kind=arrival, rate_per_s=rate) for rate in rates], rates
    if args.rate is not None:
        return [ArrivalProcess(kind=arrival, rate_per_s=_rate(args.rate))], None
    if arrival == "burst":
        return [ArrivalProcess(kind="burst")], None
    raise PerfmodelError("give an arrival rate (--rate 2/s), several (--rates 1,2,4,8), closed-loop users "
                         "(--users 32 --think 5s), a trace (--trace requests.csv) or --arrival burst")


def _stderr_is_tty() -> bool:
    return sys.stderr.isatty()


def _progress_bar(args, total: int, runs: int):
    """A tqdm bar on stderr for long runs in a terminal (None otherwise; never with --json)."""
    if args.json or not _stderr_is_tty() or (total <= PROGRESS_REQUESTS and runs < PROGRESS_RUNS):
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="req", desc="simulating", file=sys.stderr, leave=False, dynamic_ncols=True)


def _serve(args) -> int:
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.llm import Parallelism
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.caveats import engine_caveats
    from perfmodel.serving import Server, ServingConfig, knee_rate, max_context, parse_length
    from perfmodel.serving.workload import read_trace

    _check_counts(args, ("tp", "pp", "users", "requests", "max_batch", "max_tokens_per_step", "block_size"))
    resolve_checkpoint_dtypes(args)
    if not 0 < args.memory_utilization <= 1:
        raise PerfmodelError(f"--memory-utilization must be in (0, 1], got {args.memory_utilization}")
    if not (math.isfinite(args.prefix_share) and 0 <= args.prefix_share < 1):
        raise PerfmodelError(f"--prefix-share must be a fraction in [0, 1) (the share of each prompt found in the "
                             f"prefix cache), got {args.prefix_share}")
    if args.chart is not None and args.chart.suffix.lower() not in CHART_SUFFIXES:
        raise PerfmodelError(f"--chart {args.chart}: the file must end in .png, .svg or .pdf")
    check_disagg_arguments(args)
    streams, rates = _arrivals(args)
    trace = prompt = output = None
    if args.trace is not None:
        trace = read_trace(args.trace)
        if args.requests is not None:
            if args.requests > len(trace):
                raise PerfmodelError(f"--requests {args.requests}, but {args.trace} holds {len(trace)} requests; "
                                     "drop --requests to replay them all")
            trace = trace.head(args.requests)
        longest: int | None = trace.longest
    else:
        prompt = parse_length(args.prompt_dist or DEFAULT_PROMPT, "--prompt-dist")
        output = parse_length(args.output_dist or DEFAULT_OUTPUT, "--output-dist")
        longest = max_context(prompt, output)
    requests = len(trace) if trace is not None else args.requests or DEFAULT_REQUESTS
    ttft_slo = None if args.ttft_slo is None else parse_quantity(args.ttft_slo, "seconds")
    tpot_slo = None if args.tpot_slo is None else parse_quantity(args.tpot_slo, "seconds")
    architecture = load_architecture(args.model)
    if trace is not None:
        trace.check_context(architecture.max_positions, architecture.name)
    else:
        prompt.check_context(architecture.max_positions, architecture.name, "--prompt-dist")
        output.check_context(architecture.max_positions, architecture.name, "--output-dist")
    hardware = load_for_prediction(args.on, overrides=parse_overrides(args.set) or None, ideal=args.ideal,
                                   engine=args.engine)
    for said in engine_caveats(architecture, hardware):
        print(f"perfmodel: note: {said}", file=sys.stderr)
    config = ServingConfig(max_batch=args.max_batch, max_tokens_per_step=args.max_tokens_per_step,
                           block_size=args.block_size, memory_utilization=args.memory_utilization,
                           kv_admission=args.kv_admission, max_kv_blocks=args.max_kv_blocks,
                           first_token=args.first_token)
    speculation = speculation_from(args)
    if args.disagg is not None:
        return run_disaggregated(args, architecture, hardware, config, speculation, requests=requests, prompt=prompt,
                                 output=output, trace=trace, longest=longest, ttft_slo=ttft_slo, tpot_slo=tpot_slo)
    server = Server(architecture, hardware, Parallelism(tp=args.tp, pp=args.pp), config=config,
                    max_context=longest, weight_dtype=args.weights,
                    kv_dtype=args.kv or args.activations, activation_dtype=args.activations, mode=args.mode,
                    speculation=speculation, expert_weight_dtype=args.expert_weights)
    if args.scenario == "server":
        return _server_scenario(args, server, requests, prompt, output, ttft_slo, tpot_slo, header_of(server))
    runs = max(len(streams), 1)
    sets, basis = intervals.parameter_sets(hardware, "served", args.confidence, intervals.sets_asked(args))
    bar = _progress_bar(args, requests * runs * (1 + len(sets)), runs)

    def simulate_all(on, first: int) -> list:
        """Every stream (or the trace) through the replica ``on``; ``first``: runs done before, for the bar."""
        done = []
        for run, stream in enumerate(streams or [None]):
            base = (first + run) * requests
            progress = None if bar is None else (lambda finished, base=base: bar.update(base + finished - bar.n))
            if trace is not None:
                done.append(on.replay(trace, ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo,
                                      prefix_share=args.prefix_share, progress=progress))
            else:
                done.append(on.simulate(stream, requests, prompt, output, seed=args.seed, ttft_slo_s=ttft_slo,
                                        tpot_slo_s=tpot_slo, prefix_share=args.prefix_share, progress=progress))
        return done

    try:
        results = simulate_all(server, 0)
        # Parameter uncertainty: each set drawn from the fit's covariance reprices the step-cost grids
        # and replays the same arrivals and lengths (same seed, same trace) through them.
        sampled = [simulate_all(server.repriced(parameters), (index + 1) * runs)
                   for index, parameters in enumerate(sets)]
    finally:
        if bar is not None:
            bar.close()
    header = header_of(server)
    if rates is not None:
        knee = knee_rate(rates, results, ttft_slo)
        found = [intervals.served_intervals(server.hardware, result, args.confidence, [run[index] for run in sampled],
                                            basis) for index, result in enumerate(results)]
        if args.chart is not None:
            from perfmodel.plotting import plot_serving_rates, save_figure

            save_figure(plot_serving_rates(rates, results, knee=knee, ttft_slo_s=ttft_slo,
                                           throughput_intervals=[bands["tokens_per_s"] for bands in found]),
                        args.chart)
        if args.json:
            print(json_text({"rates": rates, "knee_rate_per_s": knee,
                              "results": [{**result.to_dict(per_request=False), "intervals": intervals.to_json(bands)}
                                          for result, bands in zip(results, found, strict=True)]}, indent=1))
            return 0
        print(header)
        print(f"{results[0].workload.split(';', 1)[1].strip()}, {requests} requests, seed {args.seed}")
        rows = [[f"{rate:g}/s", f"{r.requests_per_s:.2f}", f"{r.tokens_per_s:.0f}", _s(r.ttft.p50), _s(r.ttft.p99),
                 _s(r.tpot.p50), _s(r.tpot.p99), "-" if r.goodput is None else f"{100 * r.goodput:.0f}%",
                 r.preemptions, _steady(r), "<- knee" if rate == knee else ""]
                for rate, r in zip(rates, results, strict=True)]
        print(format_table(["rate", "req/s", "tokens/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "goodput",
                            "preemptions", "steady", ""], rows))
        if any(r.steady_state is False for r in results):
            print(f"steady = no: {UNSETTLED}")
        rule = (f"the last rate whose p99 TTFT meets {args.ttft_slo}" if ttft_slo is not None
                else "the first rate after which throughput grows by 10% or less")
        print(f"knee: {'none' if knee is None else f'{knee:g}/s'} ({rule})")
        for rate, bands in zip(rates, found, strict=True):
            print(intervals.served_line(bands, args.confidence, at=f"at {rate:g}/s"))
        _chart_note(args)
        return 0
    result = results[0]
    found = intervals.served_intervals(hardware, result, args.confidence, [run[0] for run in sampled], basis)
    if args.chart is not None:
        from perfmodel.plotting import plot_serving_latency, save_figure

        save_figure(plot_serving_latency(result, p50_intervals=found), args.chart)
    if args.json:
        print(json_text({**result.to_dict(), "intervals": intervals.to_json(found)}, indent=1))
        return 0
    print(header)
    print(f"{result.workload}, {result.requests} requests" + ("" if trace is not None else f", seed {result.seed}"))
    rows = [[name, _s(p.p50), _s(p.p90), _s(p.p99), _s(p.mean)]
            for name, p in (("TTFT", result.ttft), ("TPOT", result.tpot), ("end-to-end", result.e2e),
                            ("inter-token", result.itl))]
    print(format_table(["latency", "p50", "p90", "p99", "mean"], rows))
    print(intervals.served_line(found, args.confidence))
    facts = [["duration", _s(result.duration_s)], ["throughput", f"{result.tokens_per_s:.1f} output tokens/s, "
                                                                 f"{result.requests_per_s:.2f} requests/s"]]
    if result.goodput is not None:
        facts.append(["goodput", f"{100 * result.goodput:.1f}% of requests meet the SLO "
                                 f"({result.goodput_requests_per_s:.2f} requests/s)"])
    facts += [["mean requests in system", f"{result.mean_in_system:.2f}"], ["max queue", str(result.max_queue)],
              ["peak KV cache", f"{result.peak_kv_blocks} of {result.kv_blocks} blocks "
                                f"({100 * result.peak_kv_share:.1f}%)"],
              ["preemptions", str(result.preemptions)], ["scheduler steps", str(result.steps)]]
    print(format_table(["metric", "value"], facts))
    if result.steady_state is False:
        print(f"note: the run did not reach a steady state: {UNSETTLED}")
    _chart_note(args)
    return 0


def _steady(result) -> str:
    return "-" if result.steady_state is None else "yes" if result.steady_state else "no"


def header_of(server) -> str:
    config = server.config
    return (f"{server.architecture.name} on {server.parallelism.chips} x {server.hardware.name} "
            f"(tp {server.parallelism.tp}, pp {server.parallelism.pp}, {server.mode} mode), max batch "
            f"{config.max_batch}, {config.max_tokens_per_step} tokens a step, KV cache {server.kv.blocks} blocks "
            f"of {config.block_size} tokens ({format_quantity(server.kv.budget_bytes, 'bytes', binary=True)} a chip)"
            + (", whole sequences reserved at admission" if config.kv_admission == "reserve" else "")
            + (", first token from the decode step after the prefill" if config.first_token == "decode" else "")
            + ("" if server.speculation is None else f"; {server.speculation.label}"))


def _server_scenario(args, server, requests, prompt, output, ttft_slo, tpot_slo, header) -> int:
    from perfmodel.serving import ArrivalProcess, server_scenario

    bar = _progress_bar(args, requests * (1 + RATE_SEARCH_RUNS), 1 + RATE_SEARCH_RUNS)
    progress = None if bar is None else (lambda runs: bar.update(requests * runs - bar.n))
    try:
        found = server_scenario(server, requests, prompt, output, ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo,
                                seed=args.seed, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    limits = " and ".join(f"{name} p99 <= {text}" for name, text in (("TTFT", args.ttft_slo), ("TPOT", args.tpot_slo))
                          if text is not None)
    # Parameter uncertainty of the two runs printed (the offline one and the one at the rate found): each
    # set drawn from the fit's covariance reprices the step costs and replays them with the same seed.
    # (The rate itself is the search's answer at the nominal parameters; it gets no interval.)
    sets, basis = intervals.parameter_sets(server.hardware, "served", args.confidence, intervals.sets_asked(args))
    repriced = [server.repriced(parameters) for parameters in sets]
    offline = intervals.served_intervals(server.hardware, found.offline, args.confidence, [
        on.simulate(ArrivalProcess(kind="burst"), requests, prompt, output, seed=args.seed) for on in repriced], basis)
    served = None
    if found.result is not None and found.rate_per_s is not None:
        at = ArrivalProcess(kind="poisson", rate_per_s=found.rate_per_s)
        served = intervals.served_intervals(server.hardware, found.result, args.confidence, [
            on.simulate(at, requests, prompt, output, seed=args.seed, ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo)
            for on in repriced], basis)
    if args.json:
        print(json_text({"scenario": "server", "rate_per_s": found.rate_per_s, "constraints": limits,
                          "ttft_slo_s": ttft_slo, "tpot_slo_s": tpot_slo,
                          "tried": [{"rate_per_s": rate, "met": met} for rate, met in found.tried],
                          "offline": {**found.offline.to_dict(per_request=False), "intervals": intervals.to_json(offline)},
                          "result": None if found.result is None else {**found.result.to_dict(per_request=False),
                                                                       "intervals": intervals.to_json(served)}},
                         indent=1))
        return 0
    print(header)
    print(f"MLPerf server scenario: {limits}; prompt {prompt.text}, output {output.text}, {requests} requests a "
          f"run, seed {args.seed}")
    print(f"offline (every request at once): {found.offline.tokens_per_s:.1f} output tokens/s, "
          f"{found.offline.requests_per_s:.2f} requests/s")
    print(format_table(["rate", "meets"], [[f"{rate:.4g}/s", "yes" if met else "no"] for rate, met in found.tried]))
    if found.result is None:
        print(f"no rate down to {found.tried[-1][0]:.3g}/s meets {limits}: the constraint is below what one "
              "request alone achieves, or needs more chips (--tp/--pp)")
        return 0
    r = found.result
    print(f"server: {found.rate_per_s:.4g} requests/s ({r.tokens_per_s:.1f} output tokens/s), TTFT p99 "
          f"{_s(r.ttft.p99)}, TPOT p99 {_s(r.tpot.p99)}; {100 * found.rate_per_s / found.offline.requests_per_s:.0f}% "
          "of the offline rate")
    print(intervals.served_line(offline, args.confidence, at="offline"))
    print(intervals.served_line(served, args.confidence, at="server"))
    return 0


def _chart_note(args) -> None:
    if args.chart is not None:
        print(f"chart: {args.chart}")


def _s(value: float) -> str:
    return "-" if value is None or math.isnan(value) else format_quantity(value, "seconds")
