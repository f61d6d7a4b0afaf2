"""Capture any ``torch.nn.Module`` into a workload :class:`Graph` without running it (edge module).

The module's parameters and buffers become fake tensors (``FakeTensorMode``): no weight is
materialized, nothing runs on a device, nothing is downloaded. Build big models on the meta device
(``with torch.device("meta"): model = ...``); real modules work too, as their tensors are faked.

One forward pass under a ``TorchDispatchMode`` records every dispatch-level (aten) op with its
shapes and dtypes, the module it ran in (from forward hooks: ``layers.3.self_attn.q_proj``), and
producer->consumer edges (from tensor identity). Views (``view``, ``transpose``, ``expand``,
``slice``...) are free: no op, no launch, no bytes; their outputs stay linked to the producer of
their input. ``scaled_dot_product_attention`` is caught at the torch-function level, whichever
backend would run it, and recorded as one attention op. Ops without a rule are recorded as kind
``other`` and listed with their counts in ``CaptureResult.unsupported``.

:func:`capture_training` records a whole training step the same way: the forward, the loss, the
backward exactly as autograd runs it (its gradient kernels are priced as the forward op they
differentiate: ``BACKWARD_OF``) and an optimizer step run by ``torch.optim`` on the fake parameters.
Op names start with their phase (``TRAINING_PHASES``).

torch is imported only here.
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Sequence

from perfmodel.errors import PerfmodelError
from perfmodel.workload.ir import Graph, Op, TensorSpec
from perfmodel.workload.op_kinds import (
    ATTENTION_OPS,
    COPY_OPS,
    FLOPS_PER_ELEMENT_BY_FUNCTION,
    NORM_OPS,
    OP_KIND_TABLE,
    POINTWISE_OPS,
    RANDOM_ELEMENTWISE_OPS,
    matmul_flops,
)

TORCH_DTYPES = {
    "float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8", "int64": "int64", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8",
    "bool": "bool", "complex64": "complex64", "complex128": "complex128",
}
FREE_OPS = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice", "select", "unsqueeze",
            "squeeze", "as_strided", "detach", "alias", "lift_fresh", "unflatten", "flatten", "split", "split_with_sizes",
            "unbind", "chunk", "narrow", "view_as", "expand_as", "_reshape_alias", "numpy_T", "diagonal", "unfold",
            "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "scalar_tensor", "zeros",
            "ones", "full", "arange", "lift_fresh_copy", "_local_scalar_dense", "sym_size", "sym_stride", "dim",
            "resolve_conj", "resolve_neg", "_assert_tensor_metadata", "_assert_async", "set_", "resize_"}
# Gradient kernels autograd emits, each priced as the forward op whose kind it shares (the op table
# lists forward targets): a norm's or softmax's gradient is one more pass over the same tensors, a
# fused attention's is the attention gradient kernel (``backward``), an embedding's a scatter of the
# token gradients into the table, a pooling's a pass over its windows. Point-wise gradients
# (``threshold_backward``, ``silu_backward``...) carry torch's point-wise tag and need no entry.
ATTENTION_BACKWARD_OPS = {"_scaled_dot_product_flash_attention_backward",
                          "_scaled_dot_product_flash_attention_for_cpu_backward",
                          "_scaled_dot_product_efficient_attention_backward",
                          "_scaled_dot_product_cudnn_attention_backward",
                          "_scaled_dot_product_fused_attention_overrideable_backward", "_flash_attention_backward",
                          "_efficient_attention_backward"}
BACKWARD_OF = {
    **{name: "_scaled_dot_product_flash_attention" for name in ATTENTION_BACKWARD_OPS},
    "native_layer_norm_backward": "native_layer_norm", "native_group_norm_backward": "native_group_norm",
    "native_batch_norm_backward": "native_batch_norm", "_fused_rms_norm_backward": "_fused_rms_norm",
    "_softmax_backward_data": "_softmax", "_log_softmax_backward_data": "_log_softmax",
    # An embedding's gradient zeroes a table-sized gradient and scatter-adds the token rows into it: a
    # copy of the table's size (as training.backward prices it), not a gather.
    "embedding_dense_backward": "scatter", "embedding_backward": "scatter", "_embedding_bag_backward": "scatter",
    "max_pool2d_with_indices_backward": "max_pool2d_with_indices", "avg_pool2d_backward": "avg_pool2d",
    "_adaptive_avg_pool2d_backward": "_adaptive_avg_pool2d",
    # A view's gradient is the gradient copied into a zeroed tensor of the viewed tensor's size.
    **{f"{view}_backward": "constant_pad_nd" for view in ("slice", "select", "diagonal", "unfold")},
    # Cross-entropy's negative log-likelihood gathers one log-probability per row; its gradient
    # scatters them back into a zeroed tensor of the logits' size.
    "nll_loss_forward": "gather", "nll_loss2d_forward": "gather", "nll_loss_backward": "scatter",
    "nll_loss2d_backward": "scatter",
}
# A fused optimizer step (``torch.optim.AdamW(fused=True)``) is one point-wise pass over the
# parameters, their gradients and moments.
FUSED_OPTIMIZER_OPS = {"_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_"}
# The phases of a captured training step, each the first part of its ops' names: ``recompute`` is
# forward work that activation checkpointing (``torch.utils.checkpoint``) re-runs in the backward.
TRAINING_PHASES = ("forward", "backward", "recompute", "optimizer")
_MODULE_KEY = "perfmodel_module"  # autograd node metadata: the module path of the forward op it differentiates


@dataclass(frozen=True, kw_only=True)
class CaptureResult:
    graph: Graph
    unsupported: dict[str, int] = field(default_factory=dict)
    free_ops: int = 0
    free_by_module: dict[str, int] = field(default_factory=dict)  # free ops (views...) per module path


def torch_dtype_name(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in TORCH_DTYPES:
        raise PerfmodelError(f"tensor dtype {dtype} has no perfmodel equivalent")
    return TORCH_DTYPES[name]


def _prod(values) -> int:
    result = 1
    for value in values:
        result *= int(value)
    return result


def matmul_class_flops(graph: Graph) -> float:
    """FLOPs of matmul, conv and attention ops by ``torch.utils.flop_counter``'s convention (2 per
    multiply-add; attention = its two matmuls, its gradient five; masks ignored), for cross-checking a capture."""
    total = 0.0
    for op in graph.ops:
        attrs = op.attrs
        if op.kind == "matmul":
            total += matmul_flops(attrs["m"], attrs["n"], attrs["k"], attrs.get("batch", 1)) * op.count
        elif op.kind == "conv":
            total += matmul_flops(attrs["m"], attrs["n"], attrs["k"]) * op.count
        elif op.kind == "attention":  # QK^T and PV: two (seq_q x head_dim x seq_kv) products per head;
            # the gradient five (dV, dP, dQ, dK and the recomputed scores, as torch 2.13's counter has it)
            products = 5 if attrs.get("backward") else 2
            total += products * matmul_flops(attrs["seq_q"], attrs["seq_kv"], attrs["head_dim"],
                                             attrs["batch"] * attrs["heads"]) * op.count
    return total


def classify_aten(name: str, input_shapes: Sequence[Sequence[int]], output_shapes: Sequence[Sequence[int]] = (), *,
                  pointwise: bool | None = None, transposed: bool | None = None,
                  causal: bool = False) -> tuple[str, dict]:
    """Kind and canonical attributes of one aten op, from its name and shapes: the op table shared by
    :func:`capture` (shapes of real/fake tensors) and the calibration readers (``Input Dims`` of a
    profiler trace). Needs no torch.

    ``input_shapes``: the shapes of the op's top-level tensor arguments, in argument order (``addmm``:
    bias, a, b); ``output_shapes``: of its outputs (convolutions read their spatial size there).
    ``pointwise``: whether the op is point-wise (capture passes torch's ``Tag.pointwise``); ``None``
    looks the name up in :data:`POINTWISE_OPS`. ``transposed`` (convolutions): ``None`` guesses from
    the name. ``causal``: the attention's ``is_causal`` flag. A gradient kernel is priced as its
    forward op (:data:`BACKWARD_OF`); an attention gradient's first input is the output gradient."""
    shapes = [tuple(int(dim) for dim in shape) for shape in input_shapes]
    if name in ATTENTION_BACKWARD_OPS:
        return "attention", {**attention_attrs(shapes[1], shapes[2], causal), "backward": True}
    name, pointwise = _priced_as(name, pointwise)
    kind = aten_kind(name, pointwise)
    if kind == "matmul":
        a, b = (shapes[1], shapes[2]) if name in ("addmm", "baddbmm") else (shapes[0], shapes[1])
        batch = _prod(a[:-2]) if len(a) > 2 else 1
        if name == "linear":  # weight is (out_features, in_features)
            n = b[0] if len(b) > 1 else 1
        else:
            n = b[-1] if len(b) > 1 else 1
        return kind, {"m": a[-2] if len(a) > 1 else 1, "n": n, "k": a[-1], "batch": batch}
    if kind == "conv":
        x, w = shapes[0], shapes[1]
        transposed = "transpose" in name if transposed is None else transposed
        spatial = x[2:] if transposed else tuple(output_shapes[0])[2:]
        return kind, {"m": x[0] * _prod(spatial), "n": w[0], "k": _prod(w[1:]), "transposed": transposed}
    if kind == "attention":
        return kind, attention_attrs(shapes[0], shapes[1], causal)
    if kind == "norm":
        return kind, {"norm": NORM_OPS[name]}
    if kind == "elementwise":
        per_element = FLOPS_PER_ELEMENT_BY_FUNCTION.get(name.rstrip("_"))
        return kind, {} if per_element is None else {"flops_per_element": per_element}
    return kind, {}


def _priced_as(name: str, pointwise: bool | None) -> tuple[str, bool | None]:
    """The op-table name an aten op is priced as, and whether it is point-wise: a gradient kernel as
    its forward op; a foreach op (``_foreach_mul_``: one launch over a list of tensors) as its
    per-tensor op, point-wise by name since torch does not tag foreach ops; a fused optimizer step
    as point-wise."""
    if name.startswith("_foreach_"):
        return name.removeprefix("_foreach_"), None
    if name in FUSED_OPTIMIZER_OPS:
        return name, True
    return BACKWARD_OF.get(name, name), pointwise


def aten_kind(name: str, pointwise: bool | None = None) -> str:
    """The op kind of an aten op from its name (see :func:`classify_aten` for ``pointwise``)."""
    name, pointwise = _priced_as(name, pointwise)
    for kind in OP_KIND_TABLE.values():  # the table's aten targets; point-wise ops by tag or name below
        if kind.name != "elementwise" and name in kind.aten:
            return kind.name
    if pointwise is None:
        pointwise = name in POINTWISE_OPS or name.rstrip("_") in POINTWISE_OPS
    return "elementwise" if pointwise or name in RANDOM_ELEMENTWISE_OPS else "other"


def aten_op(name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], *, op_name: str | None = None,
            pointwise: bool | None = None, transposed: bool | None = None, causal: bool = False) -> Op:
    """The IR op of one aten call (``name`` without the ``aten::`` prefix), priced by the same table as a
    capture (:func:`classify_aten`); an attention keeps only its output (its gradient dQ, dK and dV),
    as in a capture."""
    kind, attrs = classify_aten(name, [tensor.shape for tensor in inputs], [tensor.shape for tensor in outputs],
                                pointwise=pointwise, transposed=transposed, causal=causal)
    if kind == "attention":
        outputs = _attention_outputs(attrs, outputs)
    return Op(name=op_name or name, kind=kind, inputs=tuple(inputs), outputs=tuple(outputs), attrs=attrs,
              provenance=f"aten.{name}")


def _attention_outputs(attrs, outputs) -> tuple:
    """An attention's output, or its gradient's dQ, dK and dV: logsumexp and seeds are small bookkeeping."""
    return tuple(outputs)[:3 if attrs.get("backward") else 1]


def _classify(name: str, func, args, outputs) -> tuple[str, dict]:
    """Kind and canonical attributes of one dispatched aten op (see :func:`classify_aten`)."""
    import torch

    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    transposed = bool(args[6]) if name == "convolution" and len(args) > 6 else None
    causal = _causal_flag(func, args) if name in ATTENTION_OPS or name in ATTENTION_BACKWARD_OPS else False
    return classify_aten(name, [tuple(t.shape) for t in tensors], [tuple(t.shape) for t in outputs],
                         pointwise=torch.Tag.pointwise in getattr(func, "tags", ()), transposed=transposed,
                         causal=causal)


def _causal_flag(func, args) -> bool:
    """The ``is_causal`` argument of an aten SDPA variant, found by name in its schema."""
    for index, argument in enumerate(func._schema.arguments):
        if argument.name == "is_causal" and index < len(args):
            return bool(args[index])
    return False


def attention_attrs(query, key, causal: bool) -> dict:
    """Attributes of an attention from the query and key shapes (tensors or shape tuples)."""
    query, key = tuple(getattr(query, "shape", query)), tuple(getattr(key, "shape", key))
    batch = _prod(query[:-3]) if len(query) > 3 else 1
    return {"batch": batch, "heads": int(query[-3]) if len(query) > 2 else 1,
            "kv_heads": int(key[-3]) if len(key) > 2 else 1, "seq_q": int(query[-2]),
            "seq_kv": int(key[-2]), "head_dim": int(query[-1]), "causal": causal,
            "implementation": "flash"}


class _Recorder:
    """Records ops; shared by the dispatch mode and the torch-function mode."""

    def __init__(self):
        self.module_stack: list[str] = []
        self.ops: list[Op] = []
        self.edges: list[tuple[str, str]] = []
        # id(tensor) -> (weak reference, op name): the reference tells a reused id from the tensor; a
        # strong one would keep every tensor alive and make autograd copy each gradient it could steal.
        self.producer: dict[int, tuple[Any, str]] = {}
        self.names: Counter = Counter()
        self.unsupported: Counter = Counter()
        self.free = 0
        self.free_by_module: Counter[str] = Counter()
        self.suppress = 0
        self.failed_in: str | None = None  # the module path where a dispatched op raised
        # Training capture: the phase being run, and for the optimizer the parameter that owns each
        # tensor it touches (the parameter, its gradient, its moments and what is computed from them).
        self.phase: str | None = None
        self.owner: dict[int, tuple[Any, str]] = {}

    def module_path(self) -> str:
        return self.module_stack[-1] if self.module_stack else ""

    def scope(self, inputs=()) -> str:
        """The name prefix of an op: its module path, led by its phase when a training step is captured.
        Backward ops take the module of the forward op they differentiate (autograd node metadata);
        a module running during the backward is a checkpoint's recompute; optimizer ops take the
        parameter they update."""
        if self.phase is None:
            return self.module_path()
        phase, path = self.phase, self.module_path()
        if phase == "backward":
            if self.module_stack:
                phase = "recompute"
            else:
                import torch

                node = torch._C._current_autograd_node()
                path = node.metadata.get(_MODULE_KEY, "") if node is not None else ""
        elif phase == "optimizer":
            owners = {self.owner[id(t)][1] for t in inputs if self.owner.get(id(t), (None,))[0] is t}
            path = owners.pop() if len(owners) == 1 else ""  # a foreach op updates many parameters
        return f"{phase}.{path}" if path else phase

    def own(self, tensors, path: str) -> None:
        for tensor in tensors:
            self.owner[id(tensor)] = (tensor, path)

    def tag_nodes(self, value) -> None:
        """Tag the autograd nodes a torch call created with the current module path, so that its
        backward ops are named after it: walks back from the outputs' nodes to nodes already tagged."""
        stack = [t.grad_fn for t in _flatten_tensors(value) if t.grad_fn is not None]
        path = self.module_path()
        while stack:
            node = stack.pop()
            if node is None or _MODULE_KEY in node.metadata:
                continue
            node.metadata[_MODULE_KEY] = path
            stack.extend(parent for parent, _ in node.next_functions)

    def unique_name(self, short: str, scope: str) -> str:
        base = f"{scope}.{short}" if scope else short
        self.names[base] += 1
        return base if self.names[base] == 1 else f"{base}_{self.names[base] - 1}"

    def producers_of(self, tensors) -> list[str]:
        found = []
        for tensor in tensors:
            entry = self.producer.get(id(tensor))
            if entry is not None and entry[0]() is tensor and entry[1] not in found:
                found.append(entry[1])
        return found

    def link(self, outputs, name: str) -> None:
        for tensor in outputs:
            self.producer[id(tensor)] = (weakref.ref(tensor), name)

    def record(self, short: str, kind: str, attrs: dict, inputs, outputs, provenance: str) -> str:
        scope = self.scope(inputs)
        name = self.unique_name(short, scope)
        op = Op(name=name, kind=kind, inputs=tuple(_spec(t, self) for t in inputs),
                outputs=tuple(_spec(t, self) for t in outputs), attrs=attrs, provenance=provenance)
        self.ops.append(op)
        for producer in self.producers_of(inputs):
            self.edges.append((producer, name))
        self.link(outputs, name)
        if self.phase == "optimizer" and scope != self.phase:
            self.own(outputs, scope.removeprefix("optimizer."))
        return name


def _spec(tensor, recorder: _Recorder) -> TensorSpec:
    role = "weight" if getattr(tensor, "_perfmodel_weight", False) else "activation"
    shape = tuple(int(dim) for dim in tensor.shape) or (1,)
    return TensorSpec(shape=shape, dtype=torch_dtype_name(tensor.dtype), role=role)


def _flatten_tensors(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in _flatten_tensors(item)]
    if isinstance(value, dict):
        return [tensor for item in value.values() for tensor in _flatten_tensors(item)]
    return []


def _modes(recorder: _Recorder):
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class DispatchRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                result = func(*args, **kwargs)
            except Exception:
                recorder.failed_in = recorder.failed_in or recorder.module_path()
                raise
            if recorder.suppress:
                return result
            name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
            # Empty tensors (an empty KV cache, say) move no bytes: leave them out.
            inputs = [t for t in _flatten_tensors(args) + _flatten_tensors(kwargs) if t.numel() > 0]
            # An in-place op that returns nothing (foreach, fused optimizers) writes its mutable arguments.
            outputs = [t for t in _flatten_tensors(result) or _written(func, args, kwargs) if t.numel() > 0]
            if not outputs:
                return result
            if name in FREE_OPS or getattr(func, "is_view", False) or not inputs and name not in COPY_OPS:
                recorder.free += 1
                recorder.free_by_module[recorder.scope(inputs)] += 1
                if inputs and getattr(inputs[0], "_perfmodel_weight", False):
                    for tensor in outputs:  # a transposed or reshaped weight is still a weight
                        tensor._perfmodel_weight = True
                producers = recorder.producers_of(inputs)
                if producers:
                    recorder.link(outputs, producers[0])
                return result
            if name == "convolution_backward":
                _record_convolution_backward(recorder, args, result)
                return result
            kind, attrs = _classify(name, func, list(args), outputs)
            short = name
            if kind == "attention":
                outputs = list(_attention_outputs(attrs, outputs))
                if attrs.get("backward"):  # named as its forward is, whichever backend's kernel runs it
                    short = "scaled_dot_product_attention_backward"
            if kind == "other":
                recorder.unsupported[f"aten.{name}"] += 1
            recorder.record(short, kind, attrs, inputs, outputs, provenance=f"aten.{name}")
            return result

    class FunctionRecorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is not torch.nn.functional.scaled_dot_product_attention or recorder.suppress:
                result = func(*args, **kwargs)
                if recorder.phase is not None:
                    recorder.tag_nodes(result)
                return result
            query, key, value = args[:3] if len(args) >= 3 else (kwargs["query"], kwargs["key"], kwargs["value"])
            recorder.suppress += 1
            try:
                result = func(*args, **kwargs)
            finally:
                recorder.suppress -= 1
            causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
            attrs = attention_attrs(query, key, causal)
            recorder.record("scaled_dot_product_attention", "attention", attrs, [query, key, value],
                            _flatten_tensors(result), provenance="aten.scaled_dot_product_attention")
            if recorder.phase is not None:
                recorder.tag_nodes(result)
            return result

    return DispatchRecorder(), FunctionRecorder()


def _written(func, args, kwargs) -> list:
    """The tensors an op writes in place: its arguments whose schema marks them mutable (``Tensor(a!)``)."""
    written = []
    for index, argument in enumerate(func._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            written += _flatten_tensors(args[index] if index < len(args) else kwargs.get(argument.name))
    return written


def _record_convolution_backward(recorder: _Recorder, args, result) -> None:
    """A convolution's gradient as the kernels that compute it: dgrad (input gradient) and wgrad
    (weight gradient), each a convolution as large as the forward, and the bias gradient, a sum."""
    grad_output, x, weight = args[0], args[1], args[2]
    transposed = bool(args[7]) if len(args) > 7 else False
    _, attrs = classify_aten("convolution", [x.shape, weight.shape], [grad_output.shape], transposed=transposed)
    grad_input, grad_weight, grad_bias = (tuple(result) + (None, None, None))[:3]
    for short, inputs, output in (("dgrad", [grad_output, weight], grad_input), ("wgrad", [grad_output, x], grad_weight)):
        if output is not None:
            recorder.record(f"convolution_backward.{short}", "conv", attrs, inputs, [output],
                            provenance="aten.convolution_backward")
    if grad_bias is not None:
        kind, bias_attrs = classify_aten("sum", [grad_output.shape], [grad_bias.shape])
        recorder.record("convolution_backward.bias", kind, bias_attrs, [grad_output], [grad_bias],
                        provenance="aten.convolution_backward")


def _parse_inputs(example_inputs, input_shapes, input_dtypes, fake_mode, device="cpu"):
    import torch

    if example_inputs is not None:
        inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        return tuple(fake_mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs)
    if not input_shapes:
        raise PerfmodelError("give example_inputs or input_shapes (for example [(1, 512)])")
    dtypes = list(input_dtypes or [])
    inputs = []
    with fake_mode:
        for index, shape in enumerate(input_shapes):
            if not shape or any(int(dim) <= 0 for dim in shape):
                raise PerfmodelError(f"input shape {tuple(shape)} must have positive dimensions, e.g. 1x512")
            dtype = dtypes[index] if index < len(dtypes) else torch.float32
            if dtype in (torch.int64, torch.int32, torch.long, torch.int):
                inputs.append(torch.zeros(tuple(int(d) for d in shape), dtype=dtype, device=device))
            else:
                inputs.append(torch.empty(tuple(int(d) for d in shape), dtype=dtype, device=device))
    return tuple(inputs)


def capture(module, example_inputs=None, *, input_shapes: Sequence[Sequence[int]] | None = None,
            input_dtypes: Sequence[Any] | None = None, name: str | None = None,
            forward_kwargs: dict | None = None) -> CaptureResult:
    """Capture ``module``'s forward pass on fake tensors into a :class:`Graph`.

    ``example_inputs``: tensors (real, meta or fake) or a tuple of them; or ``input_shapes`` (and
    ``input_dtypes``, torch dtypes, default float32) to make fake inputs.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    _require_module(module, "capture")
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    state = _fake_state(module, fake_mode)
    # Inputs live where the parameters do (a module built on the meta device gets meta inputs).
    first = next(iter(state.values()), None)
    device = first.device if first is not None else "cpu"
    inputs = _parse_inputs(example_inputs, input_shapes, input_dtypes, fake_mode, device)
    recorder = _Recorder()
    dispatch_mode, function_mode = _modes(recorder)
    with _recording(module, recorder), fake_mode, function_mode, dispatch_mode, torch.no_grad():
        torch.func.functional_call(module, state, inputs, forward_kwargs or {})
    if not recorder.ops:
        raise PerfmodelError("the forward pass recorded no ops (nothing to model)")
    return _result(recorder, name or type(module).__name__)


def capture_training(module, example_inputs=None, *, input_shapes: Sequence[Sequence[int]] | None = None,
                     input_dtypes: Sequence[Any] | None = None, name: str | None = None,
                     forward_kwargs: dict | None = None, loss_fn: Callable[[Any], Any] | None = None,
                     optimizer: str | Callable[[list], Any] | None = "adamw",
                     master_dtype: Any = None) -> CaptureResult:
    """Capture one training step of ``module`` on fake tensors: the forward, the loss, the backward
    autograd runs for it and an optimizer step, as one :class:`Graph` (inputs as for :func:`capture`).

    Op names start with their phase (:data:`TRAINING_PHASES`): ``forward.model.layers.0.mlp.up_proj.mm``,
    ``backward.model.layers.0.mlp.up_proj.mm`` (its gradients, named after the forward op's module),
    ``recompute.`` (a checkpointed module's forward run again in the backward) and
    ``optimizer.model.layers.0.mlp.up_proj.weight.lerp_`` (the update of that parameter).

    ``loss_fn(output)``: the loss to differentiate (default: the sum of the output's first
    floating-point tensor, e.g. the logits, whose gradient is a broadcast and adds no kernel).
    ``optimizer``: 'adamw' (``torch.optim.AdamW(foreach=False)``: one kernel per parameter and
    update step, as eager PyTorch runs it without foreach), a callable making a ``torch.optim``
    optimizer from a list of parameters (``lambda ps: torch.optim.AdamW(ps, foreach=True)``), or
    None for no step. The step recorded is a steady one: the optimizer's first step, which creates
    its state, runs unrecorded before it. ``master_dtype`` (e.g. ``torch.float32`` for a bf16
    model): the optimizer updates master copies of that dtype, so the step casts each gradient up
    and copies each master back into its parameter, as mixed-precision training does.

    The module runs in training mode (dropout active, checkpointing on); each submodule's mode is
    restored afterwards. Parameters on the meta device are faked on the CPU, whose fused attention
    has a fused gradient kernel as accelerators' do (the meta device has only the math fallback).
    Not modeled: gradient scaling, clipping and zeroing, gradient accumulation over micro-batches,
    autocast, and communication (data-parallel all-reduce). AdamW's step counter is a one-element
    op per parameter (on an accelerator, a host-side scalar).
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    _require_module(module, "capture_training")
    if optimizer == "adamw":
        make_optimizer: Callable[[list], Any] | None = partial(torch.optim.AdamW, foreach=False)
    elif optimizer is None or callable(optimizer):
        make_optimizer = optimizer
    else:
        raise PerfmodelError(f"optimizer must be 'adamw', None or a callable making a torch.optim optimizer from "
                             f"a list of parameters, got {optimizer!r}")
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    state = _fake_state(module, fake_mode, meta_to="cpu")
    trained = {key: state[key] for key, parameter in module.named_parameters() if parameter.requires_grad}
    if not trained:
        raise PerfmodelError(f"no parameter of {type(module).__name__} requires grad: there is nothing to train")
    for parameter in trained.values():
        parameter.grad = None  # a fake copy carries the real gradient along; a step starts from none
    first = next(iter(state.values()))
    inputs = _parse_inputs(example_inputs, input_shapes, input_dtypes, fake_mode, first.device)
    recorder = _Recorder()
    dispatch_mode, function_mode = _modes(recorder)

    def loss_and_backward(output) -> None:
        recorder.module_stack.append("loss")
        loss = (loss_fn or _default_loss)(output)
        recorder.module_stack.pop()
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or loss.grad_fn is None:
            raise PerfmodelError("the loss must be a one-element tensor computed from the module's output, got "
                                 f"{type(loss).__name__}{list(loss.shape) if isinstance(loss, torch.Tensor) else ''}")
        recorder.phase = "backward"
        loss.backward()

    class TrainingStep(torch.nn.Module):
        """The forward, the loss and the backward, all inside ``functional_call``: a checkpoint
        recomputes its forward during the backward, which must see the fake parameters too."""

        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            loss_and_backward(self.module(*args, **kwargs))

    modes = {submodule: submodule.training for submodule in module.modules()}
    module.train()
    try:
        # always_call: a checkpoint that stops its recompute early raises through the module's forward.
        with _recording(module, recorder, always_call=True), fake_mode, function_mode, dispatch_mode, \
                torch.enable_grad():
            recorder.phase = "forward"
            torch.func.functional_call(TrainingStep(), {f"module.{key}": tensor for key, tensor in state.items()},
                                       inputs, forward_kwargs or {})
            if make_optimizer is not None:
                _optimizer_step(recorder, trained, make_optimizer, master_dtype, fake_mode)
    finally:
        for submodule, training in modes.items():
            submodule.training = training
    return _result(recorder, name or type(module).__name__)


def _default_loss(output):
    """The sum of the output's first floating-point tensor that needs a gradient."""
    for tensor in _flatten_tensors(output):
        if tensor.is_floating_point() and tensor.requires_grad:
            return tensor.sum()
    raise PerfmodelError("the module's output has no floating-point tensor that needs a gradient: pass loss_fn")


def _optimizer_step(recorder: _Recorder, params: dict, make_optimizer, master_dtype, fake_mode) -> None:
    """Record a steady optimizer step over ``params`` (name -> fake parameter with its gradient)."""
    import torch

    params = {key: param for key, param in params.items() if param.grad is not None}  # unused ones get none
    for key, param in params.items():
        recorder.own([param, param.grad], key)
    updated = list(params.values())
    if master_dtype is not None:
        with fake_mode:
            updated = [torch.empty_like(param, dtype=master_dtype) for param in params.values()]
        for key, master in zip(params, updated, strict=True):
            master._perfmodel_weight = True
            recorder.own([master], key)
    try:
        optim = make_optimizer(updated)
    except Exception as error:
        raise PerfmodelError(f"the optimizer could not be made: {type(error).__name__}: {error}") from None

    def step():
        if master_dtype is not None:
            for param, master in zip(params.values(), updated, strict=True):
                master.grad = param.grad.to(master_dtype)
        optim.step()
        if master_dtype is not None:
            with torch.no_grad():
                for param, master in zip(params.values(), updated, strict=True):
                    param.copy_(master)

    recorder.suppress += 1  # the first step creates the moments: not what every later step runs
    try:
        step()
    finally:
        recorder.suppress -= 1
    for key, tensor in zip(params, updated, strict=True):
        states = _flatten_tensors(dict(optim.state.get(tensor, {})))
        for moment in states:  # optimizer state lives with the weights
            moment._perfmodel_weight = True
        recorder.own(states, key)
    recorder.phase = "optimizer"
    step()


def _require_module(module, function: str) -> None:
    import torch

    if not isinstance(module, torch.nn.Module):
        raise PerfmodelError(f"{function} needs a torch.nn.Module, got {type(module).__name__}")


def _fake_state(module, fake_mode, meta_to: str | None = None) -> dict:
    """Fake copies of the module's parameters (marked as weights) and buffers; ``meta_to``: the
    device meta tensors are faked on."""
    import torch

    state = {}
    for key, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if meta_to is not None and tensor.device.type == "meta":
            with fake_mode:
                fake = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=meta_to)
            fake.requires_grad_(tensor.requires_grad)
        else:
            fake = fake_mode.from_tensor(tensor)
        if isinstance(tensor, torch.nn.Parameter):
            fake._perfmodel_weight = True
        state[key] = fake
    return state


@contextmanager
def _recording(module, recorder: _Recorder, always_call: bool = False):
    """Name ops after the module running them (forward hooks) while capturing; a failure of the
    module is reported as bad input."""
    def enter(path):
        def hook(_module, _args):
            recorder.module_stack.append(path)  # a hook's return value would replace the inputs: return None
        return hook

    def leave(_module, _args, _output):
        recorder.module_stack.pop()  # returning anything would replace the module's output

    hooks = []
    for module_name, submodule in module.named_modules():
        if module_name:
            hooks.append(submodule.register_forward_pre_hook(enter(module_name)))
            hooks.append(submodule.register_forward_hook(leave, always_call=always_call))
    # Fake-tensor kernels log a traceback before raising; the error is reported below instead.
    fake_logger = logging.getLogger("torch._subclasses.fake_tensor")
    previous_level = fake_logger.level
    fake_logger.setLevel(logging.CRITICAL)
    try:
        yield
    except PerfmodelError:
        raise
    except Exception as error:  # the module's own failure, reported as bad input
        raise PerfmodelError(_explain(error, recorder)) from None
    finally:
        fake_logger.setLevel(previous_level)
        for hook in hooks:
            hook.remove()


def _result(recorder: _Recorder, name: str) -> CaptureResult:
    graph = Graph(name=name, ops=recorder.ops, edges=_dedupe(recorder.edges))
    return CaptureResult(graph=graph, unsupported=dict(recorder.unsupported), free_ops=recorder.free,
                         free_by_module=dict(recorder.free_by_module))


def _dedupe(edges):
    seen, result = set(), []
    for edge in edges:
        if edge not in seen and edge[0] != edge[1]:
            seen.add(edge)
            result.append(edge)
    return result


def _explain(error: Exception, recorder: _Recorder) -> str:
    where = recorder.failed_in or recorder.module_path() or "the top-level module"
    text = f"{type(error).__name__}: {error}".strip()
    first_line = text.splitlines()[0][:300]
    data_dependent = ("DataDependent" in type(error).__name__ or "data-dependent" in text.lower()
                      or "data dependent" in text.lower() or "_local_scalar_dense" in text or "item()" in text)
    if data_dependent:
        return (f"the forward pass of {where} depends on tensor values (data-dependent control flow or .item()), "
                f"which a capture without data cannot follow: {first_line}. Make the branch depend on shapes or "
                "pass the value as a Python argument.")
    if isinstance(error, RuntimeError) and any(word in text for word in ("shape", "size", "mat1", "dim")):
        return f"the input shapes do not fit {where}: {first_line}. Check --input-shape against the model's inputs."
    return f"the module raised while capturing (in {where}): {first_line}"
