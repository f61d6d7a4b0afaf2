# python benchmarks/all_reduce_heldout.py [gpu:engine ...]  (needs the calibration extra: aiconfigurator-core)
"""Held-out all-reduce error per GPU/engine: fit on a random half (seed 0) of the engine's all-reduce rows
(the overlay fit's sample), predict the other half; median |error| by GPU count and payload decade."""
import collections
import inspect
import math
import statistics
import sys

import numpy as np

from calibration import aiconfigurator as t
from calibration import engine_overlays as eo
from calibration.achievable import device_time_hardware
from calibration.fit import components, heldout_errors, split_half, spread_weights
from perfmodel.hardware.loader import load_hardware


def run(gpu, engine):
    records, skipped, read = t.engine_records(gpu, engine, seed=0)
    records = [r for r in records if r.op_class == "all_reduce"]
    spec = device_time_hardware(load_hardware(gpu))
    if "policy" in inspect.signature(eo.with_measured_step_latency).parameters:
        hw = eo.with_measured_step_latency(spec, records, t.all_reduce_policy(gpu, engine))
    else:
        hw = eo.with_measured_step_latency(spec, records)
    parts = components(records, hw, "graph")
    measured = np.asarray([r.duration_s for r in records])
    train, test = split_half(tuple(r.op_class for r in records), 0)
    errors = heldout_errors(parts, measured, train, test, spread_weights(records))
    rows = []
    for e, i in zip(errors, test, strict=True):
        op = records[i].graph().ops[0]
        rows.append((int(op.attrs["group_size"]), int(math.log10(op.attrs["bytes"])), e))
    return rows

groups = sys.argv[1:] or [f"{g}:{e}" for g in t.GPU_FOLDERS for e in t.ENGINES]
allrows = []
for item in groups:
    gpu, engine = item.split(":")
    if t.table(gpu, engine, "all_reduce") is None:
        continue
    rows = run(gpu, engine)
    allrows += [(gpu, engine) + r for r in rows]
    by_p = collections.defaultdict(list)
    for p, _, e in rows:
        by_p[p].append(abs(e))
    dec = collections.defaultdict(list)
    for p, d, e in rows:
        dec[(p, d)].append(e)
    print(f"{gpu:14s} {engine:7s} median|err| {100*statistics.median([abs(e) for *_, e in rows]):5.1f}%  " +
          "  ".join(f"p{p}:{100*statistics.median(v):.0f}%" for p, v in sorted(by_p.items())))
    print("      decades (bytes 1e{d}) median signed err: " + "; ".join(
        f"p{p}/{d}:{100*statistics.median(v):+.0f}" for (p, d), v in sorted(dec.items())))
