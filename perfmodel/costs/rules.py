"""Cost rules: one small pure function per op kind, in a registry (pure core).

A rule maps an op on a device to an :class:`OpCost`: useful and executed FLOPs (after padding to
the engine's native tile and quantization into waves over its units), the engine and dtype that do
the work, bytes at every memory level (innermost first), launches, barriers, and link
traffic for collectives. Rules broadcast over numpy arrays in attributes (sweeps).

Engines: matmul, conv and attention run on a ``matrix`` engine, the rest on a ``vector`` engine;
if the device has none of that kind with the op's dtype, any engine with the dtype serves; bf16
and fp16 stand in for each other (same width; a device that lists one runs the other at that rate
for lack of a separate figure); non-matrix work may fall back to the fp32 rate (floats upcast;
integer and boolean index arithmetic on the same ALUs).
An op whose dtype no engine supports is an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence, overload

import numpy as np
from numpy.typing import ArrayLike

from perfmodel.costs import all_reduce
from perfmodel.costs import conventions as C
from perfmodel.costs.topology import group_span, ring_links, span_steps
from perfmodel.costs.traffic import (
    attended_pairs,
    chunk_start,
    flash_attention_elements_moved,
    matmul_elements_moved,
    padded_bytes,
    tile_elements_moved,
)
from perfmodel.dtypes import EQUIVALENT_DTYPES, get_dtype
from perfmodel.errors import NoEngineError, PerfmodelError
from perfmodel.hardware.execution_models import SIValue
from perfmodel.hardware.model import (
    KERNEL_CLASS_SEPARATOR,
    ComputeEngine,
    Hardware,
    KernelShape,
    Link,
    Parameters,
    base_kind,
    parent_kind,
)
from perfmodel.tracing import (
    argmin,
    at_least,
    clip,
    equal,
    floats,
    greater,
    is_traced,
    largest,
    maximum,
    minimum,
    peek,
    pick,
    where,
)
from perfmodel.workload.ir import Dimension, Op, TensorSpec
from perfmodel.workload.op_kinds import OP_KIND_TABLE, matmul_flops

# Kinds whose weights are per-channel vectors (a norm's scale and shift: one row of the activation's
# width, re-read by every row), so that warm_cache still serves their activations from the caches.
PER_CHANNEL_WEIGHT_KINDS = frozenset({"norm"})
ACCUMULATOR_BYTES = 4  # fp32 accumulators hold a matrix engine's output tile
# A product's dimension as a rule reads it: a tensor's (``workload.ir.Dimension``) or a ``dimension``
# attribute, which may also be a whole float (``workload.op_kinds.Attribute``); arrays over sweep points.
RuleDimension = Dimension | float
# The kernel shape a matmul chose: a name, an array of names over sweep points, or None (no shapes declared).
KernelName = str | np.ndarray | None
DATASHEET_PARAMETERS = Parameters()  # every efficiency 1, no latencies


@dataclass(frozen=True, kw_only=True)
class OpCost:
    """What one op asks of a device. Array-valued fields broadcast over sweep points."""

    flops: SIValue
    executed_flops: SIValue
    engine: str
    peak_dtype: str
    bytes_by_level: tuple[SIValue, ...]
    launches: int = 1
    host_calls: int = 0              # host dispatches that launch no kernel (eager views)
    barriers: int = 0
    link: str | None = None
    link_bytes: SIValue = 0.0
    link_latency_s: SIValue = 0.0
    # The link's kernel class the collective is charged as (``nvlink/nccl``: NCCL's ring on the link; an
    # array of names over sweep points, where the engine's choice changes with size); None: the link's own.
    link_class: KernelName = None
    estimated: bool = False
    kernel: KernelName = None       # the chosen kernel shape's name (an array of names over sweep points)
    side_engine: str | None = None  # a second engine working inside the same kernel (weight dequantization)
    side_peak_dtype: str = ""
    side_flops: SIValue = 0.0
    # Thread blocks of the kernel that each pay a fixed prologue and epilogue of their own beside the main loop
    # (attention's Q tiles: ``attention_work_units``); spread over the engine's units, they cost
    # ``Parameters.unit_latency`` each (0: none counted, the kernel's start-up latency alone).
    work_units: SIValue = 0.0
    # Whether the kernel's blocks wait for their traffic at the outermost on-device level outside their main loop
    # (prefill attention: ``kernel_busy_s``); per point where alike ops are priced together.
    exposed_traffic: Any = False
    # Exponentials the kernel evaluates on its engine units' special-function units, in series with its main loop's
    # matmuls (prefill attention's softmax: ``prefill_exponentials``); priced at ``exponential_rate_per_s`` times the
    # ``EXPONENTIAL_DTYPE`` efficiency of the op's kind, added to its compute time.
    exponentials: SIValue = 0.0
    # Whether the blocks' fixed time (``work_units``) runs under the kernel's streaming, as one more bottleneck,
    # instead of adding to it (decode attention: the comment above
    # ``exposed_prefill_traffic``); per point like ``exposed_traffic``.
    blocks_overlap: Any = False
    # Whether the kernel splits each sequence's keys over several blocks and then combines their partial results
    # (flash-decoding: ``decode_splits_keys``), a phase with a fixed time of its own after the streaming
    # (``Parameters.split_latency``); per point like ``exposed_traffic``.
    splits_keys: Any = False


@dataclass(frozen=True, kw_only=True)
class CostContext:
    """Device facts a rule needs beyond the op: the device, whether weights stay on the device, and
    how the evaluation will charge the op: ``parameters`` (None: the spec's own, its calibrated
    efficiencies where it carries them, else the datasheet) and ``overlap`` ('max' or 'sum'), so that a
    rule that chooses (a matmul's kernel) chooses by the time the op is then charged."""

    hardware: Hardware
    weights_resident: bool = True
    parameters: Parameters | None = None
    overlap: str = "max"

    @property
    def pricing(self) -> Parameters:
        """The parameters the op is charged with (``parameters`` resolved)."""
        if self.parameters is not None:
            return self.parameters
        return self.hardware.efficiency if self.hardware.efficiency is not None else DATASHEET_PARAMETERS


CostRule = Callable[[Op, CostContext], OpCost]
COST_RULES: dict[str, CostRule] = {}


def cost_rule(kind: str) -> Callable[[CostRule], CostRule]:
    """Register the cost rule of an op kind of the table (``workload.op_kinds``)."""
    if kind not in OP_KIND_TABLE:
        raise ValueError(f"no op kind {kind!r} in the op-kind table; register it first (workload.op_kinds.register)")

    def register(rule: CostRule) -> CostRule:
        if kind in COST_RULES:
            raise ValueError(f"a cost rule for {kind!r} is already registered ({COST_RULES[kind].__name__})")
        COST_RULES[kind] = rule
        return rule

    return register


def op_cost(op: Op, context: CostContext) -> OpCost:
    """The cost of ``op`` (one instance; the caller multiplies by ``op.count``)."""
    rule = COST_RULES.get(op.kind, COST_RULES["other"])
    return warm_cache(op, context, rule(op, context))


# The kernel class of attention with one query per sequence (``pricing_kind``).
DECODE_ATTENTION = f"attention{KERNEL_CLASS_SEPARATOR}decode"
# The kernel class of attention's gradient kernels (``pricing_kind``).
ATTENTION_BACKWARD = f"attention{KERNEL_CLASS_SEPARATOR}backward"
# The kernel class of decode attention over a KV cache of 8-bit floats (``pricing_kind``): the engines' decode
# kernels for an fp8 cache are other instantiations than their bf16-cache ones (TensorRT-LLM's XQA and MMHA
# templated on the cache type, converting each fp8 K/V tile in registers or running fp8 MMAs on Hopper;
# FlashAttention-3's and FlashInfer's fp8-KV paths dequantizing in the main loop with a descale per head), so
# their reach of HBM and their fixed costs are their own: NVIDIA's generation-attention tables time them
# 17-25% slower on vLLM and SGLang and 35% faster on TensorRT-LLM than half the bf16 kernels' bytes at the bf16
# kernels' efficiency. A parameter set without the class prices it as bf16-cache decode (``kind_chain``).
DECODE_ATTENTION_FP8_CACHE = f"{DECODE_ATTENTION}{KERNEL_CLASS_SEPARATOR}fp8_cache"
# The variant of each decode class for one query head a KV head (multi-head attention, ``one_query_head_per_kv_head``):
# ``attention/decode/mha`` and ``attention/decode/fp8_cache/mha``. TensorRT-LLM runs grouped queries through its
# XQA kernel (one block a sequence and KV head packing the group's queries into tensor-core tiles: "XQA kernel
# provides optimization for MQA and GQA during generation phase", docs/source/blogs/XQA-kernel.md) and plain MHA
# through its masked multi-head attention kernel (one block a sequence and query head, CUDA cores:
# docs/source/advanced/gpt-attention.md); FlashAttention's and FlashInfer's decode pack a group's queries into
# one tile's rows, which with a group of one is a tile of one row. Their per-block fixed cost differs: NVIDIA's
# H100 TensorRT-LLM tables at 2-8 cached tokens and batch >= 256 take 11 ns a block (sequence x KV head) with
# one query head a KV head and 36-43 ns with groups of 2-16; one fixed cost for both priced MHA 50-80% slow at
# large batch and the groups 25-45% fast. A parameter set without the variant prices it as its decode class.
MHA_VARIANT = "mha"
# The kernel class of a product of block-scaled fp8 weights (``dtypes``: fp8_block, 128 x 128 weight scales)
# with fp8 activations (1 x 128 scales), DeepSeek-V3's recipe (``pricing_kind``).
BLOCK_FP8_MATMUL = f"matmul{KERNEL_CLASS_SEPARATOR}fp8_block"


@dataclass(frozen=True, kw_only=True)
class KernelClass:
    """What a kernel class (``kind/variant``, ``pricing_kind``) has of its own among the parameters a fit
    gives its plain kind (``calibration.fit``); every class has its own start-up latency (its kernels'
    fixed cost). A lookup for a parameter the class lacks falls back to the plain kind's (``Parameters``)."""

    own_rate: bool    # a compute efficiency of its own (else the plain kind's: the same product on the same units)
    own_memory: bool  # a memory efficiency of its own (else the plain kind's: the same bytes through the same levels)


KERNEL_CLASSES = {
    # Decode attention's tensor-core work is prefill's product (fitted apart, TensorRT-LLM's decode attention took
    # 1% of the peak from query groups of 48-128 heads a KV head, whose fallback kernel re-reads the cache per query
    # head, and charged it to Llama's group of 8), but its split-KV kernels reach HBM otherwise.
    DECODE_ATTENTION: KernelClass(own_rate=False, own_memory=True),
    # Its fp8-cache kernels stream half the bytes through another main loop (the dequantization: above).
    DECODE_ATTENTION_FP8_CACHE: KernelClass(own_rate=False, own_memory=True),
    # MHA decode streams the same cache through another kernel (above), a reach of HBM of its own.
    f"{DECODE_ATTENTION}{KERNEL_CLASS_SEPARATOR}{MHA_VARIANT}": KernelClass(own_rate=False, own_memory=True),
    f"{DECODE_ATTENTION_FP8_CACHE}{KERNEL_CLASS_SEPARATOR}{MHA_VARIANT}": KernelClass(own_rate=False, own_memory=True),
    # A block-scaled fp8 GEMM's main loop is another kernel's (DeepGEMM promotes its partial sums to fp32 every 128
    # of k and scales them there; CUTLASS's, FlashInfer's and Triton's block-scaled kernels): the engines' tables
    # show its rate apart from their per-tensor fp8 GEMMs' in both directions (0.85x on TensorRT-LLM's H100, 1.24x
    # on SGLang's, 0.53x on TensorRT-LLM's L40S) and its fixed cost too (TensorRT-LLM's H100: 5.6 against 13.2 us),
    # while a small-m product streams the same weights (SGLang's H100, m < 10: 0.98x the fp8 time;
    # ``benchmarks/fp8_block_gap.py``). Fitted with a memory efficiency of its own, H100's lower one stood in for
    # the rate at m = 10-99 and priced the m < 10 rows 10-30% slow.
    BLOCK_FP8_MATMUL: KernelClass(own_rate=True, own_memory=False),
    # Attention's gradient kernels are not its forward kernel (other loops, tiles and pipelines: FlashAttention-2's
    # Algorithm 2 runs key blocks outside and query blocks inside; TPU kernels split it in two or write a partial dQ
    # per key block). On v5p, at the FLOPs each kernel executes (``attention_cost``), axlearn's splash forward rows
    # reach 0.33-0.41 of the peak (the legacy kernel's, too short to fit, 0.27-0.38) and the backward 0.46-0.54
    # (legacy: 0.43-0.60) with the forward at 0.41 (``calibration/data/published/TPU_SEARCH.md``). Its traffic is
    # the forward's tensors again, through the same levels: the plain kind's memory efficiency.
    ATTENTION_BACKWARD: KernelClass(own_rate=True, own_memory=False),
}


def fitted_kind(kind: str, parameter: str) -> str:
    """The kind whose fitted ``parameter`` (``"rate"``: compute efficiency, ``"memory"``: memory efficiency)
    serves ``kind``: a kernel class's own where ``KERNEL_CLASSES`` says so, else its plain kind's."""
    entry = KERNEL_CLASSES.get(kind)
    if entry is None:
        return kind
    own = {"rate": entry.own_rate, "memory": entry.own_memory}[parameter]
    if own:
        return kind
    # a nested class without its own takes its parent class's (which may have its own or take its plain kind's)
    parent = parent_kind(kind)
    return fitted_kind(parent, parameter) if parent in KERNEL_CLASSES else base_kind(kind)


def block_fp8_product(op: Op) -> bool:
    """Whether ``op`` multiplies fp8 activations by fp8_block weights: the block-scaled kernel. Under wider
    activations the same weights are dequantized in the kernel instead (``dequantize_flops``): a plain matmul."""
    if op.kind != "matmul" or len(op.inputs) < 2 or op.inputs[1].role != "weight":
        return False
    return get_dtype(op.inputs[1].dtype).name == "fp8_block" and get_dtype(op.inputs[0].dtype).name == "fp8"


def pricing_kind(op: Op) -> str:
    """The kind whose parameters (efficiencies, start-up latency: ``Parameters``) price ``op``: its own,
    except a block-scaled fp8 GEMM (``block_fp8_product``: ``BLOCK_FP8_MATMUL``, whose kernels are not
    the per-tensor fp8 ones: their fixed cost and rate differ by engine, ``benchmarks/fp8_block_gap.py``;
    a parameter set without the class prices it as an fp8 matmul), attention's gradient (``ATTENTION_BACKWARD``,
    whose kernels are not the forward's: ``KERNEL_CLASSES``; a parameter set without the class prices it as
    attention) and forward attention with one query per sequence, the generation step. Engines run other
    kernels for the generation step than for prefill (TensorRT-LLM's XQA and masked multi-head attention, FlashInfer's
    and FlashAttention's decode kernels, split over the KV length as in flash-decoding), and their
    fixed cost and their reach of HBM differ: NVIDIA's generation-attention tables
    (``calibration.aiconfigurator``) start at 8-10 us on H100 where context kernels start above 15 us.
    Several queries (prefill, chunked prefill,
    speculative verification) keep the attention class, and so does an array of
    query counts (a sweep over them): which points are evaluated together (a sweep's chunks, alike ops
    priced as one) must not change how any of them is priced. A traced count decides (and guards) as
    numbers do in the replay (``tracing``)."""
    if op.kind == "matmul":
        return BLOCK_FP8_MATMUL if block_fp8_product(op) else op.kind
    if op.kind != "attention":
        return op.kind
    if op.attrs.get("backward", False):
        return ATTENTION_BACKWARD
    queries = op.attrs.get("seq_q")
    if queries is None or (np.ndim(queries) != 0 and not is_traced(queries)):
        return op.kind
    one_query = bool(queries == 1) if is_traced(queries) else float(queries) == 1
    keys = op.attrs.get("seq_kv")
    if one_query and keys is not None and not is_traced(keys) and np.ndim(keys) == 0 \
            and not _one_query(1, keys, op.attrs.get("decode_kernel", False)):
        # one token and no cache: a one-token prompt, which most engines run through their context (prefill)
        # kernels (NVIDIA's context-attention tables time it so: 1-token rows cost what 16-token rows do), unless
        # its engine runs it through the generation kernel (``_one_query``, the one rule the cost terms follow too)
        return op.kind
    if not one_query:
        return op.kind
    kind = DECODE_ATTENTION_FP8_CACHE if fp8_cache(op) else DECODE_ATTENTION
    return f"{kind}{KERNEL_CLASS_SEPARATOR}{MHA_VARIANT}" if one_query_head_per_kv_head(op) else kind


def one_query_head_per_kv_head(op: Op) -> bool:
    """Whether attention ``op`` has as many KV heads as query heads (multi-head attention: no query group to
    pack), which the engines' decode runs as another kernel (``MHA_VARIANT``). A sweep over head counts keeps
    the grouped class at every point (as a sweep over query counts keeps the attention class), so which points
    are evaluated together does not change how any is priced; a traced count decides (and guards)."""
    heads, kv_heads = op.attrs.get("heads"), op.attrs.get("kv_heads")
    if heads is None or kv_heads is None:
        return kv_heads is None  # no KV heads given: one a query head
    if is_traced(heads) or is_traced(kv_heads):
        return bool(heads == kv_heads)
    if np.ndim(heads) != 0 or np.ndim(kv_heads) != 0:
        return False
    return float(heads) == float(kv_heads)


def fp8_cache(op: Op) -> bool:
    """Whether attention ``op`` reads its keys from a cache of 8-bit floats (``DECODE_ATTENTION_FP8_CACHE``).
    An int8 cache is not one (its kernels are other ones again, and no table here times them)."""
    if len(op.inputs) < 2:
        return False
    keys = get_dtype(op.inputs[1].dtype)
    return keys.kind == "float" and keys.bits == 8 and not keys.block_scaled


def warm_cache(op: Op, context: CostContext, cost: OpCost) -> OpCost:
    """Activations are served from hardware-managed caches as far as they fit: their producer has
    just written them (and a benchmark loop re-reads them). Outside a cache of capacity C, an op whose
    activations total F bytes moves only the part that does not fit, ``bytes x max(0, 1 - C/F)``
    (an ideal cache keeps C of them): nothing when they fit, everything when F >> C. Weights and KV
    caches are streamed from their home level (they rarely fit, and a real model touches them once
    per pass); software-managed scratchpads keep nothing across kernels. A norm's weights (its scale
    and shift, :data:`PER_CHANNEL_WEIGHT_KINDS`) are streamed while its activations come from the
    caches as above (its rule prices every tensor once, ``streaming_bytes``); any other op that reads
    weights (a matmul, whose traffic is tiled, or an optimizer update of whole parameters) is left as
    its rule prices it."""
    tensors = (*op.inputs, *op.outputs)
    if op.kind == "collective" or not tensors:
        return cost
    held = [tensor for tensor in tensors if tensor.role != "activation"]
    activations = [tensor for tensor in tensors if tensor.role == "activation"]
    if not activations or (held and op.kind not in PER_CHANNEL_WEIGHT_KINDS):
        return cost
    footprint = floats(sum(tensor.bytes for tensor in activations))
    levels = context.hardware.memory
    streamed = _tensor_bytes(held, context) if held else (0.0,) * len(levels)
    traffic = list(cost.bytes_by_level)
    for index, level in enumerate(levels):
        if level.kind == "cache" and level.managed == "hardware" and not level.off_device:
            missing: SIValue = clip(1.0 - level.total_capacity_bytes / maximum(footprint, 1.0), 0.0, 1.0)
            missing = missing if np.ndim(missing) or is_traced(missing) else float(missing)
            for outer in range(index + 1, len(levels)):
                if not levels[outer].off_device:
                    traffic[outer] = streamed[outer] + (traffic[outer] - streamed[outer]) * missing
    return replace(cost, bytes_by_level=tuple(traffic))


# ----------------------------------------------------------------------------------------- engines
def runs(engine: ComputeEngine, dtype: str) -> bool:
    """Whether ``engine`` runs ``dtype``: its peak for it is positive. A peak swept as an array (one
    value per sweep point) must be positive at every point or at none: an op's engine and the dtype
    whose rate applies are chosen once for all the points of a sweep, so a peak that is zero at some
    points only is an error (sweep positive values; sweep the engine's absence as a separate spec)."""
    rate = engine.peak_flops_per_s.get(dtype, 0.0)
    if not isinstance(rate, np.ndarray):
        return bool(rate > 0)
    positive = rate > 0
    if positive.all():
        return True
    if not positive.any():
        return False
    raise PerfmodelError(f"the {dtype} peak of engine {engine.name!r} is swept to zero at some points only "
                         f"({np.count_nonzero(~positive)} of {positive.size}); an op's engine is chosen once for "
                         "a whole sweep, so sweep positive peaks only, or compare the engine's absence as a "
                         "separate spec")


def select_engine(hardware: Hardware, op_kind: str, dtype: str) -> tuple[ComputeEngine, str]:
    """The engine that runs an op of ``op_kind`` in ``dtype``, and the dtype whose peak applies."""
    entry = OP_KIND_TABLE.get(op_kind)
    preferred = entry.engine if entry is not None else "vector"
    engines = list(hardware.compute.values())
    candidates = [dtype, *EQUIVALENT_DTYPES.get(dtype, ())]
    if preferred != "matrix":
        # Vector work runs on a vector engine whenever the device has one: in the dtype if it computes
        # it, else upcast to fp32 (a GPU's CUDA cores run a bf16 norm or softmax in fp32); a matrix
        # engine does no element-wise work, so it prices vector work only on a device without a vector
        # engine (a wafer's PEs), below.
        vector = [engine for engine in engines if engine.kind == preferred]
        for wanted in (*candidates, "fp32"):
            for engine in vector:
                if runs(engine, wanted):
                    return engine, wanted
    for wanted in candidates:
        for engine in sorted(engines, key=lambda e: e.kind != preferred):
            if runs(engine, wanted):
                return engine, wanted
    if preferred != "matrix":  # upcast floats; integer and boolean ALUs assumed at the fp32 rate
        for engine in sorted(engines, key=lambda e: e.kind != preferred):
            if runs(engine, "fp32"):
                return engine, "fp32"
    offered = sorted({f"{e.name}:{d}" for e in engines for d in e.peak_flops_per_s})
    raise NoEngineError(f"{hardware.name} has no engine for {'an' if op_kind[0] in 'aeiou' else 'a'} {op_kind} op in "
                        f"{dtype}; its engines offer {', '.join(offered)}. Choose another dtype or device.")


# ----------------------------------------------------------------------------------------- traffic
def inner_capacity_bytes(hardware: Hardware, level_index: int, engine: ComputeEngine) -> SIValue | None:
    """Capacity that tiles at ``level_index`` can be reused from: the next level inward, or, for the
    innermost level, the engine's accumulator tile (None when the engine declares no tile)."""
    if level_index > 0:
        return hardware.memory[level_index - 1].reuse_capacity_bytes
    candidates = engine.kernel_candidates
    if not candidates:
        return None
    tile = engine.tile or candidates[0].tile
    return tile.m * tile.n * ACCUMULATOR_BYTES / C.OUTPUT_BLOCK_SHARE


def _granule(hardware: Hardware, level_index: int) -> float | None:
    return hardware.memory[level_index].transfer_granule_bytes


def off_device_bytes(op: Op, context: CostContext) -> SIValue:
    """An off-device store (Cerebras MemoryX) serves only weights, and only when they do not stay on
    the device (weight streaming)."""
    return 0.0 if context.weights_resident else sum((t.bytes for t in op.inputs if t.role == "weight"), 0)


def _tensor_bytes(tensors: Sequence[TensorSpec], context: CostContext) -> tuple[SIValue, ...]:
    """Bytes of ``tensors`` at every level (padded to the level's transfer granule); 0 off the device."""
    hardware = context.hardware
    return tuple(0.0 if level.off_device else
                 sum((padded_bytes(t.shape, get_dtype(t.dtype).bytes_per_element, _granule(hardware, index))
                      for t in tensors), 0)
                 for index, level in enumerate(hardware.memory))


def streaming_bytes(op: Op, context: CostContext) -> tuple[SIValue, ...]:
    """Compulsory traffic: every input read and every output written once at every on-device level."""
    on_device = _tensor_bytes((*op.inputs, *op.outputs), context)
    return tuple(off_device_bytes(op, context) if level.off_device else on_device[index]
                 for index, level in enumerate(context.hardware.memory))


def _tiled_bytes(op: Op, context: CostContext, engine: ComputeEngine, m: RuleDimension, n: RuleDimension,
                 k: RuleDimension, batch: RuleDimension, a_bytes_per_element: float, b_bytes_per_element: float,
                 c_bytes_per_element: float, a_compulsory_elements: SIValue | None = None) -> tuple[SIValue, ...]:
    """Bytes per level for a (batched) tiled product; ``a_compulsory_elements`` replaces m*k for
    convolutions, whose im2col matrix re-reads each input element kernel-size times from on chip.
    Each level reuses what the next level inward holds (the innermost: the engine's accumulator tile);
    ``select_kernel`` replaces the innermost level's traffic for declared kernels."""
    hardware = context.hardware
    result: list[SIValue] = []
    for index, level in enumerate(hardware.memory):
        if level.off_device:
            result.append(off_device_bytes(op, context))
            continue
        capacity = inner_capacity_bytes(hardware, index, engine)
        if capacity is None:
            reads_a, reads_b, writes_c = m * k, k * n, m * n
        else:
            element_bytes = max(a_bytes_per_element, b_bytes_per_element, c_bytes_per_element)
            reads_a, reads_b, writes_c = matmul_elements_moved(m, n, k, capacity / element_bytes)
        if a_compulsory_elements is not None:
            reads_a = reads_a * (a_compulsory_elements / (floats(m) * k))
        moved = (reads_a * a_bytes_per_element + reads_b * b_bytes_per_element + writes_c * c_bytes_per_element)
        result.append(batch * moved * _granule_factor(hardware, index, k, a_bytes_per_element))
    return tuple(result)


def _granule_factor(hardware: Hardware, level_index: int, inner_dim: RuleDimension,
                    bytes_per_element: float) -> SIValue:
    """Rows padded to the transfer granule (sticks) inflate traffic by padded/actual row bytes."""
    granule = _granule(hardware, level_index)
    if not granule:
        return 1.0
    row_bytes = floats(inner_dim) * bytes_per_element
    return np.ceil(row_bytes / granule) * granule / row_bytes


# -------------------------------------------------------------------------------------- padding
def _executed_flops(units: int, m: RuleDimension, n: RuleDimension, k: RuleDimension, batch: RuleDimension,
                    tile_m: SIValue, tile_n: SIValue, tile_k: SIValue, split_k: bool | np.ndarray,
                    step_flops: SIValue = 0.0, split_flops: SIValue = 0.0, epilogue_flops: SIValue = 0.0) -> SIValue:
    """FLOPs a unit's time is held for: every wave runs each unit's share of the k-loop, one tile step at a
    time, a step holding the unit for at least ``step_flops`` (``k_step_flops``), then, where the engine does
    not hide it, stores its output tile (``epilogue_flops`` per output element: ``epilogue_flops_per_output``);
    a split product adds ``split_flops`` (``split_reduction_flops``)."""
    tiles_m, tiles_n = np.ceil(floats(m) / tile_m), np.ceil(floats(n) / tile_n)
    k_blocks = np.ceil(floats(k) / tile_k)
    tiles = batch * tiles_m * tiles_n
    split = np.where(split_k, clip(np.floor(units / tiles), 1.0, k_blocks), 1.0)
    waves = np.ceil(tiles * split / units)
    step = maximum(C.FLOPS_PER_FMA * tile_m * tile_n * tile_k, step_flops)
    executed: SIValue = (waves * units * (np.ceil(k_blocks / split) * step + tile_m * tile_n * epilogue_flops)
                         + where(greater(split, 1.0), split_flops, 0.0))
    return executed


def k_step_flops(engine: ComputeEngine, rate_flops_per_s: SIValue) -> SIValue:
    """The work a unit could do at ``rate_flops_per_s`` (the datasheet peak: the floor then scales with the
    compute efficiency, as a fit's compute components do) in the engine's shortest k-loop step
    (``ComputeEngine.k_step_s``): a tile step whose math takes less still holds the unit that long. A kernel
    with a small output tile cannot hide its operand loads behind its math: NVIDIA's H100 GEMM tables (``calibration.
    aiconfigurator``) grow by ~75 ns per 64 of k for a single output tile, the same for 32 to 256 columns
    and for 1 to 1024 rows (a 16 x 128 x 64 step's math takes 35 ns at a unit's share of the peak)."""
    return engine.k_step_s * rate_flops_per_s / engine.units


def epilogue_flops_per_output(engine: ComputeEngine, hardware: Hardware, rate_flops_per_s: SIValue,
                              output_bytes_per_element: float) -> SIValue:
    """The work a unit could do at ``rate_flops_per_s`` (the datasheet peak, as ``k_step_flops``) while it stores
    one output element of its tile at its share of the device memory's datasheet bandwidth, where the engine's
    kernels store a tile after its main loop instead of beside the next tile's (``ComputeEngine.
    matmul_epilogue_hidden`` False); 0 where they hide it. NVIDIA's A100 GEMM tables show the stores adding up:
    4096 x 4096 products take 29, 37, 46 and 51 us at k = 32, 64, 128 and 256 (the 33.5 MB output alone
    streams in 16.5 us at the datasheet's 2.04 TB/s), where H100's take 17 us at k = 128 (``calibration.aiconfigurator``)."""
    if engine.matmul_epilogue_hidden:
        return 0.0
    outer = [level for level in hardware.memory if not level.off_device][-1]
    return output_bytes_per_element * rate_flops_per_s / outer.bandwidth_bytes_per_s


def split_reduction_flops(engine: ComputeEngine, rate_flops_per_s: SIValue) -> SIValue:
    """A split-K product's extra work, as FLOPs at ``rate_flops_per_s`` (the datasheet peak): the partial sums are added by a
    second kernel (cuBLAS's and CUTLASS's split-K reduction), which pays the engine's fixed time per kernel.
    NVIDIA's H100 GEMM tables show it: a single output tile's time grows with k up to k ~ 3-4k, then stays
    ~3 us above the 2.6 us floor of the smallest GEMMs for every larger k (``calibration.aiconfigurator``)."""
    return engine.kernel_fixed_s * rate_flops_per_s


def executed_matmul_flops(engine: ComputeEngine, m: RuleDimension, n: RuleDimension, k: RuleDimension,
                          batch: RuleDimension, kernel: KernelShape | None = None,
                          rate_flops_per_s: SIValue = 0.0) -> SIValue:
    """FLOPs the engine actually performs with ``kernel`` (default: the engine's first candidate):
    dims padded to its tile, tiles quantized into waves over the units. When there are fewer output
    tiles than units and the kernel splits k (split-K / stream-K, as cuBLAS/CUTLASS and XLA do for
    skinny products), the units share the work and a reduction kernel adds the partial sums
    (``split_reduction_flops``; its traffic, small for such shapes, is not charged). With the rate the
    op runs at (``rate_flops_per_s``; 0: not known), the k-loop's shortest step (``k_step_flops``) and the
    split's reduction count as the time they hold the units."""
    if kernel is None:
        candidates = engine.kernel_candidates
        kernel = candidates[0] if candidates else None
    if kernel is None:
        return C.FLOPS_PER_FMA * batch * floats(m) * n * k
    executed = _executed_flops(engine.units, m, n, k, batch, kernel.m, kernel.n, kernel.k, kernel.split_k,
                               k_step_flops(engine, rate_flops_per_s), split_reduction_flops(engine, rate_flops_per_s))
    return executed if np.ndim(executed) else float(executed)


def _attr(op: Op, name: str, default: Any = None) -> Any:  # attribute values are heterogeneous
    value = op.attrs.get(name, default)
    if value is None:
        raise PerfmodelError(f"op {op.name!r} ({op.kind}) needs attribute {name!r}")
    return value


# ----------------------------------------------------------------------------------------- rules
def _matmul_dims(op: Op) -> tuple[RuleDimension, RuleDimension, RuleDimension, RuleDimension]:
    if "m" in op.attrs:
        return _attr(op, "m"), _attr(op, "n"), _attr(op, "k"), op.attrs.get("batch", 1)
    if len(op.inputs) < 2:
        raise PerfmodelError(f"matmul {op.name!r} needs attrs m, n, k or two inputs")
    a, b = op.inputs[0].shape, op.inputs[1].shape
    # The leading dimensions' product as TensorSpec.numel forms it: exact Python integers (a graph's
    # element counts are at most 2**62), an array only where a dimension is swept.
    batch: RuleDimension = 1
    for dim in a[:-2]:
        batch = batch * (dim if isinstance(dim, np.ndarray) else int(dim))
    return a[-2] if len(a) > 1 else 1, b[-1], a[-1], batch


def _bytes_per_element(op: Op, slot: int, group: str = "inputs") -> float:
    """The width of tensor ``slot`` of ``group``; else of the op's first tensor; else of its dtype (an op
    given by attributes alone, ``Op.dtype``)."""
    tensors = getattr(op, group)
    if slot < len(tensors):
        return get_dtype(tensors[slot].dtype).bytes_per_element
    tensors = op.inputs or op.outputs
    return get_dtype(tensors[0].dtype if tensors else op.dtype).bytes_per_element


# ----------------------------------------------------------------------------------------- pricing
# How an evaluation charges an op (``roofline.arrays``); kernel selection chooses by the same functions.
def compute_rate_flops_per_s(hardware: Hardware, parameters: Parameters, engine: str, dtype: str,
                             kind: str) -> SIValue:
    """The rate an op of ``kind`` reaches on ``engine`` in ``dtype``: the peak x the compute efficiency."""
    return hardware.compute[engine].peak_flops_per_s[dtype] * parameters.compute(engine, dtype, kind)


@overload
def compute_time_s(executed_flops: np.ndarray, rate_flops_per_s: SIValue, latency_s: SIValue) -> np.ndarray: ...
@overload
def compute_time_s(executed_flops: SIValue, rate_flops_per_s: SIValue, latency_s: SIValue) -> SIValue: ...
def compute_time_s(executed_flops: SIValue, rate_flops_per_s: SIValue, latency_s: SIValue) -> SIValue:
    """Compute time: executed FLOPs at the reached rate, plus the op kind's start-up latency."""
    return executed_flops / rate_flops_per_s + latency_s


@overload
def memory_time_s(moved_bytes: np.ndarray, bandwidth_bytes_per_s: SIValue, efficiency: SIValue,
                  latency_s: float) -> np.ndarray: ...
@overload
def memory_time_s(moved_bytes: SIValue, bandwidth_bytes_per_s: SIValue, efficiency: SIValue,
                  latency_s: float) -> SIValue: ...
def memory_time_s(moved_bytes: SIValue, bandwidth_bytes_per_s: SIValue, efficiency: SIValue,
                  latency_s: float) -> SIValue:
    """Memory time at a level: bytes at bandwidth x efficiency, plus the level's latency once if the
    kernel touches it."""
    time = moved_bytes / (bandwidth_bytes_per_s * efficiency)
    if type(latency_s) in (float, int) and latency_s == 0:  # no latency to add (most levels): skip a pass
        return time
    return time + latency_s * greater(moved_bytes, 0)


@overload
def kernel_busy_s(components: np.ndarray, overlap: str, serial: Any = False, exposed: Any = False) -> np.ndarray: ...
@overload
def kernel_busy_s(components: Sequence[float], overlap: str, serial: Any = False, exposed: Any = False) -> float: ...
def kernel_busy_s(components: Sequence[float] | np.ndarray, overlap: str, serial: Any = False,
                  exposed: Any = False) -> SIValue:
    """A kernel's busy time from its bottleneck times (compute first, then memory levels and link;
    stacked on the first axis of an array): the slowest where they overlap ('max'), their sum where
    they do not ('sum'). Where ``serial`` (a vector kernel on an engine that does not hide memory
    behind its math, ``ComputeEngine.vector_kernels_hide_memory``), compute adds to the slowest of the
    data movements. Where ``exposed`` (``OpCost.exposed_traffic``: prefill attention, whose blocks' loads and
    stores at the outermost level, the next-to-last row, wait outside their main loop), that level's time adds to
    the slowest of the others (arrays only)."""
    if isinstance(components, np.ndarray):
        if overlap != "max":
            total: np.ndarray = components.sum(axis=0)
            return total
        busy: np.ndarray = largest(components, axis=0)
        if np.any(serial):
            busy = np.where(serial, components[0] + largest(components[1:], axis=0), busy)
        if is_traced(exposed) or np.any(exposed):
            outer = components.shape[0] - 2
            rest = np.concatenate([components[:outer], components[outer + 1:]])
            busy = where(exposed, largest(rest, axis=0) + components[outer], busy)
        return busy
    if overlap != "max":
        return sum(components)
    return components[0] + max(components[1:]) if serial else max(components)


def select_kernel(op: Op, context: CostContext, engine: ComputeEngine, peak_dtype: str, m: RuleDimension,
                  n: RuleDimension, k: RuleDimension, batch: RuleDimension, bytes_per_element: tuple[float, float, float],
                  a_compulsory_elements: SIValue | None = None, *,
                  side_compute_s: SIValue = 0.0) -> tuple[SIValue, tuple[SIValue, ...], KernelName]:
    """Price the product with every candidate kernel of the engine and keep the fastest as the op is
    then charged (per sweep point), as cuBLAS/CUTLASS heuristics and XLA's autotuner do: a batch-1 GEMV
    takes the small-M kernel and stays memory-bound instead of being padded into a 128-row tile.
    Declared kernels are output-stationary tiles (GPU CTAs) whose operands the innermost level re-feeds
    per tile; an engine's native tile alone (a weight-stationary systolic array: TPU MXU, Groq, Spyre)
    keeps the accumulator-capacity reuse model. The candidates are priced at once, as arrays.

    A candidate's time is what the evaluation charges for the parts that depend on the kernel, with
    the context's parameters (``CostContext.pricing``) and overlap: its compute time
    (``compute_time_s``: executed FLOPs at peak x efficiency plus latency; never below
    ``side_compute_s``, a second engine inside the kernel) and its innermost level's memory time
    (``memory_time_s``), combined by ``kernel_busy_s``. Everything else (outer levels, whose traffic
    does not depend on the kernel; links; the engine's fixed time per kernel; scheduling) is the same
    for every candidate and only caps or adds to that time, so the kernel chosen is the fastest as
    charged, and more bandwidth or peak never makes the op slower. Returns (executed FLOPs, bytes per
    level, kernel name)."""
    hardware = context.hardware
    few = _few_values(m, n, k, batch, a_compulsory_elements, side_compute_s) if not hardware.is_swept else None
    if few is not None:  # a large sweep over few distinct sizes (decode's batch): priced once per size
        slot, values, positions = few
        dims: list[Any] = [m, n, k, batch]
        dims[slot] = values
        executed, traffic, kernel = select_kernel(op, context, engine, peak_dtype, dims[0], dims[1], dims[2], dims[3],
                                                  bytes_per_element, a_compulsory_elements,
                                                  side_compute_s=side_compute_s)

        def spread(value: Any) -> Any:
            return value[positions] if isinstance(value, np.ndarray) and value.shape == values.shape else value

        return spread(executed), tuple(spread(level) for level in traffic), spread(kernel)
    traffic = _tiled_bytes(op, context, engine, m, n, k, batch, *bytes_per_element,
                           a_compulsory_elements=a_compulsory_elements)
    candidates = engine.kernel_candidates
    if not engine.kernels:
        native = candidates[0] if candidates else None
        return executed_matmul_flops(engine, m, n, k, batch, native), traffic, native.name if native else None
    candidates = with_unsplit_variants(candidates)
    # Sweep points come from the op's dimensions and from array-valued spec fields (bandwidth, peak).
    inner_level = hardware.memory[0]
    shape = np.broadcast_shapes(*(np.shape(value) for value in (m, n, k, batch, traffic[0], side_compute_s,
                                                                engine.peak_flops_per_s[peak_dtype],
                                                                inner_level.bandwidth_bytes_per_s)))
    if not shape:
        return _select_kernel_scalar(context, pricing_kind(op), engine, peak_dtype, candidates, float(m), float(n), float(k),
                                     float(batch), bytes_per_element, a_compulsory_elements, traffic,
                                     float(side_compute_s))
    column = (len(candidates),) + (1,) * len(shape)

    def per_kernel(values: Sequence[float]) -> np.ndarray:
        return floats(values).reshape(column)

    tile_m, tile_n, tile_k = (per_kernel([getattr(kernel, dim) for kernel in candidates]) for dim in "mnk")
    splits = np.asarray([kernel.split_k for kernel in candidates]).reshape(column)
    parameters = context.pricing
    kind = pricing_kind(op)
    rate = compute_rate_flops_per_s(hardware, parameters, engine.name, peak_dtype, kind)
    peak = engine.peak_flops_per_s[peak_dtype]
    a_bytes, b_bytes, c_bytes = bytes_per_element
    executed = _executed_flops(engine.units, m, n, k, batch, tile_m, tile_n, tile_k, splits,
                               k_step_flops(engine, peak), split_reduction_flops(engine, peak),
                               epilogue_flops_per_output(engine, hardware, peak, c_bytes))
    reads_a, reads_b, writes_c = tile_elements_moved(m, n, k, tile_m, tile_n)
    if a_compulsory_elements is not None:
        reads_a = reads_a * (a_compulsory_elements / (floats(m) * k))
    inner = batch * (reads_a * a_bytes + reads_b * b_bytes + writes_c * c_bytes) * _granule_factor(
        hardware, 0, k, a_bytes)
    compute = maximum(compute_time_s(executed, rate, parameters.latency(kind, peak_dtype)), side_compute_s)
    memory = memory_time_s(inner, inner_level.bandwidth_bytes_per_s, parameters.memory(inner_level.name, kind),
                           parameters.memory_latency(inner_level.name))
    time = kernel_busy_s(np.stack(np.broadcast_arrays(compute, memory)), context.overlap)
    best = argmin(time, axis=0)
    chosen_executed, chosen_inner = pick(executed, best), pick(inner, best)
    names = np.asarray([kernel.name for kernel in candidates])[peek(best)]
    return chosen_executed, (chosen_inner, *traffic[1:]), names


def with_unsplit_variants(candidates: Sequence[KernelShape]) -> tuple[KernelShape, ...]:
    """The candidates, and each split-K one also run whole: a split pays its reduction kernel
    (``split_reduction_flops``), so for a short k the unsplit kernel is the faster (cuBLAS's heuristics
    split only long k loops: NVIDIA's H100 tables time a single output tile rising with k up to k ~ 3k)."""
    return tuple(candidates) + tuple(replace(kernel, split_k=False) for kernel in candidates if kernel.split_k)


# A product's dimension swept over at least this many points, taking at most 1/8 as many distinct
# whole values, is priced once per value (``select_kernel``).
FEW_VALUES_FROM_POINTS = 4096
FEW_VALUES_SHARE = 8


def _few_values(m: Any, n: Any, k: Any, batch: Any, a_compulsory_elements: Any,
                side_compute_s: Any) -> tuple[int, np.ndarray, np.ndarray] | None:
    """Where exactly one of a product's dimensions is an integer array over a large sweep whose values
    span a narrow range (the other inputs plain numbers): (which dimension, every whole value of its
    range, each point's position among them). Each point's numbers are then computed from its own
    value by the same arithmetic, once per value instead of once per point."""
    dims = (m, n, k, batch)
    swept = [slot for slot, value in enumerate(dims) if np.ndim(value)]
    if len(swept) != 1 or np.ndim(side_compute_s) or np.ndim(a_compulsory_elements) or is_traced(side_compute_s):
        return None
    dim = dims[swept[0]]
    if not isinstance(dim, np.ndarray) or dim.dtype.kind not in "iu" or dim.size < FEW_VALUES_FROM_POINTS:
        return None
    low, high = int(dim.min()), int(dim.max())
    if (high - low + 1) * FEW_VALUES_SHARE > dim.size:
        return None
    return swept[0], np.arange(low, high + 1, dtype=dim.dtype), dim - low


def _select_kernel_scalar(context: CostContext, kind: str, engine: ComputeEngine, peak_dtype: str,
                          candidates: Sequence[KernelShape], m: float, n: float, k: float, batch: float,
                          bytes_per_element: tuple[float, float, float], a_compulsory_elements: SIValue | None,
                          traffic: tuple[SIValue, ...], side_compute_s: float) -> tuple[float, tuple[SIValue, ...], str]:
    """``select_kernel`` for one point, in plain floats (a graph of scalar ops prices ~10x faster so).
    It restates ``_executed_flops`` and ``tile_elements_moved`` with ``math`` and prices each candidate
    with the same functions; a test checks that both paths choose the same kernel and give the same
    numbers."""
    hardware, parameters = context.hardware, context.pricing
    a_bytes, b_bytes, c_bytes = bytes_per_element
    inner_level = hardware.memory[0]
    granule = float(_granule_factor(hardware, 0, k, a_bytes))
    a_scale = 1.0 if a_compulsory_elements is None else float(a_compulsory_elements) / (m * k)
    rate = compute_rate_flops_per_s(hardware, parameters, engine.name, peak_dtype, kind)
    compute_latency = parameters.latency(kind, peak_dtype)
    inner_bandwidth, inner_efficiency = inner_level.bandwidth_bytes_per_s, parameters.memory(inner_level.name, kind)
    inner_latency = parameters.memory_latency(inner_level.name)
    peak = float(engine.peak_flops_per_s[peak_dtype])
    step_flops, split_flops = float(k_step_flops(engine, peak)), float(split_reduction_flops(engine, peak))
    epilogue = float(epilogue_flops_per_output(engine, hardware, peak, c_bytes))
    best: tuple[float, float, float, str] | None = None  # (time, executed FLOPs, inner bytes, kernel)
    for kernel in candidates:
        tiles = batch * math.ceil(m / kernel.m) * math.ceil(n / kernel.n)
        k_blocks = math.ceil(k / kernel.k)
        split = min(max(math.floor(engine.units / tiles), 1.0), k_blocks) if kernel.split_k else 1.0
        waves = math.ceil(tiles * split / engine.units)
        step = max(C.FLOPS_PER_FMA * kernel.m * kernel.n * kernel.k, step_flops)
        executed = (waves * engine.units * (math.ceil(k_blocks / split) * step + kernel.m * kernel.n * epilogue)
                    + (split_flops if split > 1 else 0.0))
        inner = batch * (m * k * math.ceil(n / kernel.n) * a_scale * a_bytes + k * n * math.ceil(m / kernel.m) * b_bytes
                         + m * n * c_bytes) * granule
        compute = max(float(compute_time_s(executed, rate, compute_latency)), side_compute_s)
        memory = float(memory_time_s(inner, inner_bandwidth, inner_efficiency, inner_latency))
        time = float(kernel_busy_s((compute, memory), context.overlap))
        if best is None or time < best[0]:
            best = (time, executed, inner, kernel.name)
    assert best is not None
    return best[1], (best[2], *traffic[1:]), best[3]


def dequantize_flops(op: Op, weight_elements: ArrayLike, outputs_per_k_block: ArrayLike = 0.0,
                     k: ArrayLike = 0.0, block_scaled_mma: bool = True) -> SIValue:
    """Vector-engine work inside a matmul with quantized weights (``conventions``): integer weights under
    float activations, and block-scaled weights under 16-bit or wider float activations, are dequantized,
    ``conventions.DEQUANTIZE_FLOPS_PER_WEIGHT`` FLOP-equivalents per weight element, once per pass over
    the weights; fp8_block weights under fp8 activations run natively, their block scales applied to the
    fp32 partial sums every 128 of ``k`` (``outputs_per_k_block``: batch x m x n output elements). The MX
    and NVFP4 formats under activations of their element width run natively where the matrix engine has
    block-scaled MMA (``block_scaled_mma``, ``has_block_scaled_mma``); without it, fp4 elements under fp8
    activations are converted element by element (as under bf16), and mxfp8's fp8 elements run on the fp8
    MMA with their scales applied to the partial sums every block of k (32), as fp8_block's every 128."""
    if len(op.inputs) < 2 or op.inputs[1].role != "weight":
        return 0.0
    weight, activation = get_dtype(op.inputs[1].dtype), get_dtype(op.inputs[0].dtype)
    if activation.kind != "float":
        return 0.0
    per_weight = C.DEQUANTIZE_FLOPS_PER_WEIGHT.get(weight.name, 0.0)
    if weight.block_scaled and activation.bytes_per_element < C.BLOCK_SCALED_WEIGHT_ONLY_ACTIVATION_BYTES:
        if weight.name != "fp8_block" and block_scaled_mma:
            return 0.0
        element = get_dtype(weight.element or weight.name)
        if element.bits < activation.bits:  # no MMA for the narrower element: each one converted (W4A8)
            return per_weight * floats(weight_elements)
        block_k = C.FP8_BLOCK_PROMOTION_K if weight.name == "fp8_block" else weight.scale_block
        promotions = np.ceil(floats(k) / block_k)
        return C.BLOCK_SCALE_FLOPS_PER_PROMOTION * floats(outputs_per_k_block) * promotions
    return per_weight * floats(weight_elements) if per_weight else 0.0


def has_block_scaled_mma(hardware: Hardware) -> bool:
    """Whether a matrix engine applies MX / NVFP4 block scales inside its MMA instruction. Read from the
    engines' dtypes: a matrix engine that runs fp4 has it. NVIDIA's FP4 tensor cores arrived with Blackwell
    together with block-scaled MMA (PTX ISA 8.7: ``tcgen05.mma`` ``.kind::mxf8f6f4`` / ``.kind::mxf4nvf4``
    with ``.block_scale`` on sm_100a, ``mma.sync`` ``.block_scale`` on sm_120a: B200, B300, GB200, GB300, RTX
    PRO 6000); AMD's FP4 arrived with CDNA 4's scaled MFMA (``V_MFMA_SCALE_F32_*_F8F6F4``, MI350 series ISA).
    Hopper (H100, H200), Ada, Ampere and CDNA 3 (MI300X) have neither FP4 nor block-scaled MMA."""
    return any(engine.kind == "matrix" and runs(engine, "fp4") for engine in hardware.compute.values())


def vector_engine(hardware: Hardware) -> tuple[ComputeEngine, str] | None:
    """The device's vector engine at its fp32 rate (where element-wise conversion work runs)."""
    for engine in hardware.compute.values():
        if engine.kind == "vector" and runs(engine, "fp32"):
            return engine, "fp32"
    return None


@cost_rule("matmul")
def matmul_cost(op: Op, context: CostContext) -> OpCost:
    """2*m*n*k FLOPs per batch; the fastest of the engine's candidate kernels; tiled traffic at
    every level (see costs.traffic); integer weights under float activations are dequantized on
    the vector engine inside the same kernel."""
    m, n, k, batch = _matmul_dims(op)
    engine, peak_dtype = select_engine(context.hardware, op.kind, op.dtype)
    flops = matmul_flops(m, n, k, batch)
    dequantize = dequantize_flops(op, batch * floats(k) * n, batch * floats(m) * n, k,
                                  has_block_scaled_mma(context.hardware))
    vector = vector_engine(context.hardware) if np.any(np.asarray(dequantize) > 0) else None
    # The dequantizing engine works inside the kernel, so its time bounds every candidate's compute time.
    side_s = 0.0 if vector is None else compute_time_s(dequantize, compute_rate_flops_per_s(
        context.hardware, context.pricing, vector[0].name, vector[1], op.kind), 0.0)
    executed, traffic, kernel = select_kernel(
        op, context, engine, peak_dtype, m, n, k, batch,
        (_bytes_per_element(op, 0), _bytes_per_element(op, 1), _bytes_per_element(op, 0, "outputs")),
        side_compute_s=side_s)
    cost = OpCost(flops=flops, executed_flops=executed, engine=engine.name, peak_dtype=peak_dtype,
                  bytes_by_level=traffic, kernel=kernel)
    if vector is not None:
        cost = replace(cost, side_engine=vector[0].name, side_peak_dtype=vector[1], side_flops=dequantize)
    return cost


@cost_rule("conv")
def conv_cost(op: Op, context: CostContext) -> OpCost:
    """Implicit GEMM: m = batch x output positions, n = out channels, k = in channels/groups x kernel."""
    m, n, k = _attr(op, "m"), _attr(op, "n"), _attr(op, "k")
    engine, peak_dtype = select_engine(context.hardware, op.kind, op.dtype)
    input_elements = op.inputs[0].numel if op.inputs else floats(m) * k
    flops = matmul_flops(m, n, k)
    executed, traffic, kernel = select_kernel(
        op, context, engine, peak_dtype, m, n, k, 1,
        (_bytes_per_element(op, 0), _bytes_per_element(op, 1), _bytes_per_element(op, 0, "outputs")),
        a_compulsory_elements=input_elements)
    return OpCost(flops=flops, executed_flops=executed, engine=engine.name, peak_dtype=peak_dtype,
                  bytes_by_level=traffic, kernel=kernel)


@cost_rule("attention")
def attention_cost(op: Op, context: CostContext) -> OpCost:
    """Scaled dot-product attention, ``implementation`` 'flash' (fused, scores stay on chip, masked
    blocks skipped) or 'naive' (three kernels; the score matrix goes through memory).

    Grouped KV heads (GQA/MQA): ``kv_heads`` K/V heads each serve ``heads / kv_heads`` query heads;
    a flash kernel packs a group's queries into its Q blocks (flash-decoding splits the KV length
    over the units for few queries), so K and V are read per KV head, not per query head. A
    ``window`` (sliding-window attention, Mistral) limits each query to the last ``window`` keys; with
    ``chunked`` (Llama 4) to the keys of its own chunk of ``window`` positions (``attended_pairs``).
    ``v_head_dim`` (default ``head_dim``): the values' width when it differs from the keys' (MLA);
    ``kv_shared``: the values are the first ``v_head_dim`` elements of the cached keys, so the cache is
    read once (MLA's absorbed decode: FlashMLA reads the 576-wide latent + rotary key once).

    ``backward``: the gradient kernel. Its useful FLOPs are twice the forward's (four matmuls: dV, dP,
    dQ, dK: the model-FLOPs convention); a flash kernel executes a fifth, recomputing the scores
    (FlashAttention-2, arXiv 2307.08691, Algorithm 2; ``torch.utils.flop_counter`` counts it too), so
    2.5x the forward. It reads Q, K, V,
    O and dO and writes dQ, dK and dV: twice the forward's traffic at every level.
    ``backward_split``: the gradient split into a dK/dV kernel and a dQ kernel that each recompute the
    scores (``conventions.ATTENTION_BACKWARD_EXECUTED_SPLIT``: 3.5x the forward). ``backward_one_core``: the
    gradient kernels' grids have no parallel dimension (splash attention's dq and dkv kernels:
    ``dimension_semantics`` all "arbitrary"), so on a chip whose two TensorCores appear as one device
    (megacore: TPU v4, v5p; ``tensor_cores``) Pallas runs them on one core, at the rate of half the chip's
    MXUs: their executed FLOPs are counted as the chip-time they take (x cores).

    A forward flash kernel also counts its thread blocks (``attention_work_units``), each with a fixed cost
    (``Parameters.unit_latency``), and a prefill's outermost traffic adds to its main loop
    (``exposed_prefill_traffic``)."""
    batch, heads = _attr(op, "batch"), _attr(op, "heads")
    seq_q, seq_kv, head_dim = _attr(op, "seq_q"), _attr(op, "seq_kv"), _attr(op, "head_dim")
    kv_heads = op.attrs.get("kv_heads")
    kv_heads = heads if kv_heads is None else kv_heads  # (an array of KV heads when alike ops are priced together)
    window = op.attrs.get("window")
    causal, implementation = op.attrs.get("causal", False), op.attrs.get("implementation", "flash")
    flash = implementation == "flash"
    engine, peak_dtype = select_engine(context.hardware, op.kind, op.dtype)
    v_dim = op.attrs.get("v_head_dim", head_dim)
    # two matmuls a pair of query and key: q.k over head_dim and p.v over v_dim
    per_fma_pair = C.FLOPS_PER_FMA * (floats(head_dim) + v_dim)
    # elements of K and V each token brings, as a multiple of head_dim (2: K and V of equal width)
    kv_widths = 1.0 if op.attrs.get("kv_shared", False) else (floats(head_dim) + v_dim) / head_dim
    full_pairs = floats(seq_q) * seq_kv
    chunked = bool(op.attrs.get("chunked", False)) and window is not None
    pairs = attended_pairs(seq_q, seq_kv, causal, window, chunked)
    masked = causal or window is not None
    # A flash kernel skips only whole masked blocks: a diagonal block of B keys computes B*B pairs of
    # which B(B+1)/2 are attended, so each query row wastes (B-1)/2 pairs on average; over a causal
    # square of n blocks that is exactly the documented n(n+1)/2 blocks. B is the engine's key block
    # (PyTorch's CPU kernel: 512 keys against query blocks of 32-256, which wastes the same (B-1)/2).
    # An op's ``kv_block`` (the run's configured kernel block: MaxText's sa_block_*) overrides the engine's.
    # (``is None``, not truthiness: ops priced together carry their attributes as arrays.)
    configured_block = op.attrs.get("kv_block")
    block = configured_block if configured_block is not None else (
        engine.attention_kv_block or C.FLASH_ATTENTION_BLOCK)
    # A causal sliding window has a second partly masked block diagonal, at its lower edge: every query whose
    # window starts after the first key computes the block that edge cuts, (B-1)/2 masked pairs a row on average
    # (splash attention's LocalMask: a query block of 512 against a window of 1,025 keys runs 3 key blocks,
    # 1,536 keys a row, where the diagonal alone would leave 1,280).
    cut_rows = floats(seq_q) + (window_edge_rows(seq_q, seq_kv, window)
                                if causal and window is not None and not chunked else 0.0)
    executed_pairs = minimum(full_pairs, pairs + cut_rows * (block - 1) / 2) \
        if flash and masked else full_pairs
    if flash and chunked and not causal:
        # A decode query of a chunked layer sees whole key blocks from its chunk's start (a multiple of the chunk, and
        # Llama 4's 8,192 is a multiple of every kernel's key block): no block is partly masked, unlike a window's.
        executed_pairs = pairs
    scale = floats(batch) * heads
    useful = scale * pairs * (per_fma_pair + C.FLOPS_PER_SOFTMAX_ELEMENT)
    executed = scale * executed_pairs * (per_fma_pair + C.FLOPS_PER_SOFTMAX_ELEMENT)

    q_bytes = _bytes_per_element(op, 0)
    kv_bytes = _bytes_per_element(op, 1)
    group = floats(heads) / kv_heads
    # Keys any query sees: a causal window of W reaches back W - 1 keys from the first of seq_q queries.
    # Chunked: from the start of the first query's chunk (without a mask: the last position's chunk).
    if window is None:
        kv_span = floats(seq_kv)
    elif chunked:
        first = floats(seq_kv) - (np.asarray(seq_q) if causal else 1)
        kv_span = floats(seq_kv) - chunk_start(first, floats(window))
    else:
        kv_span = minimum(seq_kv, floats(window) + (np.asarray(seq_q) - 1 if causal else 0))
    kv_fraction = executed_pairs / maximum(full_pairs, 1.0)
    q_and_o = scale * floats(seq_q) * (floats(head_dim) + v_dim) * q_bytes
    compulsory = q_and_o + kv_widths * floats(batch) * kv_heads * kv_span * head_dim * kv_bytes
    hardware = context.hardware
    traffic: list[SIValue] = []
    for index, level in enumerate(hardware.memory):
        if level.off_device:
            traffic.append(0.0)
            continue
        capacity = inner_capacity_bytes(hardware, index, engine)
        if flash and capacity is not None:
            rows = floats(seq_q) * group
            moved = flash_attention_elements_moved(rows, seq_kv, head_dim, capacity / max(q_bytes, kv_bytes),
                                                   kv_fraction)
            kv_moved = (moved - 2 * rows * floats(head_dim)) * kv_widths / 2
            per_kv_head = rows * (floats(head_dim) + v_dim) * q_bytes + kv_moved * kv_bytes
            traffic.append(maximum(floats(batch) * kv_heads * per_kv_head, compulsory))
        elif flash:
            traffic.append(compulsory)
        else:
            # QK^T writes the scores, softmax reads and writes them, PV reads them.
            traffic.append(compulsory + 4 * scale * full_pairs * q_bytes)
    if op.attrs.get("backward", False):
        split = bool(op.attrs.get("backward_split", False))
        executed_share = C.ATTENTION_BACKWARD_EXECUTED_SPLIT if split else C.ATTENTION_BACKWARD_EXECUTED
        traffic_share = C.ATTENTION_BACKWARD_TRAFFIC_SPLIT if split else C.ATTENTION_BACKWARD_TRAFFIC
        cores = tensor_cores(hardware) if op.attrs.get("backward_one_core", False) else 1
        useful, executed = C.ATTENTION_BACKWARD_USEFUL * useful, executed_share * cores * executed
        traffic = [traffic_share * level_bytes for level_bytes in traffic]
    blocked = flash and not op.attrs.get("backward", False)
    decode_kernel = op.attrs.get("decode_kernel", False)
    units = attention_work_units(batch, heads, kv_heads, seq_q, seq_kv, packed=engine.attention_packs_query_groups,
                                 decode_kernel=decode_kernel) if blocked else 0.0
    exponentials = prefill_exponentials(scale * executed_pairs, seq_q, seq_kv, decode_kernel) \
        if blocked and exponential_rate_per_s(hardware, engine) is not None else 0.0
    return OpCost(flops=useful, executed_flops=executed, engine=engine.name, peak_dtype=peak_dtype,
                  bytes_by_level=tuple(traffic), launches=1 if flash else 3, work_units=units,
                  exposed_traffic=exposed_prefill_traffic(seq_q, seq_kv, decode_kernel) if blocked else False,
                  exponentials=exponentials,
                  blocks_overlap=_one_query(seq_q, seq_kv, decode_kernel) if blocked else False,
                  splits_keys=decode_splits_keys(batch, heads, kv_heads, seq_q, seq_kv, engine.units, block,
                                                 decode_kernel) if blocked else False)


def window_edge_rows(seq_q: RuleDimension, seq_kv: RuleDimension, window: RuleDimension) -> SIValue:
    """Queries (the last ``seq_q`` of ``seq_kv`` positions) whose causal window of ``window`` keys starts after
    the first key: those at positions ``p >= window``, whose window's lower edge cuts a key block."""
    return clip(floats(seq_kv) - maximum(floats(window), floats(seq_kv) - floats(seq_q)), 0.0, floats(seq_q))


def tensor_cores(hardware: Hardware) -> int:
    """TensorCores one device holds: 2 on a TPU whose two cores appear as one device (megacore: v4, v5p),
    counted by its per-core VMEM (a software-managed scratchpad's ``instances``); 1 on any other device."""
    if hardware.family != "tpu":
        return 1
    return max((level.instances for level in hardware.memory
                if level.kind == "scratchpad" and level.managed == "software"), default=1)


def attention_work_units(batch: RuleDimension, heads: RuleDimension, kv_heads: RuleDimension,
                         seq_q: RuleDimension, seq_kv: RuleDimension, packed: bool = False,
                         decode_kernel: Any = False) -> SIValue:
    """The thread blocks a flash-style attention kernel runs, each with a fixed prologue and epilogue (load its
    queries, rescale and write its output) beside its main loop over the keys. Prefill kernels tile each query
    head's rows into blocks of ``conventions.FLASH_ATTENTION_QUERY_BLOCK``: batch x heads x ceil(seq_q / 128).
    Decode kernels pack the query heads that share a KV head into one block (TensorRT-LLM's XQA, FlashInfer's and
    FlashAttention's GQA packing), so there is one block a sequence and KV head (before any split over the keys):
    batch x kv_heads x ceil(group / 128). NVIDIA's generation-attention tables show that cost: with 2-8 cached
    tokens, time grows with batch x KV heads at 20-40 ns per pair on an H100 (132 SMs: 3-5 us per block and SM)
    whatever the byte count (``calibration.aiconfigurator``).

    ``packed`` (``ComputeEngine.attention_packs_query_groups``): the prefill kernels pack a KV head's query heads into
    their rows too (FlashAttention-3's PackGQA: https://github.com/Dao-AILab/flash-attention/blob/main/hopper/
    heuristics.h, ``should_pack_gqa`` returns true for variable-length batches), so a prompt's blocks number batch x
    kv_heads x ceil(seq_q x group / 128). NVIDIA's context-attention tables of vLLM and SGLang on H100 show it: at
    batch 64, one KV head and 1 token a prompt, 1 to 96 query heads take the same 12-13 us, where TensorRT-LLM's
    kernels (a block per query head) go from 14 to 132 us."""
    block = C.FLASH_ATTENTION_QUERY_BLOCK
    decode = floats(batch) * kv_heads * np.ceil(floats(heads) / kv_heads / block)
    prefill = floats(batch) * kv_heads * np.ceil(floats(seq_q) * heads / kv_heads / block) if packed \
        else floats(batch) * heads * np.ceil(floats(seq_q) / block)
    one = _one_query(seq_q, seq_kv, decode_kernel)
    return (decode if one else prefill) if isinstance(one, bool) else where(one, decode, prefill)


def _one_query(seq_q: RuleDimension, seq_kv: RuleDimension, decode_kernel: Any = False) -> Any:
    """Whether attention of ``seq_q`` queries against ``seq_kv`` keys runs the engines' decode kernels: one query a
    sequence against a cache (one token and no cache is a one-token prompt: their context kernels, unless the op
    says its engine runs it through the decode kernel, ``decode_kernel``: vLLM's FlashInfer backend). Point by
    point, so alike ops priced together as arrays count what each would alone."""
    scalar_flag = np.ndim(decode_kernel) == 0 and not is_traced(decode_kernel)
    if not is_traced(seq_q) and not is_traced(seq_kv) and np.ndim(seq_q) == 0 and np.ndim(seq_kv) == 0 and scalar_flag:
        return float(seq_q) == 1 and (float(seq_kv) > 1 or bool(decode_kernel))
    cached = greater(seq_kv, 1)
    if scalar_flag:
        return where(equal(seq_q, 1), True if decode_kernel else cached, False)
    return where(equal(seq_q, 1), where(decode_kernel, True, cached), False)


def decode_splits_keys(batch: RuleDimension, heads: RuleDimension, kv_heads: RuleDimension, seq_q: RuleDimension,
                       seq_kv: RuleDimension, units: float, key_block: RuleDimension, decode_kernel: Any = False) -> Any:
    """Whether a decode kernel splits each sequence's keys over several thread blocks (flash-decoding) and so
    ends with a phase that combines their partial softmax results: when its blocks alone (one a sequence and
    KV head, ``attention_work_units``) fill less than ``conventions.SPLIT_KEYS_FILL`` of the engine's units
    and the cache spans more than one key block. FlashAttention's ``num_splits_heuristic`` (csrc/flash_attn/
    flash_api.cpp: "If we have enough to almost fill the SMs, then just use 1 split", ``batch_nheads_mblocks >=
    0.8f * num_SMs``; at most one split a key block) then launches a combine kernel; TensorRT-LLM's XQA multi-block
    mode (history / ``kMinHistoryTokensPerBlock``, 128 tokens, blocks a sequence) reduces after a grid-wide
    semaphore; FlashInfer merges the partial states. NVIDIA's generation-attention tables show the step: A100
    vLLM with one sequence and KV head, 12.5 us at 2-128 cached tokens and 17.3 us at 256 (a second key block),
    where the bytes add 0.1 us; an H100 TensorRT-LLM kernel 11.3 us at 256 and 15.1 us at 512."""
    one = _one_query(seq_q, seq_kv, decode_kernel)
    filled = at_least(attention_work_units(batch, heads, kv_heads, 1, seq_kv), C.SPLIT_KEYS_FILL * units)
    long = greater(seq_kv, key_block)
    if isinstance(one, bool) and not any(map(is_traced, (filled, long))) and np.ndim(filled) == np.ndim(long) == 0:
        return bool(one and not filled and long)
    return where(one, where(filled, False, long), False)


# Decode blocks overlap the streaming (``OpCost.blocks_overlap``): a decode kernel's blocks each hold one
# sequence's query group and stream its KV cache; an SM keeps several resident (XQA, FlashAttention's and
# FlashInfer's decode kernels are small in registers and shared memory), so one block's prologue and epilogue
# (load its queries, reduce and write its output) run while the others' loads are in flight, and the kernel takes
# the longer of the blocks' fixed time and the stream. NVIDIA's H100 TensorRT-LLM generation tables show it: at
# batch 512, 8 KV heads and a group of 4, the kernel takes 153 us at 2-64 cached tokens (the blocks' floor), 214 us
# at 256 (0.54 GB: 160 us at the datasheet's HBM rate) and 370 us at 512 (1.07 GB), about the larger of the floor
# and the stream, not their sum (313 and 473 us); priced as a sum, the fit's compromise left large-batch
# short-cache rows 20-35% fast and mid-length ones 15-30% slow. Prefill's blocks keep adding
# (``exposed_prefill_traffic``).


def exposed_prefill_traffic(seq_q: RuleDimension, seq_kv: RuleDimension, decode_kernel: Any = False) -> Any:
    """Prefill attention's outermost traffic adds to its main loop (``kernel_busy_s``): each Q tile loads its
    queries and first keys before its loop and stores its output after it, and with a few key blocks a tile (short
    prompts) no pipeline hides them. NVIDIA's context-attention tables (``calibration.aiconfigurator``) show it:
    fitted with the traffic overlapped, H100's TensorRT-LLM and SGLang prompts of 128-2048 tokens came out
    12-24% slow. Decode kernels stream their cache and keep the overlap."""
    one = _one_query(seq_q, seq_kv, decode_kernel)
    return (not one) if isinstance(one, bool) else where(one, False, True)


# The pseudo-dtype under which a kind's exponential rate has its efficiency (``Parameters.compute``:
# ``attention:tensor_cores:exp``); a parameter set without it takes the kind's shared efficiency.
EXPONENTIAL_DTYPE = "exp"


def prefill_exponentials(computed_scores: SIValue, seq_q: RuleDimension, seq_kv: RuleDimension,
                         decode_kernel: Any = False) -> Any:
    """The exponentials a prefill (context) flash kernel evaluates: one per score element it computes, masked ones
    of its diagonal blocks included (FlashAttention-2, arXiv 2307.08691, Algorithm 1: ``exp(S - m)`` over each
    whole block), on the special-function units and in series with the block's matmuls. The engines' context
    kernels show it: on an H100 (NVIDIA's context-attention tables, ``calibration.aiconfigurator``) the time per
    computed score of long prompts grows linearly with the head dimension with an intercept of 0.18-0.26 ps, one
    exponential at 3.9-5.5 T/s, the special-function units' 3.9 T/s (``conventions.SFU_EXPONENTIALS_PER_CLOCK``):
    head dim 64 runs at 49% of the tensor cores' peak and 256 at 72% in vLLM's FlashAttention-3 kernels. Decode
    kernels (one query against a cache) keep their time (their reads of the cache bind them): none counted."""
    one = _one_query(seq_q, seq_kv, decode_kernel)
    if isinstance(one, bool):
        return 0.0 if one else computed_scores
    return where(one, 0.0, computed_scores)


def exponential_rate_per_s(hardware: Hardware, engine: ComputeEngine) -> float | None:
    """Exponentials a second on ``engine``'s units' special-function units: NVIDIA GPUs' SMs evaluate
    ``conventions.SFU_EXPONENTIALS_PER_CLOCK`` a clock each (the tensor-core engine's units and clock); None where
    no such rate is sourced (other vendors, engines without a clock), whose kernels keep their softmax inside
    their compute as before."""
    if hardware.family != "gpu" or hardware.vendor != "NVIDIA" or engine.kind != "matrix" or not engine.clock_hz:
        return None
    return float(engine.units * engine.clock_hz * C.SFU_EXPONENTIALS_PER_CLOCK)


def exponential_time_s(hardware: Hardware, parameters: Parameters, cost: OpCost, kind: str) -> SIValue:
    """The time of ``cost``'s exponentials (``OpCost.exponentials``) at the engine's special-function rate times
    the ``EXPONENTIAL_DTYPE`` efficiency of ``kind`` (0 where it has none)."""
    if not is_traced(cost.exponentials) and not np.any(cost.exponentials):
        return 0.0
    engine = hardware.compute[cost.engine]
    rate = exponential_rate_per_s(hardware, engine)
    if rate is None:
        return 0.0
    return cost.exponentials / (rate * parameters.compute(cost.engine, EXPONENTIAL_DTYPE, kind))


def _vector_cost(op: Op, context: CostContext, flops: SIValue) -> OpCost:
    engine, peak_dtype = select_engine(context.hardware, op.kind, op.dtype)
    return OpCost(flops=flops, executed_flops=flops, engine=engine.name, peak_dtype=peak_dtype,
                  bytes_by_level=streaming_bytes(op, context))


def _output_elements(op: Op) -> np.ndarray:
    if "elements" in op.attrs:
        return floats(op.attrs["elements"])
    tensors = op.outputs or op.inputs
    return floats(sum(t.numel for t in tensors))


@cost_rule("elementwise")
def elementwise_cost(op: Op, context: CostContext) -> OpCost:
    per_element = op.attrs.get("flops_per_element", C.FLOPS_PER_ELEMENTWISE)
    return _vector_cost(op, context, per_element * _output_elements(op))


@cost_rule("reduction")
def reduction_cost(op: Op, context: CostContext) -> OpCost:
    """One FLOP per reduced element. ``blocks`` (attribute): the kernel's thread blocks where each pays a
    fixed cost of its own beside the stream (``OpCost.work_units``, ``Parameters.unit_latency``): a reduction
    to one value whose blocks each reduce a row and combine it atomically into the same word (vLLM's dynamic
    per-tensor fp8 scale, ``segmented_max_reduction_strided``: one block per token, each ending in an
    ``atomicMax`` on the one scale; calibration.aiconfigurator.ATOMIC_SCALE_GEMMS)."""
    elements = floats(sum(t.numel for t in op.inputs)) if op.inputs else _output_elements(op)
    cost = _vector_cost(op, context, C.FLOPS_PER_REDUCED_ELEMENT * elements)
    blocks = op.attrs.get("blocks")
    return cost if blocks is None else replace(cost, work_units=floats(blocks))


@cost_rule("softmax")
def softmax_cost(op: Op, context: CostContext) -> OpCost:
    return _vector_cost(op, context, C.FLOPS_PER_SOFTMAX_ELEMENT * _output_elements(op))


@cost_rule("norm")
def norm_cost(op: Op, context: CostContext) -> OpCost:
    per_element = C.FLOPS_PER_RMSNORM_ELEMENT if op.attrs.get("norm") == "rms" else C.FLOPS_PER_LAYERNORM_ELEMENT
    return _vector_cost(op, context, per_element * _output_elements(op))


@cost_rule("embedding")
def embedding_cost(op: Op, context: CostContext) -> OpCost:
    """A gather: reads the indices and the selected rows, writes them; no FLOPs. The table itself
    is not read whole, so the rows read equal the output."""
    # No FLOPs: the engine only matters for the record; use the table's dtype, not the indices'.
    engine, peak_dtype = select_engine(context.hardware, op.kind, op.outputs[0].dtype if op.outputs else op.dtype)
    rows = sum(t.bytes for t in op.outputs)
    indices = sum(t.bytes for t in op.inputs if t.role != "weight")
    traffic = tuple(0.0 if level.off_device else 2 * rows + indices for level in context.hardware.memory)
    return OpCost(flops=0.0, executed_flops=0.0, engine=engine.name, peak_dtype=peak_dtype, bytes_by_level=traffic)


@cost_rule("copy")
def copy_cost(op: Op, context: CostContext) -> OpCost:
    return _vector_cost(op, context, 0.0)


# ------------------------------------------------------------------------------------ collectives
# Bytes each chip sends per byte of payload, as a function of group size p: one entry per collective
# of the op-kind table (``op_kinds.COLLECTIVES``; a test checks they match).
COLLECTIVE_TRAFFIC: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,
    "send": lambda p: 1.0,
}


def collective_steps(collective: str, topology: str, group_size: int) -> float:
    """Latency-bound steps of a collective: a ring takes p-1 steps per phase; a d-dimensional torus
    d*(p**(1/d) - 1); a switch or full mesh one hop per phase; a dragonfly at most 3 hops."""
    p = max(group_size, 1)
    phases = 2 if collective == "all_reduce" else 1
    if collective == "send":
        return 1.0
    per_phase: float = {
        "ring": p - 1, "torus2d": 2 * (math.sqrt(p) - 1), "torus3d": 3 * (p ** (1 / 3) - 1),
        "mesh2d": 2 * (math.sqrt(p) - 1), "switch": 1, "fully_connected": 1, "dragonfly": 3, "point_to_point": p - 1,
    }[topology]
    return phases * max(per_phase, 1 if p > 1 else 0)


def links_in_use(link: Link, collective: str = "all_reduce", group_size: int = 2) -> int:
    """Links a chip drives at once in a collective: every port of a switch or dragonfly (they all
    reach the fabric); else one link for a point-to-point send (to a neighbour), one per peer on a
    full mesh (at most p - 1), both directions of each ring or torus dimension."""
    if link.topology in ("switch", "dragonfly"):
        return link.links_per_chip
    if collective == "send":
        return 1
    if link.topology == "fully_connected":
        return max(min(link.links_per_chip, group_size - 1), 1)
    per_topology = {"ring": 2, "torus2d": 4, "torus3d": 6, "mesh2d": 4, "point_to_point": 1}
    return min(link.links_per_chip, per_topology.get(link.topology, link.links_per_chip))


def choose_link(hardware: Hardware, name: str | None) -> Link:
    if name is not None:
        if name not in hardware.links:
            raise PerfmodelError(f"{hardware.name} has no link {name!r}; links: {', '.join(hardware.links) or 'none'}")
        return hardware.links[name]
    for kind in ("chip_to_chip", "network", "host"):
        for link in hardware.links.values():
            if link.kind == kind:
                return link
    raise PerfmodelError(f"{hardware.name} has no links, so it cannot run a collective; add one to its spec")


# Scale-up fabrics where an all-reduce can be one-shot, each chip reading every peer's whole buffer and
# reducing it in one step instead of the two steps of a reduce-scatter and an all-gather: NVLink through
# NVSwitch, where the engines' kernel tables measure it. A full mesh (MI300X's Infinity Fabric, Groq's
# C2C) could run one too, but no measurement here shows which its libraries or compiler use; it stays
# two-step (on Groq the one-shot would move the LPU rows' error from +167% to +189%, further off).
ONE_SHOT_TOPOLOGIES = ("switch",)


def _one_or_two_shot(link: Link, group: int, payload: Any, two_shot_bytes: Any, two_shot_latency: Any) -> tuple[Any, Any]:
    """(wire bytes per link, step latency) of the faster of a one-shot all-reduce (``p - 1`` payloads
    read per chip, one step) and the two-shot one (``2 (p - 1) / p`` payloads, two steps), judged at the
    link's datasheet bandwidth and step latency: the default where the spec names no engine's rule
    (``costs.all_reduce``). The one step's latency is the link's; the kernel tables show it: 128
    elements cost 4.2 us on 2 H100s and 4.7 us on 8 with vLLM's one-shot kernel, while two-shot 1 MiB
    on 8 costs 15 us, not the 9 us of a ring's bandwidth term."""
    one_shot_bytes = (group - 1) * payload / links_in_use(link, "all_reduce", group)
    step = _kernel_step_s(link)
    bandwidth = link.bandwidth_bytes_per_s_per_direction
    one_shot = greater(two_shot_bytes / bandwidth + two_shot_latency, one_shot_bytes / bandwidth + step)
    if not is_traced(one_shot) and np.ndim(one_shot) == 0:
        return (one_shot_bytes, step) if bool(one_shot) else (two_shot_bytes, two_shot_latency)
    return where(one_shot, one_shot_bytes, two_shot_bytes), where(one_shot, step, two_shot_latency)


def _kernel_step_s(link: Link) -> float:
    """The step latency of the engine's own peer-memory kernels: measured (``kernel_latency``) or the link's."""
    return link.kernel_latency_s if link.kernel_latency_s is not None else (link.latency_s or 0.0)


def _engine_all_reduce(link: Link, group: int, payload: Any, library: str | None = None,
                       algorithm: str | None = None) -> tuple[Any, Any, KernelName]:
    """(wire bytes per link, step latency, kernel class) of the all-reduce the link's engine runs
    (``costs.all_reduce``: its algorithm by payload and group size, from the engine's source), or the
    one ``library`` (NCCL) runs when the op calls it directly, or ``algorithm`` where the op forces one
    (nccl-tests under ``NCCL_ALGO=NVLS``)."""
    chosen = algorithm if algorithm is not None else all_reduce.algorithms(link.all_reduce, group, payload, library)
    # NCCL's algorithms step at the link's latency (NCCL's), the engine's kernels at their measured one
    names = [chosen] if isinstance(chosen, str) else sorted(set(np.asarray(chosen).ravel().tolist()))
    per_link = links_in_use(link, "all_reduce", group)
    parts = {}
    for name in names:
        step = _kernel_step_s(link) if name in all_reduce.KERNEL_STEPPED else (link.latency_s or 0.0)
        implementation = all_reduce.IMPLEMENTATION[name]
        parts[name] = (all_reduce.TRAFFIC[name](group) * payload / per_link, all_reduce.STEPS[name](group) * step,
                       link.name if implementation is None else f"{link.name}{KERNEL_CLASS_SEPARATOR}{implementation}")
    if isinstance(chosen, str):
        return parts[chosen]
    wire_bytes, latency = 0.0 * floats(payload), 0.0 * floats(payload)
    classes = np.empty(np.shape(chosen), dtype=object)
    for name, (bytes_, steps, label) in parts.items():
        mask = chosen == name
        wire_bytes, latency = where(mask, bytes_, wire_bytes), where(mask, steps, latency)
        classes[mask] = label
    return wire_bytes, latency, classes.astype(str)


@cost_rule("collective")
def collective_cost(op: Op, context: CostContext) -> OpCost:
    """Ring-style collectives priced on a link: bytes on the wire per chip over the bandwidth of the
    links in use, plus per-step latency (topology-aware: on a torus, the links and steps of the axes the
    group spans, ``costs.topology``); the payload is read and written in memory. An all-reduce on a
    scale-up link that names its engine's rule runs the algorithm that engine picks (``costs.all_reduce``),
    charged as that implementation's kernel class of the link."""
    collective = op.attrs.get("collective", "all_reduce")
    group = int(_attr(op, "group_size"))
    payload = floats(op.attrs.get("bytes", op.input_bytes))
    link = choose_link(context.hardware, op.attrs.get("link"))
    if op.attrs.get("beyond_domain") and link.max_chips is not None and group > link.max_chips:
        # a group wider than the chip-to-chip domain (wide expert parallelism across nodes): the whole
        # collective is priced on the scale-out link (conservative: its intra-node share is not split off)
        link = next((other for other in context.hardware.links.values() if other.kind == op.attrs["beyond_domain"]),
                    link)
    # On a torus the group drives the links of the axes it spans, not every port (costs.topology).
    slice_chips = op.attrs.get("slice_chips")
    spans = None if collective == "send" else group_span(link, group, int(op.attrs.get("stride", 1)),
                                                           None if slice_chips is None else int(slice_chips))
    links = links_in_use(link, collective, group) if spans is None else ring_links(link, spans)
    wire_bytes = COLLECTIVE_TRAFFIC[collective](group) * payload / links
    steps = collective_steps(collective, link.topology, group) if spans is None else \
        (2 if collective == "all_reduce" else 1) * span_steps(spans)
    latency = steps * (link.latency_s or 0.0)
    link_class: KernelName = None
    library = op.attrs.get("library")  # an op that calls NCCL itself (NCCL's own benchmark tables)
    # an algorithm the run forced (NCCL_ALGO): priced as that algorithm whatever the engine's rule
    algorithm = op.attrs.get("algorithm")
    if algorithm is not None and (collective != "all_reduce" or algorithm not in all_reduce.TRAFFIC):
        raise PerfmodelError(f"op {op.name!r}: algorithm {algorithm!r} is not an all-reduce algorithm "
                             f"({', '.join(all_reduce.TRAFFIC)})")
    if collective == "all_reduce" and link.kind == "chip_to_chip" and group > 1:
        if link.all_reduce not in (None, all_reduce.FASTEST) or library is not None or algorithm is not None:
            wire_bytes, latency, link_class = _engine_all_reduce(link, group, payload, library, algorithm)
        elif link.topology in ONE_SHOT_TOPOLOGIES:
            wire_bytes, latency = _one_or_two_shot(link, group, payload, wire_bytes, latency)
    engine, peak_dtype = select_engine(context.hardware, "reduction", op.dtype)
    # A ring reduce-scatter adds (p-1)/p of the payload per chip (Thakur, Rabenseifner & Gropp 2005).
    reduce_flops = (payload / get_dtype(op.dtype).bytes_per_element * (group - 1) / max(group, 1)
                    * (collective in ("all_reduce", "reduce_scatter")))
    memory = tuple(0.0 if level.off_device else 2 * payload for level in context.hardware.memory)
    return OpCost(flops=reduce_flops, executed_flops=reduce_flops, engine=engine.name, peak_dtype=peak_dtype,
                  bytes_by_level=memory, barriers=1, link=link.name, link_bytes=wire_bytes, link_latency_s=latency,
                  link_class=link_class)


@cost_rule("view")
def view_cost(op: Op, context: CostContext) -> OpCost:
    """A view, reshape or transpose: no kernel, no FLOPs, no bytes; one host dispatch (eager only)."""
    engine, peak_dtype = select_engine(context.hardware, "view", op.dtype)
    zero = tuple(0.0 for _ in context.hardware.memory)
    return OpCost(flops=0.0, executed_flops=0.0, engine=engine.name, peak_dtype=peak_dtype, bytes_by_level=zero,
                  launches=0, host_calls=1)


@cost_rule("other")
def unknown_op_cost(op: Op, context: CostContext) -> OpCost:
    """An op without a rule: estimated from its tensors (read inputs, write outputs, one FLOP per
    output element), marked ``estimated`` and listed in the evaluation's unsupported ops."""
    engine, peak_dtype = select_engine(context.hardware, "other", op.dtype)
    flops = _output_elements(op)
    return OpCost(flops=flops, executed_flops=flops, engine=engine.name, peak_dtype=peak_dtype,
                  bytes_by_level=streaming_bytes(op, context), estimated=True)
