"""Achievable overlays: the datasheet specs' efficiencies fitted to published microbenchmarks.

``calibration/data/published/`` holds kernel-level measurements others published (matmul TFLOP/s by
shape, bandwidth by working set and level, collective bandwidth by message size, FlashAttention
TFLOP/s). Each row becomes one measurement record whose graph is the one op it measured, so the same
fit as ``perfmodel calibrate`` (:func:`calibration.fit.fit`: prior toward the datasheet,
identifiability, held-out error per class) turns them into an overlay spec
``hardware_specs/<family>/<name>-achievable.yaml`` that ``extends`` the datasheet spec. Predictions use
the overlay by default where one ships (``--ideal`` gives the datasheet roofline). A device with no
published measurement of its own may take a sibling's compute efficiencies (``SIBLING_ESTIMATES``):
its overlay is then of kind ``estimated``, and says so in every output.

Only microbenchmarks are used here; end-to-end application rows (LLM throughput, latency) are for
validation only and never fit anything.

Conventions for turning a published row into an op (device time only: the tables time kernels
back to back, so the host's launch cost and the CUDA-graph node gap are not charged):
* matmul: one (batch x) m x n x k product in the row's dtype (fp8 writes bf16); time = FLOPs / rate.
  TPU rows not timed on the device (a host timer around dispatch and sync) are used only when they
  run at least 40 times the host's measured floor (``HOST_TIMED_MIN_S``).
* hbm rows: a read-only stream of the working set (``bytes``) from HBM, with no cache reuse (the
  working set is at least twice the L2); time = volume / bandwidth, volume = the bytes the kernel
  moves (streams x buffer for the STREAM-like kernels).
* l2 rows: the same stream with a working set that fits the L2 (served from it by the warm-cache
  rule). l1 rows are left out: the spec's innermost level is the shared-memory scratchpad, which a
  cache benchmark does not exercise as such.
* collectives: the op on ``gpus`` ranks over the spec's scale-up link; time from ``time_s``, or
  message / algorithm bandwidth, or message x factor / bus bandwidth (nccl-tests conventions).
* attention: forward FlashAttention rows with the row's batch, heads, sequence length, head dim,
  causal flag, sliding window and kernel key block; time as published, or FLOPs as the benchmark
  counts them / rate. TPU rows timed forward + backward (axlearn's ``jax.grad`` of the attention
  call) are the forward op followed by its gradient op, as training graphs build them
  (``perfmodel.training.backward.gradient_ops``); the GPU FlashAttention fwd+bwd figures stay out
  until the GPU overlays are refitted with a backward model checked against them. Host-timed TPU
  rows follow the matmul rule below.
* decode attention: one query token per sequence against a KV cache of ``seq_kv`` tokens, with the
  row's query and KV heads (grouped-query attention), as the LLM decode graphs shape it; time as
  published. These kernels read the KV cache from HBM, so they are the device's own rows only.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from calibration.published import load_published
from calibration.records import MeasurementRecord
from perfmodel.hardware.model import Hardware
from perfmodel.workload.io import dumps
from perfmodel.workload.ir import Graph, Op, TensorSpec
from perfmodel.workload.op_kinds import matmul_flops

OVERLAYS = ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200")
TPU_OVERLAYS = ("tpu-v5e", "tpu-v6e", "tpu-v5p")
# A device no published kernel measurement covers, whose matrix units are the design of a measured
# sibling's: its overlay takes the sibling's fitted compute efficiencies (an estimate, named as such in
# the overlay's source), and keeps the datasheet for memory, links and latencies, which depend on its
# own memory system and package. v5p's TensorCores carry four 128x128 MXUs each, as v5e's one does
# (JAX's tpu_info table, the scaling book); no v5p matmul, HBM or ICI figure is published
# (data/published/TPU_SEARCH.md). TPU v4 also has 128x128 MXUs but is an earlier generation (its
# MXU pipeline and compiler differ): it stays at the datasheet rather than borrow a v5 figure.
SIBLING_ESTIMATES = {"tpu-v5p": "tpu-v5e"}
# H100 SXM and H200 are the same GH100 die at the same clocks (H200 changes only the HBM): on-die
# measurements (matmul, attention, L2 streams) of either serve both, as the family's shared data;
# HBM streams and collectives (which depend on the memory and the system) stay per device. (The H800
# SXM5 FP8 GEMM rows are filed as h100-sxm for the same reason, compute-bound rows only: README.md.)
SAME_DIE = {"h100-sxm": ("h100-sxm", "h200-sxm"), "h200-sxm": ("h200-sxm", "h100-sxm")}
PATTERN_STREAMS = {"read": (1, 0), "init": (0, 1), "scale": (1, 1), "triad": (2, 1), "stencil3pt": (1, 1),
                   "stencil5pt": (1, 1), "copy": (1, 1), "write": (0, 1)}
BUS_FACTOR = {"all_reduce": lambda p: 2 * (p - 1) / p, "all_gather": lambda p: (p - 1) / p,
              "reduce_scatter": lambda p: (p - 1) / p, "all_to_all": lambda p: (p - 1) / p}
# Host-timed rows (a Python timer around a dispatch and a sync) carry the host's floor: 106 us (v5e)
# and 119 us (v6e) for an 8x8x8 matmul in the same tpu-perf-model run. A TPU row not timed on the
# device is kept only when that floor is under 2.5% of its time, so what is fitted is the device's
# work, not the dispatch (a fixed cost fitted from it would charge every TPU op ~0.1 ms).
# That floor, measured per device (tpu-perf-model's 8x8x8 dot in the same runs, README.md), is also taken
# off a host-timed row's time: what is left is the device's work. A fitted per-kernel latency then stands
# for the device alone (with the floor left in, v5e's nine rows fitted a 171 us "latency" that the overlay
# would have charged every TPU matmul).
# v5p's floor is not measured anywhere published: its rows (axlearn's attention benchmark, the same host
# timer around one jitted call on a TPU VM) take the larger of the two measured floors, an estimate whose
# error the 40x rule keeps under 2.5% of any kept row's time.
HOST_DISPATCH_FLOOR_S = {"tpu-v5e": 105.56e-6, "tpu-v6e": 118.73e-6, "tpu-v5p": 118.73e-6}
HOST_TIMED_MIN_S = 40 * max(HOST_DISPATCH_FLOOR_S.values())
# A TPU's VMEM feeds the MXUs inside every attention kernel: whole-kernel times cannot separate its bandwidth
# from the kernel's rate (fitted together on v5p's attention rows, VMEM went to 0.50, a device-wide factor
# that every v5p op would then pay), so it stays at the datasheet, as a GPU's shared memory does in
# ``calibration.engine_overlays.DATASHEET_LEVELS``. So does HBM: the only HBM-bound work in these rows is the sum
# of splash attention's partial dQs inside a forward + backward time, and fitted from it HBM went to 0.34, again
# a device-wide factor, for a device with no published memory measurement.
OWN_ROWS_DATASHEET_LEVELS = ("vmem", "hbm")
ATTENTION_FORWARD_MATMULS = 4  # FlashAttention's benchmark counts 4 * b * s^2 * h * d for the forward
# The kernel each published TPU row times, for how it computes the gradient (``training.backward.ATTENTION_KERNELS``),
# from its source at the benchmark's commit: axlearn a5f0b462 runs its copy of the legacy Pallas flash kernel (a dK/dV
# kernel and a dQ kernel that each recompute the scores, their grids split over the megacore: "parallel" dimensions);
# axlearn c40b39a5 runs splash attention (jax 0.4.33) with ``use_fused_bwd_kernel=True`` (``tpu_attention.py``): one
# gradient kernel whose grid is all "arbitrary" (one TensorCore of a v5p's two) and which writes a partial dQ per key
# block (``dq_unreduced``, summed after it). The forward kernels of both split their grids over the cores.
TPU_ATTENTION_KERNELS = {"pallas-tpu-flash-attention (legacy)": "pallas-flash", "splash-attention": "splash-fused"}


@dataclass(frozen=True, kw_only=True)
class Rows:
    records: list[MeasurementRecord]
    skipped: dict[str, int]
    # The attention kernels' key block where the rows set it (axlearn: 512), for the fit's copy of the spec
    # (``with_attention_block``). It is not an op attribute (``kv_block``): the cost rule reads that one as a
    # scalar, and ops of different shapes are priced stacked, which makes it an array.
    attention_blocks: frozenset[int] = frozenset()


def _record(name: str, op_class: str, duration_s: float, op: Op, row: dict, device: str) -> MeasurementRecord:
    return MeasurementRecord(
        name=name, op_class=op_class, duration_s=duration_s, device=device, tool=row["tool"],
        tool_version=row["version"], flops_source="analytic_shapes", bytes_source="model_derived",
        source_file=row["url"], source_row=row["line"], workload_json=dumps(Graph(name=name, ops=[op]), "json"))


def _matmul(row: dict, device: str) -> MeasurementRecord:
    dtype, batch, m, n, k = row["dtype"], row["batch"], row["m"], row["n"], row["k"]
    flops = float(matmul_flops(m, n, k, batch))
    duration = row["time_s"] if row.get("time_s") else flops / (row["measured_tflops"] * 1e12)
    output = "bf16" if dtype == "fp8" else dtype
    a_shape, b_shape, c_shape = ((batch, m, k), (batch, k, n), (batch, m, n)) if batch > 1 else ((m, k), (k, n), (m, n))
    operands = (TensorSpec(shape=a_shape, dtype=dtype), TensorSpec(shape=b_shape, dtype=dtype))
    op = Op(name="mm", kind="matmul", inputs=operands,
            outputs=(TensorSpec(shape=c_shape, dtype=output),),
            attrs={"m": m, "n": n, "k": k, "batch": batch, "dtype": dtype})
    return _record(f"matmul_{dtype}_{batch}x{m}x{n}x{k}", f"matmul:{dtype}", duration, op, row, device)


def _stream(row: dict, device: str) -> MeasurementRecord | None:
    level = row["level"]
    if level == "l1" or row["pattern"] not in PATTERN_STREAMS:
        return None
    reads, writes = PATTERN_STREAMS[row["pattern"]]
    streams = reads + writes
    volume = float(row["bytes"])
    buffer_elements = max(int(volume / streams / 4), 1)
    role = "weight" if level == "hbm" else "activation"  # hbm: no cache reuse; l2: served by the warm cache
    tensor = TensorSpec(shape=(buffer_elements,), dtype="fp32", role=role)
    sink = TensorSpec(shape=(1,), dtype="fp32")
    op = Op(name="stream", kind="elementwise", inputs=(tensor,) * reads or (sink,),
            outputs=(tensor,) * writes if writes else (sink,), attrs={"flops_per_element": 0})
    duration = volume / row["measured_bytes_per_s"]
    return _record(f"stream_{level}_{row['pattern']}_{int(volume)}", f"stream:{level}", duration, op, row, device)


def _collective(row: dict, device: str, hardware: Hardware) -> MeasurementRecord | None:
    collective, ranks, message = row["collective"], int(row["gpus"]), float(row["message_bytes"])
    if ranks < 2:
        return None
    if row.get("time_s"):
        duration = row["time_s"]
    elif row.get("alg_bytes_per_s"):
        duration = message / row["alg_bytes_per_s"]
    else:
        duration = message * BUS_FACTOR[collective](ranks) / row["bus_bytes_per_s"]
    link = next(link.name for link in hardware.links.values() if link.kind == "chip_to_chip")
    op = Op(name="collective", kind="collective", attrs={"collective": collective, "bytes": message,
                                                         "group_size": ranks, "dtype": "fp32", "link": link})
    return _record(f"{collective}_{ranks}x_{int(message)}", f"collective:{collective}", duration, op, row, device)


def _attention(row: dict, device: str) -> MeasurementRecord | None:
    backward = row["direction"] == "fwd_bwd" and device.startswith("tpu")
    if row["direction"] != "fwd" and not backward:
        return None
    batch, heads, seq, head_dim, causal = row["batch"], row["heads"], row["seq_len"], row["head_dim"], row["causal"]
    if row.get("time_s"):
        duration = row["time_s"]
    else:
        counted = ATTENTION_FORWARD_MATMULS * batch * seq * seq * heads * head_dim / (2 if causal else 1)
        duration = counted / (row["measured_tflops"] * 1e12)
    tensor = TensorSpec(shape=(batch, heads, seq, head_dim), dtype=row["dtype"])
    attrs = {"batch": batch, "heads": heads, "kv_heads": heads, "seq_q": seq, "seq_kv": seq, "head_dim": head_dim,
             "causal": causal, "implementation": "flash", "dtype": row["dtype"]}
    if row.get("window"):
        attrs["window"] = row["window"]
    if backward:
        from perfmodel.training.backward import attention_kernel_attrs

        if row["implementation"] not in TPU_ATTENTION_KERNELS:
            raise ValueError(f"TPU attention row of kernel {row['implementation']!r}: how its backward runs is not "
                             f"known (TPU_ATTENTION_KERNELS names {', '.join(TPU_ATTENTION_KERNELS)})")
        attrs.update(attention_kernel_attrs(TPU_ATTENTION_KERNELS[row["implementation"]], seq, row["block"]))
    op = Op(name="sdpa", kind="attention", inputs=(tensor, tensor, tensor), outputs=(tensor,), attrs=attrs)
    name = (f"attention_{row['implementation'].split(' ')[0]}_{batch}x{heads}x{seq}x{head_dim}"
            f"{'_causal' if causal else ''}{'_w' + str(row['window']) if row.get('window') else ''}"
            f"{'_fwd_bwd' if backward else ''}")
    if not backward:
        return _record(name, "attention", duration, op, row, device)
    from perfmodel.training.backward import gradient_ops

    ops = [op, *gradient_ops(op)]
    # its own class: the held-out halves split forward and forward + backward rows each (``calibration.fit``)
    return dataclasses.replace(_record(name, "attention:fwd_bwd", duration, op, row, device),
                               workload_json=dumps(Graph(name=name, ops=ops), "json"))


def _host_timed(record: MeasurementRecord | None, row: dict) -> tuple[MeasurementRecord | None, bool]:
    """A TPU row timed from the host (a timer around dispatch and sync): (the record less the host's
    floor, True), or (None, False) when the floor is over 2.5% of its time; other rows pass unchanged."""
    if record is None or not row["device"].startswith("tpu") or "device-timed" in row["conditions"]:
        return record, True
    if record.duration_s < HOST_TIMED_MIN_S:
        return None, False
    return dataclasses.replace(record, duration_s=record.duration_s - HOST_DISPATCH_FLOOR_S[row["device"]]), True


def _decode_attention(row: dict, device: str) -> MeasurementRecord:
    """A decode step's attention: one query token per sequence against ``seq_kv`` cached tokens, shaped
    as the LLM stage graphs shape it (``perfmodel.llm.graphs.stage_graph``)."""
    batch, heads, kv_heads, seq, head_dim = row["batch"], row["heads"], row["kv_heads"], row["seq_kv"], row["head_dim"]
    query = TensorSpec(shape=(batch, heads, 1, head_dim), dtype=row["dtype"])
    cache = TensorSpec(shape=(batch, kv_heads, seq, head_dim), dtype=row["dtype"], role="kv_cache")
    op = Op(name="sdpa", kind="attention", inputs=(query, cache, cache), outputs=(query,),
            attrs={"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_q": 1, "seq_kv": seq,
                   "head_dim": head_dim, "causal": False, "implementation": "flash", "dtype": row["dtype"]})
    name = f"decode_attention_{row['implementation']}_{batch}x{heads}/{kv_heads}x{seq}x{head_dim}"
    return _record(name, "attention", row["time_us"] * 1e-6, op, row, device)


def published_records(overlay: str, hardware: Hardware) -> Rows:
    """Every published row usable for ``overlay``, as measurement records."""
    die = SAME_DIE.get(overlay, (overlay,))
    records, skipped = [], {}

    def keep(record, reason: str) -> None:
        if record is None:
            skipped[reason] = skipped.get(reason, 0) + 1
        elif math.isfinite(record.duration_s):
            records.append(record)

    for row in load_published("matmul"):
        if row["device"] in die:
            supported = any(row["dtype"] in engine.peak_flops_per_s for engine in hardware.compute.values())
            record, long_enough = _host_timed(_matmul(row, row["device"]) if supported else None, row)
            if not long_enough:
                keep(None, "host-timed rows under 40x the host's dispatch floor")
                continue
            keep(record, f"matmul dtype {row['dtype']} has no peak")
    for row in load_published("memory_bandwidth"):
        if row["device"] == overlay or (row["device"] in die and row["level"] != "hbm"):
            keep(_stream(row, row["device"]), "l1 rows (no such level in the spec)")
    for row in load_published("collectives"):
        if row["device"] == overlay:  # collectives depend on the system's links: the device's own rows only
            keep(_collective(row, row["device"], hardware), "collectives on one rank")
    blocks = set()
    for row in load_published("attention"):
        if row["device"] in die:
            record, long_enough = _host_timed(_attention(row, row["device"]), row)
            if not long_enough:
                keep(None, "host-timed attention rows under 40x the host's dispatch floor")
                continue
            keep(record, "attention backward rows (no backward model for them yet)")
            if record is not None and row.get("block"):
                blocks.add(row["block"])
    for row in load_published("decode_attention"):
        if row["device"] == overlay:  # bound by the KV cache's HBM reads: the device's own rows only
            keep(_decode_attention(row, row["device"]), "decode attention rows")
    return Rows(records=records, skipped=skipped, attention_blocks=frozenset(blocks))


def with_attention_block(hardware: Hardware, blocks: frozenset[int]) -> Hardware:
    """The spec with its attention engine's key block set to the rows' kernel block (masked blocks are
    skipped whole, so the block sets the pairs a causal or windowed kernel computes)."""
    if not blocks:
        return hardware
    if len(blocks) > 1:
        raise ValueError(f"attention rows with different kernel blocks {sorted(blocks)}: one fit prices one block")
    from perfmodel.costs.rules import select_engine

    [block] = blocks
    engine, _ = select_engine(hardware, "attention", "bf16")
    compute = {**hardware.compute, engine.name: dataclasses.replace(engine, attention_kv_block=block)}
    return dataclasses.replace(hardware, compute=compute)


def device_time_hardware(hardware: Hardware) -> Hardware:
    """The spec with no host cost in graph mode: published kernel tables time the kernels alone."""
    execution = hardware.scheduling.modes["graph"]
    device_only = dataclasses.replace(execution, program_launch_s=0.0, per_node_s=0.0)
    scheduling = dataclasses.replace(hardware.scheduling, modes={**hardware.scheduling.modes, "graph": device_only})
    return dataclasses.replace(hardware, scheduling=scheduling)


def fit_overlay(overlay: str, *, seed: int = 0):
    """Fit ``overlay``'s achievable parameters; returns (FitResult, records, spec, skipped). For a device in
    ``SIBLING_ESTIMATES`` the records are its sibling's, and the result keeps only what carries over."""
    from calibration.fit import fit
    from perfmodel.hardware.loader import load_hardware

    sibling = SIBLING_ESTIMATES.get(overlay)
    measured = load_hardware(sibling or overlay)
    rows = published_records(sibling or overlay, measured)
    hardware = with_attention_block(device_time_hardware(measured), rows.attention_blocks)
    result = fit(rows.records, hardware, mode="graph", seed=seed, posterior_draws=not sibling)
    if sibling:
        own = load_hardware(overlay)
        estimate = _sibling_estimate(result, measured, own)
        own_fit = fit_own_rows(overlay, own, seed=seed)
        if own_fit is None:
            return estimate, rows.records, own, rows.skipped
        own_result, own_rows = own_fit
        return (_with_own(estimate, own_result), rows.records + own_rows.records, own,
                {**rows.skipped, **own_rows.skipped})
    return result, rows.records, measured, rows.skipped


def fit_own_rows(overlay: str, own: Hardware, *, seed: int = 0):
    """A sibling-estimated device's fit on its own published rows (v5p: axlearn's attention timings), or None
    when it has none. Returns (FitResult, Rows)."""
    from calibration.fit import fit

    rows = published_records(overlay, own)
    if not rows.records:
        return None
    hardware = with_attention_block(device_time_hardware(own), rows.attention_blocks)
    return fit(rows.records, hardware, mode="graph", seed=seed, posterior_draws=False,
               datasheet_levels=OWN_ROWS_DATASHEET_LEVELS), rows


def _with_own(estimate, own):
    """The sibling's estimate with the parameters the device's own rows identify (those take precedence:
    they are measured on it)."""
    measured = {name: own.params[name] for name in own.identified()}
    return dataclasses.replace(estimate, params={**estimate.params, **measured},
                               flags=tuple(dict.fromkeys((*estimate.flags, *own.flags))))


def _sibling_estimate(result, sibling: Hardware, own: Hardware):
    """The sibling's fit reduced to its compute efficiencies on engines ``own`` has in the same design
    (``compute:<kind>:<engine>:<dtype>``), and kind-wide ones (``compute:<kind>``)."""

    def carried(name: str) -> bool:
        pieces = name.split(":")
        if pieces[0] != "compute":
            return False
        if len(pieces) < 4:
            return True
        engine, measured = own.compute.get(pieces[2]), sibling.compute[pieces[2]]
        # The same design: the same kind of engine with the same native tile, running this dtype.
        return (engine is not None and (engine.kind, engine.tile) == (measured.kind, measured.tile)
                and pieces[3] in engine.peak_flops_per_s)

    params = {name: value for name, value in result.params.items() if carried(name)}
    return dataclasses.replace(result, params=params, at_bounds=(), unidentified=(),
                               flags=tuple(flag for flag in result.flags if flag.split(" ")[0] in params))


def _report(overlay: str, result, records, spec: Hardware) -> str:
    from calibration.report import text_report

    sibling = SIBLING_ESTIMATES.get(overlay)
    if not sibling:
        return text_report(result, records, spec)
    own_fit = fit_own_rows(overlay, spec)
    own_names = set(own_fit[0].identified()) if own_fit else set()
    sibling_records = [record for record in records if record.device == sibling]
    sibling_params = {name: value for name, value in result.params.items() if name not in own_names}
    sibling_result = dataclasses.replace(result, params=sibling_params)
    report = (f"{overlay}: estimated from {sibling}'s fit (SIBLING_ESTIMATES); only its compute efficiencies "
              f"carry over\n{text_report(sibling_result, sibling_records, spec)}")
    if own_fit:
        report += (f"\n\n{overlay}'s own published rows (written over the estimate where they identify a parameter)\n"
                   f"{text_report(own_fit[0], own_fit[1].records, spec)}")
    return report


def write_overlay(overlay: str, directory: Path, *, seed: int = 0) -> tuple[Path, str]:
    """Write ``<overlay>-achievable.yaml`` into ``directory``; return its path and the fit report."""
    from calibration.report import fitted_spec_yaml
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.yaml_source import write_text_atomically

    sibling = SIBLING_ESTIMATES.get(overlay)
    result, records, spec, skipped = fit_overlay(overlay, seed=seed)
    name = f"{overlay}-achievable"
    output = directory / f"{name}.yaml"
    data_directory = Path(__file__).resolve().parent / "data" / "published"
    provenance = description = None
    if sibling:
        own_fit = fit_own_rows(overlay, spec, seed=seed)
        own_names = set(own_fit[0].identified()) if own_fit else set()
        sibling_count = sum(record.device == sibling for record in records)
        kept = ", ".join(f"{key} {value:.3g}" for key, value in result.identified().items() if key not in own_names)
        note = (f"no published matmul, memory or link measurement of {overlay}; its matrix units are {sibling}'s "
                f"design, so {sibling}'s fitted compute efficiencies are taken ({kept}; {sibling_count} {sibling} "
                f"measurements, held-out median |error| {100 * (result.heldout_median_abs_error or 0):.1f}%): "
                "calibration.achievable.SIBLING_ESTIMATES")
        if own_fit:
            own_result, own_rows = own_fit
            measured = ", ".join(f"{key} {value:.3g}" for key, value in own_result.identified().items())
            note += (f"; fitted on {len(own_rows.records)} published {overlay} measurements of its own ({measured}; "
                     f"held-out median |error| {100 * (own_result.heldout_median_abs_error or 0):.1f}%)")
        provenance = {"kind": "estimate", "note": note}
        description = f"{spec.description} (estimated: compute from {sibling}'s measurements" + (
            f", {', '.join(sorted({name.split(':')[1] for name in own_names}))} from its own)" if own_names else ")")
    text = fitted_spec_yaml(result, spec, overlay, data_directory, output, records, name=name,
                            kind="estimated" if sibling else "achievable", provenance=provenance,
                            description=description)
    write_text_atomically(output, text)
    load_hardware(output)  # the overlay must load like any spec
    report = _report(overlay, result, records, spec)
    if skipped:
        report += "\nskipped rows: " + ", ".join(f"{count} x {reason}" for reason, count in skipped.items())
    return output, report


def main(argv=None) -> int:
    """``python -m calibration.achievable [--write DIR] [OVERLAY ...]``: fit and print the reports. The
    default is the GPU overlays (``--write hardware_specs/gpu``); the TPU ones (``TPU_OVERLAYS``) are named
    with ``--write hardware_specs/tpu``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m calibration.achievable", description=main.__doc__)
    parser.add_argument("overlays", nargs="*", default=list(OVERLAYS))
    parser.add_argument("--write", type=Path, help="directory for the <name>-achievable.yaml overlays")
    parser.add_argument("--reports", type=Path, help="directory for the fit reports (<name>-achievable.txt)")
    args = parser.parse_args(argv)
    from perfmodel.yaml_source import write_text_atomically

    for overlay in args.overlays:
        if args.write:
            path, report = write_overlay(overlay, args.write)
            print(f"wrote {path}")
        else:
            result, records, spec, _ = fit_overlay(overlay)
            report = _report(overlay, result, records, spec)
        if args.reports:
            write_text_atomically(args.reports / f"{overlay}-achievable.txt", report + "\n")
        print(report.split("\n\nmeasurement")[0])
    if args.write:
        from perfmodel.hardware import compiled

        shipped = compiled.shipped_directory().resolve()
        if args.write.resolve().is_relative_to(shipped):  # the stored catalog must follow the shipped specs
            print(f"wrote {compiled.write_catalog()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
