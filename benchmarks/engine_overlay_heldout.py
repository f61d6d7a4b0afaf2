"""Held-out per-op error of the per-engine overlays (issue 29), on the serving engines' own kernel tables.

Two protocols, per GPU and engine, per kind of op (GEMM bf16 / fp8, prefill attention, decode attention,
the engine's all-reduce):
* **random half**: fit on a random half of each class of the sampled shapes, predict the other half
  (``calibration.fit.heldout_half``, seed 0);
* **next version**: fit on the previous engine version's tables, predict the newest version's (only the
  kinds measured in two versions; the overlay is written and loaded as shipped, then each row is
  evaluated with the kernels timed alone, as the tables time them).

Needs the ``calibration`` extra (``aiconfigurator-core``). Writes a table to stdout and JSON to
``--json`` (default ``benchmarks/results/engine_overlay_heldout.json``). ``--shipped-random-half`` reads the
random half from the shipped overlays (the refit, ``calibration.engine_overlays``, runs the same split on the
same sample and writes its per-class medians into the overlay's provenance note) instead of fitting again: half
the work, the same numbers while the overlays are those the current code fits.

``--update`` keeps the rows of the GPU/engine pairs not rerun from the existing JSON (after a refit of some
overlays only; each row says when it ran) and prints the whole table. ``--keep-next-version`` (with ``--update``)
reruns the random half only and keeps each rerun pair's next-version errors from the existing JSON, with the date
they ran (``next_version_ran``): after a change that leaves the previous versions' fits alone in all but name.

    python benchmarks/engine_overlay_heldout.py [--gpu h100-sxm ...] [--engine sglang ...] [--shipped-random-half]
                                                [--update [--keep-next-version]]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration import aiconfigurator as tables  # noqa: E402
from calibration.achievable import device_time_hardware  # noqa: E402
from calibration.engine_overlays import fit_engine, measured_engines, overlay_text  # noqa: E402
from perfmodel.hardware.loader import load_hardware  # noqa: E402
from perfmodel.jsonable import json_text  # noqa: E402
from perfmodel.roofline import evaluate  # noqa: E402
from perfmodel.tables import format_table  # noqa: E402
from perfmodel.yaml_source import write_text_atomically  # noqa: E402

KINDS = ("gemm:bf16", "gemm:fp8", "gemm:fp8_block", "gemm:nvfp4", "prefill_attention", "prefill_attention:fp8",
         "decode_attention", "decode_attention:fp8_kv", "all_reduce")


def _previous_versions(gpu: str, engine: str) -> dict[str, str]:
    previous = {}
    for kind in tables.TABLES:
        measured = tables.versions(gpu, engine, kind)
        if len(measured) >= 2:
            previous[kind] = measured[-2]
    return previous


def _errors_on(records, overlay_file: Path) -> dict[str, float]:
    hardware = device_time_hardware(load_hardware(overlay_file))
    errors: dict[str, list[float]] = {}
    for record in records:
        predicted = evaluate(record.graph(), hardware, mode="graph").total_s
        errors.setdefault(record.op_class, []).append(abs(predicted / record.duration_s - 1))
    return {name: statistics.median(values) for name, values in errors.items()}


_SHIPPED_HALF = re.compile(r"held-out median \|error\| [0-9.]+% \(([^)]*)\)")


def shipped_random_half(gpu: str, engine: str) -> dict[str, float]:
    """The per-class held-out medians the shipped ``<gpu>-<engine>`` overlay's fit reported (its provenance
    note, as ``calibration.engine_overlays.overlay_text`` writes it)."""
    from perfmodel.hardware.loader import resolve_spec

    path = resolve_spec(f"{gpu}-{engine}")
    found = _SHIPPED_HALF.search(" ".join(path.read_text().split()))
    if found is None:
        raise SystemExit(f"{path}: no 'held-out median |error| ...% (class x%, ...)' in its provenance note; "
                         "refit it (python -m calibration.engine_overlays) or run without --shipped-random-half")
    return {name: float(value.rstrip("%")) / 100 for name, value in
            (item.rsplit(" ", 1) for item in found.group(1).split(", "))}


def run(gpus, engines, shipped_half: bool = False, next_version: bool = True) -> list[dict]:
    rows = []
    for gpu in gpus:
        for engine in measured_engines(gpu):
            if engine not in engines:
                continue
            if shipped_half:
                entry = {"gpu": gpu, "engine": engine, "random_half": shipped_random_half(gpu, engine),
                         "random_half_from": "the shipped overlay's fit"}
            else:
                fitted = fit_engine(gpu, engine, heldout=False)
                entry = {"gpu": gpu, "engine": engine, "versions": fitted.versions, "records": len(fitted.records),
                         "random_half": fitted.result.heldout_by_class}
            entry.update({"next_version": {}, "previous_versions": {}})
            previous = _previous_versions(gpu, engine) if next_version else {}
            if previous:
                older = fit_engine(gpu, engine, heldout=False, versions_by_kind=previous)
                newest, _, _ = tables.engine_records(gpu, engine, seed=1)
                checked = [record for record in newest if record.op_class.split(":")[0] in previous]
                with tempfile.TemporaryDirectory() as folder:
                    overlay = Path(folder) / f"{older.name}.yaml"
                    write_text_atomically(overlay, overlay_text(older))
                    entry["next_version"] = _errors_on(checked, overlay)
                entry["previous_versions"] = previous
            rows.append(entry)
            print(f"{gpu} {engine}: done", file=sys.stderr)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", nargs="*", default=list(tables.GPU_FOLDERS))
    parser.add_argument("--engine", nargs="*", default=list(tables.ENGINES))
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results"
                        / "engine_overlay_heldout.json")
    parser.add_argument("--shipped-random-half", action="store_true",
                        help="read the random half from the shipped overlays' fits instead of refitting")
    parser.add_argument("--update", action="store_true",
                        help="keep the existing JSON's rows of the GPU/engine pairs not rerun")
    parser.add_argument("--keep-next-version", action="store_true",
                        help="with --update: rerun the random half only; keep the next-version errors on record")
    args = parser.parse_args(argv)
    if args.keep_next_version and not (args.update and args.json.is_file()):
        parser.error(f"--keep-next-version keeps the next-version errors of {args.json}: it needs --update and "
                     "that file")
    ran = datetime.date.today().isoformat()
    rows = [{**row, "ran": ran} for row in run(args.gpu, args.engine, args.shipped_random_half,
                                               next_version=not args.keep_next_version)]
    if args.update and args.json.is_file():
        existing = json.loads(args.json.read_text())["rows"]
        if args.keep_next_version:
            on_record = {(row["gpu"], row["engine"]): row for row in existing}
            for row in rows:
                old = on_record.get((row["gpu"], row["engine"]), {})
                if old.get("next_version"):
                    row.update(next_version=old["next_version"], previous_versions=old["previous_versions"],
                               next_version_ran=old.get("next_version_ran", old.get("ran", "")))
        rerun = {(row["gpu"], row["engine"]) for row in rows}
        kept = [row for row in existing if (row["gpu"], row["engine"]) not in rerun]
        order = {(gpu, engine): index for index, (gpu, engine) in enumerate(
            (gpu, engine) for gpu in tables.GPU_FOLDERS for engine in tables.ENGINES)}
        rows = sorted(kept + rows, key=lambda row: order.get((row["gpu"], row["engine"]), len(order)))

    def cell(value):
        return "" if value is None else f"{100 * value:.1f}%"

    table = []
    for entry in rows:
        for protocol in ("random_half", "next_version"):
            errors = entry[protocol]
            if errors:
                when = entry.get("next_version_ran", entry.get("ran", "")) if protocol == "next_version" \
                    else entry.get("ran", "")
                table.append([entry["gpu"], entry["engine"], protocol] + [cell(errors.get(kind)) for kind in KINDS]
                             + [when])
    print(format_table(["gpu", "engine", "protocol", *KINDS, "ran"], table))
    print(f"\nmedian |error| of each class's held-out rows; aiconfigurator-core {tables.package_version()}")
    write_text_atomically(args.json, json_text({"package": tables.package_version(), "rows": rows}) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
