"""The shape route: rebuild one aten op of a profiler trace (or a generic CSV row) from its name and
recorded shapes into the workload IR, with the capture's own op table
(:func:`perfmodel.workload.capture.aten_op`), so that a measured op is priced exactly as a captured one.

A trace recorded with ``record_shapes=True`` gives, per ``cpu_op`` event, one entry per argument:
``Input Dims`` (a shape for a tensor, ``[]`` otherwise, a list of shapes for a tensor list), ``Input
type`` (the C++ dtype name of a tensor: ``float``, ``c10::BFloat16``...; ``Scalar``, ``ScalarList``,
``TensorList`` or ``""`` otherwise) and, in newer torch, ``Concrete Inputs`` (the values of scalar
arguments as strings: ``"-1"``, ``"[2, 2]"``, ``"False"``). Output shapes are not recorded: they are
inferred here from the inputs and the scalar arguments (reduced dims, convolution stride and padding).

Conventions:
* Tensors are activations, except the arguments an ``nn.Module`` would hold as parameters
  (:data:`WEIGHT_ARGUMENTS`: a linear's or convolution's weight and bias, a norm's affine
  parameters, an embedding table), which a capture marks as weights too.
* Empty tensors (a zero dimension) move nothing and are left out, as in a capture; a 0-d tensor is
  one element.
* An op that the table cannot price raises :class:`NotMapped` with the reason (a view, which the model
  treats as free; an op without a rule; an output shape that cannot be inferred); a malformed
  argument raises :class:`ShapeError` naming the field.
"""

from __future__ import annotations

import ast
import math
from typing import Sequence

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.workload import capture as table
from perfmodel.workload.ir import Op, TensorSpec

# C++ dtype names in ``Input type`` -> perfmodel dtypes.
TRACE_DTYPES = {
    "float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16", "long int": "int64",
    "long": "int64", "int64_t": "int64", "int": "int32", "short int": "int16", "short": "int16", "signed char": "int8",
    "unsigned char": "uint8", "bool": "bool", "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
}
# The same dtypes by the names a generic CSV may use.
DTYPE_ALIASES = {**{name: name for name in ("fp64", "fp32", "bf16", "fp16", "fp8", "int64", "int32", "int16", "int8",
                                            "uint8", "bool")},
                 **{f"torch.{name}": dtype for name, dtype in table.TORCH_DTYPES.items()}, **table.TORCH_DTYPES,
                 **TRACE_DTYPES}
TENSOR_LIST = "TensorList"
# Tensor arguments (positions among the tensor arguments) that an nn.Module holds as parameters.
WEIGHT_ARGUMENTS = {
    **{name: (1, 2) for name in ("linear", "conv1d", "conv2d", "conv3d", "convolution", "_convolution",
                                 "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "mkldnn_convolution",
                                 "cudnn_convolution")},
    **{name: (1, 2) for name in ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "batch_norm",
                                 "native_batch_norm", "_native_batch_norm_legit_no_training", "rms_norm",
                                 "_fused_rms_norm", "instance_norm")},
    "embedding": (0,), "embedding_bag": (0,), "_embedding_bag": (0,),
}
# Convolution argument positions: (stride, padding, dilation, transposed, output_padding, groups).
CONV_ARGUMENTS = {
    **{f"conv{n}d": (3, 4, 5, None, None, 6) for n in (1, 2, 3)},
    "convolution": (3, 4, 5, 6, 7, 8), "_convolution": (3, 4, 5, 6, 7, 8),
    **{f"conv_transpose{n}d": (3, 4, 7, None, 5, 6) for n in (1, 2, 3)},
    "mkldnn_convolution": (4, 3, 5, None, None, 6),
    "cudnn_convolution": (3, 2, 4, None, None, 5),
}
# Reductions: (position of the reduced dims, position of keepdim); None: over everything.
REDUCTION_ARGUMENTS = {
    **{name: (1, 2) for name in ("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "logsumexp",
                                 "any", "all", "mean_dim")},
    **{name: (1, 3) for name in ("var", "std", "var_mean", "std_mean")},
    "norm": (2, 3), "linalg_vector_norm": (2, 3),
}
SAME_SHAPE_REDUCTIONS = {"cumsum", "cumprod"}
# Pooling: (kernel, stride, padding, dilation, ceil_mode) positions; adaptive pools take an output size.
POOL_ARGUMENTS = {
    "max_pool1d": (1, 2, 3, 4, 5), "max_pool2d": (1, 2, 3, 4, 5), "max_pool2d_with_indices": (1, 2, 3, 4, 5),
    "avg_pool1d": (1, 2, 3, None, 4), "avg_pool2d": (1, 2, 3, None, 4),
}
ADAPTIVE_POOLS = {"adaptive_avg_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d"}
# The causal flag's position in each scaled-dot-product-attention signature.
CAUSAL_ARGUMENT = {"scaled_dot_product_attention": 5, "_scaled_dot_product_flash_attention": 4,
                   "_scaled_dot_product_flash_attention_for_cpu": 4, "_scaled_dot_product_efficient_attention": 6,
                   "_scaled_dot_product_cudnn_attention": 6}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "logical_and", "logical_or",
               "logical_not", "logical_xor", "signbit"}
INDEX_OUTPUTS = {"argmax": "int64", "argmin": "int64"}


class NotMapped(Exception):
    """The op is real but no model op describes it; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ShapeError(PerfmodelError):
    """A malformed shape argument; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def short_name(name: str) -> str:
    """``aten::addmm`` -> ``addmm``; a name in another namespace keeps it (``mylib::op``)."""
    return name.removeprefix("aten::").removeprefix("aten.")


def concrete_value(text):
    """A ``Concrete Inputs`` string as a Python value: ints, floats, bools, lists; None when empty."""
    if not isinstance(text, str):
        return text
    text = text.strip()
    if text in ("", "None"):
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a string argument ("same", "valid", "tanh")


def _shape(value, field: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(dim, int) and not isinstance(dim, bool)
                                                       for dim in value):
        raise ShapeError(field, f"expected a shape (a list of whole numbers), got {value!r}")
    if any(dim < 0 for dim in value):
        raise ShapeError(field, f"a dimension is negative: {value!r}")
    return tuple(value)


def _dtype(type_name: str) -> str:
    if type_name not in DTYPE_ALIASES:
        raise NotMapped(f"tensor dtype {type_name!r} has no perfmodel equivalent")
    return DTYPE_ALIASES[type_name]


def _tensor(shape: tuple[int, ...], dtype: str, role: str = "activation") -> TensorSpec:
    return TensorSpec(shape=shape or (1,), dtype=dtype, role=role)


def _ints(value, what: str, length: int | None = None) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * (length or 1)
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, int) for item in value):
        raise NotMapped(f"{what} not recorded (run the profiler with record_shapes=True on torch >= 2.1)")
    if length is not None and len(value) == 1 and length > 1:
        value = tuple(value) * length
    return tuple(value)


def _reduced_shape(shape: tuple[int, ...], dims, keepdim: bool) -> tuple[int, ...]:
    if dims is None or dims == [] or dims == ():
        return (1,) * len(shape) if keepdim else ()
    dims = {dim % len(shape) for dim in _ints(dims, "the reduced dims")} if shape else set()
    return tuple(1 if index in dims else size for index, size in enumerate(shape) if keepdim or index not in dims)


def _conv_output(name, x, w, concrete) -> tuple[tuple[int, ...], bool]:
    stride_at, padding_at, dilation_at, transposed_at, output_padding_at, groups_at = CONV_ARGUMENTS[name]
    spatial = len(x) - 2
    transposed = "transpose" in name if transposed_at is None else bool(concrete[transposed_at])
    stride = _ints(concrete[stride_at], "the convolution's stride", spatial)
    dilation = _ints(concrete[dilation_at], "the convolution's dilation", spatial)
    padding_value = concrete[padding_at]
    groups = concrete[groups_at] if isinstance(concrete[groups_at], int) else 1
    if padding_value == "same":
        return (x[0], w[0], *x[2:]), transposed
    padding = (0,) * spatial if padding_value == "valid" else _ints(padding_value, "the convolution's padding", spatial)
    if transposed:
        output_padding = (_ints(concrete[output_padding_at], "the output padding", spatial)
                          if output_padding_at is not None else (0,) * spatial)
        sizes = [(size - 1) * s - 2 * p + d * (k - 1) + op + 1
                 for size, s, p, d, k, op in zip(x[2:], stride, padding, dilation, w[2:], output_padding, strict=True)]
        return (x[0], w[1] * groups, *sizes), transposed
    sizes = [(size + 2 * p - d * (k - 1) - 1) // s + 1
             for size, s, p, d, k in zip(x[2:], stride, padding, dilation, w[2:], strict=True)]
    return (x[0], w[0], *sizes), transposed


def _pool_output(name, x, concrete) -> tuple[int, ...]:
    if name in ADAPTIVE_POOLS:
        size = _ints(concrete[1], "the pool's output size")
        return (*x[:len(x) - len(size)], *size)
    kernel_at, stride_at, padding_at, dilation_at, ceil_at = POOL_ARGUMENTS[name]
    spatial = 1 if "1d" in name else 2
    kernel = _ints(concrete[kernel_at], "the pool's kernel size", spatial)
    stride = _ints(concrete[stride_at], "the pool's stride", spatial) if concrete[stride_at] not in ([], None) else kernel
    padding = _ints(concrete[padding_at], "the pool's padding", spatial)
    dilation = _ints(concrete[dilation_at], "the pool's dilation", spatial) if dilation_at is not None else (1,) * spatial
    rounding = math.ceil if concrete[ceil_at] is True else math.floor
    sizes = [int(rounding((size + 2 * p - d * (k - 1) - 1) / s)) + 1
             for size, k, s, p, d in zip(x[-spatial:], kernel, stride, padding, dilation, strict=True)]
    return (*x[:-spatial], *sizes)


def _copy_output(name, shapes, lists, concrete) -> tuple[int, ...]:
    if name in ("cat", "stack"):
        members = lists[0] if lists else []
        if not members:
            raise NotMapped("the tensor list of cat/stack was not recorded")
        dim = concrete[1] if len(concrete) > 1 and isinstance(concrete[1], int) else 0
        first = members[0]
        if name == "stack":
            dim %= len(first) + 1
            return (*first[:dim], len(members), *first[dim:])
        dim %= len(first)
        return (*first[:dim], sum(member[dim] for member in members), *first[dim + 1:])
    if name in ("constant_pad_nd", "pad", "reflection_pad2d", "replication_pad2d"):
        pad = _ints(concrete[1], "the padding")
        out = list(shapes[0])
        for index in range(len(pad) // 2):
            out[-1 - index] += pad[2 * index] + pad[2 * index + 1]
        return tuple(out)
    if name == "repeat":
        repeats = _ints(concrete[1], "the repeats")
        base = (1,) * (len(repeats) - len(shapes[0])) + tuple(shapes[0])
        return tuple(size * times for size, times in zip(base, repeats, strict=True))
    if name in ("new_ones", "new_zeros"):
        return _ints(concrete[1], "the new tensor's size")
    if name == "upsample_nearest2d":
        size = _ints(concrete[1], "the output size")
        return (*shapes[0][:-2], *size)
    if not shapes:
        raise NotMapped(f"no tensor argument recorded for {name}")
    return shapes[0]


def _matmul_output(name, shapes) -> tuple[int, ...]:
    a, b = (shapes[1], shapes[2]) if name in ("addmm", "baddbmm") else (shapes[0], shapes[1])
    if name == "linear":
        return (*a[:-1], b[0])
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return (*b[:-2], b[-1])
    batch = np.broadcast_shapes(a[:-2], b[:-2])
    return (*batch, a[-2], b[-1])


def _output_shape(name: str, kind: str, shapes, lists, concrete) -> tuple[tuple[int, ...], dict]:
    """The main output's shape and the classification options it implies."""
    options: dict = {}
    if kind == "matmul":
        return _matmul_output(name, shapes), options
    if kind == "conv":
        if name not in CONV_ARGUMENTS:
            raise NotMapped(f"no argument table for convolution variant {name}")
        shape, options["transposed"] = _conv_output(name, shapes[0], shapes[1], concrete)
        return shape, options
    if kind == "attention":
        if name in CAUSAL_ARGUMENT and len(concrete) > CAUSAL_ARGUMENT[name]:
            options["causal"] = concrete[CAUSAL_ARGUMENT[name]] is True
        return (*shapes[0][:-1], shapes[2][-1] if len(shapes) > 2 else shapes[0][-1]), options
    if kind in ("softmax", "norm"):
        return shapes[0], options
    if kind == "reduction":
        if name in SAME_SHAPE_REDUCTIONS:
            return shapes[0], options
        if name in POOL_ARGUMENTS or name in ADAPTIVE_POOLS:
            return _pool_output(name, shapes[0], concrete), options
        if name not in REDUCTION_ARGUMENTS:
            raise NotMapped(f"no argument table for reduction {name}")
        dims_at, keep_at = REDUCTION_ARGUMENTS[name]
        dims = concrete[dims_at] if len(concrete) > dims_at else None
        keepdim = len(concrete) > keep_at and concrete[keep_at] is True
        return _reduced_shape(shapes[0], dims, keepdim), options
    if kind == "embedding":
        if name == "embedding":
            return (*shapes[1], shapes[0][-1]), options
        if name == "index_select":
            dim = concrete[1] % len(shapes[0])
            out = list(shapes[0])
            out[dim] = math.prod(shapes[1])
            return tuple(out), options
        if name in ("gather", "take"):
            return shapes[-1], options
        raise NotMapped(f"the output shape of {name} depends on the index values")
    if kind == "copy":
        return _copy_output(name, shapes, lists, concrete), options
    if kind == "elementwise":
        try:
            return tuple(np.broadcast_shapes(*shapes)), options
        except ValueError:
            raise NotMapped(f"the input shapes {list(shapes)} do not broadcast") from None
    raise NotMapped("no rule in the op table")


def trace_op(name: str, input_dims: Sequence, input_types: Sequence, concrete_inputs: Sequence | None = None, *,
             op_name: str | None = None, list_dtype: str | None = None) -> Op:
    """The IR op of one recorded aten call; raises :class:`NotMapped` or :class:`ShapeError`.

    torch.profiler records a tensor list (``aten::cat``'s inputs) as ``TensorList`` without a dtype; when no
    other argument of the call names one, ``list_dtype`` (a perfmodel dtype name, e.g. ``"fp32"``: the
    caller's statement of the model's dtype) prices it, else the call is not mapped."""
    short = short_name(name)
    if "::" in short:
        raise NotMapped(f"not an aten op ({name})")
    if short in table.FREE_OPS or short.rstrip("_") in table.FREE_OPS:
        raise NotMapped("a view or allocation (free in the model)")
    if not isinstance(input_dims, (list, tuple)):
        raise ShapeError("Input Dims", f"expected a list (one entry per argument), got {input_dims!r}")
    types = list(input_types or [])
    if len(types) != len(input_dims):
        raise ShapeError("Input type", f"{len(types)} types for {len(input_dims)} arguments in Input Dims")
    concrete = [concrete_value(value) for value in (concrete_inputs or [])]
    concrete += [None] * (len(input_dims) - len(concrete))
    inputs: list[TensorSpec] = []
    shapes: list[tuple[int, ...]] = []
    lists: list[list[tuple[int, ...]]] = []
    weights = WEIGHT_ARGUMENTS.get(short, ())
    for position, (dims, type_name) in enumerate(zip(input_dims, types, strict=True)):
        field = f"Input Dims[{position}]"
        if type_name == TENSOR_LIST:
            members = [_shape(member, field) for member in (dims or [])]
            lists.append(members)
            dtype = next((TRACE_DTYPES.get(other) for other in types if other in TRACE_DTYPES), list_dtype)
            if members and dtype is None:
                raise NotMapped("the dtype of a tensor list is not recorded (read_trace_ops: pass list_dtype)")
            inputs.extend(_tensor(member, dtype) for member in members if all(member))
            continue
        if type_name not in DTYPE_ALIASES:
            if dims not in ([], None, ()) and type_name not in ("Scalar", "ScalarList", "", "GenericList"):
                _dtype(type_name)  # a tensor of a dtype perfmodel lacks
            continue
        shape = _shape(dims, field)
        shapes.append(shape)
        if all(shape):
            role = "weight" if len(shapes) - 1 in weights else "activation"
            inputs.append(_tensor(shape, _dtype(type_name), role))
    kind = table.aten_kind(short)
    if kind == "other":
        raise NotMapped("no rule in the op table")
    if kind in ("matmul", "conv", "attention") and (len(shapes) < (3 if short in ("addmm", "baddbmm") else 2)
                                                    or not all(all(shape) for shape in shapes)):
        raise NotMapped(f"{short} needs its operand shapes (got {list(shapes)})")
    try:
        out_shape, options = _output_shape(short, kind, shapes, lists, concrete)
    except (IndexError, TypeError, ZeroDivisionError) as error:
        raise NotMapped(f"the output shape cannot be inferred from the recorded arguments ({error})") from None
    if not all(out_shape):
        raise NotMapped("an empty output (moves nothing)")
    dtype = inputs[0].dtype if inputs else "fp32"
    out_dtype = "bool" if short.rstrip("_") in COMPARISONS else INDEX_OUTPUTS.get(short, dtype)
    outputs = [_tensor(tuple(int(dim) for dim in out_shape), out_dtype)]
    if not inputs:
        raise NotMapped("no tensor inputs recorded")
    return table.aten_op(short, inputs, outputs, op_name=op_name or short, **options)


def shape_components(records, hardware, mode: str | None = None):
    """The fit's components of records that carry graphs (:func:`calibration.fit.components`), with no
    launch cost charged to device-timed records: a kernel's time on the device does not contain the
    host's dispatch of it (``MeasurementRecord.clock``)."""
    from dataclasses import replace

    from calibration.fit import components

    parts = components(records, hardware, mode)
    device_timed = np.asarray([records[owner].clock == "device" for owner in parts.record_of_op], dtype=bool)
    if not device_timed.any():
        return parts
    scheduling = np.array(parts.scheduling_s, dtype=float, copy=True)
    scheduling[device_timed] = 0.0
    return replace(parts, scheduling_s=scheduling)
