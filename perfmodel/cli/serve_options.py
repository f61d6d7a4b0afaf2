"""``serve`` options of issue 31: speculative decoding (``--speculative``) and disaggregated prefill/decode
(``--disagg xPyD``), kept out of ``serve_command`` so that its handler only hooks them in."""

from __future__ import annotations

import math

from perfmodel.errors import PerfmodelError
from perfmodel.jsonable import json_text
from perfmodel.tables import format_table
from perfmodel.units import format_quantity


def add_speculation_arguments(parser) -> None:
    from perfmodel.serving.speculation import DEFAULT_ACCEPTANCE, DEFAULT_TOKENS, METHODS

    defaults = ", ".join(f"{m} {DEFAULT_ACCEPTANCE[m]:g}" for m in METHODS)
    parser.add_argument("--speculative", choices=METHODS,
                        help="speculative decoding: draft (a smaller model, --draft-model), mtp (the model's "
                             "multi-token-prediction module, DeepSeek-V3) or eagle (an EAGLE-style head); the "
                             "verifier scores k+1 tokens a sequence in one batched pass")
    parser.add_argument("--speculative-tokens", type=int, metavar="K",
                        help="tokens drafted a step (default: " + ", ".join(f"{m} {DEFAULT_TOKENS[m]}" for m in METHODS)
                             + ")")
    parser.add_argument("--acceptance", type=float, metavar="A",
                        help=f"per-token acceptance rate in [0, 1] (published defaults: {defaults}; sources in "
                             "perfmodel/serving/speculation.py)")
    parser.add_argument("--draft-model", help="the draft model of --speculative draft (a shipped model or config.json)")


def speculation_from(args):
    """The ``Speculation`` the arguments ask for (None: none)."""
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.serving.speculation import DEFAULT_ACCEPTANCE, DEFAULT_TOKENS, Speculation

    method = getattr(args, "speculative", None)
    if method is None:
        extra = [flag for flag, value in (("--speculative-tokens", args.speculative_tokens),
                                          ("--acceptance", args.acceptance), ("--draft-model", args.draft_model))
                 if value is not None]
        if extra:
            raise PerfmodelError(f"{' and '.join(extra)} need --speculative draft, mtp or eagle")
        return None
    if method == "draft" and args.draft_model is None:
        raise PerfmodelError("--speculative draft needs --draft-model (e.g. llama-3.1-8b for llama-3.1-70b)")
    if method != "draft" and args.draft_model is not None:
        raise PerfmodelError(f"--draft-model is for --speculative draft; {method} drafts with the model's own heads")
    draft = load_architecture(args.draft_model) if args.draft_model is not None else None
    return Speculation(method=method, tokens=args.speculative_tokens or DEFAULT_TOKENS[method],
                       acceptance=DEFAULT_ACCEPTANCE[method] if args.acceptance is None else args.acceptance,
                       draft_model=draft)


def add_disagg_arguments(parser) -> None:
    parser.add_argument("--disagg", metavar="xPyD",
                        help="disaggregated prefill/decode: x prefill and y decode workers (e.g. 1P2D), the KV "
                             "cache sent between them over the spec's network link; prints it beside aggregated "
                             "replicas on the same chips")
    for role in ("prefill", "decode"):
        parser.add_argument(f"--{role}-tp", type=int, help=f"--disagg: tensor parallelism of a {role} worker "
                                                           "(default --tp)")
        parser.add_argument(f"--{role}-pp", type=int, help=f"--disagg: pipeline stages of a {role} worker "
                                                           "(default --pp)")
        parser.add_argument(f"--{role}-max-batch", type=int, help=f"--disagg: most running sequences of a {role} "
                                                                  "worker (default --max-batch)")
    parser.add_argument("--decode-ep", type=int, help="--disagg: expert parallelism of a decode worker (MoE; at "
                                                      "most decode tp x dp)")
    parser.add_argument("--decode-dp", type=int,
                        help="--disagg: attention data parallelism of a decode worker: dp groups of decode-tp chips, "
                             "each with its own batch of --decode-max-batch, the experts spread over --decode-ep of "
                             "all their chips (wide expert parallelism; all-to-alls over the network link past the "
                             "NVLink domain)")
    parser.add_argument("--kv-link", metavar="LINK", help="--disagg: the spec's link the KV cache crosses (default: "
                                                          "its network link, else its chip-to-chip link)")


DISAGG_ONLY = ("prefill_tp", "prefill_pp", "prefill_max_batch", "decode_tp", "decode_pp", "decode_max_batch",
               "decode_ep", "decode_dp", "kv_link")


def check_disagg_arguments(args) -> None:
    if args.disagg is None:
        given = ["--" + name.replace("_", "-") for name in DISAGG_ONLY if getattr(args, name) is not None]
        if given:
            raise PerfmodelError(f"{' and '.join(given)} only apply with --disagg xPyD")
        return
    for name in DISAGG_ONLY[:-1]:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise PerfmodelError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    conflicts = [flag for flag, value in (("--users", args.users), ("--rates", args.rates),
                                          ("--scenario", args.scenario), ("--chart", args.chart)) if value is not None]
    if conflicts:
        raise PerfmodelError(f"--disagg simulates one open-loop stream (--rate or --trace); drop {' and '.join(conflicts)}")


def run_disaggregated(args, architecture, hardware, config, speculation, *, requests, prompt, output, trace,
                      longest, ttft_slo, tpot_slo) -> int:
    """``serve --disagg``: the disaggregated deployment beside aggregated replicas on the same chips."""
    from dataclasses import replace

    from perfmodel.llm import Parallelism
    from perfmodel.serving import ArrivalProcess, Server
    from perfmodel.serving.disaggregated import Disaggregated, draw, kv_link, parse_disagg, simulate_pool

    prefill_workers, decode_workers = parse_disagg(args.disagg)
    kv = args.kv or args.activations
    dtypes = dict(weight_dtype=args.weights, kv_dtype=kv, activation_dtype=args.activations, mode=args.mode,
                  expert_weight_dtype=args.expert_weights)

    def server(tp, pp, max_batch, spec, ep=1, dp=1):
        limits = config if max_batch is None else replace(config, max_batch=max_batch,
                                                          max_tokens_per_step=max(config.max_tokens_per_step,
                                                                                  max_batch))
        return Server(architecture, hardware, Parallelism(tp=tp, pp=pp, ep=ep, dp=dp), config=limits,
                      max_context=longest, speculation=spec, **dtypes)

    prefill = server(args.prefill_tp or args.tp, args.prefill_pp or args.pp, args.prefill_max_batch, None)
    decode = server(args.decode_tp or args.tp, args.decode_pp or args.pp, args.decode_max_batch, speculation,
                    ep=args.decode_ep or 1, dp=args.decode_dp or 1)
    link = kv_link(hardware, prefill.parallelism.chips, decode.parallelism.chips, args.kv_link)
    deployment = Disaggregated(prefill=prefill, decode=decode, prefill_workers=prefill_workers,
                               decode_workers=decode_workers, link=link, kv_dtype=kv)
    if trace is not None:
        stream = trace
    elif args.rate is not None:
        from perfmodel.cli.llm_command import _rate

        stream = ArrivalProcess(kind=args.arrival or "poisson", rate_per_s=_rate(args.rate))
    else:
        raise PerfmodelError("--disagg needs an open-loop stream: --rate (e.g. 2/s) or --trace")
    times, prompts, outputs = draw(stream, requests, prompt, output, seed=args.seed,
                                   max_positions=architecture.max_positions)
    slos = dict(ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo)
    disaggregated = deployment.simulate(times, prompts, outputs, prefix_share=args.prefix_share, **slos)
    aggregated_server = server(args.tp, args.pp, None, speculation)
    replicas = max(deployment.chips // aggregated_server.parallelism.chips, 1)
    aggregated = simulate_pool(aggregated_server, replicas, times, prompts, outputs, prefix_share=args.prefix_share,
                               **slos)
    from perfmodel.cli import confidence as intervals

    # Parameter uncertainty: every worker's step costs repriced at each set drawn from the fit's
    # covariance, the same stream through both deployments again (the KV link reads no efficiency).
    sets, basis = intervals.parameter_sets(hardware, "served", args.confidence, intervals.sets_asked(args))
    sampled = [(replace(deployment, prefill=prefill.repriced(parameters), decode=decode.repriced(parameters)).simulate(
                    times, prompts, outputs, prefix_share=args.prefix_share, **slos),
                simulate_pool(aggregated_server.repriced(parameters), replicas, times, prompts, outputs,
                              prefix_share=args.prefix_share, **slos)) for parameters in sets]
    found = {"disaggregated": intervals.served_intervals(hardware, disaggregated, args.confidence,
                                                         [run[0] for run in sampled], basis),
             "aggregated": intervals.served_intervals(hardware, aggregated, args.confidence,
                                                      [run[1] for run in sampled], basis)}
    if args.json:
        print(json_text({"disaggregated": {**disaggregated.to_dict(), "intervals": intervals.to_json(
                             found["disaggregated"])},
                         "aggregated": {**aggregated.to_dict(), "intervals": intervals.to_json(found["aggregated"])},
                         "kv_link": {"name": link.name, "latency_s": link.latency_s,
                                     "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s},
                         "speculation": None if speculation is None else speculation.to_dict()}, indent=1))
        return 0
    print(f"{architecture.name} on {hardware.name}, {requests} requests"
          + (f", seed {args.seed}" if trace is None else f" from {args.trace}"))
    if speculation is not None:
        print(speculation.label)
    print(f"KV transfer over {link.name}: {format_quantity(link.latency_s, 'seconds')} + bytes / "
          f"{format_quantity(link.bandwidth_bytes_per_s, 'bytes_per_s')}; transfer p50 "
          f"{_s(float(_nan_percentile(disaggregated.transfer_s, 50)))}, p99 "
          f"{_s(float(_nan_percentile(disaggregated.transfer_s, 99)))}")
    rows = []
    for result in (disaggregated, aggregated):
        goodput = result.goodput
        rows.append([result.label, result.chips, _s(result.ttft.p50), _s(result.ttft.p99), _s(result.tpot.p50),
                     _s(result.tpot.p99), f"{result.tokens_per_s:.0f}", f"{result.tokens_per_s_per_chip:.1f}",
                     "-" if goodput is None else f"{100 * goodput:.0f}%", result.preemptions,
                     "-" if result.steady_state is None else "yes" if result.steady_state else "no"])
    print(format_table(["deployment", "chips", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "tokens/s",
                        "tokens/s/chip", "goodput", "preemptions", "steady"], rows))
    for name, bands in found.items():
        print(intervals.served_line(bands, args.confidence, at=name))
    return 0


def _nan_percentile(values, q: float) -> float:
    import numpy as np

    finite = values[np.isfinite(values)] if values is not None else np.zeros(0)
    return float(np.percentile(finite, q)) if finite.size else math.nan


def _s(value: float) -> str:
    return "-" if value is None or math.isnan(value) else format_quantity(value, "seconds")
