"""The backward pass and the recomputation of any forward graph, op by op (pure core).

One rule per op kind, applied to a forward :class:`Graph` in reverse order:

* matmul ``Y[m,n] = X[m,k] W[k,n]``: two matmuls of the same FLOPs, ``dX = dY W^T`` (m x k x n,
  "dgrad") and ``dW = X^T dY`` (k x n x m, "wgrad"); the backward is twice the forward. Where ``X``
  is a routing mask (``first_operand_is_mask``: a token-dropping MoE's boolean dispatch mask), only
  ``dW`` is computed.
* attention: one gradient kernel (the op with ``backward``; priced by the attention rule). A kernel that
  writes one partial dQ per key block (``backward_dq_partials``: the number of key blocks; splash attention's
  fused backward, ``use_fused_bwd_kernel``, whose output is ``(kv_seq_len // block_kv, *q.shape)``) is
  followed by the sum of those partials (``dq_unreduced.sum(axis=0)``, an XLA reduction that reads them all).
* collectives: the conjugate collective (an all-reduce's is an all-reduce, as Megatron's f/g pair;
  all-gather <-> reduce-scatter; all-to-all and send are their own).
* everything else (norms, point-wise ops, softmax, reductions, copies, gathers): one op of the same
  kind that reads the output gradient and the saved inputs and writes each activation input's
  gradient. An embedding's gradient is a scatter-add of the token gradients into a table-sized
  gradient.
* views stay free.

The captured backward of a real module (``workload.capture.capture_training``) is the check on
these rules: its matmul FLOPs are twice the forward's as here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from perfmodel.errors import PerfmodelError
from perfmodel.workload.ir import Graph, Op, TensorSpec

if TYPE_CHECKING:
    from perfmodel.hardware.execution_models import SIValue

CONJUGATE_COLLECTIVE = {"all_reduce": "all_reduce", "all_gather": "reduce_scatter", "reduce_scatter": "all_gather",
                        "all_to_all": "all_to_all", "send": "send"}
# How a named flash-attention kernel computes its gradient (attributes of its attention ops, read by
# ``costs.rules.attention_cost`` and ``gradient_ops``), from each kernel's source:
# * flash: FlashAttention-2 (arXiv 2307.08691, Algorithm 2): one gradient kernel, the rules' default;
# * pallas-flash: JAX's Pallas TPU flash attention (``jax.experimental.pallas.ops.tpu.flash_attention``; MaxText
#   before splash, e.g. 76bd53b ``layers/attentions.py``): a dK/dV kernel and a dQ kernel, each recomputing the
#   scores, their grids split over a megacore chip's TensorCores ("parallel" dimensions);
# * splash: splash attention with its default backward (MaxText ``sa_use_fused_bwd_kernel: False``): the same
#   two kernels, whose grids are all "arbitrary", so one TensorCore runs them on a megacore chip (v4, v5p);
# * splash-fused: splash attention's fused backward (``use_fused_bwd_kernel=True``): one gradient kernel on one
#   TensorCore, writing a partial dQ per key block of ``block`` keys, summed afterwards.
ATTENTION_KERNELS: dict[str, dict[str, bool]] = {"flash": {}, "pallas-flash": {"backward_split": True},
                                                   "splash": {"backward_split": True, "backward_one_core": True},
                                                   "splash-fused": {"backward_one_core": True, "backward_dq_partials": True}}


def attention_kernel_attrs(kernel: str, seq_kv: int, block: int | None) -> dict:
    """The attention op attributes of ``kernel`` (``ATTENTION_KERNELS``) for ``seq_kv`` keys in blocks of ``block``."""
    if kernel not in ATTENTION_KERNELS:
        raise PerfmodelError(f"attention kernel {kernel!r} is unknown; allowed: {', '.join(ATTENTION_KERNELS)}")
    attrs: dict[str, bool | int] = dict(ATTENTION_KERNELS[kernel])
    if attrs.get("backward_dq_partials"):
        if block is None:
            raise PerfmodelError(f"attention kernel {kernel!r} writes one partial dQ per key block: give its block "
                                 "(--attention-block, MaxText's sa_block_kv_dkv)")
        attrs["backward_dq_partials"] = math.ceil(seq_kv / block)
    return attrs


BACKWARD_PREFIX = "backward."
RECOMPUTE_PREFIX = "recompute."
LAYER_PREFIX = "layers."


def _transposed(tensor: TensorSpec) -> TensorSpec:
    shape = tensor.shape
    return replace(tensor, shape=(*shape[:-2], shape[-1], shape[-2])) if len(shape) >= 2 else tensor


def _gradient(tensor: TensorSpec, dtype: str | None = None) -> TensorSpec:
    """The gradient of a tensor: same shape, an activation (it is computed, not stored)."""
    return TensorSpec(shape=tensor.shape, dtype=dtype or tensor.dtype)


def gradient_ops(op: Op) -> list[Op]:
    """The backward ops of one forward op (see the module docstring)."""
    name = BACKWARD_PREFIX + op.name
    if op.kind == "matmul":
        x, w = op.inputs[0], op.inputs[1]
        dy = _gradient(op.outputs[0])
        m, n, k = op.attrs["m"], op.attrs["n"], op.attrs["k"]
        common = {key: value for key, value in op.attrs.items() if key not in ("m", "n", "k")}
        dgrad = replace(op, name=name + ".dgrad", inputs=(dy, _transposed(w)), outputs=(_gradient(x),),
                        attrs={**common, "m": m, "n": k, "k": n})
        wgrad = replace(op, name=name + ".wgrad", inputs=(_transposed(x), dy), outputs=(_gradient(w, dy.dtype),),
                        attrs={**common, "m": k, "n": n, "k": m})
        return [wgrad] if op.attrs.get("first_operand_is_mask") else [dgrad, wgrad]
    if op.kind == "attention":
        q, key, value = op.inputs[:3]
        o = op.outputs[0]
        kernel = replace(op, name=name, inputs=(q, key, value, o, _gradient(o)),
                         outputs=(_gradient(q), _gradient(key), _gradient(value)), attrs={**op.attrs, "backward": True})
        partials = int(op.attrs.get("backward_dq_partials", 1))
        if partials <= 1:
            return [kernel]
        unreduced = TensorSpec(shape=(partials, *q.shape), dtype=q.dtype)
        return [kernel, Op(name=name + ".dq_sum", kind="reduction", count=op.count, provenance="aten.sum",
                           inputs=(unreduced,), outputs=(_gradient(q),))]
    if op.kind == "collective":
        collective = str(op.attrs.get("collective", "all_reduce"))
        return [replace(op, name=name, attrs={**op.attrs, "collective": CONJUGATE_COLLECTIVE[collective]})]
    if op.kind == "view":
        return [replace(op, name=name)]
    if op.kind == "embedding":
        table = op.inputs[1]
        dy = _gradient(op.outputs[0])
        return [Op(name=name, kind="copy", count=op.count, provenance="aten.embedding_dense_backward",
                   inputs=(dy,), outputs=(_gradient(table, dy.dtype),))]
    activations = [tensor for tensor in op.inputs if tensor.role == "activation"]
    if not activations:
        return []
    return [replace(op, name=name, inputs=(*(_gradient(out) for out in op.outputs), *op.inputs),
                    outputs=tuple(_gradient(tensor) for tensor in activations))]


def _chained(name: str, ops: list[Op]) -> Graph:
    names = [op.name for op in ops]
    return Graph(name=name, ops=ops, edges=list(zip(names, names[1:], strict=False)))


def backward_graph(forward: Graph) -> Graph:
    """The backward pass of ``forward``: each op's gradient ops, last op first."""
    ops = [gradient for op in reversed(forward.ops) for gradient in gradient_ops(op)]
    return _chained(f"{forward.name}.backward", ops)


def kept_name(op: Op) -> str:
    """How ``TrainingSetup.kept`` names an op: the last part of its name (q_proj, down_proj...)."""
    return op.name.rpartition(".")[2]


def _kept(op: Op, kept: tuple[str, ...] | None) -> bool:
    """Whether selective recomputation keeps this op's output: every matmul, or those named in ``kept``."""
    return op.kind == "matmul" and (kept is None or kept_name(op) in kept)


def dead_layer_tail(layer_ops: list[Op]) -> set[str]:
    """The names of a layer's last ops whose outputs no gradient reads: walking back from the layer's end, its
    residual adds (``*.residual``: the gradient of a sum needs no value), collectives, and the first matmul by a
    2-D weight before them (``y = x W``: ``dx = dy W^T`` and ``dW = x^T dy`` read ``x``, not ``y``; a dense MLP's
    down projection). A grouped expert matmul is not: its output is weighted by the router, whose gradient reads
    it. The layer's output is the next layer's saved input, so a recomputation that keeps only what the gradients
    read (``recomputed_ops`` with ``drop_dead``) never runs these."""
    dead: set[str] = set()
    for op in reversed(layer_ops):
        if op.kind == "collective" or (op.kind == "elementwise" and op.name.endswith(".residual")):
            dead.add(op.name)
            continue
        weight = op.inputs[1] if op.kind == "matmul" and len(op.inputs) > 1 else None
        if weight is not None and weight.role == "weight" and len(weight.shape) == 2:
            dead.add(op.name)
        break
    return dead


def recomputed_ops(forward: Graph, policy: str, kept: tuple[str, ...] | None = None,
                   drop_dead: bool = False) -> list[Op]:
    """The forward ops a recomputation ``policy`` runs again during the backward, renamed
    ``recompute.<name>``: 'full' every op of the decoder layers, 'selective' every layer op but the
    kept matmuls (all matmuls, or those whose last name part is in ``kept``: q_proj, o_proj...) and
    the collectives, 'none' nothing. ``drop_dead``: less the layer's tail that no gradient reads
    (``dead_layer_tail``), as JAX builds the recomputation: ``jax.checkpoint``'s partial evaluation keeps only
    the staged forward ops the backward reads (``remat_partial_eval``, ``pe.dce_jaxpr``, jax/_src/ad_checkpoint.py)."""
    if policy == "none":
        return []
    layer_ops = [op for op in forward.ops if op.name.startswith(LAYER_PREFIX)]
    dead = dead_layer_tail(layer_ops) if drop_dead else set()
    layer_ops = [op for op in layer_ops if op.name not in dead]
    if policy == "selective":
        layer_ops = [op for op in layer_ops if not _kept(op, kept) and op.kind != "collective"]
    return [replace(op, name=RECOMPUTE_PREFIX + op.name) for op in layer_ops]


def backward_with_recompute(forward: Graph, policy: str, kept: tuple[str, ...] | None = None,
                            drop_dead: bool = False) -> Graph:
    """What a chip runs between a micro-batch's forward and its gradients: the recomputed forward
    ops (less the dead layer tail with ``drop_dead``), then the backward."""
    return _chained(f"{forward.name}.backward",
                    [*recomputed_ops(forward, policy, kept, drop_dead), *backward_graph(forward).ops])


def saved_activation_bytes(forward: Graph, policy: str, kept: tuple[str, ...] | None = None) -> SIValue:
    """Bytes a chip keeps from one micro-batch's forward until its backward: every tensor the
    decoder layers produce ('none'), the kept matmuls' outputs and each layer's input ('selective'),
    or each layer's input ('full'); collectives' buffers are not kept, and a matmul output that a
    reduce-scatter consumes is kept as its shard (sequence parallel). Counts multiply (one op per layer)."""
    position = {op.name: index for index, op in enumerate(forward.ops)}
    layer_ops = [op for op in forward.ops if op.name.startswith(LAYER_PREFIX) and op.kind not in ("collective", "view")]
    if not layer_ops:
        return 0.0
    layer_input = layer_ops[0].inputs[0].bytes * layer_ops[0].count
    if policy == "full":
        return layer_input
    saved: SIValue = 0.0
    for op in layer_ops:
        if policy == "selective" and not _kept(op, kept):
            continue
        kept_bytes = op.output_bytes * op.count
        index = position[op.name] + 1
        following = forward.ops[index] if index < len(forward.ops) else None
        if (op.kind == "matmul" and following is not None and following.kind == "collective"
                and following.attrs.get("collective") == "reduce_scatter"):
            kept_bytes = kept_bytes / int(following.attrs["group_size"])
        saved = saved + kept_bytes
    return saved + (layer_input if policy == "selective" else 0.0)
