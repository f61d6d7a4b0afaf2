"""Fit the model's efficiencies and overheads to measurements.

Parameters (all fitted in log space, so they stay positive):
* a compute efficiency per (op kind, engine, dtype) that the measurements exercise
  (``matmul:simd:fp32``...): how far each kind of work gets below the datasheet peak;
* a bandwidth efficiency per memory level that binds at least ``MIN_RECORDS_PER_PARAMETER``
  measurements;
* a fixed start-up latency per op kind (``compute_latency``: thread-pool wake-up, kernel prologue) for
  kinds with at least ``MIN_RECORDS_FOR_LATENCY`` measurements: the size-dependent part of the
  efficiency that small GEMMs, norms and convolutions show;
* the per-kernel dispatch cost of the execution mode (``kernel_launch``).

The model's own components are computed once at datasheet values (``evaluate_arrays``); a
candidate parameter vector only rescales them, so a fit costs milliseconds. Residuals are
``log(predicted / measured)`` with a robust (soft-L1) loss and bounds (``scipy.optimize.least_squares``);
standard errors come from the Jacobian at the solution. The fit starts with a smooth maximum
(a p-norm of the bottleneck times) so that a bottleneck that does not bind at the start still gets a
gradient, then refines with the model's exact maximum. Held-out error: fit on a random half of the
measurements (shapes), predict the other half; and k-fold.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import Hardware, Parameters
from perfmodel.roofline.evaluate import evaluate_arrays
from perfmodel.workload.ir import concatenate

MIN_RECORDS_PER_PARAMETER = 3
BINDING_SHARE = 0.3  # a level "binds" a record when its time is at least this share of the busy time
EFFICIENCY_BOUNDS = (1e-3, 4.0)
LAUNCH_BOUNDS_S = (1e-8, 1e-2)
ROBUST_SCALE = 0.1  # soft-L1 switches from quadratic to linear beyond ~10% log error
MIN_RECORDS_FOR_LATENCY = 3
# Element-wise ops get no latency of their own: with one launch each, theirs would be the launch
# cost itself, which they identify.
LATENCY_KINDS = ("matmul", "conv", "attention", "norm", "softmax", "reduction")
LATENCY_BOUNDS_S = (1e-9, 1e-3)
SMOOTH_MAX_POWER = 6


@dataclass(frozen=True, kw_only=True)
class Components:
    """Datasheet-valued model components of every op of every record, ready to rescale."""

    record_of_op: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray        # (levels, ops)
    scheduling_s: np.ndarray
    fixed_s: np.ndarray         # device-side fixed time per kernel, not fitted here
    compute_keys: tuple[str, ...]
    kinds: tuple[str, ...]
    counts: np.ndarray
    level_names: tuple[str, ...]
    overlapped: bool
    launch_s: float
    records: int


@dataclass(frozen=True, kw_only=True)
class FitResult:
    params: dict[str, tuple[float, float]]          # name -> (value, standard error)
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
    at_bounds: tuple[str, ...] = ()  # parameters the data do not identify (the fit ran into a bound)

    @property
    def errors(self) -> np.ndarray:
        return (self.predicted_s - self.measured_s) / self.measured_s

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(self.errors)))

    def parameters(self, name: str) -> Parameters:
        compute = {key.removeprefix("compute:"): value for key, (value, _) in self.params.items()
                   if key.startswith("compute:")}
        memory = {key.removeprefix("memory:"): value for key, (value, _) in self.params.items()
                  if key.startswith("memory:")}
        latency = {key.removeprefix("latency:"): value for key, (value, _) in self.params.items()
                   if key.startswith("latency:")}
        return Parameters(name=name, compute_efficiency=compute, memory_efficiency=memory, compute_latency_s=latency)


def components(records, hardware: Hardware, mode: str | None = None) -> Components:
    graphs = [record.graph() for record in records]
    merged, owner = concatenate(graphs)
    arrays = evaluate_arrays(merged, hardware, mode=mode, fuse=False)
    execution = hardware.scheduling.modes[arrays.mode]
    keys = tuple(f"{op.kind}:{cost.engine}:{cost.peak_dtype}" for op, cost in zip(merged.ops, arrays.costs, strict=True))
    return Components(record_of_op=np.asarray(owner), compute_s=arrays.compute_s, memory_s=arrays.memory_s,
                      scheduling_s=arrays.scheduling_s, fixed_s=arrays.fixed_s,
                      compute_keys=keys, kinds=tuple(op.kind for op in merged.ops),
                      counts=arrays.counts, level_names=arrays.level_names,
                      overlapped=arrays.mode == "dynamic" and execution.host_overlap,
                      launch_s=execution.kernel_launch_s or execution.per_node_s or execution.program_launch_s,
                      records=len(records))


def _predict(parts: Components, compute_eff: np.ndarray, memory_eff: np.ndarray, launch_scale: float,
             latency: np.ndarray, smooth: bool = False) -> np.ndarray:
    compute = parts.compute_s / compute_eff + latency * parts.counts
    memory = parts.memory_s / memory_eff
    if smooth:
        stacked = np.vstack([compute[None], memory])
        busy = np.sum(stacked ** SMOOTH_MAX_POWER, axis=0) ** (1 / SMOOTH_MAX_POWER)
    else:
        busy = np.maximum(compute, memory.max(axis=0))
    busy = busy + parts.fixed_s  # the kernels' device-side fixed time (evaluate_arrays' combine rule)
    scheduling = parts.scheduling_s * launch_scale
    per_op = np.maximum(busy, scheduling) if parts.overlapped else busy + scheduling
    return np.bincount(parts.record_of_op, weights=per_op, minlength=parts.records)


def _design(parts: Components, subset: np.ndarray):
    """Which parameters the records in ``subset`` can identify.

    Memory: at the outermost level, a bandwidth efficiency per op kind that binds there for at least
    ``MIN_RECORDS_PER_PARAMETER`` records (a CPU GEMM re-packs its operands, so its DRAM efficiency
    differs from a stream's); elsewhere one per level."""
    in_subset = np.isin(parts.record_of_op, subset)
    kinds = np.asarray(parts.kinds)
    compute_keys = sorted({key for key, used, time in zip(parts.compute_keys, in_subset, parts.compute_s, strict=True)
                           if used and time > 0})
    busy = np.maximum(parts.compute_s, parts.memory_s.max(axis=0))
    memory_groups = []  # (label, level index, op mask)
    outermost = len(parts.level_names) - 1
    for index, name in enumerate(parts.level_names):
        binding = in_subset & (parts.memory_s[index] >= BINDING_SHARE * busy) & (parts.memory_s[index] > 0)
        covered = np.zeros_like(binding)
        # Per-kind efficiencies only where the data are plentiful: the outermost level.
        for kind in sorted(set(kinds[binding])) if index == outermost else ():
            mask = kinds == kind
            if len(set(parts.record_of_op[binding & mask])) >= MIN_RECORDS_PER_PARAMETER:
                memory_groups.append((f"{kind}:{name}", index, mask))
                covered |= mask
        rest = binding & ~covered
        if len(set(parts.record_of_op[rest])) >= MIN_RECORDS_PER_PARAMETER:
            memory_groups.append((name, index, ~covered))
    latency_kinds = [kind for kind in LATENCY_KINDS
                     if len(set(parts.record_of_op[in_subset & (kinds == kind)])) >= MIN_RECORDS_FOR_LATENCY]
    return compute_keys, memory_groups, latency_kinds


def _vector_to_parts(theta, parts: Components, design):
    compute_keys, memory_groups, latency_kinds = design
    compute_eff = np.ones_like(parts.compute_s)
    for offset, key in enumerate(compute_keys):
        compute_eff[np.asarray(parts.compute_keys) == key] = math.exp(theta[offset])
    memory_eff = np.ones_like(parts.memory_s)
    for offset, (_label, level, mask) in enumerate(memory_groups):
        memory_eff[level, mask] = math.exp(theta[len(compute_keys) + offset])
    latency = np.zeros_like(parts.compute_s)
    start = len(compute_keys) + len(memory_groups)
    for offset, kind in enumerate(latency_kinds):
        latency[np.asarray(parts.kinds) == kind] = math.exp(theta[start + offset])
    launch_scale = math.exp(theta[-1]) / parts.launch_s if parts.launch_s > 0 else 1.0
    return compute_eff, memory_eff, launch_scale, latency


def _bounds(efficiencies: int, latencies: int) -> tuple[np.ndarray, np.ndarray]:
    """Log-space bounds of the parameter vector: efficiencies, then latencies, then the launch cost."""
    low = np.r_[np.full(efficiencies, math.log(EFFICIENCY_BOUNDS[0])), np.full(latencies, math.log(LATENCY_BOUNDS_S[0])),
                math.log(LAUNCH_BOUNDS_S[0])]
    high = np.r_[np.full(efficiencies, math.log(EFFICIENCY_BOUNDS[1])), np.full(latencies, math.log(LATENCY_BOUNDS_S[1])),
                 math.log(LAUNCH_BOUNDS_S[1])]
    return low, high


def _solve(parts: Components, measured: np.ndarray, subset: np.ndarray):
    from scipy.optimize import least_squares

    design = _design(parts, subset)
    compute_keys, memory_groups, latency_kinds = design
    efficiencies = len(compute_keys) + len(memory_groups)
    launch0 = parts.launch_s if parts.launch_s > 0 else 1e-6
    x0 = np.r_[np.zeros(efficiencies), np.full(len(latency_kinds), math.log(1e-6)), math.log(launch0)]
    low, high = _bounds(efficiencies, len(latency_kinds))
    x0 = np.clip(x0, low + 1e-9, high - 1e-9)

    def residuals(theta, smooth):
        predicted = _predict(parts, *_vector_to_parts(theta, parts, design), smooth=smooth)
        return np.log(predicted[subset] / measured[subset])

    rough = least_squares(residuals, x0, bounds=(low, high), loss="soft_l1", f_scale=ROBUST_SCALE, args=(True,))
    solution = least_squares(residuals, rough.x, bounds=(low, high), loss="soft_l1", f_scale=ROBUST_SCALE,
                             args=(False,))
    return solution, design


def _standard_errors(solution) -> np.ndarray:
    """From the Jacobian of the residuals at the solution."""
    jacobian = solution.jac
    dof = max(len(solution.fun) - len(solution.x), 1)
    variance = float(np.sum(solution.fun ** 2)) / dof
    covariance = np.linalg.pinv(jacobian.T @ jacobian) * variance
    return np.sqrt(np.clip(np.diag(covariance), 0, None))


def fit(records, hardware: Hardware, *, mode: str | None = None, seed: int = 0, folds: int = 5,
        extra_seeds: int = 4) -> FitResult:
    """Fit on all records; report the held-out error of a random half split and of k folds."""
    if len(records) < 4:
        raise PerfmodelError(f"a fit needs at least 4 measurements, got {len(records)}")
    parts = components(records, hardware, mode)
    measured = np.asarray([record.duration_s for record in records])
    everything = np.arange(len(records))
    solution, design = _solve(parts, measured, everything)
    compute_keys, memory_groups, latency_kinds = design
    errors = _standard_errors(solution)
    params, datasheet = {}, {}
    for offset, key in enumerate(compute_keys):
        value = math.exp(solution.x[offset])
        params[f"compute:{key}"] = (value, value * errors[offset])
        datasheet[f"compute:{key}"] = 1.0
    for offset, (label, _level, _mask) in enumerate(memory_groups):
        index = len(compute_keys) + offset
        value = math.exp(solution.x[index])
        params[f"memory:{label}"] = (value, value * errors[index])
        datasheet[f"memory:{label}"] = 1.0
    for offset, kind in enumerate(latency_kinds):
        index = len(compute_keys) + len(memory_groups) + offset
        value = math.exp(solution.x[index])
        params[f"latency:{kind}"] = (value, value * errors[index])
        datasheet[f"latency:{kind}"] = 0.0
    launch = math.exp(solution.x[-1])
    params["kernel_launch_s"] = (launch, launch * errors[-1])
    datasheet["kernel_launch_s"] = parts.launch_s
    predicted = _predict(parts, *_vector_to_parts(solution.x, parts, design))
    classes = tuple(record.op_class for record in records)
    heldout, by_class = heldout_half(parts, measured, classes, seed)
    others = []
    for other in range(seed + 1, seed + 1 + extra_seeds):  # how much the split itself moves the answer
        median, classes_error = heldout_half(parts, measured, classes, other)
        worst = max(classes_error, key=classes_error.get)
        others.append((other, median, worst, classes_error[worst]))
    low_bounds, high_bounds = _bounds(len(compute_keys) + len(memory_groups), len(latency_kinds))
    names = list(params)
    at_bounds = tuple(names[index] for index, value in enumerate(solution.x)
                      if min(value - low_bounds[index], high_bounds[index] - value) < 1e-3)
    return FitResult(params=params, datasheet=datasheet, predicted_s=predicted, measured_s=measured, classes=classes,
                     names=tuple(record.name for record in records), cost=float(solution.cost),
                     heldout_median_abs_error=heldout, heldout_by_class=by_class,
                     kfold_median_abs_error=kfold(parts, measured, seed, folds), heldout_other_seeds=tuple(others),
                     at_bounds=at_bounds)


def _heldout_errors(parts: Components, measured: np.ndarray, train: np.ndarray, test: np.ndarray) -> np.ndarray:
    solution, design = _solve(parts, measured, train)
    # A kind of work absent from the training half keeps its datasheet efficiency (1.0).
    predicted = _predict(parts, *_vector_to_parts(solution.x, parts, design))
    return (predicted[test] - measured[test]) / measured[test]


def heldout_half(parts: Components, measured: np.ndarray, classes, seed: int) -> tuple[float, dict[str, float]]:
    """Fit on a random half of the measurements, predict the other half (stratified by class)."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for name in sorted(set(classes)):
        members = np.flatnonzero(np.asarray(classes) == name)
        rng.shuffle(members)
        half = len(members) // 2
        train.extend(members[:half] if len(members) > 1 else [])
        test.extend(members[half:])
    errors = _heldout_errors(parts, measured, np.asarray(train), np.asarray(test))
    by_class = {}
    for name in sorted(set(classes)):
        selected = [abs(error) for error, index in zip(errors, test, strict=True) if classes[index] == name]
        if selected:
            by_class[name] = float(statistics.median(selected))
    return float(np.median(np.abs(errors))), by_class


def kfold(parts: Components, measured: np.ndarray, seed: int, folds: int) -> float | None:
    if folds < 2 or len(measured) < 2 * folds:
        return None
    order = np.random.default_rng(seed + 1).permutation(len(measured))
    errors = []
    for fold in range(folds):
        test = order[fold::folds]
        train = np.setdiff1d(order, test)
        errors.extend(np.abs(_heldout_errors(parts, measured, train, test)))
    return float(np.median(errors))
