"""The op-kind table: one entry per kind of op, and every list about kinds derived from it (pure core).

Each :class:`OpKind` says which engine class runs it (``matrix`` or ``vector``), whether a compiler
fuses it into its producer's kernel, its typed attributes (checked when a graph is built, so a
missing ``m`` fails at ``Graph(...)``, not deep in an evaluation), the aten targets a capture or a
profiler trace maps to it, and whether the calibration fit gives its kernels a start-up latency.
Its cost rule is registered under the same name in ``costs.rules`` (``@cost_rule(name)``); a test
checks that every kind has one. Adding a kind: :func:`register` an entry and its cost rule (README,
"Extending perfmodel"; ``tests/test_registries.py`` adds a toy kind from outside the package).

FLOP conventions used by every graph source (capture, builders, LLM graphs): a matmul is
``matmul_flops`` (an FMA is 2 FLOPs, ``units.FLOPS_PER_FMA``); element-wise functions cost
``FLOPS_PER_ELEMENT_BY_FUNCTION`` FLOPs per element (1 for plain arithmetic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from perfmodel.tracing import floats
from perfmodel.units import FLOPS_PER_FMA

ATTRIBUTE_TYPES = ("dimension", "number", "flag", "text")
# The largest size the IR accepts: a dimension, a tensor's element count, an op's repeat count, a
# ``dimension`` attribute. Sizes stay exact in 64-bit integers (2**63 - 1 is int64's largest) with room
# for one doubling, and FLOPs and bytes (products of a few sizes) stay finite in float64 (~1.8e308).
MAX_SIZE = 2**62
# The most FLOPs per element an op may declare: far above any point-wise function's cost
# (FLOPS_PER_ELEMENT_BY_FUNCTION tops out at 12) or a fused chain of them, and small enough that
# FLOPs stay finite.
MAX_FLOPS_PER_ELEMENT = 10**6


@dataclass(frozen=True)
class Attribute:
    """A typed op attribute: ``dimension`` (a positive integer, or an array of them in a sweep),
    ``number`` (a finite real >= 0, or an array), ``flag`` (true/false) or ``text`` (one of
    ``choices`` when given). A dimension is at most ``MAX_SIZE``; a number at most ``maximum``."""

    type: str
    required: bool = False
    choices: tuple[str, ...] = ()
    maximum: float = MAX_SIZE

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` for this attribute, or None."""
        if self.type == "flag":
            return None if isinstance(value, (bool, np.bool_)) else f"must be true or false, got {value!r}"
        if self.type == "text":
            if not isinstance(value, str):
                return f"must be text, got {value!r}"
            if self.choices and value not in self.choices:
                return f"must be one of {', '.join(self.choices)}, got {value!r}"
            return None
        if type(value) is int or type(value) is float:  # the common scalar case, without numpy
            return self._scalar_problem(value)
        if isinstance(value, (list, tuple, dict, set)):
            # An array is a sweep's (numpy, built by the code); a list from a file (``batch: [4]``) reached
            # the cost rules as a Python list and failed there (fuzz finding, issue 38).
            return f"must be a number, got {value!r}"
        array = np.asarray(value)
        if isinstance(value, (bool, np.bool_)) or array.dtype.kind not in "iuf" or array.size == 0:
            return f"must be a number, got {value!r}"
        if not np.all(np.isfinite(array)):
            return f"must be finite, got {value!r}"
        if self.type == "dimension":
            if array.dtype.kind == "f" and not np.all(array == np.round(array)):
                return f"must be a whole number, got {value!r}"
            if not np.all(array > 0):
                return f"must be more than zero, got {value!r}"
        elif not np.all(array >= 0):
            return f"must not be negative, got {value!r}"
        return None if np.all(array <= self.maximum) else self._too_large(np.max(array))

    def _scalar_problem(self, value: float) -> str | None:
        if isinstance(value, float) and not math.isfinite(value):  # (an int of any size is finite)
            return f"must be finite, got {value!r}"
        if self.type == "dimension":
            if value != int(value):
                return f"must be a whole number, got {value!r}"
            if value <= 0:
                return f"must be more than zero, got {value!r}"
        elif value < 0:
            return f"must not be negative, got {value!r}"
        return None if value <= self.maximum else self._too_large(value)

    def _too_large(self, value: object) -> str:
        allowed = "a whole number from 1" if self.type == "dimension" else "a number from 0"
        return f"must be {allowed} to {_limit(self.maximum)}, got {value!r}"


def _limit(value: float) -> str:
    """A limit as a reader knows it: ``2**62 (4.6e+18)`` for MAX_SIZE."""
    return f"2**62 ({MAX_SIZE:.2g})" if value == MAX_SIZE else f"{value:g}"


DIMENSION = Attribute("dimension")
REQUIRED_DIMENSION = Attribute("dimension", required=True)
NUMBER = Attribute("number")
FLOPS_PER_ELEMENT = Attribute("number", maximum=MAX_FLOPS_PER_ELEMENT)
FLAG = Attribute("flag")
TEXT = Attribute("text")
# Attributes any op may carry.
COMMON_ATTRIBUTES: Mapping[str, Attribute] = {"dtype": TEXT, "elements": DIMENSION}


@dataclass(frozen=True, kw_only=True)
class OpKind:
    """One kind of op (see the module docstring)."""

    name: str
    engine: str                                   # "matrix" or "vector"
    summary: str
    fusible: bool = False
    # Whether it may also join a matrix op's kernel as an epilogue (point-wise work only: Inductor's
    # GEMM templates and oneDNN fuse point-wise ops after a GEMM, never a norm, softmax or reduction;
    # benchmarks/inductor_kernels.py).
    epilogue: bool = False
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    aten: frozenset[str] = frozenset()
    startup_latency: bool = False
    # A requirement that attribute types cannot say (an op -> a message when it is unmet).
    requirement: Callable[[Any], str | None] | None = None

    def __post_init__(self) -> None:
        if self.engine not in ("matrix", "vector"):
            raise ValueError(f"op kind {self.name!r}: engine must be 'matrix' or 'vector', got {self.engine!r}")
        for name, attribute in self.attributes.items():
            if attribute.type not in ATTRIBUTE_TYPES:
                raise ValueError(f"op kind {self.name!r}: attribute {name!r} has unknown type {attribute.type!r}")

    def attribute(self, name: str) -> Attribute | None:
        return self.attributes.get(name, COMMON_ATTRIBUTES.get(name))

    def attribute_problems(self, op: Any) -> list[tuple[str, str]]:
        """(attribute, message) for every missing required or mistyped attribute of ``op``."""
        attrs = op.attrs
        problems = [(name, f"a {self.name} op needs attribute {name!r}")
                    for name, attribute in self.attributes.items() if attribute.required and name not in attrs]
        unmet = self.requirement(op) if self.requirement is not None else None
        if unmet:
            problems.append(("*", unmet))
        for name, value in attrs.items():
            attribute = self.attribute(name)
            message = None if attribute is None else attribute.problem(value)
            if message:
                problems.append((name, message))
        return problems


OP_KIND_TABLE: dict[str, OpKind] = {}


def register(kind: OpKind) -> OpKind:
    if kind.name in OP_KIND_TABLE:
        raise ValueError(f"op kind {kind.name!r} is already registered")
    OP_KIND_TABLE[kind.name] = kind
    return kind


def op_kind(name: str) -> OpKind | None:
    return OP_KIND_TABLE.get(name)


def is_vector_kind(name: str) -> bool:
    """Whether ``name`` is vector work (element-wise, reductions, norms, softmax: the table's vector
    engine), or a kind the table does not know (priced as vector work too)."""
    entry = OP_KIND_TABLE.get(name)
    return entry is None or entry.engine == "vector"


def matmul_flops(m: Any, n: Any, k: Any, batch: Any = 1) -> Any:
    """Useful FLOPs of ``batch`` (m x k) @ (k x n) products: 2 per multiply-add, as every vendor peak
    and ``torch.utils.flop_counter`` count them. Dimensions are ints or arrays (sweeps); so is the result."""
    return FLOPS_PER_FMA * batch * floats(m) * n * k


# Arithmetic per element of transcendental point-wise functions, counted as the basic operations of
# their usual implementations (polynomial/rational approximations): estimates, not hardware counts.
# One convention for captures, profiler traces, builders and LLM graphs. A gated MLP activation
# (SwiGLU/GeGLU: act(gate) * up) adds 1 for the multiply.
FLOPS_PER_ELEMENT_BY_FUNCTION: Mapping[str, int] = {
    "exp": 4, "exp2": 4, "expm1": 4, "log": 4, "log1p": 4, "log2": 4, "sin": 4, "cos": 4, "tan": 6,
    "tanh": 6, "sigmoid": 5, "erf": 6, "erfc": 6, "rsqrt": 2, "sqrt": 2, "pow": 4, "reciprocal": 1,
    "gelu": 12, "silu": 6, "mish": 12, "softplus": 8, "elu": 5, "hardswish": 4, "hardsigmoid": 3,
}


def activation_flops_per_element(function: str, gated: bool) -> int:
    """FLOPs per output element of an MLP activation ``function`` (silu, gelu...), times ``up`` if gated."""
    return FLOPS_PER_ELEMENT_BY_FUNCTION.get(function, 1) + (1 if gated else 0)


# ------------------------------------------------------------------------------ aten targets by kind
MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_int_mm"}
CONV_OPS = {"convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
            "_convolution", "cudnn_convolution", "mkldnn_convolution"}
ATTENTION_OPS = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
                 "_scaled_dot_product_attention_math", "_flash_attention_forward", "_efficient_attention_forward"}
SOFTMAX_OPS = {"softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax"}
NORM_OPS = {"native_layer_norm": "layer", "layer_norm": "layer", "rms_norm": "rms", "_fused_rms_norm": "rms",
            "native_group_norm": "group", "group_norm": "group", "native_batch_norm": "batch",
            "_native_batch_norm_legit_no_training": "batch", "_native_batch_norm_legit": "batch",
            "batch_norm": "batch", "instance_norm": "instance"}
REDUCTION_OPS = {"sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "argmax", "argmin",
                 "prod", "norm", "linalg_vector_norm", "logsumexp", "cumsum", "cumprod", "any", "all", "max_pool2d",
                 "avg_pool2d", "adaptive_avg_pool2d", "max_pool2d_with_indices", "_adaptive_avg_pool2d", "avg_pool1d",
                 "adaptive_avg_pool1d", "max_pool1d", "mean_dim"}
GATHER_OPS = {"embedding", "index_select", "gather", "index", "take", "embedding_bag", "_embedding_bag"}
COPY_OPS = {"cat", "stack", "clone", "copy_", "copy", "_to_copy", "contiguous", "constant_pad_nd", "repeat",
            "index_put", "index_put_", "scatter", "scatter_", "scatter_add", "masked_scatter", "roll", "flip", "tril",
            "triu", "fill_", "zero_", "new_ones", "new_zeros", "ones_like", "zeros_like", "full_like", "fill",
            "split_with_sizes_copy", "unbind_copy", "pad", "reflection_pad2d", "replication_pad2d", "upsample_nearest2d"}
RANDOM_ELEMENTWISE_OPS = {"bernoulli", "bernoulli_", "native_dropout", "dropout", "rand_like", "uniform_", "normal_",
                          "randn_like", "exponential_"}
# Point-wise aten ops by name, for callers without torch's op tags (profiler traces): each carries
# torch's ``Tag.pointwise`` (checked by the calibration tests); an in-place ``name_`` matches ``name``.
POINTWISE_OPS = frozenset({
    "abs", "acos", "acosh", "add", "addcdiv", "addcmul", "angle", "asin", "asinh", "atan", "atan2", "atanh",
    "bitwise_and", "bitwise_left_shift", "bitwise_not", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "ceil",
    "celu", "clamp", "clamp_max", "clamp_min", "clip", "copysign", "cos", "cosh", "deg2rad", "digamma", "div", "elu",
    "eq", "erf", "erfc", "erfinv", "exp", "exp2", "expm1", "floor", "fmax", "fmin", "fmod", "frac", "ge", "gelu",
    "gelu_backward", "gt", "hardshrink", "hardsigmoid", "hardtanh", "heaviside", "hypot", "isfinite", "isinf", "isnan",
    "le", "leaky_relu", "lerp", "lgamma", "log", "log10", "log1p", "log2", "logaddexp", "logical_and", "logical_not",
    "logical_or", "logical_xor", "logit", "lt", "masked_fill", "maximum", "minimum", "mish", "mul", "nan_to_num",
    "ne", "neg", "pow", "reciprocal", "relu", "relu6", "remainder", "round", "rsqrt", "rsub", "selu", "sgn",
    "sigmoid", "sigmoid_backward", "sign", "silu", "silu_backward", "sin", "sinc", "sinh", "softplus", "softshrink",
    "sqrt", "square", "sub", "tan", "tanh", "tanh_backward", "threshold", "threshold_backward", "true_divide",
    "trunc", "where", "xlogy",
})

ATTENTION_IMPLEMENTATIONS = ("flash", "naive")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send")


def _matmul_dimensions_known(op: Any) -> str | None:
    if all(name in op.attrs for name in "mnk"):
        return None
    if len(op.inputs) >= 2:
        # The rule reads k and m from the first tensor's last dimensions and n from the second's: a
        # scalar (shape []) has none (an IndexError in the cost rule; fuzz finding, issue 38).
        if all(len(tensor.shape) >= 1 for tensor in op.inputs[:2]):
            return None
        return "a matmul op's two input tensors need at least one dimension each (the rule reads m, n and k from them)"
    return "a matmul op needs attributes m, n and k, or two input tensors to read them from"


def _causal_queries_fit(op: Any) -> str | None:
    """A causal attention's queries are the last ``seq_q`` of its ``seq_kv`` positions (the mask
    aligned to the bottom right, as FlashAttention and a prefill over a KV cache have it)."""
    seq_q, seq_kv = op.attrs.get("seq_q"), op.attrs.get("seq_kv")
    if op.attrs.get("causal") is not True or DIMENSION.problem(seq_q) or DIMENSION.problem(seq_kv):
        return None  # not causal, or the dimensions' own problems are reported by their attributes
    if np.any(np.asarray(seq_q, dtype=object) > np.asarray(seq_kv, dtype=object)):
        return (f"a causal attention's queries are the last seq_q of its seq_kv positions, so seq_q must be at most "
                f"seq_kv (got seq_q {_shown(seq_q)}, seq_kv {_shown(seq_kv)})")
    return None


def _shown(value: Any) -> str:
    return str(value) if np.ndim(value) == 0 else f"{np.min(value)}..{np.max(value)} (an array)"


MATMUL_ATTRIBUTES = {"m": DIMENSION, "n": DIMENSION, "k": DIMENSION, "batch": DIMENSION}

register(OpKind(name="matmul", engine="matrix", startup_latency=True, aten=frozenset(MATMUL_OPS),
                attributes=MATMUL_ATTRIBUTES, requirement=_matmul_dimensions_known,
                summary="batch x (m x k) @ (k x n): attributes m, n, k, or two input tensors"))
register(OpKind(name="conv", engine="matrix", startup_latency=True, aten=frozenset(CONV_OPS),
                attributes={"m": REQUIRED_DIMENSION, "n": REQUIRED_DIMENSION, "k": REQUIRED_DIMENSION,
                            "transposed": FLAG},
                summary="convolution as an implicit GEMM (m = batch x output positions, n = out channels, "
                        "k = in channels / groups x kernel)"))
register(OpKind(name="attention", engine="matrix", startup_latency=True, aten=frozenset(ATTENTION_OPS),
                attributes={"batch": REQUIRED_DIMENSION, "heads": REQUIRED_DIMENSION, "seq_q": REQUIRED_DIMENSION,
                            "seq_kv": REQUIRED_DIMENSION, "head_dim": REQUIRED_DIMENSION, "kv_heads": DIMENSION,
                            "window": DIMENSION, "chunked": FLAG, "causal": FLAG, "backward": FLAG,
                            "decode_kernel": FLAG,
                            "implementation": Attribute("text", choices=ATTENTION_IMPLEMENTATIONS)},
                requirement=_causal_queries_fit,
                summary="scaled dot-product attention (flash or naive; causal, grouped KV heads, sliding or chunked "
                        "window; backward: the gradient kernel; decode_kernel: a one-token prompt the engine's "
                        "generation kernel runs)"))
register(OpKind(name="elementwise", engine="vector", fusible=True, epilogue=True,
                aten=POINTWISE_OPS | RANDOM_ELEMENTWISE_OPS,
                attributes={"flops_per_element": FLOPS_PER_ELEMENT},
                summary="point-wise arithmetic, flops_per_element FLOPs per output element (default 1)"))
register(OpKind(name="reduction", engine="vector", fusible=True, startup_latency=True, aten=frozenset(REDUCTION_OPS),
                summary="a reduction (sum, mean, max, pooling): 1 FLOP per input element"))
register(OpKind(name="norm", engine="vector", fusible=True, startup_latency=True, aten=frozenset(NORM_OPS),
                attributes={"norm": TEXT, "flops_per_element": FLOPS_PER_ELEMENT},
                summary="layer/RMS/group/batch normalization (RMS 5, others 8 FLOPs per element)"))
register(OpKind(name="softmax", engine="vector", fusible=True, startup_latency=True, aten=frozenset(SOFTMAX_OPS),
                attributes={"flops_per_element": FLOPS_PER_ELEMENT},
                summary="softmax: 5 FLOPs per element"))
register(OpKind(name="embedding", engine="vector", aten=frozenset(GATHER_OPS),
                summary="a gather of table rows: no FLOPs, reads the rows and indices, writes the rows"))
register(OpKind(name="collective", engine="vector",
                attributes={"group_size": REQUIRED_DIMENSION, "bytes": NUMBER, "link": TEXT,
                            "collective": Attribute("text", choices=COLLECTIVES),
                            # where the group lies on a torus (costs.topology): chips between its members
                            # and the chips of the slice; by default the group is the whole slice
                            "stride": DIMENSION, "slice_chips": DIMENSION},
                summary="a collective over group_size chips on a link (ring/torus/switch aware)"))
register(OpKind(name="copy", engine="vector", fusible=True, aten=frozenset(COPY_OPS),
                summary="data movement (cat, clone, casts, padding): reads inputs, writes outputs, no FLOPs"))
register(OpKind(name="view", engine="vector",
                summary="an op that launches no kernel (view, reshape, transpose, slice): no FLOPs or bytes; eager "
                        "PyTorch still pays its host dispatch (scheduling host_op), compiled code none"))
register(OpKind(name="other", engine="vector",
                summary="anything without a rule: estimated from its tensors, 1 FLOP per output element"))
