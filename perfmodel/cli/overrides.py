"""Arguments shared by every command that evaluates on a spec: ``--on`` lists of specs, ``--set
FIELD=VALUE`` what-ifs, ``--ideal`` and ``--mode`` (one vocabulary, from the execution-model registry)."""

from __future__ import annotations

import argparse
import contextlib

from perfmodel.errors import PerfmodelError

SET_HELP = "what-if override of a spec field, e.g. memory.hbm.bandwidth=6.4TB/s (repeatable)"


def whole_number(minimum: int, what: str = "must be"):
    """An argparse type: a whole number of at least ``minimum`` (``what`` starts the error, e.g. "the
    seed must be")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what} at least {minimum}, got {value}")
        return value

    return parse


def comma_names(what: str, example: str):
    """An argparse type: a comma list of names, at least one (``what`` and ``example`` word the error)."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(item.strip() for item in text.split(",") if item.strip())
        if not names:
            raise argparse.ArgumentTypeError(f"give at least one {what}, e.g. {example}; got {text!r}")
        return names

    return parse


spec_names = comma_names("spec name or path", "h100-sxm,tpu-v5e")  # ``--on a,b,c``
seed = whole_number(0, "the seed must be")  # ``--seed``: numpy's generators take only non-negative seeds


def add_set_argument(parser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help=SET_HELP)


def parse_overrides(items: list[str]) -> dict[str, str]:
    overrides = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep or not field.strip() or not value.strip():
            raise PerfmodelError(f"--set {item!r}: expected FIELD=VALUE, e.g. memory.hbm.bandwidth=6.4TB/s")
        overrides[field.strip()] = value.strip()
    return overrides


IDEAL_HELP = ("use the datasheet roofline (ideal parameters) instead of the achievable overlay fitted to published "
              "microbenchmarks, where one ships (the *-achievable specs of 'perfmodel specs list')")


def add_ideal_argument(parser) -> None:
    parser.add_argument("--ideal", action="store_true", help=IDEAL_HELP)


def add_engine_argument(parser) -> None:
    """``--engine``: the serving engine whose measured kernels price a GPU (its ``<device>-<engine>`` overlay)."""
    from perfmodel.hardware.loader import DEFAULT_SERVING_ENGINE, NO_ENGINE, SERVING_ENGINES

    parser.add_argument("--engine", choices=SERVING_ENGINES + (NO_ENGINE,), default=None, help=(
        "the serving engine whose kernels price the device: its <device>-<engine> overlay, fitted to the per-op "
        f"latencies NVIDIA measured inside that engine (default: {DEFAULT_SERVING_ENGINE} where the device has one; "
        f"{NO_ENGINE}: the engine-independent achievable overlay); engine overlays run in graph mode (CUDA graphs) "
        "unless --mode says otherwise"))


def add_mode_argument(parser) -> None:
    from perfmodel.hardware.execution_models import mode_choices, mode_help

    parser.add_argument("--mode", choices=mode_choices(), help=mode_help())


# Where the dtypes of a workload file's ops come from (predict, roofline: no option sets them); shown
# after an error that a device has no engine for one (cli.main, errors.NoEngineError).
WORKLOAD_DTYPES = "the workload file sets the dtypes (each tensor's dtype, or an op's attrs.dtype)"


# ``--weights checkpoint``: the dtypes of the model's published checkpoint, from its config.
CHECKPOINT_WEIGHTS = "checkpoint"
WEIGHTS_HELP = ("weight dtype (bf16, fp16, fp8, fp8_block, int8, int4...), or 'checkpoint': the dtypes the model's "
                "published checkpoint runs in, from its config's quantization_config (DeepSeek-V3/R1: fp8_block weights "
                "and fp8 activations; gpt-oss: mxfp4 experts) unless --activations, --kv or --expert-weights say "
                "otherwise")


def add_dtype_arguments(parser) -> None:
    """The weight, KV-cache and activation dtypes of an LLM scenario (llm, serve, search);
    :func:`resolve_checkpoint_dtypes` fills them in."""
    parser.add_argument("--weights", default="bf16", help=WEIGHTS_HELP)
    parser.add_argument("--kv", default=None, help="KV-cache dtype (default: the activation dtype)")
    parser.add_argument("--activations", default=None, help="activation dtype (default: bf16)")
    parser.set_defaults(dtype_hint="--weights, --activations and --kv set the dtypes (e.g. --weights bf16 "
                                   "--activations bf16)")


def resolve_checkpoint_dtypes(args) -> None:
    """Fill in the dtype arguments in place: ``--weights checkpoint`` takes the weight, activation, KV and
    expert-weight dtypes from the model's config (``llm.quantization.checkpoint_dtypes``) where no option
    names them; otherwise activations default to bf16. Every command with dtype arguments calls it first."""
    given = getattr(args, "activations", None)
    if args.weights != CHECKPOINT_WEIGHTS:
        args.activations = given or "bf16"
        return
    from perfmodel.llm.catalog import load_config
    from perfmodel.llm.quantization import checkpoint_dtypes

    found = checkpoint_dtypes(load_config(args.model))
    args.weights = found["weight_dtype"]
    args.activations = given or found["activation_dtype"]
    args.kv = args.kv or found["kv_dtype"]
    if getattr(args, "expert_weights", None) is None:
        args.expert_weights = found["expert_weight_dtype"]


def add_expert_weights_argument(parser) -> None:
    """``--expert-weights DTYPE``: the routed experts' weight dtype when stored apart from the rest
    (``Scenario.expert_weight_dtype``; llm, serve, size, search). None (absent): ``--weights``."""
    parser.add_argument("--expert-weights", metavar="DTYPE",
                        help="the routed experts' weight dtype when stored apart from the rest (gpt-oss as published: "
                             "--weights bf16 --expert-weights mxfp4); default: --weights")


def add_fanout_arguments(parser) -> None:
    """``--workers N`` / ``--scheduler ADDRESS``: where a command that fans out runs its pieces
    (``perfmodel.fanout``); read back with :func:`fanout`."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=whole_number(1), metavar="N",
                       help="run the work on a local Dask cluster of N worker processes (needs perfmodel[dask]); "
                            "the results are identical to a run in this process")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="run the work on the Dask cluster whose scheduler is at ADDRESS, e.g. tcp://10.0.0.5:8786 "
                            "(its workers need the same perfmodel installed); see the README")


@contextlib.contextmanager
def fanout(args, what: str = "piece"):
    """The mapper ``--workers``/``--scheduler`` ask for, for the duration of the block (neither: this
    process), drawing a progress bar over its ``what``s on a Dask cluster (not with ``--json``)."""
    from perfmodel.fanout import mapper, with_progress

    workers, scheduler = getattr(args, "workers", None), getattr(args, "scheduler", None)
    with mapper(workers=workers, scheduler=scheduler) as inner:
        distributed = workers is not None or scheduler is not None
        yield with_progress(inner, what, enabled=not getattr(args, "json", False)) if distributed else inner
