"""``perfmodel specs list | show | validate | detect | compare``."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from perfmodel.errors import PerfmodelError, SpecError
from perfmodel.jsonable import json_text, to_jsonable
from perfmodel.tables import format_table
from perfmodel.units import format_quantity

DEFAULT_COMPARE = ("h100-sxm", "tpu-v5e", "cerebras-wse-3", "groq-lpu-v1", "ibm-spyre", "epyc-zen4-2vcpu")


def register(commands: argparse._SubParsersAction) -> None:
    specs = commands.add_parser("specs", help="list, show, validate, detect and compare hardware specs")
    verbs = specs.add_subparsers(dest="verb", metavar="VERB", parser_class=type(specs))
    specs.set_defaults(handler=lambda args: specs.print_help() or 2)

    listing = verbs.add_parser("list", help="the specs in the catalog")
    listing.add_argument("--family", help="only this family (gpu, tpu, wafer, lpu, spyre, cpu)")
    listing.add_argument("--json", action="store_true", help="print a JSON list of objects")
    listing.set_defaults(handler=_list)

    show = verbs.add_parser("show", help="one spec with the source of every number")
    show.add_argument("name", help="catalog name or path to a YAML spec")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_show)

    validate = verbs.add_parser("validate", help="check spec files; exit 2 if any is invalid")
    validate.add_argument("paths", nargs="+", type=Path)
    validate.add_argument("--json", action="store_true")
    validate.set_defaults(handler=_validate)

    detect = verbs.add_parser("detect", help="write a spec for the local CPU (peaks are estimates)")
    detect.add_argument("-o", "--output", type=Path, help="write the YAML here (default: print it)")
    detect.add_argument("--name", default="local-cpu")
    detect.add_argument("--json", action="store_true")
    detect.set_defaults(handler=_detect)

    compare = verbs.add_parser("compare", help="peaks, bandwidths, ridge points and overheads side by side")
    compare.add_argument("names", nargs="*", default=list(DEFAULT_COMPARE))
    compare.add_argument("--dtype", default="bf16", help="dtype of the compute peak (falls back to fp16, fp32)")
    compare.add_argument("--chart", type=Path, help="also draw the rooflines to this file (.png, .svg, .pdf)")
    compare.add_argument("--json", action="store_true")
    compare.set_defaults(handler=_compare)


def _list(args) -> int:
    from perfmodel.hardware.loader import catalog

    entries = [entry for entry in catalog() if args.family is None or entry.family == args.family]
    if args.family and not entries:
        raise PerfmodelError(f"no spec of family {args.family!r}; families: gpu, tpu, wafer, lpu, spyre, cpu")
    if args.json:
        print(json_text([{"name": e.name, "family": e.family, "vendor": e.vendor, "description": e.description,
                           "path": str(e.path)} for e in entries], indent=2))
        return 0
    print(format_table(["name", "family", "vendor", "description"],
                       [[e.name, e.family, e.vendor, e.description] for e in entries]))
    return 0


def hardware_to_dict(hardware) -> dict:
    """A JSON-ready view of a spec in SI units, with the source of every numeric field."""
    return to_jsonable(hardware)


def _show(args) -> int:
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.hardware.model import MODE_FIELDS

    hardware = load_hardware(args.name)
    if args.json:
        print(json_text(hardware_to_dict(hardware), indent=2))
        return 0
    print(f"{hardware.name}: {hardware.description}  [{hardware.family}, {hardware.vendor}]")
    rows = []

    def add(field: str, text: str) -> None:
        source_id = hardware.field_sources.get(field, "")
        source = hardware.sources.get(source_id)
        rows.append([field, text, f"{source_id} ({source.kind})" if source else ""])

    for name, engine in hardware.compute.items():
        add(f"compute.{name}.units", str(engine.units))
        for dtype, rate in engine.peak_flops_per_s.items():
            add(f"compute.{name}.peak.{dtype}", format_quantity(rate, "flops_per_s"))
        if engine.attention_kv_block is not None:
            add(f"compute.{name}.attention_kv_block", f"{engine.attention_kv_block} keys")
        if engine.attention_packs_query_groups:
            add(f"compute.{name}.attention_packs_query_groups", "yes")
        if not engine.vector_kernels_hide_memory:
            add(f"compute.{name}.vector_kernels_hide_memory", "false (compute and data movement add up)")
    for level in hardware.memory:
        prefix = f"memory.{level.name}"
        add(f"{prefix}.capacity", f"{format_quantity(level.capacity_bytes, 'bytes')} x {level.instances} "
                                  f"({level.kind}, {level.managed}-managed)")
        add(f"{prefix}.bandwidth", format_quantity(level.bandwidth_bytes_per_s, "bytes_per_s"))
    for name, link in hardware.links.items():
        add(f"links.{name}.bandwidth_per_direction",
            f"{format_quantity(link.bandwidth_bytes_per_s_per_direction, 'bytes_per_s')} x {link.links_per_chip} "
            f"({link.topology})")
        if link.wraparound_chips is not None:
            add(f"links.{name}.wraparound", f"an axis of {link.wraparound_chips} chips (or a multiple) closes into a ring"
                                            + ("; only in slices of whole cubes" if link.wraparound_whole_slice else ""))
    for name, mode in hardware.scheduling.modes.items():
        for field, attribute in MODE_FIELDS.items():
            value = getattr(mode, attribute)
            if value:
                add(f"scheduling.modes.{name}.{field}", format_quantity(value, "seconds"))
        for op_name, seconds in mode.library_dispatch_s.items():
            add(f"scheduling.modes.{name}.library_dispatch.{op_name}", format_quantity(seconds, "seconds"))
        if (step := mode.engine_step) is not None:
            prefix = f"scheduling.modes.{name}.engine_step"
            add(f"{prefix}.host_fixed", f"{format_quantity(step.host_fixed_s, 'seconds')} a step "
                                        f"({'overlapped with' if step.overlap else 'added to'} the device's step)")
            add(f"{prefix}.host_per_sequence", f"{format_quantity(step.host_per_sequence_s, 'seconds')} a sequence")
            add(f"{prefix}.fuses_mixed", "prefill chunks and decode tokens in one pass" if step.fuses_mixed
                else "prefill and decode in separate passes")
    add("power.tdp", format_quantity(hardware.power.tdp_watts, "watts"))
    print(format_table(["field", "value", "source"], rows))
    print("\nsources:")
    for key, source in hardware.sources.items():
        print(f"  {key} [{source.kind}] {source.url}\n      {source.note}")
    for alternative in hardware.alternatives:
        others = ", ".join(f"{value} ({source})" for value, source in alternative.others)
        print(f"\n{alternative.field}: uses {alternative.used}; also reported: {others}.\n  why: {alternative.reason}")
    if hardware.notes:
        print(f"\nnotes: {hardware.notes}")
    return 0


def _validate(args) -> int:
    from perfmodel.hardware.loader import validate_spec_file

    results = [(path, validate_spec_file(path)) for path in args.paths]
    if args.json:
        print(json_text([{"path": str(path), "valid": not problems,
                           "problems": [asdict(problem) for problem in problems]} for path, problems in results],
                         indent=2))
    else:
        for path, problems in results:
            print(f"ok       {path}" if not problems else str(SpecError(problems)))
    return 0 if all(not problems for _, problems in results) else 2


def _detect(args) -> int:
    from perfmodel.hardware.detect import detected_spec, detected_spec_yaml, read_cpu_facts
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.yaml_source import write_text_atomically

    facts = read_cpu_facts()
    if args.json:
        print(json_text(detected_spec(facts, args.name), indent=2))
        return 0
    text = detected_spec_yaml(facts, args.name)
    if args.output is None:
        print(text)
        return 0
    write_text_atomically(args.output, text)
    load_hardware(args.output)  # what we write must load like any spec
    print(f"wrote {args.output}")
    return 0


def _compare(args) -> int:
    from perfmodel.hardware.loader import load_hardware

    rows, records = [], []
    for name in args.names:
        hardware = load_hardware(name)
        dtype, peak = _peak_with_fallback(hardware, args.dtype)
        memory = hardware.outermost_on_device
        mode = hardware.scheduling.mode()
        overhead = max(mode.kernel_launch_s, mode.program_launch_s)
        ridge = peak / memory.bandwidth_bytes_per_s
        engine = next(engine for engine in hardware.compute.values() if engine.peak_flops_per_s.get(dtype) == peak)
        shown = {"peak": f"compute.{engine.name}.peak.{dtype}", "bandwidth": f"memory.{memory.name}.bandwidth",
                 "capacity": f"memory.{memory.name}.capacity", "power": "power.tdp"}
        estimated = sorted(key for key, field in shown.items() if _is_estimate(hardware, field))

        def marked(key: str, text: str, estimated=estimated) -> str:
            return f"~{text}" if key in estimated else text

        records.append({"name": hardware.name, "family": hardware.family, "dtype": dtype, "peak_flops_per_s": peak,
                        "memory_level": memory.name, "bandwidth_bytes_per_s": memory.bandwidth_bytes_per_s,
                        "capacity_bytes": memory.total_capacity_bytes, "ridge_flop_per_byte": ridge,
                        "mode": mode.name, "launch_overhead_s": overhead, "tdp_watts": hardware.power.tdp_watts,
                        "estimated": estimated})
        rows.append([hardware.name, hardware.family, marked("peak", f"{format_quantity(peak, 'flops_per_s')} {dtype}"),
                     marked("bandwidth",
                            f"{memory.name} {format_quantity(memory.bandwidth_bytes_per_s, 'bytes_per_s')}"),
                     marked("capacity", format_quantity(memory.total_capacity_bytes, "bytes")), round(ridge, 1),
                     f"{mode.name} {format_quantity(overhead, 'seconds')}",
                     marked("power", format_quantity(hardware.power.tdp_watts, "watts"))])
    if args.json:
        print(json_text(records, indent=2))
    else:
        print(format_table(["spec", "family", "peak", "memory bandwidth", "capacity", "ridge FLOP/B",
                            "launch (default mode)", "power"], rows))
        if any(record["estimated"] for record in records):
            print("\n~ an estimate (its source's kind is 'estimate'; 'perfmodel specs show NAME' gives the derivation "
                  "and range), not a vendor or measured figure")
    if args.chart:
        from perfmodel.plotting import save_spec_rooflines

        save_spec_rooflines(records, args.chart)
        if not args.json:
            print(f"\nwrote {args.chart}")
    return 0


def _is_estimate(hardware, field: str) -> bool:
    """Whether a spec's number at ``field`` comes from a source of kind 'estimate'."""
    source_id = hardware.field_sources.get(field)
    return source_id is not None and hardware.sources[source_id].kind == "estimate"


def _peak_with_fallback(hardware, dtype: str) -> tuple[str, float]:
    for candidate in (dtype, "fp16", "bf16", "fp32"):
        peak = hardware.peak_flops_per_s(candidate)
        if peak > 0:
            return candidate, peak
    raise PerfmodelError(f"{hardware.name} has no peak for {dtype} (nor fp16/bf16/fp32)")
