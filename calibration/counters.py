"""The counter route: fit a spec to kernels whose FLOPs and bytes were measured (Nsight Compute),
with no graph: the model's components come straight from the counters.

For each kernel (one record, one row of the components)::

    compute_s    = max over the units that did FLOPs of  flops[unit] / peak[engine, dtype]
    memory_s[L]  = bytes counted at level L / bandwidth[L]
    fixed_s      = kernel_fixed_s of the engine that did the (most) work
    scheduling_s = launches x the execution mode's per-kernel cost, for host-timed records only

* FLOPs come per ``"<engine kind>:<dtype>"`` (``record.flops_by_engine``: ``vector:fp32`` from the
  CUDA-core instruction counts, ``matrix:bf16`` from the tensor pipe); the engine and the dtype whose
  peak applies are chosen as for any op (:func:`perfmodel.costs.rules.select_engine`: a matrix engine
  for tensor work, a vector engine otherwise, bf16 and fp16 standing in for each other). The
  component key is ``kind:engine:dtype`` where ``kind`` is the kernel's op kind, read from its name
  (:data:`KERNEL_KINDS`: ``gemm`` -> matmul, ``softmax`` -> softmax...), so the fit's efficiencies are
  the ones a graph evaluation looks up.
* Counter levels map onto the spec's memory levels (:func:`counter_levels`): ``dram`` (``dram__bytes``)
  -> the outermost on-device level (HBM, LPDDR); ``l2`` (``lts__t_bytes``) -> the level named ``l2``,
  else the cache just inside the outermost on-device level; ``l1`` (``l1tex__t_bytes``: L1 and shared
  memory) -> the innermost level. A counter level the spec has no match for is left out.
* Nsight Compute times a kernel on the device (``clock="device"``): the host's launch is not in it,
  so no launch cost is charged (the fit then leaves the launch cost at the datasheet value). Only
  host-timed records pay ``launches x`` the mode's per-kernel cost (``kernel_launch``, else
  ``per_node``, else ``program_launch``, as :func:`calibration.fit.components` picks it).
* A kernel with neither FLOP nor byte counters cannot be priced: it is listed as unmapped time.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from calibration.fit import Components
from calibration.records import MeasurementRecord, Measurements, Unmapped, group_unmapped, kernel_label
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import execution_model, resolve_mode
from perfmodel.hardware.model import Hardware
from perfmodel.workload.op_kinds import OP_KIND_TABLE, op_kind

# Kernel-name fragments (lower case) -> op kind, first match wins: cuDNN/CUTLASS convolutions name
# their implicit GEMMs fprop/dgrad/wgrad, PyTorch's native kernels name what they do.
KERNEL_KINDS = (
    ("fprop", "conv"), ("dgrad", "conv"), ("wgrad", "conv"), ("conv", "conv"), ("winograd", "conv"),
    ("flash", "attention"), ("fmha", "attention"), ("attention", "attention"), ("sdpa", "attention"),
    ("softmax", "softmax"),
    ("layer_norm", "norm"), ("layernorm", "norm"), ("rms_norm", "norm"), ("rmsnorm", "norm"),
    ("batch_norm", "norm"), ("group_norm", "norm"),
    ("gemm", "matmul"), ("gemv", "matmul"), ("xmma", "matmul"), ("cutlass", "matmul"), ("nvjet", "matmul"),
    ("matmul", "matmul"), ("cublas", "matmul"),
    ("reduce", "reduction"), ("elementwise", "elementwise"),
    ("embedding", "embedding"), ("index", "embedding"), ("gather", "embedding"), ("scatter", "embedding"),
    ("copy", "copy"), ("catarray", "copy"), ("transpose", "copy"), ("fill", "copy"),
)
NO_COUNTERS = "no FLOP or byte counters (collect e.g. dram__bytes.sum, sm__sass_thread_inst_executed_op_ffma_pred_on.sum)"
ENGINE_KINDS = {"matrix": "matmul", "vector": "elementwise"}  # the op kind that prefers each engine kind


def kernel_kind(name: str) -> str:
    """The op kind of a kernel from its (demangled) name; ``other`` when nothing matches."""
    lowered = name.lower()
    return next((kind for fragment, kind in KERNEL_KINDS if fragment in lowered), "other")


def counter_levels(hardware: Hardware) -> dict[str, int]:
    """Counter level (``dram``, ``l2``, ``l1``) -> index of the spec's memory level it measures."""
    levels = hardware.memory
    outermost = levels.index(hardware.outermost_on_device)
    mapping = {"dram": outermost, "hbm": outermost}
    names = [level.name for level in levels]
    if "l2" in names:
        mapping["l2"] = names.index("l2")
    elif outermost > 0 and levels[outermost - 1].kind == "cache":
        mapping["l2"] = outermost - 1
    if outermost > 0:
        mapping["l1"] = 0
    return mapping


def _compute(record: MeasurementRecord, hardware: Hardware, kind: str):
    """(seconds, engine name, peak dtype) of the record's FLOPs on the unit that takes longest."""
    from perfmodel.costs.rules import select_engine

    best = (0.0, None, None)
    breakdown = dict(record.flops_by_engine)
    if not breakdown and not math.isnan(record.flops) and record.flops > 0:
        breakdown = {"vector:fp32": record.flops}  # a bare FLOP count: CUDA-core fp32 (the common case)
    for key, flops in breakdown.items():
        engine_kind, _, dtype = key.partition(":")
        if flops <= 0:
            continue
        engine, peak_dtype = select_engine(hardware, ENGINE_KINDS.get(engine_kind, kind), dtype)
        seconds = flops / engine.peak_flops_per_s[peak_dtype]
        if seconds >= best[0]:
            best = (seconds, engine.name, peak_dtype)
    return best


def _preferred_engine(hardware: Hardware, kind: str):
    entry = op_kind(kind)
    wanted = entry.engine if entry is not None else "vector"
    engines = sorted(hardware.compute.values(), key=lambda engine: engine.kind != wanted)
    return engines[0] if engines else None


def counter_components(records, hardware: Hardware, mode: str | None = None) -> Components:
    """The fit's components of Nsight Compute records (see the module docstring): one row per kernel."""
    mode_name = resolve_mode(hardware, mode)
    execution, model = hardware.scheduling.modes[mode_name], execution_model(mode_name)
    launch_s = model.launch_ceiling_s(execution)
    levels = counter_levels(hardware)
    count = len(records)
    compute_s, fixed_s, scheduling_s = np.zeros(count), np.zeros(count), np.zeros(count)
    memory_s = np.zeros((len(hardware.memory), count))
    keys, kinds, dtypes = [], [], []
    for index, record in enumerate(records):
        kind = record.op_class if record.op_class in OP_KIND_TABLE else kernel_kind(record.name)
        seconds, engine_name, dtype = _compute(record, hardware, kind)
        engine = hardware.compute[engine_name] if engine_name else _preferred_engine(hardware, kind)
        compute_s[index] = seconds
        keys.append(f"{kind}:{engine_name}:{dtype}" if engine_name else f"{kind}:-:-")
        kinds.append(kind)
        dtypes.append(dtype if engine_name else "-")
        fixed_s[index] = (engine.kernel_fixed_s if engine is not None else 0.0) * record.launches
        for level, measured in record.bytes_by_level.items():
            if level in levels and not math.isnan(measured):
                position = levels[level]
                memory_s[position, index] += measured / hardware.memory[position].bandwidth_bytes_per_s
        if record.clock == "host":
            scheduling_s[index] = record.launches * launch_s
    return Components(record_of_op=np.arange(count), compute_s=compute_s, memory_s=memory_s,
                      scheduling_s=scheduling_s, fixed_s=fixed_s, compute_keys=tuple(keys), kinds=tuple(kinds),
                      # a kernel's shape is not in its counters: it is priced as its kind (no kernel class)
                      priced_kinds=tuple(kinds), dtypes=tuple(dtypes), counts=np.ones(count),
                      level_names=tuple(level.name for level in hardware.memory),
                      execution_model=model, execution=execution, launch_s=launch_s,
                      records=count)


def counter_measurements(records, hardware: Hardware, source_file: str, format_name: str = "ncu") -> Measurements:
    """Split reader records into priceable kernels and unmapped time; a priced record's ``op_class`` is
    its kernel kind and its name the short kernel label (:func:`calibration.records.kernel_label`)."""
    from perfmodel.costs.rules import select_engine

    levels = counter_levels(hardware)
    priced, unmapped, total = [], [], 0.0
    for record in records:
        total += record.duration_s * record.count
        has_flops = bool(record.flops_by_engine) or (not math.isnan(record.flops) and record.flops > 0)
        has_bytes = any(level in levels and not math.isnan(value) and value > 0
                        for level, value in record.bytes_by_level.items())
        if not has_flops and not has_bytes:
            unmapped.append(Unmapped(name=kernel_label(record.name), reason=NO_COUNTERS,
                                     time_s=record.duration_s * record.count, count=record.count))
            continue
        kind = kernel_kind(record.name)
        try:
            for key in record.flops_by_engine:
                engine_kind, _, dtype = key.partition(":")
                select_engine(hardware, ENGINE_KINDS.get(engine_kind, kind), dtype)
        except PerfmodelError as error:
            unmapped.append(Unmapped(name=kernel_label(record.name), reason=str(error).split(";")[0],
                                     time_s=record.duration_s * record.count, count=record.count))
            continue
        priced.append(replace(record, op_class=kind, name=kernel_label(record.name)))
    return Measurements(source_file=source_file, format=format_name, route="counter", records=tuple(priced),
                        unmapped=tuple(group_unmapped(unmapped)), total_s=total)
