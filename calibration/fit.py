"""Fit the model's efficiencies and overheads to measurements, with fits that can be trusted.

Parameters (all fitted in log space, so they stay positive):
* a compute efficiency per (op kind, engine, dtype) that binds at least ``MIN_RECORDS_PER_PARAMETER``
  measurements; kinds of work with fewer share one efficiency (``*``: the family's shared parameter);
* a bandwidth efficiency per memory level (per op kind at the outermost level where the data are
  plentiful; the most measured kind's then also serves the kinds never measured there; where both
  vector work and matrix work bind the outermost level, the kinds without their own efficiency share
  their class's, ``vector:<level>`` or ``matrix:<level>``, written for each kind of the class), and a
  latency per level (``memory_latency``: the saturating efficiency in transfer size,
  ``latency + bytes / (bandwidth x e)``) where transfers spanning a decade of sizes bind it (a kind
  with its own efficiency whose transfers span less takes no part in it);
* a fixed start-up latency per op kind and dtype (``compute_latency``: thread-pool wake-up, kernel
  prologue; an fp8 GEMM's kernels are not bf16's), from records whose compute binds, falling back to
  one per kind where a dtype has too few; kinds are the kinds that price the ops
  (``costs.rules.pricing_kind``: decode attention apart from prefill attention) here and for the
  efficiencies;
* the fixed time of a split decode kernel's combine phase (``kind@split``, ``Parameters.split_latency``) for
  decode classes whose records hold kernels that split their keys and kernels that do not (``OpCost.splits_keys``);
* a fixed time per thread block (``kind@unit``, ``Parameters.unit_latency``) for kinds whose kernels count
  their blocks (``OpCost.work_units``: attention's Q tiles, per kernel class), where the records span a
  decade of block counts: small shapes with many blocks bind it (decode attention with 2-8 cached tokens at
  batch 512-2048), the rates come from the large ones;
* per link, alpha-beta for collectives: a base latency per collective (alpha) and a bandwidth
  efficiency (beta);
* the per-kernel dispatch cost of the execution mode (``kernel_launch``), when the records pay one.

The model's components are computed once at datasheet values (``evaluate_arrays`` with the ideal
parameter set, so calibrating an already calibrated spec starts from the datasheet, not from its old
factors); a candidate parameter vector only rescales them, so a fit costs milliseconds.

Trust: residuals are ``log(predicted / measured)`` weighted by ``1 / sqrt(1 + (spread / SPREAD_FLOOR)^2)`` (relative
below ``SPREAD_FLOOR``), with a robust soft-L1 loss; a Gaussian prior on every efficiency and on the
launch cost pulls toward the datasheet (``PRIOR_LOG_SIGMA``), so a departure must be earned by data.
Which parameters exist is judged from the records' components: a kind of work gets a compute
efficiency where compute binds at least ``BINDING_SHARE`` of the busy time, for vector kinds judged at
the lowest starting efficiency (``COMPUTE_STARTS``: element-wise, norm and softmax kernels reach a
small share of a SIMD unit's FMA peak, so at the datasheet's 1 their compute looks hidden under memory
time). Bottlenecks combine as the evaluation combines them (a maximum; compute plus the slowest data
movement for a vector kernel on an engine that does not hide memory, ``vector_kernels_hide_memory``),
so the optimizer is started from several such compute efficiencies and keeps the least-cost solution
(cost on the training data and priors only). Latencies
have a one-sided prior (``_latency_prior``): free below a physical scale (a start-up latency below the
mode's launch cost, a memory latency below the level's datasheet access latency, or 1 us where the
spec gives none), a factor 10 above
it costs one measurement missed by ``ROBUST_SCALE``, so a latency cannot stand in for an efficiency
that the training sizes leave ambiguous.
A parameter that no measurement binds (its column of the data Jacobian is zero) is reported as
unidentified and not written into a fitted spec. Standard errors come from the inverse of the
Gauss-Newton Hessian of data and prior together (a proper covariance: an unbound parameter keeps its
prior's width, never a false zero). Efficiencies above 1 beyond two standard errors are flagged: the
spec likely understates the device. Held-out error: fit on a random half of the measurements per
class, predict the other half (several seeds), and k-fold.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from perfmodel.costs.rules import EXPONENTIAL_DTYPE, exponential_time_s, fitted_kind, kernel_busy_s, pricing_kind
from perfmodel.errors import PerfmodelError
from perfmodel.fanout import Mapper, serial_map
from perfmodel.hardware.execution_models import ExecutionModel, execution_model
from perfmodel.hardware.model import (
    SPLIT_LATENCY_SUFFIX,
    UNIT_LATENCY_SUFFIX,
    ExecutionMode,
    Hardware,
    Parameters,
    base_kind,
    kind_chain,
)
from perfmodel.roofline.arrays import evaluate_arrays, library_dispatch_s, serial_vector_kernels
from perfmodel.workload.ir import concatenate
from perfmodel.workload.op_kinds import OP_KIND_TABLE, is_vector_kind

MIN_RECORDS_PER_PARAMETER = 3
BINDING_SHARE = 0.3  # a component "binds" a record when its time is at least this share of the busy time
EFFICIENCY_BOUNDS = (1e-3, 4.0)
EXPOSED_TRAFFIC_EFFICIENCY_PREFIX = "memory:attention:"  # prefill attention's exposed traffic (``_bounds``)


def capped_at_datasheet(name: str) -> bool:
    """Whether the efficiency ``name`` cannot exceed its datasheet figure, so the fit bounds it at 1 and writes 1
    where it ends there (``FitResult.at_ceiling``; the report says so, which keeps the signal a wrong peak would
    give): prefill attention's exposed traffic (``_bounds`` says why) and every compute efficiency but the softmax
    exponentials'. A kernel's matmuls cannot outrun the engine's peak; where a fit wants them to, the records do
    not tell its parts apart (B200 vLLM's prefill attention ran free to 1.38 +- 0.57 against exponentials at
    0.86: the two rates trade off over its head dims).

    The exponentials' efficiency (``compute:<kind>:<engine>:exp``) is not capped: it is the kernel's effective
    per-score rate, which counts the share of the exponentials hidden under its asynchronous matmuls (Hopper's
    wgmma with FlashAttention-3's ping-pong of two warpgroups, arXiv 2407.08608 section 3.1; Blackwell's tcgen05
    MMAs), so it may exceed the special-function units' peak: the Hopper fits put it at 1.3-1.7."""
    if name.startswith(EXPOSED_TRAFFIC_EFFICIENCY_PREFIX):
        return True
    return name.startswith("compute:") and not is_exponential_key(name)


LAUNCH_BOUNDS_S = (1e-8, 1e-2)
ROBUST_SCALE = 0.1  # soft-L1 switches from quadratic to linear beyond ~10% log error
MIN_RECORDS_FOR_LATENCY = 3
LATENCY_BOUNDS_S = (1e-9, 1e-3)
#: The parameter sections that are latencies (``Design.names``): at their floor they are written as 0.
LATENCY_SECTIONS = ("latency", "memory_latency", "collective_latency")
#: A fitted latency under this multiple of its lower bound (10 ns) is at its floor: no kernel, memory access or
#: collective starts in under 10 ns, so the fit is saying there is no fixed cost (an optimizer stopped at 1.2 ns
#: rather than exactly at the bound says the same).
FLOOR_FACTOR = 10.0
SMOOTH_MAX_POWER = 6
# Prior width in log space: moving an efficiency by a factor e^0.5 (1.65x) costs as much as one
# measurement missed by ROBUST_SCALE (10%); a departure must be carried by several measurements.
PRIOR_LOG_SIGMA = 0.5
SPREAD_FLOOR = 0.2         # relative spread at which a measurement counts half (weight 1/sqrt(2))
UNIDENTIFIED_SHARE = 1e-6  # data-Jacobian column norm below this share of the largest: unidentified
INITIAL_LATENCY_S = 1e-6
# The scale of a memory latency where the spec gives no access latency for the level: loads from DRAM
# or HBM take well under a microsecond on the devices here (pointer-chase latencies of 0.1-0.8 us);
# a fitted latency far above it stands in for a bandwidth that keeps rising with transfer size.
MEMORY_LATENCY_SCALE_S = 1e-6
BOUND_TOLERANCE = 0.1  # log-space distance (10%) under which a parameter counts as at a bound of the fit
CEILING_TOLERANCE = 1e-3  # ... and under which a capped efficiency counts as at its datasheet ceiling
LATENCY_PRIOR_LOG_SIGMA = math.log(10)  # latencies above their scale (_latency_prior): a factor 10 per width
# A start-up latency per dtype needs that dtype's own kernels this short (datasheet compute time): a
# fixed cost extrapolated from kernels hundreds of times longer is a guess (``_latency_groups``).
SMALL_KERNEL_S = 10e-6
COMPUTE_STARTS = (1.0, 0.3, 0.1)  # vector kinds' compute efficiencies the fit starts from (the datasheet's first)


@dataclass(frozen=True, kw_only=True)
class Components:
    """Datasheet-valued model components of every op of every record, ready to rescale."""

    record_of_op: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray        # (levels, ops)
    scheduling_s: np.ndarray
    fixed_s: np.ndarray         # device-side fixed time per kernel, not fitted here
    compute_keys: tuple[str, ...]
    kinds: tuple[str, ...]            # each op's kind
    priced_kinds: tuple[str, ...]     # the kind whose parameters price it (``costs.rules.pricing_kind``)
    dtypes: tuple[str, ...]           # the dtype its engine computes in (the cost's peak dtype)
    counts: np.ndarray
    level_names: tuple[str, ...]
    level_latency_s: tuple[float | None, ...] = ()  # each level's datasheet access latency (None: not given)
    execution_model: ExecutionModel      # the mode's behaviour: how scheduling combines with device time
    execution: ExecutionMode             # the mode's numbers in the spec
    launch_s: float
    records: int
    link_s: np.ndarray | None = None      # datasheet link time (bytes / bandwidth + per-step latency)
    link_names: tuple[str, ...] = ()      # the link each op uses ("" for none)
    link_latency_s: np.ndarray | None = None  # the part of link_s that is step latency (not scaled by efficiency)
    serial: np.ndarray | None = None      # vector kernels whose compute and data movement add up (the engine's)
    library_s: np.ndarray | None = None   # host cost of library calls (the mode's table), not scaled with the launch cost
    # Levels whose efficiency and latency stay at the datasheet: the data cannot tell them from another
    # component (a GPU's shared memory feeds the tensor cores inside every GEMM kernel, so kernel times
    # alone cannot separate its bandwidth from the tensor-core rate: fitting both leaves one arbitrary).
    datasheet_levels: tuple[str, ...] = ()
    # Each op's thread blocks with a fixed cost of their own per unit of its engine (``OpCost.work_units`` /
    # units: attention's Q tiles), which a ``kind@unit`` latency prices (``Parameters.unit_latency``).
    unit_waves: np.ndarray | None = None
    exposed: np.ndarray | None = None  # ops whose outermost traffic adds to the rest (``OpCost.exposed_traffic``)
    # The part of ``compute_s`` that is special-function work in series with the matmuls (prefill attention's
    # exponentials, ``OpCost.exponentials``), which a ``kind:engine:exp`` efficiency scales apart.
    exponential_s: np.ndarray | None = None
    overlapped: np.ndarray | None = None  # ops whose blocks' time is one more bottleneck (``OpCost.blocks_overlap``)
    # Decode ops that split their keys and pay a combine phase (``OpCost.splits_keys``), which a ``kind@split``
    # latency prices (``Parameters.split_latency``).
    splits: np.ndarray | None = None

    @property
    def link_time(self) -> np.ndarray:
        return np.zeros_like(self.compute_s) if self.link_s is None else self.link_s

    @property
    def links(self) -> tuple[str, ...]:
        return self.link_names or ("",) * len(self.compute_s)


@dataclass(frozen=True, kw_only=True)
class FitResult:
    params: dict[str, tuple[float, float]]          # name -> (value, standard error)
    # log-space covariance of the parameters ``covariance_names`` (``params``'s order as fitted; a caller
    # that adds or drops entries of ``params`` keeps the names, so the two stay aligned by name)
    log_covariance: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    covariance_names: tuple[str, ...] = ()
    # The covariance of the same parameters' relative changes under the fit's own cost
    # (``posterior_covariance``), where asked for (``fit(posterior_draws=True)``, what overlays store);
    # None: not computed or not trustworthy.
    posterior_relative_covariance: np.ndarray | None = None
    datasheet: dict[str, float]
    predicted_s: np.ndarray
    measured_s: np.ndarray
    classes: tuple[str, ...]
    names: tuple[str, ...]
    cost: float
    heldout_median_abs_error: float | None = None
    heldout_by_class: dict[str, float] = field(default_factory=dict)
    kfold_median_abs_error: float | None = None
    heldout_other_seeds: tuple[tuple[int, float, str, float], ...] = ()  # (seed, median, worst class, its error)
    at_bounds: tuple[str, ...] = ()  # parameters that ran into a bound
    at_ceiling: tuple[str, ...] = ()  # efficiencies that ended at their datasheet ceiling (written as 1)
    at_floor: tuple[str, ...] = ()    # latencies under FLOOR_FACTOR x their lower bound: no fixed cost (written as 0)
    level_defaults: tuple[tuple[str, str], ...] = ()  # (level, kind): its per-kind parameters serve unmeasured kinds
    unidentified: tuple[str, ...] = ()  # parameters no measurement binds: reported, never written
    flags: tuple[str, ...] = ()         # warnings about the fit (efficiency above 1, ...)
    success: bool = True
    message: str = ""

    @property
    def errors(self) -> np.ndarray:
        return (self.predicted_s - self.measured_s) / self.measured_s

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(self.errors)))

    def identified(self) -> dict[str, float]:
        """Parameters to write: bound by data and not stuck at a bound (a latency at its floor is zero)."""
        return {name: value for name, (value, _) in self.params.items()
                if name not in self.unidentified and name not in self.at_bounds}

    def parameters(self, name: str, kind: str = "calibrated") -> Parameters:
        """The identified parameters as a parameter set (unidentified ones keep the datasheet)."""
        values = self.identified()
        # A latency at its floor is a fitted zero: written as 0, so a lookup stops there instead of falling back
        # to the kind's other dtypes (the kind-level mean below: a 1 ns bf16 GEMM start-up left out priced B200's
        # bf16 GEMMs at the fp8 kernels' 11 us).
        values.update({name: 0.0 for name in self.at_floor if name in values})

        def group(prefix: str) -> dict[str, float]:
            return {key.removeprefix(prefix): value for key, value in values.items() if key.startswith(prefix)}

        for level, measured_kind in self.level_defaults:  # kinds never measured at a level: its most measured kind's
            if f"memory:{measured_kind}:{level}" in values:
                values.setdefault(f"memory:{level}", values[f"memory:{measured_kind}:{level}"])
        for key in [key for key in values if key.startswith(("memory:vector:", "memory:matrix:"))]:
            # A class's efficiency is written for each kind of the class (the spec looks kinds up, not classes).
            label, level = key.split(":")[1:]
            for kind in OP_KIND_TABLE:
                if is_vector_kind(kind) == (label == "vector"):
                    values.setdefault(f"memory:{kind}:{level}", values[key])
            del values[key]
        compute = group("compute:")
        # A kind of work measured in some dtypes (matmul in bf16 and tf32) gets a kind-level entry, the
        # geometric mean of its fitted efficiencies, for the dtypes no measurement covers (fp8, say):
        # the family's shared parameter, instead of silently falling back to the datasheet.
        by_kind: dict[str, list[float]] = {}
        for key, value in compute.items():
            pieces = key.split(":")
            if len(pieces) == 3 and not is_exponential_key(key):  # (a special-function rate is no matmul's)
                by_kind.setdefault(pieces[0], []).append(value)
        for op_kind, efficiencies in by_kind.items():
            compute.setdefault(op_kind, float(np.exp(np.mean(np.log(efficiencies)))))
        latency = group("latency:")
        # A kind whose latency was fitted per dtype gets a kind-level one too (the geometric mean) for the
        # dtypes no measurement covers, as its efficiencies do.
        by_dtype: dict[str, list[float]] = {}
        for key, value in latency.items():
            if ":" in key and value > 0:
                by_dtype.setdefault(key.split(":")[0], []).append(value)
        for op_kind, latencies in by_dtype.items():
            latency.setdefault(op_kind, float(np.exp(np.mean(np.log(latencies)))))
        return Parameters(name=name, kind=kind, compute_efficiency=compute, memory_efficiency=group("memory:"),
                          compute_latency_s=latency, memory_latency_s=group("memory_latency:"),
                          link_efficiency=group("link:"), collective_latency_s=group("collective_latency:"))


def components(records, hardware: Hardware, mode: str | None = None,
               datasheet_levels: tuple[str, ...] = ()) -> Components:
    graphs = [record.graph() for record in records]
    merged, owner = concatenate(graphs)
    # Always from the datasheet: a calibrated spec's own factors must not become the starting point.
    arrays = evaluate_arrays(merged, hardware, mode=mode, fuse=False, parameters=Parameters(name="datasheet"))
    execution, model = hardware.scheduling.modes[arrays.mode], execution_model(arrays.mode)
    priced = tuple(pricing_kind(op) for op in merged.ops)
    # A kernel class has a compute efficiency of its own only where its main loop is another kernel's
    # (``costs.rules.KERNEL_CLASSES``: block-scaled fp8 GEMMs); decode attention shares prefill's.
    keys = tuple(f"{fitted_kind(kind, 'rate')}:{cost.engine}:{cost.peak_dtype}"
                 for kind, cost in zip(priced, arrays.costs, strict=True))
    library = library_dispatch_s(execution, merged.ops)
    library = None if library is None else library * arrays.counts
    # The launch cost the fit rescales is the mode's per-kernel dispatch; a library call's cost is the spec's.
    scheduling = arrays.scheduling_s if library is None else arrays.scheduling_s - library
    datasheet = Parameters(name="datasheet")
    exponential = np.asarray([float(exponential_time_s(hardware, datasheet, cost, kind))
                              for cost, kind in zip(arrays.costs, priced, strict=True)]) * arrays.counts
    return Components(record_of_op=np.asarray(owner), compute_s=arrays.compute_s, memory_s=arrays.memory_s,
                      scheduling_s=scheduling, fixed_s=arrays.fixed_s, library_s=library,
                      compute_keys=keys, kinds=tuple(op.kind for op in merged.ops), priced_kinds=priced,
                      dtypes=tuple(cost.peak_dtype for cost in arrays.costs),
                      counts=arrays.counts, level_names=arrays.level_names,
                      level_latency_s=tuple(level.latency_s for level in hardware.memory),
                      execution_model=model, execution=execution, launch_s=model.launch_ceiling_s(execution),
                      records=len(records), link_s=arrays.link_s,
                      # an implementation's collectives are a kernel class of their link (``nvlink/nccl``),
                      # fitted apart: NCCL's ring is not the engine's one-shot kernel
                      link_names=tuple(str(cost.link_class or cost.link or "") for cost in arrays.costs),
                      link_latency_s=np.asarray([float(cost.link_latency_s) if cost.link else 0.0
                                                 for cost in arrays.costs]) * arrays.counts,
                      serial=serial_vector_kernels(hardware, arrays.costs, merged.ops),
                      datasheet_levels=datasheet_levels,
                      unit_waves=np.asarray([float(cost.work_units) / hardware.compute[cost.engine].units
                                             for cost in arrays.costs]),
                      exposed=np.asarray([bool(cost.exposed_traffic) for cost in arrays.costs]),
                      exponential_s=exponential if exponential.any() else None,
                      overlapped=np.asarray([bool(cost.blocks_overlap) for cost in arrays.costs]),
                      splits=np.asarray([bool(cost.splits_keys) for cost in arrays.costs]))


@dataclass(frozen=True, kw_only=True)
class Design:
    """Which parameters the data can bind, and the ops each one scales."""

    compute: tuple[tuple[str, np.ndarray], ...]          # (key, op mask)
    memory: tuple[tuple[str, int, np.ndarray], ...]      # (label, level index, op mask)
    latency: tuple[tuple[str, np.ndarray], ...]          # ("kind:dtype" or "kind", op mask)
    memory_latency: tuple[tuple[str, int, np.ndarray], ...]  # (level name, level index, op mask)
    links: tuple[str, ...]                               # link names (efficiency and alpha each)
    launch: bool
    level_defaults: tuple[tuple[str, str], ...] = ()     # (level, kind whose parameters serve the other kinds)

    @property
    def names(self) -> list[str]:
        return ([f"compute:{key}" for key, _ in self.compute] + [f"memory:{label}" for label, _, _ in self.memory]
                + [f"latency:{label}" for label, _ in self.latency]
                + [f"memory_latency:{name}" for name, _, _ in self.memory_latency]
                + [f"link:{name}" for name in self.links] + [f"collective_latency:{name}" for name in self.links]
                + (["kernel_launch_s"] if self.launch else []))

    @property
    def efficiencies(self) -> int:
        return len(self.compute) + len(self.memory)


def _predict(parts: Components, theta: np.ndarray, design: Design, smooth: bool = False) -> np.ndarray:
    values = np.exp(theta)
    position = 0
    # A kernel's special-function work (``Components.exponential_s``) takes its ``:exp`` efficiency where the design
    # has one, else its matmuls' (as a written parameter set falls back to the kind's shared efficiency).
    exponential = np.zeros_like(parts.compute_s) if parts.exponential_s is None else parts.exponential_s
    matmul_scale, exponential_scale = np.ones_like(parts.compute_s), np.full(len(parts.compute_s), np.nan)
    for key, mask in design.compute:
        if is_exponential_key(key):
            exponential_scale[mask] = values[position]
        else:
            matmul_scale[mask] = values[position]
        position += 1
    exponential_scale = np.where(np.isnan(exponential_scale), matmul_scale, exponential_scale)
    compute = (parts.compute_s - exponential) / matmul_scale + exponential / exponential_scale
    memory = parts.memory_s.copy()
    for _label, level, mask in design.memory:
        memory[level, mask] = memory[level, mask] / values[position]
        position += 1
    blocked = np.zeros(len(compute), dtype=bool) if parts.unit_waves is None else parts.unit_waves > 0
    unit_blocks = np.zeros_like(compute)  # thread blocks' fixed time (``Parameters.unit_latency``)
    startups = np.zeros_like(compute)     # the start-up of kernels with blocks, beside their bottlenecks
    for label, mask in design.latency:
        if label.endswith(UNIT_LATENCY_SUFFIX):
            unit_blocks = unit_blocks + np.where(mask, values[position], 0.0) * parts.unit_waves * parts.counts
        elif label.endswith(SPLIT_LATENCY_SUFFIX):  # (its mask holds only the ops that split)
            startups = startups + np.where(mask, values[position], 0.0) * parts.counts
        else:  # a kernel with blocks pays its start-up beside its bottlenecks too (``evaluate_arrays``)
            startup = np.where(mask, values[position], 0.0) * parts.counts
            compute = compute + np.where(blocked, 0.0, startup)
            startups = startups + np.where(blocked, startup, 0.0)
        position += 1
    for _name, level, mask in design.memory_latency:
        memory[level] = memory[level] + np.where(mask & (parts.memory_s[level] > 0), values[position], 0.0) * parts.counts
        position += 1
    link = parts.link_time.copy()
    links = np.asarray(parts.links)
    for offset, name in enumerate(design.links):
        uses = links == name
        efficiency, alpha = values[position + offset], values[position + len(design.links) + offset]
        # the evaluation's rule: bytes over the bandwidth times its efficiency, plus the steps' latency
        steps = 0.0 if parts.link_latency_s is None else parts.link_latency_s
        link = np.where(uses, (link - steps) / efficiency + steps + alpha * parts.counts, link)
    position += 2 * len(design.links)
    launch_scale = values[position] / parts.launch_s if design.launch and parts.launch_s > 0 else 1.0
    stacked = np.vstack([compute[None], memory, link[None]])
    if smooth:
        busy = np.sum(stacked ** SMOOTH_MAX_POWER, axis=0) ** (1 / SMOOTH_MAX_POWER)
        if parts.serial is not None and parts.serial.any():
            moving = np.sum(stacked[1:] ** SMOOTH_MAX_POWER, axis=0) ** (1 / SMOOTH_MAX_POWER)
            busy = np.where(parts.serial, compute + moving, busy)
        if parts.exposed is not None and parts.exposed.any():
            outer = stacked.shape[0] - 2
            rest = np.delete(stacked, outer, axis=0)
            busy = np.where(parts.exposed, np.sum(rest ** SMOOTH_MAX_POWER, axis=0) ** (1 / SMOOTH_MAX_POWER)
                            + stacked[outer], busy)
    else:  # the evaluation's own rule (serial vector kernels and exposed traffic included)
        busy = kernel_busy_s(stacked, "max", False if parts.serial is None else parts.serial,
                             False if parts.exposed is None else parts.exposed)
    if parts.overlapped is not None and parts.overlapped.any():
        # decode blocks' fixed time is one more bottleneck (``OpCost.blocks_overlap``, ``evaluate_arrays``)
        under = (busy ** SMOOTH_MAX_POWER + unit_blocks ** SMOOTH_MAX_POWER) ** (1 / SMOOTH_MAX_POWER) if smooth \
            else np.maximum(busy, unit_blocks)
        busy = np.where(parts.overlapped, under, busy + unit_blocks)
    else:
        busy = busy + unit_blocks
    busy = busy + startups + parts.fixed_s  # the kernels' device-side fixed time (evaluate_arrays' combine rule)
    scheduling = parts.scheduling_s * launch_scale + (0.0 if parts.library_s is None else parts.library_s)
    per_op = parts.execution_model.combine(busy, scheduling, parts.execution)
    return np.bincount(parts.record_of_op, weights=per_op, minlength=parts.records)


def is_exponential_key(key: str) -> bool:
    """Whether a compute key or parameter name ends in the special-function pseudo-dtype (``...:exp``)."""
    return key.endswith(f":{EXPONENTIAL_DTYPE}")


# The exponentials' share of a kernel's compute time must differ this much across the records (largest over
# smallest) for their efficiency to be told from the matmuls' (head dims 64 to 256 on an H100: 0.5 to 0.2).
EXPONENTIAL_SHARE_SPAN = 1.5


def _exponential_groups(parts: Components, compute_binding: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The ``kind:engine:exp`` efficiencies the records tell apart from their kinds' matmul efficiency: enough
    records whose compute binds, with the exponentials' share of it spanning ``EXPONENTIAL_SHARE_SPAN`` (one head
    dimension alone leaves the two rates collinear)."""
    if parts.exponential_s is None:
        return []
    exponential = parts.exponential_s
    share = np.divide(exponential, parts.compute_s, out=np.zeros_like(exponential), where=parts.compute_s > 0)
    labels = np.asarray([f"{key.rsplit(':', 1)[0]}:{EXPONENTIAL_DTYPE}" for key in parts.compute_keys])
    groups = []
    for label in sorted(set(labels[compute_binding & (exponential > 0)])):
        mask = (labels == label) & (exponential > 0)
        measured = compute_binding & mask
        if (_records_where(parts, measured) >= MIN_RECORDS_PER_PARAMETER
                and float(share[measured].max()) >= EXPONENTIAL_SHARE_SPAN * float(share[measured].min())):
            groups.append((label, mask))
    return groups


def _records_where(parts: Components, mask: np.ndarray) -> int:
    return len(set(parts.record_of_op[mask]))


def _spans_a_decade(times: np.ndarray) -> bool:
    """Whether ``times`` differ enough (more than 10x) to tell a fixed latency from a rate."""
    return bool(times.size) and float(times.max()) > 10 * float(times.min())


def _covered(groups, size: int) -> np.ndarray:
    covered = np.zeros(size, dtype=bool)
    for _label, mask in groups:
        covered |= mask
    return covered


def _design(parts: Components, subset: np.ndarray) -> Design:
    """Which parameters the records in ``subset`` can identify (see the module docstring)."""
    in_subset = np.isin(parts.record_of_op, subset)
    kinds = np.asarray(parts.kinds)
    # the kind whose memory efficiency each op takes (a kernel class's own or its plain kind's: ``fitted_kind``)
    priced = np.asarray([fitted_kind(kind, "memory") for kind in parts.priced_kinds])
    keys = np.asarray(parts.compute_keys)
    link = parts.link_time
    busy = np.maximum.reduce([parts.compute_s, parts.memory_s.max(axis=0), link])
    # The compute of vector kinds (element-wise, reductions, norms, softmax) is judged at the lowest
    # efficiency the fit starts from: such kernels reach a small share of the engine's FMA peak (a
    # softmax's exp, a norm's two passes), so at the datasheet's 1 their compute would look hidden
    # under memory time in records where it binds.
    vector = np.asarray([is_vector_kind(kind) for kind in kinds], dtype=bool)
    reach = np.where(vector, parts.compute_s / min(COMPUTE_STARTS), parts.compute_s)
    compute_binding = in_subset & (reach >= BINDING_SHARE * np.maximum(busy, reach)) & (parts.compute_s > 0)
    # Sparse keys fall back along the lookup chain of Parameters.compute: "kind:engine:dtype", then
    # the kind, then "engine:dtype", then everything ("*"), each level needing enough measurements.
    compute_groups, left = [], compute_binding.copy()
    def base(key: str) -> str:  # a kernel class's key as its plain kind's ("attention/decode:..." -> "attention:...")
        kind, _, rest = key.partition(":")
        return base_kind(kind) + (":" + rest if rest else "")

    fallbacks = (lambda key: key, lambda key: key.split(":")[0], lambda key: base(key),
                 lambda key: base(key.split(":")[0]), lambda key: ":".join(key.split(":")[1:]), lambda key: "*")
    for label_of in fallbacks:
        labels = np.asarray([label_of(key) for key in keys])
        for label in sorted(set(labels[left])):
            # The ops whose keys still need a parameter and fall under this label.
            mask = (labels == label) & np.isin(keys, keys[left & (labels == label)]) & ~_covered(compute_groups,
                                                                                             len(keys))
            if _records_where(parts, left & mask) >= MIN_RECORDS_PER_PARAMETER:
                compute_groups.append((label, mask))
                left &= ~mask
    compute_groups += _exponential_groups(parts, compute_binding)
    memory_groups = []
    outermost = len(parts.level_names) - 1
    memory_latency = []
    level_defaults: list[tuple[str, str]] = []
    for index, name in enumerate(parts.level_names):
        if name in parts.datasheet_levels:
            continue
        binding = in_subset & (parts.memory_s[index] >= BINDING_SHARE * busy) & (parts.memory_s[index] > 0)
        covered = np.zeros_like(binding)
        # Per-kind efficiencies only where the data are plentiful: the outermost level, when at least
        # two kinds of work bind it (a CPU GEMM re-packs its operands; a stream does not). With one
        # kind, its efficiency is the level's and serves every kind; with several, the most measured
        # kind's serves the kinds never measured there (``level_defaults``, applied when written).
        plentiful = [kind for kind in sorted(set(priced[binding])) if index == outermost
                     and _records_where(parts, binding & (priced == kind)) >= MIN_RECORDS_PER_PARAMETER]
        if len(plentiful) > 1:
            level_defaults.append((name, max(plentiful, key=lambda kind: _records_where(parts, binding & (priced == kind)))))
        narrow = np.zeros_like(binding)
        for kind in plentiful if len(plentiful) > 1 else ():
            mask = priced == kind
            memory_groups.append((f"{kind}:{name}", index, mask))
            covered |= mask
            # A kind with its own efficiency whose transfers span less than a decade cannot tell a
            # latency from its efficiency: it takes no part in the level's latency (decode-attention
            # rows, all near one size, pulled a 12 us latency into every stream kernel).
            if not _spans_a_decade(parts.memory_s[index][binding & mask]):
                narrow |= mask
        if index == outermost and (binding & ~covered & vector).any() and (binding & ~covered & ~vector).any():
            # Where both classes bind the level, kinds without their own efficiency share their class's
            # (vector work streams; matrix work re-packs its operands: a CPU GEMV reads its weights at
            # 40% of a sum's rate) before the level's. One class alone keeps the level's efficiency.
            for label, members in (("vector", vector), ("matrix", ~vector)):
                mask = members & ~covered
                if _records_where(parts, binding & mask) >= MIN_RECORDS_PER_PARAMETER:
                    memory_groups.append((f"{label}:{name}", index, mask))
                    covered |= mask
        rest = binding & ~covered
        if _records_where(parts, rest) >= MIN_RECORDS_PER_PARAMETER:
            memory_groups.append((name, index, ~covered))
        shared = binding & ~narrow
        sizes = parts.memory_s[index][shared]
        # A latency needs transfers of different sizes (otherwise it cannot be told from the efficiency).
        if _records_where(parts, shared) >= 2 * MIN_RECORDS_PER_PARAMETER and _spans_a_decade(sizes):
            memory_latency.append((name, index, ~narrow))
    # Kinds with a start-up latency (the op-kind table's ``startup_latency``). Element-wise ops get none:
    # with one launch each, theirs would be the launch cost itself, which they identify. A start-up
    # latency adds to a kernel's compute time, so only records whose compute binds can measure it (on
    # memory-bound records, such as decode attention, it would stand in for a bandwidth as a floor).
    # Like a memory latency, it needs compute times spanning more than a decade, or it cannot be told
    # from the efficiency (v5e's nine matmuls, 6 to 47 ms, fitted 66 +- 86 us that would have charged
    # every TPU matmul).
    latency_groups = _latency_groups(parts, compute_binding, in_subset)
    links = np.asarray(parts.links)
    link_names = tuple(name for name in sorted(set(links[in_subset])) if name
                       and _records_where(parts, in_subset & (links == name)) >= 2 * MIN_RECORDS_PER_PARAMETER)
    launch = bool(np.any(parts.scheduling_s[in_subset] > 0)) and parts.launch_s > 0
    return Design(compute=tuple(compute_groups), memory=tuple(memory_groups), latency=latency_groups,
                  memory_latency=tuple(memory_latency), links=link_names, launch=launch,
                  level_defaults=tuple(level_defaults))


def _latency_groups(parts: Components, compute_binding: np.ndarray,
                    in_subset: np.ndarray) -> tuple[tuple[str, np.ndarray], ...]:
    """The start-up latencies the data identify, along the lookup chain of ``Parameters.latency``.

    A kind's latency needs enough records whose compute binds, over more than a decade of times. It is
    split by dtype (``matmul:bf16``, ``matmul:fp8``: an fp8 GEMM's kernels are not bf16's) only where
    every dtype of the kind can tell its own: enough records over a decade, down to kernels shorter than
    ``SMALL_KERNEL_S`` at the datasheet, where a fixed cost shows (the published H800 fp8 GEMMs, 32 us to
    1.4 ms, fitted an fp8 latency of 8.9 +- 7.8 us that then cost the 1024-cubed fp8 GEMM 37%).

    A kernel class (``kind/variant``) is told by all of its records, not only those whose compute
    binds: it is priced apart because its kernels differ, and decode attention is memory-bound at the
    datasheet for all but its largest query groups, yet its kernels have a floor no byte count explains
    (NVIDIA's generation-attention tables: 8-10 us on an H100 for shapes that move a few kilobytes). A
    class whose records cannot tell a latency shares its plain kind's."""
    kinds, priced, dtypes = np.asarray(parts.kinds), np.asarray(parts.priced_kinds), np.asarray(parts.dtypes)
    left = np.asarray([kind in OP_KIND_TABLE and OP_KIND_TABLE[kind].startup_latency for kind in kinds], dtype=bool)

    def measured_by(mask: np.ndarray, kind: str) -> np.ndarray | None:
        """The records that tell the latency of ``mask``'s ops (None: too few, or too alike in time)."""
        measured = (in_subset if base_kind(kind) != kind else compute_binding) & mask
        enough = _records_where(parts, measured) >= MIN_RECORDS_FOR_LATENCY
        return measured if enough and _spans_a_decade(parts.compute_s[measured]) else None

    groups: dict[str, np.ndarray] = {}
    for kind in sorted(set(priced[left])):
        of_kind = left & (priced == kind)
        per_dtype = {}
        for dtype in sorted(set(dtypes[of_kind])):
            mask = of_kind & (dtypes == dtype)
            measured = measured_by(mask, kind)
            if measured is not None and float(parts.compute_s[measured].min()) <= SMALL_KERNEL_S:
                per_dtype[f"{kind}:{dtype}"] = mask
        if len(per_dtype) > 1 and len(per_dtype) == len(set(dtypes[of_kind])):
            groups.update(per_dtype)
            left &= ~of_kind
        elif measured_by(of_kind, kind) is not None:
            groups[kind] = of_kind
            left &= ~of_kind
    for kind in sorted(set(priced[left])):  # kernel classes left over: the nearest class above with a latency
        mask = left & (priced == kind)
        above = kind_chain(kind)[1:]
        owner = next((each for each in above if each in groups), None)
        if owner is not None:
            groups[owner] = groups[owner] | mask
        elif above and measured_by(mask, above[-1]) is not None:
            groups[above[-1]] = mask
    if parts.unit_waves is not None:
        # A kind whose kernels count thread blocks with a fixed cost each (``OpCost.work_units``) gets that
        # cost as its own latency per block and engine unit, where its records span a decade of block counts
        # (else it cannot be told from the kernel's start-up latency).
        for kind in sorted(set(priced[in_subset & (parts.unit_waves > 0)])):
            mask = (priced == kind) & (parts.unit_waves > 0)
            measured = in_subset & mask
            if _records_where(parts, measured) >= MIN_RECORDS_FOR_LATENCY and _spans_a_decade(parts.unit_waves[measured]):
                groups[f"{kind}{UNIT_LATENCY_SUFFIX}"] = mask
    if parts.splits is not None:
        # The combine phase of kernels that split their keys (``OpCost.splits_keys``) gets a fixed time of its own
        # (``Parameters.split_latency``), one for all the classes under the outermost kernel class (decode
        # attention, whatever its cache dtype or query group: the engine's one combine step), where its records hold
        # kernels that split and kernels that do not. One per class was tried (an experiment, not committed): its
        # fp8-cache and MHA values came out loosely bound (H100 vLLM MHA 3.6 +- 8.8 us) and four more dimensions left
        # the posterior's importance sampling under ``MINIMUM_EFFECTIVE_DRAWS`` in 15 of the 27 engine overlays.
        outermost = np.asarray([kind_chain(kind)[-2:][0] for kind in priced])  # (a plain kind: itself)
        for kind in sorted(set(outermost[in_subset & parts.splits])):
            mask = (outermost == kind) & parts.splits
            whole = (outermost == kind) & ~parts.splits
            if min(_records_where(parts, in_subset & mask), _records_where(parts, in_subset & whole)) \
                    >= MIN_RECORDS_FOR_LATENCY:
                groups[f"{kind}{SPLIT_LATENCY_SUFFIX}"] = mask
    return tuple(groups.items())


def _initial(parts: Components, design: Design) -> np.ndarray:
    launch0 = [math.log(parts.launch_s)] if design.launch else []
    return np.r_[np.zeros(design.efficiencies), np.full(len(design.latency) + len(design.memory_latency),
                                                         math.log(INITIAL_LATENCY_S)),
                 np.zeros(len(design.links)), np.full(len(design.links), math.log(INITIAL_LATENCY_S)), launch0]


def _bounds(design: Design) -> tuple[np.ndarray, np.ndarray]:
    """Log-space bounds of the parameter vector, in the order of ``Design.names``."""
    eff, lat = np.log(EFFICIENCY_BOUNDS), np.log(LATENCY_BOUNDS_S)
    pieces = [(eff, design.efficiencies), (lat, len(design.latency) + len(design.memory_latency)),
              (eff, len(design.links)), (lat, len(design.links)), (np.log(LAUNCH_BOUNDS_S), int(design.launch))]
    low = np.concatenate([np.full(count, bounds[0]) for bounds, count in pieces])
    high = np.concatenate([np.full(count, bounds[1]) for bounds, count in pieces])
    # Prefill attention's outermost traffic is priced exposed (``OpCost.exposed_traffic``): it cannot move
    # faster than the datasheet. A fit that wants it faster (vLLM's Blackwell prefill kernels fitted 3-3.5x)
    # is saying the traffic hides under the math; held at 1 it is priced at the datasheet rate instead of an
    # unphysical one, and the efficiency stays a check on the datasheet everywhere else.
    for index, name in enumerate(design.names[:design.efficiencies]):
        if capped_at_datasheet(name):
            high[index] = 0.0
    return low, high


def _prior(parts: Components, design: Design):
    """(index, centre) of every parameter with a datasheet value: efficiencies (1) and the launch cost."""
    efficiency_indices = list(range(design.efficiencies))
    start = design.efficiencies + len(design.latency) + len(design.memory_latency)
    efficiency_indices += list(range(start, start + len(design.links)))
    centres = [0.0] * len(efficiency_indices)
    if design.launch:
        efficiency_indices.append(len(design.names) - 1)
        centres.append(math.log(parts.launch_s))
    return np.asarray(efficiency_indices, dtype=int), np.asarray(centres)


def spread_weights(records) -> np.ndarray:
    """Each measurement's weight in the fit: ``1 / sqrt(1 + (relative spread / SPREAD_FLOOR)^2)``."""
    relative = np.asarray([record.spread_s / record.duration_s if record.duration_s > 0 else 0.0 for record in records])
    return 1.0 / np.sqrt(1.0 + (relative / SPREAD_FLOOR) ** 2)


def _latency_prior(parts: Components, design: Design) -> tuple[np.ndarray, np.ndarray]:
    """(index, log scale) of the latencies with a one-sided prior: a latency is free below its scale
    and a departure above it must be earned (10x the scale costs one measurement missed by
    ROBUST_SCALE). Without it a latency and an efficiency that the training sizes cannot tell apart
    trade places: a 100 us "start-up" stands in for a slow exp, a microsecond "L1 latency" for the
    launch cost. Scales: a kind's start-up latency, the mode's per-kernel launch cost (when the records
    pay one); a level's memory latency, its datasheet access latency, or ``MEMORY_LATENCY_SCALE_S``
    where the spec gives none."""
    index, scale = [], []
    start = design.efficiencies
    if parts.launch_s > 0:
        index += range(start, start + len(design.latency))
        scale += [parts.launch_s] * len(design.latency)
    latencies = parts.level_latency_s or (None,) * len(parts.level_names)
    for offset, (_name, level, _mask) in enumerate(design.memory_latency):
        index.append(start + len(design.latency) + offset)
        scale.append(latencies[level] or MEMORY_LATENCY_SCALE_S)
    return np.asarray(index, dtype=int), np.log(np.asarray(scale, dtype=float))


def _residual_function(parts: Components, measured: np.ndarray, subset: np.ndarray, weights: np.ndarray,
                       design: Design):
    """The fit's residuals of a log parameter vector: data (weighted log errors), then the priors."""
    prior_index, prior_centre = _prior(parts, design)
    latency_index, latency_scale = _latency_prior(parts, design)

    def residuals(theta, smooth):
        predicted = _predict(parts, theta, design, smooth=smooth)
        data = np.log(predicted[subset] / measured[subset]) * weights
        above = np.maximum(theta[latency_index] - latency_scale, 0.0) / LATENCY_PRIOR_LOG_SIGMA * ROBUST_SCALE
        return np.r_[data, (theta[prior_index] - prior_centre) / PRIOR_LOG_SIGMA * ROBUST_SCALE, above]

    return residuals


def _robust_cost(residuals: np.ndarray) -> float:
    """``least_squares``' cost of ``residuals`` under the fit's loss (soft-L1 at ``ROBUST_SCALE``)."""
    z = (residuals / ROBUST_SCALE) ** 2
    return float(0.5 * ROBUST_SCALE ** 2 * np.sum(2 * (np.sqrt(1 + z) - 1)))


POSTERIOR_DRAWS = 8000   # parameter vectors drawn to correct the covariance (sampling importance resampling)
PROPOSAL_SCALE = 1.25    # the proposal's standard deviations, in the Gauss-Newton ones: a little wider than the target
# (in a dozen dimensions a proposal 2x wider leaves under 1% of the draws effective)
MINIMUM_EFFECTIVE_DRAWS = 100
POSTERIOR_ROUNDS = 8  # proposals: the Gauss-Newton normal, then up to seven adapted to the weighted draws
# Batches of POSTERIOR_DRAWS more from the best proposal when the rounds end short of MINIMUM_EFFECTIVE_DRAWS (the
# 2026-12-07 refit with decode's combine phase, before these batches, left H100 SGLang's fit at 98 effective draws
# and B200 SGLang's at 76; with them 172 and 132, as their reports say)
EXTRA_DRAW_BATCHES = 3


def posterior_covariance(parts: Components, measured: np.ndarray, weights: np.ndarray, design: Design, solution,
                         covariance: np.ndarray, variance: float, seed: int = 0,
                         held: tuple[str, ...] = ()) -> tuple[np.ndarray | None, float]:
    """The covariance of the parameters' *relative* changes (``value / fitted - 1``) under the fit's own
    cost, where the Gauss-Newton log covariance misleads.

    The Gauss-Newton covariance (``_standard_errors``) is the cost's curvature at the optimum. Bottlenecks
    combine by a maximum, so a parameter that binds no measurement *at the optimum* (a GEMM start-up
    latency under memory time) has almost no curvature there and gets a huge error, although the data
    refuse it as soon as it grows enough to bind (and its one-sided prior refuses it above its scale).
    Drawn from that covariance, it would put a GEMM's latency at 30x its fit (H100's vLLM fit: bf16 GEMM
    latency 1.06 us, log standard error 1.67; its cost rises by 41 residual variances at e^2 x the fit
    and by 0.26 at e^-2 x). So: draw parameter vectors
    from the Gauss-Newton normal widened ``PROPOSAL_SCALE`` x, weight each by the fit's posterior over
    the proposal density (``exp(-(cost - cost_min) / variance)``, the cost that ``least_squares``
    minimised, data and priors, ``variance`` the residual variance the Gauss-Newton errors are scaled
    by; vectors outside the fit's bounds weigh 0), adapting the proposal to the weighted draws while
    fewer than ``MINIMUM_EFFECTIVE_DRAWS`` are effective, and take the weighted covariance of the relative
    changes: a latency the data leave free downwards and bind upwards spans -100%..+100% there (its log
    would span e^-7..e^0.7, which a symmetric law cannot say). Returns (covariance in ``design.names``'
    order, effective number of draws); None when fewer than
    ``MINIMUM_EFFECTIVE_DRAWS`` (the correction cannot be trusted; the caller keeps no covariance).
    ``held``: parameters kept at the optimum (those at a bound of the fit, which are not written)."""
    bound = np.all(np.isfinite(covariance), axis=0) & np.all(np.isfinite(covariance), axis=1)
    bound &= np.array([name not in held for name in design.names])
    if not bound.any():
        return None, 0.0
    residuals = _residual_function(parts, measured, np.arange(len(measured)), weights, design)
    low, high = _bounds(design)
    centre = solution.x
    best = _robust_cost(residuals(centre, False))
    rng = np.random.default_rng(seed)
    mean, block = centre[bound], covariance[np.ix_(bound, bound)]
    # A parameter the curvature leaves nearly free (a log standard error of tens) would put almost every
    # draw outside the fit's bounds, where the weight is 0: its proposal spread is capped at a quarter of
    # the bounds' width (correlations kept; the weights use the capped proposal's own density).
    width = (high - low)[bound]
    shrink = np.sqrt(np.minimum(1.0, (width / 4) ** 2 / np.maximum(np.diag(block), 1e-300)))
    block = block * np.outer(shrink, shrink)
    kept: tuple = (None, None, 0.0, None, None)  # the round with the most effective draws (and its log weights and
    # proposal): adapted proposals need not improve
    for _round in range(POSTERIOR_ROUNDS):
        draws, log_weight = _weighted_draws(residuals, centre, bound, mean, block * PROPOSAL_SCALE ** 2,
                                            (low, high), best, variance, rng)
        weight, effective = _normalised(log_weight)
        if weight is None:
            break
        if effective > kept[2]:
            kept = (draws, weight, effective, log_weight, (mean, block))
        if effective >= MINIMUM_EFFECTIVE_DRAWS:
            break
        # Adapt: the next proposal is this round's weighted normal (population Monte Carlo), where the
        # Gauss-Newton one sits wide of a cost that rises steeply on one side.
        # With few effective draws the weighted covariance is noisy and too narrow in some directions: the
        # next proposal mixes it with the one just used (defensive), so no direction collapses.
        mean = weight @ draws[:, bound]
        centred = draws[:, bound] - mean
        block = 0.5 * (centred * weight[:, None]).T @ centred + 0.5 * block
    draws, weight, effective, log_weight, proposal = kept
    # Still short: more draws from the best round's proposal, pooled with its own (draws of one proposal weigh
    # alike, so their log weights pool as they are). Only a fit that fell short pays for them; the others' draws
    # are unchanged.
    for _batch in range(EXTRA_DRAW_BATCHES if weight is not None and effective < MINIMUM_EFFECTIVE_DRAWS else 0):
        more, more_log = _weighted_draws(residuals, centre, bound, proposal[0], proposal[1] * PROPOSAL_SCALE ** 2,
                                         (low, high), best, variance, rng)
        draws, log_weight = np.vstack([draws, more]), np.r_[log_weight, more_log]
        weight, effective = _normalised(log_weight)
        if effective >= MINIMUM_EFFECTIVE_DRAWS:
            break
    if weight is None or effective < MINIMUM_EFFECTIVE_DRAWS:
        return None, effective
    relative = np.exp(draws[:, bound] - centre[bound]) - 1
    centred = relative - weight @ relative
    result = np.diag(np.full(len(centre), np.inf))
    result[np.ix_(bound, bound)] = (centred * weight[:, None]).T @ centred
    return result, effective


def _normalised(log_weight: np.ndarray) -> tuple[np.ndarray | None, float]:
    """Importance weights normalised to sum to 1, and the effective number of draws they make (Kish:
    ``1 / sum(w^2)``); None and 0 when no draw has any weight."""
    if not np.isfinite(log_weight).any():
        return None, 0.0
    weight = np.exp(log_weight - np.max(log_weight))
    weight /= weight.sum()
    return weight, float(1.0 / np.sum(weight ** 2))


def _weighted_draws(residuals, centre: np.ndarray, bound: np.ndarray, mean: np.ndarray, block: np.ndarray,
                    bounds: tuple[np.ndarray, np.ndarray], best: float, variance: float, rng):
    """``POSTERIOR_DRAWS`` parameter vectors from the normal (``mean``, ``block``) over the ``bound``
    parameters (the others at ``centre``) and their log importance weights (the fit's posterior
    ``exp(-(cost - best) / variance)`` over the proposal density; -inf outside the fit's bounds)."""
    values, vectors = np.linalg.eigh((block + block.T) / 2)
    keep = values > 1e-12 * max(float(values.max()), 1e-300)
    standard = rng.standard_normal((POSTERIOR_DRAWS, int(keep.sum())))
    draws = np.tile(centre, (POSTERIOR_DRAWS, 1))
    draws[:, bound] = mean + standard @ (vectors[:, keep] * np.sqrt(values[keep])).T
    log_proposal = -0.5 * np.sum(standard ** 2, axis=1)
    log_target = np.full(POSTERIOR_DRAWS, -np.inf)
    inside = np.all((draws >= bounds[0]) & (draws <= bounds[1]), axis=1)
    for index in np.flatnonzero(inside):
        log_target[index] = -(_robust_cost(residuals(draws[index], False)) - best) / variance
    return draws, log_target - log_proposal


def _solve_design(parts: Components, measured: np.ndarray, subset: np.ndarray, weights: np.ndarray,
                  design: Design):
    from scipy.optimize import least_squares

    low, high = _bounds(design)
    residuals = _residual_function(parts, measured, subset, weights, design)

    best = None
    # Bottlenecks combine by a maximum, so a vector kind's compute efficiency started at the datasheet's
    # 1 leaves its compute hidden under memory time, with no gradient to find it: the fit also starts
    # those from lower efficiencies and keeps the solution of least cost (training data and priors).
    kinds = np.asarray(parts.kinds)
    vector = [index for index, (_key, mask) in enumerate(design.compute)
              if all(is_vector_kind(kind) for kind in set(kinds[mask]))]
    for start in COMPUTE_STARTS if vector else COMPUTE_STARTS[:1]:
        x0 = _initial(parts, design)
        x0[vector] = math.log(start)
        x0 = np.clip(x0, low + 1e-9, high - 1e-9)
        rough = least_squares(residuals, x0, bounds=(low, high), loss="soft_l1", f_scale=ROBUST_SCALE, args=(True,))
        solution = least_squares(residuals, rough.x, bounds=(low, high), loss="soft_l1", f_scale=ROBUST_SCALE,
                                 args=(False,))
        if best is None or solution.cost < best.cost:
            best = solution
    return best


def _solve(parts: Components, measured: np.ndarray, subset: np.ndarray, weights: np.ndarray):
    design = _design(parts, subset)
    if not design.names:
        raise PerfmodelError("no parameter can be fitted: no measurement binds any model component "
                             "(compute, memory, links or launch); add measurements of more kinds and sizes")
    return _solve_design(parts, measured, subset, weights, design), design, len(subset)


def _standard_errors(solution, data_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Standard errors (log space) from the inverse Gauss-Newton Hessian of data and prior, which
    parameters the data alone leave unbound (a zero column of the data Jacobian), and the log-space
    covariance of all parameters (rows and columns of unbound ones infinite on the diagonal, zero off it)."""
    jacobian = solution.jac
    data = jacobian[:data_rows]
    column = np.linalg.norm(data, axis=0)
    unbound = column <= UNIDENTIFIED_SHARE * max(float(column.max(initial=0.0)), 1e-300)
    dof = max(data_rows - int((~unbound).sum()), 1)
    variance = max(float(np.sum(solution.fun[:data_rows] ** 2)) / dof, 1e-12)
    # The bound parameters' block of the Hessian (data and prior); a parameter the data leave free has
    # no finite error from the data (its prior alone, or nothing for a latency): reported as infinite.
    bound = ~unbound
    errors = np.full(jacobian.shape[1], np.inf)
    covariance = np.diag(errors.copy())
    block = jacobian[:, bound]
    hessian = block.T @ block
    if bound.any() and np.linalg.matrix_rank(hessian) == hessian.shape[0]:
        inverse = np.linalg.inv(hessian) * variance
        errors[bound] = np.sqrt(np.clip(np.diag(inverse), 0, None))
        covariance[np.ix_(bound, bound)] = (inverse + inverse.T) / 2
    return errors, unbound, covariance, variance



# What a fitted efficiency above 1 says is wrong beneath it, by the kind of figure it multiplies.
ABOVE_DATASHEET_CHECKS = {
    "compute": ("peak", "check the clock (a base or TSC clock instead of the boost clock?), the unit count and the "
                        "ops per clock behind the peak"),
    "memory": ("bandwidth", "check the level's bandwidth (measured on another part? a per-clock width at the wrong "
                            "clock?)"),
    "link": ("bandwidth", "check the link's per-direction bandwidth (vendor aggregate / ports / 2)"),
}


def above_datasheet_flags(params: dict[str, tuple[float, float]], skip=()) -> tuple[str, ...]:
    """A warning for each fitted efficiency above 1: the device ran faster than the datasheet figure the
    efficiency multiplies, so that figure is wrong (an efficiency is at most 1 by definition). Named by
    parameter, with what to check: ``compute:matmul:simd:fp32 fitted 1.12x the datasheet peak: check the
    clock ...``; ``skip``: parameters not written (unidentified, at a bound)."""
    flags = []
    for name, (value, error) in params.items():
        kind = name.split(":")[0]
        if kind not in ABOVE_DATASHEET_CHECKS or name in skip or not value > 1.0:
            continue
        if kind == "compute" and is_exponential_key(name):
            continue  # an effective rate that counts what the matmuls hide (``capped_at_datasheet``), not a peak
        figure, check = ABOVE_DATASHEET_CHECKS[kind]
        flags.append(f"{name} fitted {value:.2f}x the datasheet {figure} (+/- {error:.2g}): {check}")
    return tuple(flags)


def fit(records, hardware: Hardware, *, mode: str | None = None, seed: int = 0, folds: int = 5,
        extra_seeds: int = 4, parts: Components | None = None, datasheet_levels: tuple[str, ...] = (),
        mapper: Mapper = serial_map, posterior_draws: bool = False) -> FitResult:
    """Fit on all records; report the held-out error of a random half split and of k folds.

    ``parts``: the model's components of the records when they do not come from re-evaluating each
    record's graph (the counter route builds them from measured FLOPs and bytes). ``datasheet_levels``:
    memory levels left at the datasheet (``Components.datasheet_levels``). ``mapper``: where the held-out
    fits run (``perfmodel.fanout``; the same answer anywhere)."""
    if len(records) < 4:
        raise PerfmodelError(f"a fit needs at least 4 measurements, got {len(records)}")
    parts = components(records, hardware, mode, datasheet_levels) if parts is None else parts
    measured = np.asarray([record.duration_s for record in records])
    everything = np.arange(len(records))
    weights = spread_weights(records)
    solution, design, data_rows = _solve(parts, measured, everything, weights)
    errors, unbound, covariance, variance = _standard_errors(solution, data_rows)
    names = design.names
    values = np.exp(solution.x)
    params = {name: (float(value), float(value * error)) for name, value, error in zip(names, values, errors,
                                                                                        strict=True)}
    datasheet = {name: (parts.launch_s if name == "kernel_launch_s" else
                        1.0 if name.split(":")[0] in ("compute", "memory", "link") else 0.0) for name in names}
    classes = tuple(record.op_class for record in records)
    # The held-out fits (a half split per seed: the extra seeds show how much the split itself moves the
    # answer; then k folds) are independent pieces of work for ``mapper``.
    seeds = range(seed, seed + 1 + extra_seeds)
    halves = [split_half(classes, each) for each in seeds]
    fold_splits = kfold_splits(len(measured), seed, folds)
    heldout_runs = list(mapper(_HeldOut(parts=parts, measured=measured, weights=weights), halves + fold_splits))
    summaries = [_half_summary(errors, test, classes)
                 for errors, (_, test) in zip(heldout_runs[:len(halves)], halves, strict=True)]
    heldout, by_class = summaries[0]
    others = []
    for other, (median, classes_error) in zip(seeds[1:], summaries[1:], strict=True):
        worst = max(classes_error, key=classes_error.get)
        others.append((other, median, worst, classes_error[worst]))
    folded = heldout_runs[len(halves):]
    kfold_error = float(np.median(np.concatenate([np.abs(errors) for errors in folded]))) if folded else None
    low_bounds, high_bounds = _bounds(design)
    unidentified = tuple(name for name, free in zip(names, unbound, strict=True) if free)
    # Within 10% of a bound (log space): a latency that ends at 1.07 ns has run into its 1 ns floor. An
    # unidentified parameter's value is wherever the optimizer left it (a bound on one CPU, inside on
    # another): it is reported as unidentified only.
    # An efficiency held at its datasheet ceiling (``capped_at_datasheet``) that ends there is the datasheet:
    # written as 1, not dropped (dropped, the spec would price it at the kind's shared efficiency instead). Only
    # one the optimizer pressed against the ceiling (``CEILING_TOLERANCE``); one fitted just below it (TPU v5e's
    # matmuls at 0.945) is a fitted value, kept.
    at_ceiling = tuple(name for name, value, high in zip(names, solution.x, high_bounds, strict=True)
                       if name not in unidentified and capped_at_datasheet(name) and high - value < CEILING_TOLERANCE)
    # A latency the optimizer took down to its floor (under ``FLOOR_FACTOR`` x the 1 ns bound) is no fixed cost
    # at all: written as 0.
    at_floor = tuple(name for name, value, low in zip(names, solution.x, low_bounds, strict=True)
                     if name not in unidentified and name.split(":")[0] in LATENCY_SECTIONS
                     and value - low < math.log(FLOOR_FACTOR))
    at_bounds = tuple(names[index] for index, value in enumerate(solution.x)
                      if names[index] not in unidentified and names[index] not in at_ceiling
                      and names[index] not in at_floor
                      and (value - low_bounds[index] < BOUND_TOLERANCE
                           or (high_bounds[index] - value < BOUND_TOLERANCE and not capped_at_datasheet(names[index]))))
    for name in at_ceiling:
        params[name] = (1.0, params[name][1])
    # The fit's predictions are those of what gets written: parameters left out fall back to the
    # datasheet (efficiency 1, no latency, the spec's launch cost).
    written = solution.x.copy()
    for index, name in enumerate(names):
        if name in unidentified or name in at_bounds or name in at_ceiling or name in at_floor:
            written[index] = (math.log(parts.launch_s) if name == "kernel_launch_s"
                              else 0.0 if name.split(":")[0] in ("compute", "memory", "link") else -np.inf)
    predicted = _predict(parts, written, design)
    flags = above_datasheet_flags(params, skip=(*unidentified, *at_bounds))
    message = (f"{len(names) - len(unidentified)} of {len(names)} parameters identified"
               + (f"; unidentified (not written): {', '.join(unidentified)}" if unidentified else ""))
    posterior = None
    if posterior_draws:
        posterior, effective = posterior_covariance(parts, measured, weights, design, solution, covariance, variance,
                                                    seed, held=(*at_bounds, *at_ceiling, *at_floor))
        message += (f"; posterior covariance from weighted draws ({effective:.0f} effective)"
                    if posterior is not None else
                    f"; no posterior covariance ({effective:.0f} effective draws, {MINIMUM_EFFECTIVE_DRAWS} needed)")
    return FitResult(params=params, log_covariance=covariance, covariance_names=tuple(names), datasheet=datasheet,
                     posterior_relative_covariance=posterior,
                     predicted_s=predicted,
                     measured_s=measured, classes=classes,
                     names=tuple(record.name for record in records), cost=float(solution.cost),
                     heldout_median_abs_error=heldout, heldout_by_class=by_class,
                     kfold_median_abs_error=kfold_error,
                     heldout_other_seeds=tuple(others), at_bounds=at_bounds, at_ceiling=at_ceiling, at_floor=at_floor,
                     unidentified=unidentified, flags=flags,
                     level_defaults=design.level_defaults,
                     success=bool(solution.success), message=message + f"; optimizer: {solution.message}")


def heldout_errors(parts: Components, measured: np.ndarray, train: np.ndarray, test: np.ndarray,
                   weights: np.ndarray, observed: np.ndarray | None = None) -> np.ndarray:
    """Fit on ``train``; the relative errors of the predictions of ``test`` against ``observed``
    (default: the measurements fitted; another run of the same shapes for an independent check)."""
    observed = measured if observed is None else observed
    design = _design(parts, train)
    if design.names:
        solution, design, _ = _solve(parts, measured, train, weights[train])
        theta = solution.x
    else:  # too few training measurements to bind anything: the datasheet predicts
        theta = np.zeros(0)
    # A kind of work absent from the training half keeps its datasheet efficiency (1.0).
    predicted = _predict(parts, theta, design)
    return (predicted[test] - observed[test]) / observed[test]


def split_half(classes, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random half of each class's measurements to fit on, the rest to predict (a class of one is
    predicted only)."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for name in sorted(set(classes)):
        members = np.flatnonzero(np.asarray(classes) == name)
        rng.shuffle(members)
        half = len(members) // 2
        train.extend(members[:half] if len(members) > 1 else [])
        test.extend(members[half:])
    return np.asarray(train, dtype=int), np.asarray(test, dtype=int)


def heldout_half(parts: Components, measured: np.ndarray, classes, seed: int,
                 weights: np.ndarray | None = None) -> tuple[float, dict[str, float]]:
    """Fit on a random half of the measurements, predict the other half (stratified by class)."""
    weights = np.ones(len(measured)) if weights is None else weights
    train, test = split_half(classes, seed)
    return _half_summary(heldout_errors(parts, measured, train, test, weights), test, classes)


def _half_summary(errors: np.ndarray, test: np.ndarray, classes) -> tuple[float, dict[str, float]]:
    """The median |error| of a held-out half, and per class."""
    by_class = {}
    for name in sorted(set(classes)):
        selected = [abs(error) for error, index in zip(errors, test, strict=True) if classes[index] == name]
        if selected:
            by_class[name] = float(statistics.median(selected))
    return float(np.median(np.abs(errors))), by_class


def kfold_splits(size: int, seed: int, folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) of each of ``folds`` folds over ``size`` measurements (none when too few)."""
    if folds < 2 or size < 2 * folds:
        return []
    order = np.random.default_rng(seed + 1).permutation(size)
    return [(np.setdiff1d(order, order[fold::folds]), order[fold::folds]) for fold in range(folds)]


def kfold(parts: Components, measured: np.ndarray, seed: int, folds: int,
          weights: np.ndarray | None = None) -> float | None:
    splits = kfold_splits(len(measured), seed, folds)
    if not splits:
        return None
    weights = np.ones(len(measured)) if weights is None else weights
    run = _HeldOut(parts=parts, measured=measured, weights=weights)
    return float(np.median(np.concatenate([np.abs(run(split)) for split in splits])))


@dataclass(frozen=True, kw_only=True, eq=False)
class _HeldOut:
    """One held-out fit: (train, test) -> the relative errors of the test predictions."""

    parts: Components
    measured: np.ndarray
    weights: np.ndarray

    def __call__(self, split: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        train, test = split
        return heldout_errors(self.parts, self.measured, train, test, self.weights)
