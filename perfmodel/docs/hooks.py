"""mkdocs hooks: pages generated at build time, so that none is copied by hand: the command-line
reference (perfmodel's argparse parser), the labs and their figures (notebooks/figures/*.png), the spec
schema (the pydantic models of perfmodel/hardware/schema.py) and the accuracy and intervals table (the
stored residuals, workloads/validation/interval_residuals.json)."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "notebooks" / "figures"


def cli_reference() -> str:
    from perfmodel.cli import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command")
    parts = ["# Command line\n", "Generated from `perfmodel`'s argparse parser at build time: every command's "
             "`--help`.\n", "```text", parser.format_help().strip(), "```\n"]
    for name, sub in sorted(commands.choices.items()):
        parts += [f"## perfmodel {name}\n", "```text", sub.format_help().strip(), "```\n"]
    return "\n".join(parts)


def labs_page() -> str:
    """The labs (notebooks/*.ipynb, each with its title cell) and every figure they saved."""
    import json

    parts = ["# Labs\n", "Jupyter notebooks in `notebooks/`, executed by the test suite "
             "(`tests/test_notebooks*.py`); run them with `jupyter lab notebooks/`.\n"]
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text()).get("cells", [])
        title = next(("".join(c["source"]).strip().splitlines()[0].lstrip("# ") for c in cells
                      if c.get("cell_type") == "markdown" and "".join(c["source"]).strip()), notebook.stem)
        parts.append(f"- `{notebook.name}`: {title}")
    parts.append("\n## Figures the labs draw\n")
    for figure in sorted(FIGURES.glob("*.png")):
        parts.append(f"![{figure.stem}](figures/{figure.name})\n\n`notebooks/figures/{figure.name}`\n")
    return "\n".join(parts)


def on_files(files, config):
    files.append(File.generated(config, "cli.md", content=cli_reference()))
    files.append(File.generated(config, "labs.md", content=labs_page()))
    files.append(File.generated(config, "schema.md", content=schema_page()))
    files.append(File.generated(config, "accuracy.md", content=accuracy_page()))
    for figure in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"figures/{figure.name}", abs_src_path=str(figure)))
    return files


# --- the spec schema, generated from perfmodel.hardware.schema (pydantic) ------------------------------------

def _unwrap(annotation, metadata=()):
    """``Annotated`` and ``Optional`` stripped; (type, metadata, optional)."""
    import types
    import typing

    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation, *extra = typing.get_args(annotation)
            metadata = (*metadata, *extra)
        elif origin in (typing.Union, types.UnionType):
            members = [m for m in typing.get_args(annotation) if m is not type(None)]
            optional = optional or len(members) < len(typing.get_args(annotation))
            if len(members) != 1:
                return annotation, metadata, optional
            annotation = members[0]
        else:
            return annotation, metadata, optional


def _dimension(metadata) -> str | None:
    """The unit dimension of a quantity field: the ``dimension`` its parsing validator reads."""
    import inspect

    from pydantic import BeforeValidator

    for item in metadata:
        if isinstance(item, BeforeValidator):
            found = inspect.getclosurevars(item.func).nonlocals.get("dimension")
            if isinstance(found, str):
                return found
    return None


def _constraints(metadata) -> str:
    parts = []
    for item in metadata:
        for name, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{sign} {value:g}" if isinstance(value, (int, float)) else f"{sign} {value}")
        pattern = getattr(item, "pattern", None)
        if pattern:
            parts.append(f"pattern `{pattern}`")
    return f" ({', '.join(parts)})" if parts else ""


def _type_text(annotation, metadata=()) -> str:
    import typing

    from pydantic import BaseModel

    from perfmodel.units import DIMENSIONS

    annotation, metadata, _ = _unwrap(annotation, metadata)
    dimension = _dimension(metadata)
    if dimension is not None:
        info = DIMENSIONS[dimension]
        return f"{info.description} with a unit, e.g. `{info.example}`"
    origin = typing.get_origin(annotation)
    if annotation is bool:
        return "`true` or `false`"
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{choice}`" for choice in typing.get_args(annotation))
    if annotation is int:
        return "whole number" + _constraints(metadata)
    if annotation is float:
        return "number" + _constraints(metadata)
    if annotation is str:
        return "text" + _constraints(metadata)
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"mapping of {_type_text(key)} to {_type_text(value)}"
    if origin is list:
        return f"list of {_type_text(typing.get_args(annotation)[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"object ({annotation.__name__}, below)"
    return f"`{annotation}`"


KEY_NAMES = {"compute": "engine", "memory": "level", "links": "link", "modes": "mode", "sources": "source",
             "kernels": "kernel"}  # what a key of each mapping names, for the schema page's headings


def _model_sections(model, path: str, out: list[str], seen: set) -> None:
    import typing

    from pydantic import BaseModel

    out.append(f"## `{path}` ({model.__name__})\n")
    if model.__doc__ and model.__doc__.strip() and model.__name__ != "HardwareSpec":
        out.append(" ".join(model.__doc__.split()) + "\n")
    out += ["| field | type | required / default |", "|---|---|---|"]
    nested = []
    for name, field in model.model_fields.items():
        annotation, metadata, optional = _unwrap(field.annotation, tuple(field.metadata))
        if field.is_required():
            need = "required"
        elif field.default is None or optional:
            need = "optional"
        else:
            need = f"default `{field.default!r}`"
        text = _type_text(field.annotation, tuple(field.metadata)).replace("|", "\\|")
        out.append(f"| `{name}` | {text} | {need} |")
        origin = typing.get_origin(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            nested.append((annotation, f"{path}.{name}" if path != "spec" else name))
        elif origin in (dict, list):
            inner, _, _ = _unwrap(typing.get_args(annotation)[-1])
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                key = f"<{KEY_NAMES.get(name, 'name')}>" if origin is dict else "[]"
                base = name if path == "spec" else f"{path}.{name}"
                nested.append((inner, f"{base}.{key}" if origin is dict else f"{base}{key}"))
    out.append("")
    for inner, inner_path in nested:
        if inner not in seen:
            seen.add(inner)
            _model_sections(inner, inner_path, out, seen)


def schema_page() -> str:
    """Every field a hardware spec may hold, from the pydantic models that validate it."""
    from perfmodel.hardware.schema import HardwareSpec

    out = ["# Spec schema\n",
           "Generated at build time from the pydantic models in `perfmodel/hardware/schema.py`, the same models "
           "that validate every spec (`perfmodel specs validate FILE`). Every number with a unit is written with "
           "its unit (`3.35 TB/s`, `80 GB`, `1.9 us`) and read into SI units; every object with numbers names its "
           "`source` (an id of the top-level `sources` table), and `field_sources` names another source for single "
           "fields. `<name>` stands for a key you choose (an engine, a memory level, a link, a mode). Any numeric "
           "field can be changed for a what-if with `--set PATH=VALUE` (`--set memory.hbm.bandwidth=4TB/s`).\n"]
    _model_sections(HardwareSpec, "spec", out, {HardwareSpec})
    return "\n".join(out)


# --- the intervals and accuracy table, from the stored residuals (perfmodel.intervals) -----------------------

ACCURACY_LEVELS = (0.8, 0.9)


def accuracy_page() -> str:
    """Per parameter set, family and kind of prediction: the residuals behind the intervals, the band's
    ends as factors of a predicted time, and the held-out coverage (every row of a source held out)."""
    import math
    import statistics

    from perfmodel.intervals import GENERATED_BY, PARAMETER_SETS, band_of, heldout_coverage, load_table, table_path

    table = load_table()
    out = ["# Accuracy and intervals\n",
           f"Generated at build time from the stored residual table `workloads/validation/{table_path().name}` "
           f"(regenerated by `{GENERATED_BY}`; `tests/test_intervals.py` fails when it no longer matches what "
           "`perfmodel validate` predicts). A residual is log(predicted time / measured time) of one reproduced "
           "published measurement (a rate counts as a reciprocal time). An interval at confidence c is the "
           "cross-conformal band over sources (CV+: each source compared with the centre of the others) of the "
           "residuals of the prediction's family and kind (of its family when the kind has too few or one source), "
           "as `--confidence` prints it; a true time lies between the predicted time x the *low* "
           "factor and x the *high* factor below (a rate: divided by them).\n",
           "The rows one by one are in the explorer's *Specs and accuracy* view and `perfmodel validate`.\n"]
    for parameter_set in PARAMETER_SETS:
        residuals = table[parameter_set]
        out.append(f"## {parameter_set.capitalize()} parameters\n")
        out.append("| family | kind | residuals | median predicted / measured time | "
                   + " | ".join(f"{round(100 * c)}% interval (x low .. x high of a predicted time)" for c in ACCURACY_LEVELS)
                   + " |")
        out.append("|---|---|---:|---:|" + "---|" * len(ACCURACY_LEVELS))
        for family, kind in sorted({(item.family, item.kind) for item in residuals}):
            chosen = [item.residual for item in residuals if item.family == family and item.kind == kind]
            cells = []
            for level in ACCURACY_LEVELS:
                band = band_of(residuals, family, kind, level, parameter_set)
                if not band.known:
                    cells.append("no interval (too few residuals)")
                    continue
                assert band.low is not None and band.high is not None
                note = "" if band.residuals == len(chosen) else f" (family's {band.residuals})"
                cells.append(f"x {math.exp(-band.high):.2f} .. x {math.exp(-band.low):.2f}{note}")
            out.append(f"| {family} | {kind} | {len(chosen)} | {math.exp(statistics.median(chosen)):.2f} | "
                       + " | ".join(cells) + " |")
        out.append("")
        out.append(f"Held-out coverage ({parameter_set} parameters): each row against the band built without "
                   "every row of its source.\n")
        out.append("| confidence | family | rows | banded | covered | share | median width (high / low) |")
        out.append("|---|---|---:|---:|---:|---:|---:|")
        for level in ACCURACY_LEVELS:
            for item in heldout_coverage(residuals, level):
                share = "-" if item.share is None else f"{100 * item.share:.0f}%"
                width = "-" if item.median_width is None else f"{item.median_width:.2f}"
                out.append(f"| {round(100 * level)}% | {item.family} | {item.rows} | {item.banded} | {item.covered} | "
                           f"{share} | {width} |")
        out.append("")
    return "\n".join(out)
