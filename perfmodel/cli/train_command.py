"""``perfmodel train``: one training step of a layout, or the fastest layout that fits."""

from __future__ import annotations

import operator
from dataclasses import replace
from pathlib import Path

from perfmodel.cli import confidence as intervals
from perfmodel.cli.overrides import (
    add_fanout_arguments,
    add_ideal_argument,
    add_mode_argument,
    add_set_argument,
    comma_names,
    fanout,
    parse_overrides,
    whole_number,
)
from perfmodel.errors import PerfmodelError
from perfmodel.jsonable import json_text
from perfmodel.tables import format_table
from perfmodel.units import format_quantity

# training.backward.ATTENTION_KERNELS's names, spelled here so that building the parser imports no model code (a test
# checks they agree)
ATTENTION_KERNEL_NAMES = ("flash", "pallas-flash", "splash", "splash-fused")

LAYOUT_AXES = ("dp", "fsdp", "tp", "pp", "cp", "ep")


def register(commands) -> None:
    train = commands.add_parser(
        "train", help="predict a training step (time by phase, tokens/s per chip, MFU/HFU, memory), or search layouts",
        description="Predict one optimizer step of training a shipped (or config.json) model on CHIPS chips: "
                    "forward, backward, recomputation, optimizer, pipeline bubble and exposed communication, "
                    "tokens/s per chip, MFU and HFU, memory per chip. Give a layout with --dp/--fsdp/--tp/--pp/--cp "
                    "(unset axes are 1; with none given, every chip is an FSDP shard), or --search for the fastest "
                    "layout that fits. Data-parallel communication is assumed to overlap with compute (--no-overlap "
                    "to charge all of it).")
    train.add_argument("--model", required=True, help="a shipped model (perfmodel models list) or a config.json path")
    train.add_argument("--on", required=True, help="spec name or path")
    train.add_argument("--chips", type=_count, required=True)
    train.add_argument("--global-batch", type=_count, required=True, help="sequences per optimizer step")
    train.add_argument("--seq", type=_count, required=True, help="tokens per sequence")
    for axis in LAYOUT_AXES:
        train.add_argument(f"--{axis}", type=_count, help=f"{axis} degree")
    train.add_argument("--zero", type=int, default=0, choices=[0, 1, 2],
                       help="ZeRO stage over the dp replicas (1: optimizer state, 2: + gradients; ZeRO-3 is --fsdp)")
    train.add_argument("--micro-batch", type=_count, default=1, help="sequences per forward/backward pass")
    train.add_argument("--virtual-stages", type=_count, default=1, help="interleaved 1F1B chunks per chip (pp > 1)")
    train.add_argument("--recompute", choices=["none", "selective", "full"],
                       help="activation recomputation (default none; --search tries all three unless given)")
    train.add_argument("--keep", type=_names, metavar="NAMES",
                       help="with --recompute selective: keep only these layer matmuls' outputs, comma-separated "
                            "(e.g. q_proj,k_proj,v_proj,o_proj; MaxText's named remat policies), recompute the rest")
    train.add_argument("--offload", action="store_true",
                       help="move the kept tensors to host memory after each layer's forward and back for its backward")
    train.add_argument("--mtp", action="store_true",
                       help="also train the model's multi-token-prediction modules (DeepSeek-V3/R1's recipe): each "
                            "module's forward and backward, its extra output-head pass, weights and optimizer state")
    train.add_argument("--moe-capacity-factor", type=float, metavar="F",
                       help="MoE models: price MaxText's token-dropping MoE (one-hot dispatch and combine einsums, "
                            "experts computing buffers of ceil(seq x top-k / experts) x F slots) instead of dropless "
                            "grouped matmuls")
    train.add_argument("--attention-block", type=int, metavar="KEYS",
                       help="the flash-attention kernel's block (the larger of its query and key blocks, MaxText's "
                            "sa_block_*): a causal kernel also computes the masked pairs of the blocks on the "
                            "diagonal (default: the spec's attention_kv_block, else 128)")
    train.add_argument("--attention-kernel", choices=ATTENTION_KERNEL_NAMES, metavar="KERNEL",
                       help="the flash-attention kernel, for how its backward runs: flash (FlashAttention-2, one "
                            "gradient kernel; the default), pallas-flash (JAX's Pallas TPU kernel: dK/dV and dQ "
                            "kernels, each recomputing the scores), splash (splash attention, MaxText's default: the "
                            "same two kernels on one TensorCore of a v4/v5p chip), splash-fused (its fused backward "
                            "on one TensorCore, one partial dQ per key block of --attention-block keys)")
    train.add_argument("--compute-dtype", default="bf16", help="matmul and activation dtype (default bf16)")
    train.add_argument("--master-dtype", default="fp32",
                       help="master weights, AdamW moments and reduced gradients (default fp32; a spec without an "
                            "fp32 vector engine needs bf16 here)")
    train.set_defaults(dtype_hint="--compute-dtype and --master-dtype set the dtypes (e.g. --compute-dtype bf16)")
    train.add_argument("--domain-chips", type=_count,
                       help="chips per fast-link domain (an NVLink node, a TPU slice); default: the chip-to-chip "
                            "link's reach; groups that span domains use the spec's network link")
    train.add_argument("--no-overlap", action="store_true", help="charge all data-parallel communication")
    train.add_argument("--search", action="store_true", help="find the fastest layout that fits; prints the top 10")
    train.add_argument("--chart", type=Path, metavar="FILE.png",
                       help="write the step time by phase as a chart (.png, .svg or .pdf)")
    add_mode_argument(train)
    add_set_argument(train)
    add_ideal_argument(train)
    add_fanout_arguments(train)
    intervals.add_confidence_argument(train, parameter_sets=TRAINING_PARAMETER_SETS)
    train.add_argument("--json", action="store_true")
    train.set_defaults(handler=_train)


_count = whole_number(1)
# Parameter sets a step is priced again at (--parameter-sets): a layout search prices each printed row's
# micro-batch costs again per set (~0.25 s a set for Llama-3.1-8B on 8 H100s), so fewer than llm's 32;
# the spread (there: -8% to +11% of the step time) adds in quadrature to a model-form band of ~+-37%,
# so 16 or 32 sets give ends within 0.5% of each other (measured on that example).
TRAINING_PARAMETER_SETS = 16


TRAINING_FIGURES = {"step_s": "time", "tokens_per_s": "rate", "tokens_per_s_per_chip": "rate", "mfu": "rate"}


def _step_intervals(hardware, result, confidence: float, runs=(), basis: str = "") -> dict:
    """A training step's headline figures (``TRAINING_FIGURES``; MFU is a rate: FLOPs per second over the
    peak) with their intervals; ``runs``: the same step at parameter sets drawn from the fit's covariance,
    ``basis`` theirs (or why there are none)."""
    sampled = intervals.sampled_figures(runs, basis, {name: operator.attrgetter(name) for name in TRAINING_FIGURES}) \
        if runs or basis else None
    return intervals.intervals(hardware, "training", confidence,
                               {name: (getattr(result, name), sense) for name, sense in TRAINING_FIGURES.items()},
                               sampled)


_names = comma_names("name", "q_proj,k_proj")


def _layout(args):
    from perfmodel.training import Layout

    given = {axis: getattr(args, axis) for axis in LAYOUT_AXES if getattr(args, axis) is not None}
    if not any(axis in given for axis in ("dp", "fsdp", "tp", "pp", "cp")):
        given["fsdp"] = args.chips
    layout = Layout(**given, zero=args.zero, micro_batch=args.micro_batch, virtual_stages=args.virtual_stages)
    if layout.chips != args.chips:
        raise PerfmodelError(f"--chips {args.chips} must equal dp x fsdp x tp x pp x cp = {layout.dp} x {layout.fsdp} x "
                             f"{layout.tp} x {layout.pp} x {layout.cp} = {layout.chips}")
    return layout


def _train(args) -> int:
    from perfmodel.hardware.loader import load_for_prediction
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.training import TrainingSetup, train_predict
    from perfmodel.training.search import reprice, search
    from perfmodel.yaml_source import check_output_path

    if args.chart is not None:
        check_output_path(args.chart, "--chart", (".png", ".svg", ".pdf"))
    if not args.search and (args.workers is not None or args.scheduler is not None):
        raise PerfmodelError("--workers/--scheduler spread a layout search: add --search (one layout is one evaluation)")
    if args.keep and args.recompute != "selective":
        raise PerfmodelError("--keep narrows selective recomputation: add --recompute selective")
    architecture = load_architecture(args.model)
    hardware = load_for_prediction(args.on, overrides=parse_overrides(args.set) or None, ideal=args.ideal)
    setup = TrainingSetup(global_batch=args.global_batch, seq_len=args.seq, compute_dtype=args.compute_dtype,
                          master_dtype=args.master_dtype, recompute=args.recompute or "none", kept=args.keep,
                          offload=args.offload, moe_capacity_factor=args.moe_capacity_factor,
                          mtp=args.mtp, attention_block=args.attention_block, attention_kernel=args.attention_kernel)
    if args.search:
        if any(getattr(args, axis) is not None for axis in LAYOUT_AXES):
            raise PerfmodelError("--search chooses the layout: drop --dp/--fsdp/--tp/--pp/--cp/--ep")
        with fanout(args, "group") as mapper:
            found = search(architecture, hardware, setup, args.chips, mode=args.mode, domain_chips=args.domain_chips,
                           recompute=(args.recompute,) if args.recompute else ("none", "selective", "full"),
                           mapper=mapper)
        if found.best is None:
            raise PerfmodelError(f"no layout of {architecture.name} on {args.chips} x {hardware.name} fits at global "
                                 f"batch {args.global_batch} x {args.seq} tokens ({found.tried} tried); add chips, "
                                 "shorten the sequence or use --recompute full")
        results = list(found.ranked)
        header = (f"{architecture.name} on {args.chips} x {hardware.name}: {found.tried} layouts tried, "
                  f"{found.tried - found.rejected} fit; the fastest {len(results)}")
    else:
        results = [train_predict(architecture, hardware, setup, _layout(args), mode=args.mode,
                                 domain_chips=args.domain_chips, overlap=not args.no_overlap)]
        header = f"{architecture.name} on {args.chips} x {hardware.name}"
    # Parameter uncertainty: every printed layout's step again at each set drawn from the fit's covariance,
    # priced as it was (a search's rows: their micro-batch costs shared per recompute policy, tp and cp).
    sets, basis = intervals.parameter_sets(hardware, "training", args.confidence, intervals.sets_asked(args))

    def again(parameters) -> list:
        on = replace(hardware, efficiency=parameters)
        if args.search:
            return reprice(architecture, on, results, args.chips, mode=args.mode, domain_chips=args.domain_chips)
        return [train_predict(architecture, on, setup, _layout(args), mode=args.mode, domain_chips=args.domain_chips,
                              overlap=not args.no_overlap)]

    runs = [again(parameters) for parameters in sets]
    found = [_step_intervals(hardware, result, args.confidence, [run[index] for run in runs], basis)
             for index, result in enumerate(results)]
    if args.chart is not None:
        from perfmodel.plotting import plot_training_breakdown, save_figure

        save_figure(plot_training_breakdown(results, step_intervals=[bands["step_s"] for bands in found]), args.chart)
    if args.json:
        data = [{**result.to_dict(), "intervals": intervals.to_json(bands)}
                for result, bands in zip(results, found, strict=True)]
        print(json_text(data if args.search else data[0], indent=1))
        return 0

    def seconds(value: float) -> str:
        return format_quantity(value, "seconds")

    first = results[0]
    print(f"{header} ({first.mode} mode; parameters: {first.parameters}); global batch {args.global_batch} x "
          f"{args.seq} tokens")
    if args.search:
        rows = [[r.layout.label(), r.setup.recompute, seconds(r.step_s), intervals.text(bands["step_s"], seconds),
                 f"{r.tokens_per_s_per_chip:.0f}", f"{100 * r.mfu:.1f}%",
                 format_quantity(r.memory.total, "bytes", binary=True), r.bound] for r, bands in zip(results, found,
                                                                                                      strict=True)]
        print(format_table(["layout", "recompute", "step", f"step {intervals.heading(args.confidence)}",
                            "tokens/s/chip", "MFU", "memory/chip", "bound"], rows))
        print(f"interval: {found[0]['step_s'].basis}")
        return 0
    bands = found[0]
    result = first
    memory = ", ".join(f"{key} {format_quantity(value, 'bytes', binary=True)}"
                       for key, value in result.memory.as_dict().items())
    rows = [["layout", result.layout.label()], ["recompute", result.setup.recompute],
            ["step time", seconds(result.step_s), intervals.text(bands["step_s"], seconds)],
            ["tokens/s", f"{result.tokens_per_s:,.0f}", intervals.text(bands["tokens_per_s"], lambda v: f"{v:,.0f}")],
            ["tokens/s per chip", f"{result.tokens_per_s_per_chip:,.1f}",
             intervals.text(bands["tokens_per_s_per_chip"], lambda v: f"{v:,.1f}")],
            ["MFU / HFU", f"{100 * result.mfu:.1f}% / {100 * result.hfu:.1f}%",
             "MFU " + intervals.text(bands["mfu"], lambda v: f"{100 * v:.1f}%")],
            ["memory per chip", memory],
            ["fits", f"{'yes' if result.fits else 'NO'} ({format_quantity(result.memory.total, 'bytes', binary=True)} "
                     f"of {format_quantity(result.capacity_bytes, 'bytes', binary=True)})"],
            ["bound", result.bound], ["power", format_quantity(result.power_watts, "watts")]]
    print(format_table(["metric", "value", intervals.heading(args.confidence)], [row + [""] * (3 - len(row))
                                                                                 for row in rows]))
    print(f"interval: {bands['step_s'].basis}")
    phases = [[phase.replace("_", " "), format_quantity(value, "seconds"), f"{100 * value / result.step_s:.1f}%"]
              for phase, value in result.time_by_phase.items() if value > 0]
    print(format_table(["phase", "time", "share"], phases))
    for note in result.notes:
        print(f"note: {note}")
    if not result.fits:
        print(f"perfmodel: warning: {architecture.name} does not fit this layout; try --search, more chips, "
              "--recompute full or a smaller --micro-batch")
    return 0
