"""The hardware model: frozen records of one device, in SI units.

Built by :mod:`perfmodel.hardware.loader` from a YAML spec; the core reads only these records.

Conventions
-----------
* Memory levels are ordered innermost first (registers/scratchpad ... DRAM, external store).
* ``MemoryLevel.capacity_bytes`` is per instance; ``bandwidth_bytes_per_s`` is the aggregate over
  all instances (the rate at which the compute engines can move data through that level).
* ``pooled`` marks a level whose instances the compiler uses as one partitioned memory.
* A ``Link`` bandwidth is per direction and per link; ``links_per_chip`` links leave each chip.
* Scheduling overheads are in seconds; an overhead that the spec does not give is 0 (not charged),
  and the spec says so in its notes.
* The fields a sweep can vary (memory bandwidth and capacity, engine peaks, execution-mode overheads)
  are ``SIValue``s: floats as loaded, arrays of sweep points in ``roofline.sweep.hardware_with``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Mapping, TypeVar

import numpy as np

from perfmodel.dtypes import EQUIVALENT_DTYPES

if TYPE_CHECKING:
    from perfmodel.hardware.execution_models import SIValue

Family = Literal["gpu", "tpu", "wafer", "lpu", "spyre", "cpu"]
FAMILIES: tuple[str, ...] = ("gpu", "tpu", "wafer", "lpu", "spyre", "cpu")
EngineKind = Literal["matrix", "vector", "scalar"]
LevelKind = Literal["registers", "cache", "scratchpad", "sram", "dram", "external"]
Management = Literal["hardware", "software"]
Topology = Literal["switch", "ring", "torus2d", "torus3d", "mesh2d", "fully_connected", "dragonfly",
                   "point_to_point"]
LinkKind = Literal["chip_to_chip", "host", "network", "external_store"]
SourceKind = Literal["datasheet", "datasheet-secondary", "measured", "vendor-code", "dev-measured",
                     "estimate", "detected", "what-if"]


_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


def _frozen_mapping(mapping: Mapping[_Key, _Value]) -> Mapping[_Key, _Value]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where a number comes from: a URL (or a repo path for the project's own measurements)."""

    url: str
    kind: SourceKind
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Tile:
    """Native work granularity of an engine: matmul dimensions are padded to multiples of these."""

    m: int
    n: int
    k: int


@dataclass(frozen=True, kw_only=True)
class KernelShape:
    """One matmul kernel the device's software stack offers (a cuBLAS/CUTLASS CTA tile, a small-M
    GEMV-style kernel, an MXU pass): the block of the output one unit computes per step (``m x n``,
    stepping ``k`` at a time). With ``split_k`` the kernel may split k across units when there are
    fewer output tiles than units (split-K / stream-K); the engine prices every candidate and takes
    the fastest, as cuBLAS heuristics and XLA do."""

    name: str
    m: int
    n: int
    k: int
    split_k: bool = True

    @property
    def tile(self) -> Tile:
        return Tile(m=self.m, n=self.n, k=self.k)


@dataclass(frozen=True, kw_only=True)
class ComputeEngine:
    """A compute engine (tensor cores, MXUs, PE arrays, vector units) and its dense peaks.

    ``kernels`` are the candidate matmul kernel shapes (empty: the ``tile`` alone, or no padding);
    ``kernel_fixed_s`` is the device-side fixed time of every kernel on this engine (start-up: the
    first wave's prologue and pipeline fill; tail: the epilogue and drain), separate from the host's
    launch cost, which belongs to the execution mode. ``k_step_s``: the shortest step of a matmul kernel's
    k-loop, the time a unit holds its tile for each ``k`` block even when the tile's math takes less (a
    small output tile cannot hide its operand loads: NVIDIA's GEMM tables on H100 grow ~75 ns per 64 of k
    for a single output tile whatever its width; 0: no floor). ``vector_kernels_hide_memory``: whether a vector
    kernel (element-wise, reduction, norm, softmax) on this engine moves its data while it computes, so
    that the slower of the two sets its time (True, the roofline), or computes and waits for its data in
    turn, so that they add up (False: a CPU core's streaming loop, measured on this project's CPU: a
    layer norm of 128 MiB takes its in-cache time plus the DRAM stream, 338 ns per 1,000 elements
    against 155 + 146). ``attention_kv_block``: the keys a flash-style attention kernel on this engine
    processes as one block, skipping only blocks that are masked whole (None: FlashAttention-2's 128).
    ``attention_packs_query_groups``: whether this engine's prefill (context) attention kernels pack the query
    heads that share a KV head into one thread block's rows, as its decode kernels do (FlashAttention-3's PackGQA,
    which its variable-length path, the one vLLM and SGLang call for prefill on Hopper, always takes), so that a
    short prompt's blocks number batch x kv_heads x ceil(seq_q x group / 128) (``costs.rules.attention_work_units``).
    ``matmul_epilogue_hidden``: whether a matmul kernel's unit stores one output tile while it computes the next
    (Hopper's and Blackwell's warp-specialized persistent kernels: a TMA store beside the next tile's main loop), or
    stores it after its main loop and only then starts the next, so that each wave's output stores add to its time
    (False: the A100, whose multistage kernels give each thread block one tile and whose GEMM tables show the stores
    adding up; ``costs.rules.epilogue_flops_per_output``; priced where the engine declares ``kernels``, as the k-step
    floor is). A measured claim per device, not per architecture: the L40S's tables (Ada, the same kind of kernels)
    show them hidden.
    """

    name: str
    kind: EngineKind
    units: int
    peak_flops_per_s: Mapping[str, SIValue]
    clock_hz: float | None = None
    tile: Tile | None = None
    kernels: tuple[KernelShape, ...] = ()
    kernel_fixed_s: float = 0.0
    k_step_s: float = 0.0
    vector_kernels_hide_memory: bool = True
    attention_kv_block: int | None = None
    attention_packs_query_groups: bool = False
    matmul_epilogue_hidden: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_flops_per_s", _frozen_mapping(self.peak_flops_per_s))
        object.__setattr__(self, "kernels", tuple(self.kernels))

    @property
    def kernel_candidates(self) -> tuple[KernelShape, ...]:
        """The kernels to choose from: the declared ones, else the native tile as the only one."""
        if self.kernels:
            return self.kernels
        if self.tile is not None:
            return (KernelShape(name="native", m=self.tile.m, n=self.tile.n, k=self.tile.k),)
        return ()


@dataclass(frozen=True, kw_only=True)
class MemoryLevel:
    """One level of the memory hierarchy."""

    name: str
    kind: LevelKind
    managed: Management
    capacity_bytes: SIValue
    instances: int
    bandwidth_bytes_per_s: SIValue
    latency_s: float | None = None
    usable_capacity_bytes: SIValue | None = None
    transfer_granule_bytes: float | None = None
    off_device: bool = False
    pooled: bool = False

    @property
    def total_capacity_bytes(self) -> SIValue:
        return self.capacity_bytes * self.instances

    @property
    def usable_bytes_per_instance(self) -> SIValue:
        return self.capacity_bytes if self.usable_capacity_bytes is None else self.usable_capacity_bytes

    @property
    def reuse_capacity_bytes(self) -> SIValue:
        """Capacity available to hold one tile for reuse: one instance, or all of them when pooled.

        ``pooled`` levels are partitioned by the compiler across instances without duplication
        (Cerebras' per-core SRAM holds one slice of each operand), so they act as one memory.
        """
        return self.usable_bytes_per_instance * (self.instances if self.pooled else 1)


@dataclass(frozen=True, kw_only=True)
class Link:
    """A chip-to-chip, host or network link.

    On a torus, ``wraparound_chips`` says which axes of a slice close into rings: an axis whose length
    is a multiple of it; a shorter one is a line (TPU v5e and v6e: only a full axis of 16 wraps).
    ``wraparound_whole_slice``: the rings are closed by switches that join whole cubes of that side,
    so a slice wraps only when every axis does (TPU v4 and v5p: 4x4x4 cubes on optical switches).
    None: every axis wraps. ``costs.topology`` turns this into the links a collective's group drives."""

    name: str
    kind: LinkKind
    bandwidth_bytes_per_s_per_direction: float
    topology: Topology
    links_per_chip: int = 1
    latency_s: float | None = None
    max_chips: int | None = None
    wraparound_chips: int | None = None
    wraparound_whole_slice: bool = False
    # How an engine runs an all-reduce on this link (``costs.all_reduce.POLICIES``; None: the default, the
    # faster of one- and two-shot on a switch), and the step latency of its own peer-memory kernels
    # (None: ``latency_s``, which stays the collective library's per-step latency).
    all_reduce: str | None = None
    kernel_latency_s: float | None = None


# The all-reduce rules a link may name (``Link.all_reduce``): the spec layer checks names here, below the
# cost layer that defines each rule (``costs.all_reduce`` registers exactly these; it refuses to load otherwise).
ALL_REDUCE_POLICY_NAMES = ("fastest", "trtllm-sm80", "trtllm-sm90", "trtllm-sm100", "trtllm-pcie", "vllm-sm80",
                           "vllm-sm90", "vllm-sm100", "vllm-sm103", "vllm-pcie", "sglang-sm80", "sglang-nvlink",
                           "sglang-pcie", "vllm-sm100-nvl72", "vllm-sm103-nvl72", "sglang-nvl72")


# The overheads of an execution mode, one table: YAML field (``scheduling.modes.<mode>.<field>``) ->
# ``ExecutionMode`` attribute. The schema's ``ModeSpec``, the loader, ``specs show`` and sweeps read it.
MODE_FIELDS = {"kernel_launch": "kernel_launch_s", "program_launch": "program_launch_s", "per_node": "per_node_s",
               "dma_setup": "dma_setup_s", "sync": "sync_s", "host_op": "host_op_s", "fabric_hop": "fabric_hop_s"}


@dataclass(frozen=True, kw_only=True)
class EngineStep:
    """A serving engine's host work for one scheduler step (scheduling the batch, preparing its inputs,
    launching it, reading back and processing the sampled tokens): ``host_fixed_s`` a step plus
    ``host_per_sequence_s`` for each sequence the step runs (the engines' loops walk their requests in
    Python: the time grows with the batch).

    ``overlap``: the engine prepares step n+1 on the host while the device runs step n (vLLM's async
    scheduling, SGLang's overlap scheduler, TensorRT-LLM's overlap scheduler), so a step takes the longer
    of the two; without it the host work and the device work add up. A step that starts from an idle
    engine has no device work to hide its host work behind: it pays both (``pipelined=False``).

    ``fuses_mixed``: the engine runs a step's prefill chunks and decoding sequences as one forward pass over
    all their tokens (vLLM V1, TensorRT-LLM's in-flight batching); False: as separate prefill and decode
    passes (SGLang unless ``--enable-mixed-chunk``), each reading the weights (``serving.steps``)."""

    host_fixed_s: float
    host_per_sequence_s: float
    overlap: bool
    fuses_mixed: bool = True

    def host_s(self, sequences: int) -> float:
        return self.host_fixed_s + self.host_per_sequence_s * sequences

    def step_s(self, device_s: float, sequences: int, *, pipelined: bool = True) -> float:
        """The step's time: its device time (the stage graphs' evaluation) and its host work combined."""
        host = self.host_s(sequences)
        return max(device_s, host) if self.overlap and pipelined else device_s + host


@dataclass(frozen=True, kw_only=True)
class ExecutionMode:
    """How the host drives the device in one execution mode, and what that costs.

    * ``kernel_launch_s``: host cost of dispatching one kernel (``dynamic`` mode: per op);
    * ``program_launch_s``: cost of launching one compiled program or captured graph;
    * ``per_node_s``: cost of each node inside a program or graph (device-side gaps);
    * ``dma_setup_s``: runtime cost of setting up one orchestrated DMA transfer;
    * ``sync_s``: cost of one synchronization/barrier;
    * ``host_op_s``: host cost of an op that launches no kernel (a view, reshape or transpose in eager
      PyTorch: Python + the ATen dispatcher); compiled programs have no such ops;
    * ``fabric_hop_s``: latency of one hop of the on-device mesh between neighbouring cores (spatial
      dataflow: an op's input is broadcast across its region and partial sums are reduced back);
    * ``host_overlap``: whether host dispatch overlaps device work (a GPU: yes; a CPU running its
      own kernels on the dispatching thread: no, so dispatch and work add up);
    * ``library_dispatch_s``: extra host cost per call of the ATen ops (by name, ``gelu`` for
      ``aten.gelu``) that the framework hands to a library (PyTorch's exact gelu on a CPU: oneDNN);
    * ``engine_step``: a serving engine's host work per scheduler step in this mode (``EngineStep``), or
      None: the serving simulator then charges a step its device time alone.
    """

    name: str  # a registered execution model (hardware.execution_models)
    kernel_launch_s: SIValue = 0.0
    program_launch_s: SIValue = 0.0
    per_node_s: SIValue = 0.0
    dma_setup_s: SIValue = 0.0
    sync_s: SIValue = 0.0
    host_op_s: SIValue = 0.0
    fabric_hop_s: SIValue = 0.0
    host_overlap: bool = True
    library_dispatch_s: Mapping[str, float] = field(default_factory=dict)
    engine_step: EngineStep | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "library_dispatch_s", _frozen_mapping(self.library_dispatch_s))


@dataclass(frozen=True, kw_only=True)
class Scheduling:
    """The execution modes the device's software stack offers, and which one is the default."""

    default_mode: str
    modes: Mapping[str, ExecutionMode]

    def __post_init__(self) -> None:
        object.__setattr__(self, "modes", _frozen_mapping(self.modes))

    def mode(self, name: str | None = None) -> ExecutionMode:
        return self.modes[self.default_mode if name is None else name]


# A fitted parameter's name in a fit's covariance (``FitCovariance.names``), ``section:key``: the section
# prefix -> the ``Parameters`` table it is written to (``latency`` is the compute start-up latency).
FIT_SECTIONS = {"compute": "compute_efficiency", "memory": "memory_efficiency", "latency": "compute_latency_s",
                "memory_latency": "memory_latency_s", "link": "link_efficiency",
                "collective_latency": "collective_latency_s"}


@dataclass(frozen=True, kw_only=True)
class FitCovariance:
    """The covariance of a fitted parameter set's written values (``efficiency.fit`` in YAML): ``names``
    (``compute:matmul:tensor_cores:bf16``, ``memory:l2``, ``latency:matmul``: see ``FIT_SECTIONS``) and
    the covariance of their relative changes (``value / written - 1``) under the fit's posterior, in
    ``names``' order (relative, not log: a latency the data leave free downwards but bind upwards is
    -100%..+100%, which a log law cannot say; see ``calibration.fit.posterior_covariance``). Values
    derived from one fitted parameter (a kind-level entry, a class written for each of its kinds) are
    perfectly correlated with it, so the matrix is positive semi-definite, not definite.
    ``measurements``: how many the fit used."""

    names: tuple[str, ...]
    relative_covariance: tuple[tuple[float, ...], ...]
    measurements: int


@dataclass(frozen=True, kw_only=True)
class Parameters:
    """Efficiencies and overhead scales applied to the datasheet figures (1.0 = ideal datasheet).

    A calibrated spec carries them (``efficiency:`` in YAML) and every evaluation on it uses them.

    ``compute_efficiency`` keys, most specific first: ``"kind:engine:dtype"`` (op kind such as
    ``matmul`` or ``norm``), ``"kind"``, ``"engine:dtype"``, ``"engine"``, ``"*"``;
    ``memory_efficiency`` keys: ``"kind:level"`` (a CPU GEMM re-packs its operands, say), a level name,
    or ``"*"``; ``scheduling_scale`` multiplies every overhead.
    ``compute_latency_s`` (``"kind:dtype"`` or ``"kind"`` -> seconds) is a fixed start-up cost of every
    instance of that kind of op (in that dtype: an fp8 GEMM's kernels are not bf16's), which makes the
    effective efficiency size-dependent: ``e(F) = e F / (F + e peak t0)``.
    A kind may be a kernel class ``"kind/variant"`` (``attention/decode``: the one-query kernels engines
    run for generation, see ``costs.rules.pricing_kind``); every lookup for it falls back to the plain
    kind's parameters, so a parameter set fitted before the class existed prices it as before.
    A ``kind@unit`` entry (``unit_latency``) is the fixed time of each thread block of such kernels that
    count their blocks (``OpCost.work_units``: attention's Q tiles) per unit of the engine; those kernels pay
    their start-up latency beside their bottlenecks, not under them. A ``kind@split`` entry (``split_latency``) is
    the fixed time of the phase that combines a split decode kernel's partial results (``OpCost.splits_keys``).
    ``memory_latency_s`` (level -> seconds) does the same for memory: a kernel that moves B bytes at a
    level takes ``latency + B / (bandwidth x e)``, a bandwidth efficiency that saturates with transfer
    size, ``e(B) = e B / (B + e bandwidth latency)`` (small transfers never reach the stream rate).
    Collectives are alpha-beta on each link: ``collective_latency_s`` (alpha, per collective, on top of
    the spec's per-step latency) and ``link_efficiency`` (beta: the share of the link bandwidth the
    collective reaches). ``kind`` names the parameter set: ideal, achievable or calibrated.
    """

    name: str = "datasheet"
    compute_efficiency: Mapping[str, float] = field(default_factory=dict)
    memory_efficiency: Mapping[str, float] = field(default_factory=dict)
    scheduling_scale: float = 1.0
    compute_latency_s: Mapping[str, float] = field(default_factory=dict)
    memory_latency_s: Mapping[str, float] = field(default_factory=dict)
    link_efficiency: Mapping[str, float] = field(default_factory=dict)
    collective_latency_s: Mapping[str, float] = field(default_factory=dict)
    # "ideal" (datasheet), "achievable" (fitted to published microbenchmarks), "estimated" (an achievable
    # overlay taken from a sibling device's fit), "calibrated" (fitted to measured runs)
    kind: str = "ideal"
    # The fit's covariance of the values above, where the fitter stored it (perfmodel.uncertainty samples
    # parameter sets from it); None: no parameter uncertainty is known (the datasheet, an estimate).
    fit: FitCovariance | None = None

    @property
    def label(self) -> str:
        """How outputs name this parameter set: 'ideal (datasheet)', 'achievable (h100-sxm-achievable)'..."""
        return "ideal (datasheet)" if self.kind == "ideal" else f"{self.kind} ({self.name})"

    def memory_latency(self, level: str) -> float:
        return self.memory_latency_s.get(level, self.memory_latency_s.get("*", 0.0))

    def link(self, link: str) -> tuple[float, float]:
        """(bandwidth efficiency, base latency per collective) of a link, or of a kernel class of it
        (``nvlink/nccl``: one implementation's collectives on the link, ``costs.all_reduce``), which
        falls back to the link's own parameters, then to ``*``."""
        chain = kind_chain(link)
        efficiency = next((self.link_efficiency[name] for name in chain if name in self.link_efficiency),
                          self.link_efficiency.get("*", 1.0))
        alpha = next((self.collective_latency_s[name] for name in chain if name in self.collective_latency_s),
                     self.collective_latency_s.get("*", 0.0))
        return efficiency, alpha

    def compute(self, engine: str, dtype: str, kind: str | None = None) -> float:
        """The efficiency of ``kind`` on ``engine`` in ``dtype``. A dtype without its own entry takes its
        same-rate twin's (fp16 <-> bf16, ``dtypes.EQUIVALENT_DTYPES``) before the kind's shared one:
        the shared one mixes in dtypes that run at other rates (fp8 reaches less of its peak)."""
        table = self.compute_efficiency
        twins = EQUIVALENT_DTYPES.get(dtype, ())
        per_kind = [key for each in kind_chain(kind)
                    for key in (f"{each}:{engine}:{dtype}", *[f"{each}:{engine}:{twin}" for twin in twins], each)]
        for key in (*per_kind, f"{engine}:{dtype}", *[f"{engine}:{twin}" for twin in twins], engine, "*"):
            if key in table:
                return table[key]
        return 1.0

    def memory(self, level: str, kind: str | None = None) -> float:
        table = self.memory_efficiency
        for key in (*[f"{each}:{level}" for each in kind_chain(kind)], level, "*"):
            if key in table:
                return table[key]
        return 1.0

    def latency(self, kind: str, dtype: str) -> float:
        """The start-up latency of an instance of ``kind`` computing in ``dtype``: the dtype's own, its
        same-rate twin's, then the kind's shared one (0 where none is fitted)."""
        table = self.compute_latency_s
        twins = EQUIVALENT_DTYPES.get(dtype, ())
        for each in kind_chain(kind):
            for key in (f"{each}:{dtype}", *[f"{each}:{twin}" for twin in twins], each):
                if key in table:
                    return table[key]
        return 0.0

    def unit_latency(self, kind: str) -> float:
        """The fixed time of one thread block of a ``kind`` kernel per unit of the engine it runs on
        (``OpCost.work_units``: attention's Q tiles), kept in ``compute_latency_s`` as ``kind@unit``: the
        kernel class's own, then its plain kind's (0 where none is fitted; never the kernel's start-up latency)."""
        return self._suffixed_latency(kind, UNIT_LATENCY_SUFFIX)

    def split_latency(self, kind: str) -> float:
        """The fixed time of the phase that combines a split decode kernel's partial results
        (``OpCost.splits_keys``), kept in ``compute_latency_s`` as ``kind@split``: the kernel class's own, then
        the classes' above it (0 where none is fitted)."""
        return self._suffixed_latency(kind, SPLIT_LATENCY_SUFFIX)

    def _suffixed_latency(self, kind: str, suffix: str) -> float:
        """A ``kind<suffix>`` entry of ``compute_latency_s`` along the kind's class chain (0 where none)."""
        for each in kind_chain(kind):
            if f"{each}{suffix}" in self.compute_latency_s:
                return self.compute_latency_s[f"{each}{suffix}"]
        return 0.0


# The suffix of a kind's per-thread-block latency in ``Parameters.compute_latency_s`` (``attention@unit``).
UNIT_LATENCY_SUFFIX = "@unit"
# The suffix of a kind's combine-phase latency in ``Parameters.compute_latency_s`` (``attention/decode@split``).
SPLIT_LATENCY_SUFFIX = "@split"

# A kernel class is written ``kind/variant`` (``attention/decode``); not a dot, which ``--set`` paths split on.
KERNEL_CLASS_SEPARATOR = "/"


def base_kind(kind: str) -> str:
    """The plain kind of a kernel class (``attention/decode`` -> ``attention``; a kind is its own)."""
    return kind.split(KERNEL_CLASS_SEPARATOR, 1)[0]


def kind_chain(kind: str | None) -> tuple[str, ...]:
    """The kinds whose parameters serve ``kind``, most specific first: a kernel class ``kind/variant``
    falls back to ``kind``, and a nested one (``attention/decode/fp8_cache``) to each class above it
    (``attention/decode``, then ``attention``), so a parameter set fitted before a class existed prices it
    as its parent class."""
    if kind is None:
        return ()
    pieces = kind.split(KERNEL_CLASS_SEPARATOR)
    return tuple(KERNEL_CLASS_SEPARATOR.join(pieces[:length]) for length in range(len(pieces), 0, -1))


def parent_kind(kind: str) -> str:
    """The class a kernel class falls back to first (``attention/decode/fp8_cache`` -> ``attention/decode``;
    a plain kind is its own)."""
    chain = kind_chain(kind)
    return chain[1] if len(chain) > 1 else kind


@dataclass(frozen=True, kw_only=True)
class Power:
    tdp_watts: float
    idle_watts: float | None = None


@dataclass(frozen=True, kw_only=True)
class Alternative:
    """A figure on which sources disagree: the value used, the others, and why."""

    field: str
    used: str
    others: tuple[tuple[str, str], ...]  # (value, source id)
    reason: str


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """One device: compute engines, memory hierarchy, links, scheduling, power and sources.

    ``field_sources`` maps the dotted path of every numeric field to its source id in ``sources``.
    """

    name: str
    family: Family
    vendor: str
    description: str
    compute: Mapping[str, ComputeEngine]
    memory: tuple[MemoryLevel, ...]
    links: Mapping[str, Link]
    scheduling: Scheduling
    power: Power
    price_usd_per_hour: float | None = None
    sources: Mapping[str, Source] = field(default_factory=dict)
    field_sources: Mapping[str, str] = field(default_factory=dict)
    alternatives: tuple[Alternative, ...] = ()
    notes: str = ""
    origin: str = ""
    efficiency: Parameters | None = None

    def __post_init__(self) -> None:
        for name in ("compute", "links", "sources", "field_sources"):
            object.__setattr__(self, name, _frozen_mapping(getattr(self, name)))

    @cached_property
    def is_swept(self) -> bool:
        """Whether any numeric field is an array of sweep points (``roofline.sweep.hardware_with``)."""
        parts: list[Any] = [*self.memory, *self.compute.values(), *self.scheduling.modes.values(), *self.links.values()]
        for part in parts:
            for part_field in fields(part):
                value = getattr(part, part_field.name)
                values = value.values() if isinstance(value, Mapping) else (value,)
                if any(isinstance(item, np.ndarray) for item in values):
                    return True
        return False

    def level(self, name: str) -> MemoryLevel:
        for level in self.memory:
            if level.name == name:
                return level
        raise KeyError(f"{self.name} has no memory level {name!r}; levels: {[lv.name for lv in self.memory]}")

    @property
    def outermost_on_device(self) -> MemoryLevel:
        """The largest memory on the device itself (HBM, LPDDR, or SRAM on SRAM-only designs)."""
        on_device = [level for level in self.memory if not level.off_device]
        return on_device[-1]

    def peak_flops_per_s(self, dtype: str, kind: EngineKind | None = None) -> SIValue:
        """The highest dense peak for ``dtype`` over the engines (of ``kind`` if given); 0 if none."""
        rates = [engine.peak_flops_per_s.get(dtype, 0.0) for engine in self.compute.values()
                 if kind is None or engine.kind == kind]
        return max(rates, default=0.0)

    def source_of(self, dotted_field: str) -> Source:
        return self.sources[self.field_sources[dotted_field]]
