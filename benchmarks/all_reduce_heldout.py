# python benchmarks/all_reduce_heldout.py [--full] [gpu:engine ...]  (needs the calibration extra: aiconfigurator-core)
"""Held-out all-reduce error per GPU/engine: fit on a random half (seed 0) of the engine's all-reduce rows
(the overlay fit's sample), predict the other half; median |error| by GPU count, and the median signed error
by GPU count and payload decade. Twice: on the engine's rows alone ("engine", as the overlays fit), and with
NCCL's own all-reduce table joining the training half where it agrees with the engine's NCCL rows ("+nccl":
``aiconfigurator.nccl_records``; the held-out half is the engine's rows either way). Also prints the
agreement (engine / NCCL median ratio per GPU count at the sizes the engine hands NCCL). ``--full``: also the
whole overlay fit (``engine_overlays.fit_engine``, every table) without and with NCCL's rows: the NCCL class's
fitted efficiency and alpha, and the fit's own held-out all-reduce error."""
import collections
import math
import statistics
import sys

import numpy as np

from calibration import aiconfigurator as t
from calibration import engine_overlays as eo
from calibration.achievable import device_time_hardware
from calibration.fit import components, heldout_errors, split_half, spread_weights
from perfmodel.hardware.loader import load_hardware


def run(gpu, engine, with_nccl):
    records, skipped, read = t.engine_records(gpu, engine, seed=0)
    own = [r for r in records if r.op_class == "all_reduce"]
    nccl = t.nccl_records(gpu, engine, seed=0) if with_nccl else []
    spec = device_time_hardware(load_hardware(gpu))
    hw = eo.with_measured_step_latency(spec, own, t.all_reduce_policy(gpu, engine))
    everything = own + nccl
    parts = components(everything, hw, "graph")
    measured = np.asarray([r.duration_s for r in everything])
    train, test = split_half(tuple(r.op_class for r in own), 0)
    train = np.concatenate([train, np.arange(len(own), len(everything))]).astype(int)
    errors = heldout_errors(parts, measured, train, test, spread_weights(everything))
    rows = []
    for e, i in zip(errors, test, strict=True):
        op = own[i].graph().ops[0]
        rows.append((int(op.attrs["group_size"]), int(math.log10(op.attrs["bytes"])), e))
    return rows, len(nccl)


def agreement(gpu, engine):
    mine, nccl = t.table(gpu, engine, "all_reduce"), t.table(gpu, "nccl", "nccl_all_reduce")
    if mine is None or nccl is None:
        return "no NCCL table"
    priced = [(frame[frame.apply(lambda row, k=k: t.unpriced(k, row), axis=1).isna()])
              for frame, k in ((t.read_rows(mine), "all_reduce"), (t.read_rows(nccl), "nccl_all_reduce"))]
    found = t.nccl_agreement(*priced, t.all_reduce_policy(gpu, engine))
    return f"NCCL {nccl.version}: " + ", ".join(f"p{p} {ratio:.2f}x ({n})" for p, (ratio, n) in found.items())


def summary(rows):
    by_p = collections.defaultdict(list)
    dec = collections.defaultdict(list)
    for p, d, e in rows:
        by_p[p].append(abs(e))
        dec[(p, d)].append(e)
    head = f"median|err| {100*statistics.median([abs(e) for *_, e in rows]):5.1f}%  " + "  ".join(
        f"p{p}:{100*statistics.median(v):.0f}%" for p, v in sorted(by_p.items()))
    return head, "; ".join(f"p{p}/{d}:{100*statistics.median(v):+.0f}" for (p, d), v in sorted(dec.items()))


def full(gpu, engine):
    for label, with_nccl in (("engine", False), ("+nccl", True)):
        fitted = eo.fit_engine(gpu, engine, heldout=False, nccl=with_nccl)
        params = {name: f"{value:.3g} +- {error:.2g}" for name, (value, error) in fitted.result.params.items()
                  if "nccl" in name}
        held = {name: f"{100 * error:.1f}%" for name, error in fitted.result.heldout_by_class.items()
                if name.startswith("all_reduce")}
        print(f"  full fit {label:6s}: {params}; held-out {held}")


arguments = sys.argv[1:]
whole = "--full" in arguments
arguments = [argument for argument in arguments if argument != "--full"]
groups = arguments or [f"{g}:{e}" for g in t.GPU_FOLDERS for e in t.ENGINES]
for item in groups:
    gpu, engine = item.split(":")
    if t.table(gpu, engine, "all_reduce") is None:
        continue
    print(f"{gpu} {engine}: engine/NCCL at shared sizes: {agreement(gpu, engine)}")
    for label, with_nccl in (("engine", False), ("+nccl", True)):
        rows, added = run(gpu, engine, with_nccl)
        head, decades = summary(rows)
        print(f"  {label:6s} ({added:2d} NCCL rows) {head}")
        print(f"         decades (bytes 1e<d>) median signed err: {decades}")
    if whole:
        full(gpu, engine)
