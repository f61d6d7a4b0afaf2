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

torch is imported only here.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

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
    multiply-add; attention = its two matmuls, masks ignored), for cross-checking a capture."""
    total = 0.0
    for op in graph.ops:
        attrs = op.attrs
        if op.kind == "matmul":
            total += matmul_flops(attrs["m"], attrs["n"], attrs["k"], attrs.get("batch", 1)) * op.count
        elif op.kind == "conv":
            total += matmul_flops(attrs["m"], attrs["n"], attrs["k"]) * op.count
        elif op.kind == "attention":  # QK^T and PV: two (seq_q x head_dim x seq_kv) products per head
            total += 2 * matmul_flops(attrs["seq_q"], attrs["seq_kv"], attrs["head_dim"],
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
    the name. ``causal``: the attention's ``is_causal`` flag."""
    shapes = [tuple(int(dim) for dim in shape) for shape in input_shapes]
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


def aten_kind(name: str, pointwise: bool | None = None) -> str:
    """The op kind of an aten op from its name (see :func:`classify_aten` for ``pointwise``)."""
    for kind in OP_KIND_TABLE.values():  # the table's aten targets; point-wise ops by tag or name below
        if kind.name != "elementwise" and name in kind.aten:
            return kind.name
    if pointwise is None:
        pointwise = name in POINTWISE_OPS or name.rstrip("_") in POINTWISE_OPS
    return "elementwise" if pointwise or name in RANDOM_ELEMENTWISE_OPS else "other"


def aten_op(name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], *, op_name: str | None = None,
            pointwise: bool | None = None, transposed: bool | None = None, causal: bool = False) -> Op:
    """The IR op of one aten call (``name`` without the ``aten::`` prefix), priced by the same table as a
    capture (:func:`classify_aten`); an attention keeps only its first output, as in a capture."""
    kind, attrs = classify_aten(name, [tensor.shape for tensor in inputs], [tensor.shape for tensor in outputs],
                                pointwise=pointwise, transposed=transposed, causal=causal)
    if kind == "attention":
        outputs = tuple(outputs)[:1]
    return Op(name=op_name or name, kind=kind, inputs=tuple(inputs), outputs=tuple(outputs), attrs=attrs,
              provenance=f"aten.{name}")


def _classify(name: str, func, args, outputs) -> tuple[str, dict]:
    """Kind and canonical attributes of one dispatched aten op (see :func:`classify_aten`)."""
    import torch

    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    transposed = bool(args[6]) if name == "convolution" and len(args) > 6 else None
    causal = _causal_flag(func, args) if name in ATTENTION_OPS else False
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
        self.producer: dict[int, tuple[Any, str]] = {}  # id(tensor) -> (tensor kept alive, op name)
        self.names: Counter = Counter()
        self.unsupported: Counter = Counter()
        self.free = 0
        self.free_by_module: Counter[str] = Counter()
        self.suppress = 0

    def module_path(self) -> str:
        return self.module_stack[-1] if self.module_stack else ""

    def unique_name(self, short: str) -> str:
        base = f"{self.module_path()}.{short}" if self.module_path() else short
        self.names[base] += 1
        return base if self.names[base] == 1 else f"{base}_{self.names[base] - 1}"

    def producers_of(self, tensors) -> list[str]:
        found = []
        for tensor in tensors:
            entry = self.producer.get(id(tensor))
            if entry is not None and entry[0] is tensor and entry[1] not in found:
                found.append(entry[1])
        return found

    def link(self, outputs, name: str) -> None:
        for tensor in outputs:
            self.producer[id(tensor)] = (tensor, name)

    def record(self, short: str, kind: str, attrs: dict, inputs, outputs, provenance: str) -> str:
        name = self.unique_name(short)
        op = Op(name=name, kind=kind, inputs=tuple(_spec(t, self) for t in inputs),
                outputs=tuple(_spec(t, self) for t in outputs), attrs=attrs, provenance=provenance)
        self.ops.append(op)
        for producer in self.producers_of(inputs):
            self.edges.append((producer, name))
        self.link(outputs, name)
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
            result = func(*args, **kwargs)
            if recorder.suppress:
                return result
            name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
            # Empty tensors (an empty KV cache, say) move no bytes: leave them out.
            inputs = [t for t in _flatten_tensors(args) + _flatten_tensors(kwargs) if t.numel() > 0]
            outputs = [t for t in _flatten_tensors(result) if t.numel() > 0]
            if not outputs and not name.endswith("_"):
                return result
            if name in FREE_OPS or getattr(func, "is_view", False) or not inputs and name not in COPY_OPS:
                recorder.free += 1
                recorder.free_by_module[recorder.module_path()] += 1
                if inputs and getattr(inputs[0], "_perfmodel_weight", False):
                    for tensor in outputs:  # a transposed or reshaped weight is still a weight
                        tensor._perfmodel_weight = True
                producers = recorder.producers_of(inputs)
                if producers:
                    for tensor in outputs:
                        recorder.producer[id(tensor)] = (tensor, producers[0])
                return result
            kind, attrs = _classify(name, func, list(args), outputs)
            if kind == "attention":
                outputs = outputs[:1]  # the attention output; logsumexp and seeds are small bookkeeping
            if kind == "other":
                recorder.unsupported[f"aten.{name}"] += 1
            recorder.record(name, kind, attrs, inputs, outputs, provenance=f"aten.{name}")
            return result

    class FunctionRecorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is not torch.nn.functional.scaled_dot_product_attention or recorder.suppress:
                return func(*args, **kwargs)
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
            return result

    return DispatchRecorder(), FunctionRecorder()


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

    if not isinstance(module, torch.nn.Module):
        raise PerfmodelError(f"capture needs a torch.nn.Module, got {type(module).__name__}")
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    state = {}
    for key, tensor in [*module.named_parameters(), *module.named_buffers()]:
        fake = fake_mode.from_tensor(tensor)
        if isinstance(tensor, torch.nn.Parameter):
            fake._perfmodel_weight = True
        state[key] = fake
    # Inputs live where the parameters do (a module built on the meta device gets meta inputs).
    first = next(iter([*module.parameters(), *module.buffers()]), None)
    device = first.device if first is not None else "cpu"
    inputs = _parse_inputs(example_inputs, input_shapes, input_dtypes, fake_mode, device)
    recorder = _Recorder()
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
            hooks.append(submodule.register_forward_hook(leave))
    dispatch_mode, function_mode = _modes(recorder)
    # Fake-tensor kernels log a traceback before raising; the error is reported below instead.
    fake_logger = logging.getLogger("torch._subclasses.fake_tensor")
    previous_level = fake_logger.level
    fake_logger.setLevel(logging.CRITICAL)
    try:
        with fake_mode, function_mode, dispatch_mode, torch.no_grad():
            torch.func.functional_call(module, state, inputs, forward_kwargs or {})
    except PerfmodelError:
        raise
    except Exception as error:  # the module's own failure, reported as bad input
        raise PerfmodelError(_explain(error, recorder)) from None
    finally:
        fake_logger.setLevel(previous_level)
        for hook in hooks:
            hook.remove()
    if not recorder.ops:
        raise PerfmodelError("the forward pass recorded no ops (nothing to model)")
    graph = Graph(name=name or type(module).__name__, ops=recorder.ops, edges=_dedupe(recorder.edges))
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
    where = recorder.module_path() or "the top-level module"
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
