"""Load hardware specs from YAML into :class:`~perfmodel.hardware.model.Hardware` (edge module).

* ``load_hardware(name_or_path, overrides=None)``: a catalog name (``h100-sxm``) or a path.
* ``extends: other`` resolves a catalog name or a file beside the spec (no other directories),
  then merges this file over it key by key (mappings merge, everything else is replaced).
* ``overrides`` (``{"memory.hbm.bandwidth": "6.4 TB/s"}``) are applied last, for what-if studies;
  each overridden number is attributed to a ``what-if`` source. An override given as text (``--set``)
  is read by the type of the field it sets: a quantity as a quantity with its unit, a count as a whole
  number (``units=108``), a flag as ``true``/``false``, an enum (``kind=sram``) as its text, a plain
  number (an efficiency) as a number; text that does not fit is reported as ``--set FIELD`` with what
  was expected. Any field the schema declares may be set, present in the spec or not. Setting a level's ``capacity`` on a
  level with a ``usable_capacity`` scales the usable capacity by new/old capacity (the usable share
  is kept; attributed to ``what-if-scaled``), unless the override sets ``usable_capacity`` too.
* Every problem in a spec is collected and raised at once as one :class:`SpecError` naming file,
  line, dotted field path and what is allowed.
"""

from __future__ import annotations

import copy
import math
import re
import types
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Mapping, Union, get_args, get_origin

from perfmodel.errors import PerfmodelError, Problem, SpecError, UnitError
from perfmodel.hardware import model
from perfmodel.hardware.compiled import stored_hardware, stored_names
from perfmodel.paths import spec_directories
from perfmodel.units import parse_quantity
from perfmodel.yaml_source import YamlDocument, join_path, read_yaml

if TYPE_CHECKING:  # the schema (pydantic) is imported where a spec is validated: a stored spec needs none of it
    from pydantic import ValidationError

    from perfmodel.hardware.schema import FitSpec, HardwareSpec

WHAT_IF_SOURCE = "what-if"
WHAT_IF_SCALED_SOURCE = "what-if-scaled"


@dataclass(frozen=True, kw_only=True)
class CatalogEntry:
    name: str
    family: str
    vendor: str
    description: str
    path: Path


@dataclass(frozen=True, kw_only=True)
class _Merged:
    data: dict
    origins: dict[str, tuple[str, int | None]]  # dotted path -> (file, line)


def spec_files() -> list[Path]:
    """Every YAML spec file in the catalog directories, sorted by family folder then name."""
    files: list[Path] = []
    for directory in spec_directories():
        files.extend(sorted(directory.rglob("*.yaml")))
    return files


def forget_spec_files() -> None:
    """Drop what this process has read of the spec files (the catalog's index, each file's record): for
    code that has just written spec files and reads them back (``compiled.compile_catalog``)."""
    catalog_index.cache_clear()
    _load_cached.cache_clear()


@lru_cache(maxsize=1)
def catalog_index() -> dict[str, Path]:
    index: dict[str, Path] = {}
    for path in spec_files():
        document = read_yaml(path)
        name = document.data.get("name") if isinstance(document.data, dict) else None
        index.setdefault(str(name) if name else path.stem, path)
    return index


def catalog() -> list[CatalogEntry]:
    """The shipped specs (and any in ``$PERFMODEL_SPEC_PATH``), each loaded and validated."""
    entries = []
    for name, path in catalog_index().items():
        hardware = load_hardware(path)
        entries.append(CatalogEntry(name=name, family=hardware.family, vendor=hardware.vendor,
                                    description=hardware.description, path=path))
    return entries


def _file_named(name: str) -> Path | None:
    """The catalog file ``<name>.yaml`` when it is the only one of that name and declares that name:
    a catalog name resolved by reading one file, not the whole catalog (cold start)."""
    if not name or any(character in name for character in "/\\*?[]") or name.startswith("."):
        return None
    matches = [path for directory in spec_directories() for path in sorted(directory.rglob(f"{name}.yaml"))]
    if len(matches) != 1:
        return None
    document = read_yaml(matches[0])
    declared = document.data.get("name") if isinstance(document.data, dict) else None
    return matches[0] if declared == name else None


def resolve_spec(name_or_path: str | Path, *, beside: Path | None = None) -> Path:
    """A catalog name, or a path to a file; with ``beside``, only files in that directory."""
    text = str(name_or_path)
    named = _file_named(text)  # a catalog name, found by its file name (the whole index only if not)
    if named is not None:
        return named
    index = catalog_index()
    if text in index:
        return index[text]
    if beside is None and text.lower() in index and not Path(text).is_file():  # catalog names in any case
        return index[text.lower()]
    if beside is not None:
        candidate = (beside / text)
        if "/" in text or "\\" in text or text.startswith(".") or not candidate.is_file():
            known = ", ".join(sorted(index))
            raise FileNotFoundError(f"'extends: {text}' must name a catalog spec ({known}) or a file in "
                                    f"the same directory as the spec ({beside})")
        target = candidate.resolve()  # a link beside the spec is followed only to a file in its directory
        if target.parent != beside.resolve():
            raise FileNotFoundError(f"'extends: {text}' is a link to {target}, outside the spec's directory "
                                    f"({beside}); extends reads only files in that directory (copy the file there)")
        return candidate
    path = Path(text)
    if path.is_file():
        return path
    raise FileNotFoundError(f"no spec named {text!r}: not a catalog name ({', '.join(sorted(index))}) "
                            "and not a file; run 'perfmodel specs list' to see the catalog")


def _origins(document: YamlDocument) -> dict[str, tuple[str, int | None]]:
    return {path: (document.file, line) for path, line in document.lines.items()}


def _merge(base: dict, top: dict, prefix: str, origins: dict, top_origins: dict) -> dict:
    merged = dict(base)
    for key, value in top.items():
        path = join_path(prefix, key)
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value, path, origins, top_origins)
        else:
            merged[key] = copy.deepcopy(value)
            for dotted in [p for p in origins if p == path or p.startswith(path + ".")]:
                del origins[dotted]
        for dotted, origin in top_origins.items():
            if dotted == path or dotted.startswith(path + "."):
                origins[dotted] = origin
    return merged


def _read_merged(path: Path, chain: tuple[Path, ...], problems: list[Problem]) -> _Merged | None:
    document = read_yaml(path)
    problems.extend(document.problems)
    if document.data is None:
        return None
    if not isinstance(document.data, dict):
        problems.append(Problem(file=str(path), line=1, field="", message="a spec must be a YAML mapping"))
        return None
    data, origins = document.data, _origins(document)
    parent_name = data.get("extends")
    if parent_name is None:
        return _Merged(data=data, origins=origins)
    line = document.lines.get("extends")
    try:
        parent_path = resolve_spec(str(parent_name), beside=path.parent)
    except FileNotFoundError as error:
        problems.append(Problem(file=str(path), line=line, field="extends", message=str(error)))
        return None
    if parent_path.resolve() in chain:
        cycle = " -> ".join(p.name for p in (*chain, parent_path.resolve()))
        problems.append(Problem(file=str(path), line=line, field="extends", message=f"extends cycle: {cycle}"))
        return None
    parent = _read_merged(parent_path, (*chain, parent_path.resolve()), problems)
    if parent is None:
        return None
    child = {key: value for key, value in data.items() if key != "extends"}
    for inherited in ("alternatives", "notes"):
        # A variant's own caveats replace the parent's, which may not apply to it.
        parent.data.pop(inherited, None)
    merged_origins = dict(parent.origins)
    merged = _merge(parent.data, child, "", merged_origins, origins)
    merged_origins["extends"] = (str(path), line)
    return _Merged(data=merged, origins=merged_origins)


def _set_path(data: dict, dotted: str, value: Any, declared: bool) -> None:
    """Set ``dotted`` in the raw spec; ``declared``: the leaf is a field the schema declares, so it may
    be absent from the spec (an optional field, or one with a default such as ``host_overlap``)."""
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            raise KeyError(dotted)
        node = node[key]
    if keys[-1] not in node and not declared:
        raise KeyError(dotted)
    node[keys[-1]] = value


@dataclass(frozen=True, kw_only=True)
class _FieldType:
    """What the schema says about one dotted spec field: ``kind`` is ``count`` (a positive whole
    number), ``integer``, ``number`` (a plain real, e.g. an efficiency), ``quantity`` (a number with a
    unit), ``flag``, ``choice`` (an enum), ``text`` or ``other`` (an object, a list); ``declared``: a
    field of a schema object (not a key of a free-form mapping such as ``peak``)."""

    kind: str
    declared: bool
    choices: tuple[Any, ...] = ()

    @property
    def numeric(self) -> bool:
        return self.kind in ("count", "integer", "number", "quantity")


def _unwrap(annotation: Any, metadata: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """Strip ``Optional`` and ``Annotated`` from a type, collecting the annotations' metadata."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation, *extra = get_args(annotation)
            metadata = (*metadata, *extra)
        elif origin in (Union, types.UnionType):
            members = [member for member in get_args(annotation) if member is not type(None)]
            if len(members) != 1:
                return annotation, metadata
            annotation = members[0]
        else:
            return annotation, metadata


def _classify(annotation: Any, metadata: tuple[Any, ...], declared: bool) -> _FieldType:
    if annotation is bool:
        return _FieldType(kind="flag", declared=declared)
    if get_origin(annotation) is Literal:
        choices = get_args(annotation)
        if all(isinstance(choice, int) and not isinstance(choice, bool) for choice in choices):
            return _FieldType(kind="integer", declared=declared, choices=choices)
        return _FieldType(kind="choice", declared=declared, choices=choices)
    if annotation is int:
        positive = any(getattr(item, "gt", None) == 0 for item in metadata)
        return _FieldType(kind="count" if positive else "integer", declared=declared)
    if annotation is float:
        from pydantic import BeforeValidator

        quantity = any(isinstance(item, BeforeValidator) for item in metadata)
        return _FieldType(kind="quantity" if quantity else "number", declared=declared)
    if annotation is str:
        return _FieldType(kind="text", declared=declared)
    return _FieldType(kind="other", declared=declared)


def _field_type(dotted: str) -> _FieldType | None:
    """The schema's type of the dotted field ``dotted``, or None when the schema has no such field."""
    from pydantic import BaseModel

    from perfmodel.hardware.schema import HardwareSpec

    annotation: Any = HardwareSpec
    metadata: tuple[Any, ...] = ()
    declared = False
    for key in dotted.split("."):
        annotation, metadata = _unwrap(annotation, metadata)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(key)
            if field is None:
                return None
            annotation, metadata, declared = field.annotation, tuple(field.metadata), True
        elif get_origin(annotation) is dict:
            annotation, metadata, declared = get_args(annotation)[1], (), False
        else:
            return None
    annotation, metadata = _unwrap(annotation, metadata)
    return _classify(annotation, metadata, declared)


_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")


def _parse_override(value: Any, field: _FieldType | None) -> tuple[Any, str | None]:
    """``(value, None)`` with an override's text read by its field's type, or ``(value, expected)``
    saying what the text should have been. Values that are not text (the Python API) pass as given."""
    if not isinstance(value, str) or field is None:
        return value, None
    text = value.strip()
    if field.kind in ("count", "integer"):
        if _WHOLE_NUMBER.fullmatch(text):
            number = int(text)
            if field.choices and number not in field.choices:
                return value, f"one of {', '.join(map(str, field.choices))}"
            return number, None
        if field.choices:
            return value, f"one of {', '.join(map(str, field.choices))}"
        return value, "a whole number (a count, e.g. 108)" if field.kind == "count" else "a whole number"
    if field.kind == "flag":
        if text.lower() in ("true", "false"):
            return text.lower() == "true", None
        return value, "true or false"
    if field.kind == "choice":
        if text in field.choices:
            return text, None
        return value, f"one of {', '.join(map(str, field.choices))}"
    if field.kind == "number":
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        return (number, None) if math.isfinite(number) else (value, "a number without a unit (e.g. 0.85)")
    return value, None  # quantities (parsed with their unit by the schema), text


def _apply_overrides(merged: _Merged, overrides: Mapping[str, Any], problems: list[Problem]) -> None:
    data = merged.data
    if overrides:
        data.setdefault("sources", {})[WHAT_IF_SOURCE] = {
            "url": "repo:perfmodel/hardware/loader.py", "kind": "what-if",
            "note": "value set by the user for a what-if study (--set / overrides)",
        }
    old_capacities = {dotted: _get_path(data, dotted) for dotted in overrides if _is_level_capacity(dotted)}
    for dotted, value in overrides.items():
        field = _field_type(dotted)
        parsed, expected = _parse_override(value, field)
        if expected is not None:
            problems.append(Problem(file="--set", line=None, field=dotted,
                                    message=f"expected {expected} for --set {dotted}, got {value!r}"))
            continue
        try:
            _set_path(data, dotted, parsed, declared=field is not None and field.declared)
        except KeyError:
            problems.append(Problem(file="--set", line=None, field=dotted,
                                    message="no such field in the spec; use a dotted path such as "
                                            "'memory.hbm.bandwidth' (see 'perfmodel specs show NAME')"))
            continue
        # Only numbers carry sources: field_sources may name numeric fields only (an enum or a flag
        # set here is still reported as set by --set through its origin).
        _attribute(merged, dotted, WHAT_IF_SOURCE, numeric=field is None or field.numeric)
    for dotted, old in old_capacities.items():
        usable = dotted.removesuffix("capacity") + "usable_capacity"
        if usable not in overrides:
            _scale_usable_capacity(merged, dotted, old, usable)


def _attribute(merged: _Merged, dotted: str, source: str, *, numeric: bool = True) -> None:
    merged.origins[dotted] = ("--set", None)
    if not numeric:
        return
    owner_path, _, leaf = dotted.rpartition(".")
    owner, tail = _find_sourced_owner(merged.data, owner_path)
    if owner is not None:
        owner.setdefault("field_sources", {})[join_path(tail, leaf)] = source


def _is_level_capacity(dotted: str) -> bool:
    parts = dotted.split(".")
    return len(parts) == 3 and parts[0] == "memory" and parts[2] == "capacity"


def _get_path(data: dict, dotted: str) -> Any:
    node: Any = data
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _scale_usable_capacity(merged: _Merged, capacity_path: str, old: Any, usable_path: str) -> None:
    """Keep a level's usable share when its capacity is overridden (``usable *= new / old``).

    Values that do not parse are left alone: validation reports them with their field path.
    """
    usable = _get_path(merged.data, usable_path)
    if usable is None:
        return
    try:
        old_bytes = parse_quantity(old, "bytes")
        new_bytes = parse_quantity(_get_path(merged.data, capacity_path), "bytes")
        usable_bytes = parse_quantity(usable, "bytes")
    except (UnitError, ValueError):
        return
    if old_bytes <= 0:
        return
    sources = merged.data.get("sources")
    if not isinstance(sources, dict):
        return
    _set_path(merged.data, usable_path, f"{usable_bytes * new_bytes / old_bytes!r} B", declared=True)
    sources[WHAT_IF_SCALED_SOURCE] = {
        "url": "repo:perfmodel/hardware/loader.py", "kind": "what-if",
        "note": "usable capacity scaled with the capacity set by the user (--set / overrides): "
                "usable = spec usable x new capacity / spec capacity, so the usable share is kept; "
                "set usable_capacity too to choose it yourself"}
    _attribute(merged, usable_path, WHAT_IF_SCALED_SOURCE)


def _find_sourced_owner(data: dict, dotted: str) -> tuple[dict | None, str]:
    """The innermost mapping on ``dotted`` that has a ``source`` key, and the rest of the path."""
    keys = dotted.split(".") if dotted else []
    owner, rest, node = None, keys, data
    for index, key in enumerate(keys):
        node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and "source" in node:
            owner, rest = node, keys[index + 1:]
    return owner, ".".join(rest)


def _problems_from_validation(error: ValidationError, merged: _Merged, file: str,
                              overrides: Mapping[str, Any] | None = None) -> list[Problem]:
    """One problem per validation error, at the file and line its field comes from; an error on an
    object that a ``--set`` override changed (``usable_capacity is larger than capacity`` after
    ``--set memory.hbm.usable_capacity=...``) is the override's, not the shipped spec's line."""
    from perfmodel.hardware.schema import SCHEMA_VERSION

    problems = []
    for item in error.errors():
        dotted = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key; check the spelling against hardware_specs/README.md"
        elif item["type"] == "missing":
            message = "required field is missing"
        elif item["type"] == "literal_error" and dotted == "schema_version":
            message = f"must be {SCHEMA_VERSION} (the schema this perfmodel reads)"
        origin_path = dotted
        while origin_path and origin_path not in merged.origins:
            origin_path = origin_path.rpartition(".")[0]
        origin_file, line = merged.origins.get(origin_path, (file, None))
        overridden = [key for key in overrides or () if dotted and key.startswith(dotted + ".")]
        if overridden and origin_file != "--set":
            origin_file, line = "--set", None
            message = f"{message} (after --set {', '.join(overridden)})"
        problems.append(Problem(file=origin_file, line=line, field=dotted, message=message))
    return problems


ACHIEVABLE_SUFFIX = "-achievable"


#: Serving engines with per-engine overlays (``<device>-<engine>.yaml``: the device's parameters fitted to the
#: kernels that engine runs, ``calibration.engine_overlays``). ``none`` asks for the engine-independent
#: achievable overlay (published microbenchmarks).
SERVING_ENGINES = ("trtllm", "vllm", "sglang")
NO_ENGINE = "none"
#: The engine ``llm``, ``serve`` and ``size`` price a GPU with when none is named: TensorRT-LLM, NVIDIA's
#: own engine, the one NVIDIA's published serving results (its performance tables, MLPerf submissions)
#: were measured with; vLLM and SGLang are a flag away.
DEFAULT_SERVING_ENGINE = "trtllm"


def _shipped(name: str) -> bool:
    stored = stored_names()  # the current stored catalog knows the shipped names without reading a file
    return name in stored if stored is not None else _file_named(name) is not None


def engine_overlays(name: str) -> tuple[str, ...]:
    """The serving engines with an overlay shipped for catalog device ``name``."""
    return tuple(engine for engine in SERVING_ENGINES if _shipped(f"{name}-{engine}"))


def serving_spec_name(name: str, engine: str | None) -> str:
    """The spec a serving prediction on ``name`` uses: ``<name>-<engine>`` for a named engine (an error if
    none ships), the default engine's where the device has one and no engine is named, else ``name``
    (whose achievable overlay ``load_for_prediction`` then takes). ``engine='none'``: ``name``."""
    if engine == NO_ENGINE:
        return name
    available = engine_overlays(name)
    if engine is None:
        return f"{name}-{DEFAULT_SERVING_ENGINE}" if DEFAULT_SERVING_ENGINE in available else name
    if engine not in SERVING_ENGINES:
        raise PerfmodelError(f"--engine {engine!r}: expected one of {', '.join(SERVING_ENGINES + (NO_ENGINE,))}")
    if engine not in available:
        raise PerfmodelError(f"no {engine} overlay ships for {name!r} (engines measured there: "
                             f"{', '.join(available) or 'none'}); use --engine {NO_ENGINE} for its "
                             "engine-independent parameters, or --ideal for the datasheet")
    return f"{name}-{engine}"


def achievable_name(name: str) -> str | None:
    """The catalog name of ``name``'s achievable overlay, if one ships (None otherwise). An overlay is
    found by its file name, ``<name>-achievable.yaml`` declaring that name, so that predicting on a
    device reads its own spec files only (the shipped catalog names every file after its spec)."""
    candidate = f"{name}{ACHIEVABLE_SUFFIX}"
    if name.endswith(ACHIEVABLE_SUFFIX):
        return None
    stored = stored_names()  # the current stored catalog knows the shipped names without reading a file
    if stored is not None and name in stored:
        return candidate if candidate in stored else None
    return candidate if _file_named(candidate) is not None else None


def load_for_prediction(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None, *,
                        ideal: bool = False, engine: str | None = NO_ENGINE) -> model.Hardware:
    """The spec predictions use: a catalog device's achievable overlay (efficiencies fitted to
    published microbenchmarks) where one ships, unless ``ideal`` asks for the datasheet roofline.
    ``engine``: a serving engine's overlay (``serving_spec_name``; None: the default engine's where one
    ships). A path, an overlay or a device without one loads as given; the result names its parameter set."""
    if not ideal and engine != NO_ENGINE and isinstance(name_or_path, str) and _shipped(name_or_path):
        name_or_path = serving_spec_name(name_or_path, engine)
    elif not ideal and engine not in (None, NO_ENGINE):
        raise SpecError([Problem(file=str(name_or_path), line=None, field="", message=(
            f"--engine {engine} needs a catalog device name (its <device>-{engine} overlay), not a path"))])
    overlay = None if ideal else achievable_name(str(name_or_path))
    return load_hardware(overlay or name_or_path, overrides)


def load_hardware(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None) -> model.Hardware:
    """Load and validate a spec by catalog name or path; raise :class:`SpecError` listing every problem.
    A shipped spec named exactly comes from the stored catalog when it is current (``compiled``)."""
    if not overrides and isinstance(name_or_path, str):
        stored = stored_hardware(name_or_path)
        if stored is not None:
            return stored
    try:
        path = resolve_spec(name_or_path)
    except FileNotFoundError as error:
        raise SpecError([Problem(file=str(name_or_path), line=None, field="", message=str(error))]) from None
    if not overrides:
        return full_load(path)
    return _load(path, dict(overrides))


def full_load(path: Path) -> model.Hardware:
    """The spec file at ``path`` read and validated (never from the stored catalog); cached per file."""
    return _load_cached(path.resolve())


@lru_cache(maxsize=64)
def _load_cached(path: Path) -> model.Hardware:
    return _load(path, {})


def _load(path: Path, overrides: dict[str, Any]) -> model.Hardware:
    from pydantic import ValidationError

    from perfmodel.hardware.schema import HardwareSpec, memory_order_problems
    problems: list[Problem] = []
    merged = _read_merged(path, (path.resolve(),), problems)
    if merged is None:
        raise SpecError(problems)
    _apply_overrides(merged, overrides, problems)
    sources = merged.data.get("sources")
    source_ids = set(sources) if isinstance(sources, dict) else set()
    spec = None
    try:
        spec = HardwareSpec.model_validate(merged.data, context={"source_ids": source_ids})
    except ValidationError as error:
        problems.extend(_problems_from_validation(error, merged, str(path), overrides))
    if spec is not None:
        for dotted, message in memory_order_problems(spec, exempt=frozenset(overrides)):
            origin_file, line = merged.origins.get(dotted, merged.origins.get(dotted.rpartition(".")[0],
                                                                               (str(path), None)))
            problems.append(Problem(file=origin_file, line=line, field=dotted, message=message))
    if problems or spec is None:
        raise SpecError(problems)
    return to_hardware(spec, origin=str(path))


def validate_spec_file(path: str | Path) -> list[Problem]:
    """The problems of one spec file (empty when it is valid)."""
    try:
        _load(Path(path), {})
    except SpecError as error:
        return list(error.problems)
    return []


SPEC_TABLES = ("schema_version", "extends", "sources", "alternatives", "notes")  # not fields of the device


@dataclass(frozen=True, kw_only=True)
class SpecField:
    """One field of a spec as written (its ``extends`` chain merged): the dotted path ``--set`` takes,
    the value as the YAML holds it, the id of the source it cites (``""``: none, a text field) and the
    file and line it comes from."""

    field: str
    value: Any
    source: str
    file: str
    line: int | None


def spec_fields(name_or_path: str | Path) -> list[SpecField]:
    """Every field of a spec (a catalog name or a file), its ``extends`` chain merged, in file order,
    with the source each cites (``Hardware.field_sources``) and where it is written; the spec is
    validated first (a bad spec raises :class:`SpecError`). ``sources``, ``alternatives`` and
    ``notes`` are the spec's tables about its fields, not fields (``SPEC_TABLES``)."""
    path = resolve_spec(name_or_path)
    problems: list[Problem] = []
    merged = _read_merged(path, (path.resolve(),), problems)
    if merged is None:
        raise SpecError(problems)
    hardware = full_load(path)
    out: list[SpecField] = []

    def walk(data: Any, prefix: str) -> None:
        if isinstance(data, dict):
            for key, value in data.items():
                if not prefix and key in SPEC_TABLES:
                    continue
                walk(value, join_path(prefix, str(key)))
            return
        file, line = merged.origins.get(prefix, (str(path), None))
        out.append(SpecField(field=prefix, value=data, source=hardware.field_sources.get(prefix, ""), file=file,
                             line=line))

    walk(merged.data, "")
    return out


def _collect_field_sources(prefix: str, spec: Any, out: dict[str, str]) -> None:
    from perfmodel.hardware.schema import numeric_field_paths

    for path in numeric_field_paths(spec):
        out[f"{prefix}.{path}"] = spec.source_of(path)


def _fit_covariance(fit: FitSpec | None) -> model.FitCovariance | None:
    """``efficiency.fit`` (``schema.FitSpec``, checked there) as the model's record."""
    if fit is None:
        return None
    return model.FitCovariance(names=tuple(fit.parameters), measurements=fit.measurements,
                               relative_covariance=tuple(tuple(float(value) for value in row)
                                                         for row in fit.relative_covariance))


def to_hardware(spec: HardwareSpec, *, origin: str = "") -> model.Hardware:
    """Convert a validated spec into the core record."""
    field_sources: dict[str, str] = {}
    compute = {}
    for name, engine in spec.compute.items():
        _collect_field_sources(f"compute.{name}", engine, field_sources)
        tile = None if engine.tile is None else model.Tile(m=engine.tile.m, n=engine.tile.n, k=engine.tile.k)
        kernels = tuple(model.KernelShape(name=kernel_name, m=kernel.m, n=kernel.n, k=kernel.k, split_k=kernel.split_k)
                        for kernel_name, kernel in engine.kernels.items())
        compute[name] = model.ComputeEngine(name=name, kind=engine.kind, units=engine.units,
                                            peak_flops_per_s=engine.peak, clock_hz=engine.clock, tile=tile,
                                            kernels=kernels, kernel_fixed_s=engine.kernel_fixed_time or 0.0,
                                            k_step_s=engine.k_step_time or 0.0,
                                            vector_kernels_hide_memory=engine.vector_kernels_hide_memory,
                                            attention_kv_block=engine.attention_kv_block,
                                            attention_packs_query_groups=engine.attention_packs_query_groups,
                                            matmul_epilogue_hidden=engine.matmul_epilogue_hidden)
    memory = []
    for name, level in spec.memory.items():
        _collect_field_sources(f"memory.{name}", level, field_sources)
        memory.append(model.MemoryLevel(
            name=name, kind=level.kind, managed=level.managed, capacity_bytes=level.capacity,
            instances=level.instances, bandwidth_bytes_per_s=level.bandwidth, latency_s=level.latency,
            usable_capacity_bytes=level.usable_capacity, transfer_granule_bytes=level.transfer_granule,
            off_device=level.off_device, pooled=level.pooled))
    links = {}
    for name, link in spec.links.items():
        _collect_field_sources(f"links.{name}", link, field_sources)
        links[name] = model.Link(name=name, kind=link.kind,
                                 bandwidth_bytes_per_s_per_direction=link.bandwidth_per_direction,
                                 topology=link.topology, links_per_chip=link.links_per_chip,
                                 latency_s=link.latency, max_chips=link.max_chips,
                                 wraparound_chips=link.wraparound, wraparound_whole_slice=link.wraparound_whole_slice,
                                 all_reduce=link.all_reduce, kernel_latency_s=link.kernel_latency)
    modes = {}
    for name, mode in spec.scheduling.modes.items():
        _collect_field_sources(f"scheduling.modes.{name}", mode, field_sources)
        step = mode.engine_step
        engine_step = None if step is None else model.EngineStep(
            host_fixed_s=step.host_fixed, host_per_sequence_s=step.host_per_sequence, overlap=step.overlap,
            fuses_mixed=step.fuses_mixed)
        modes[name] = model.ExecutionMode(
            name=name, host_overlap=mode.host_overlap, library_dispatch_s=dict(mode.library_dispatch),
            engine_step=engine_step,
            **{attribute: getattr(mode, field) or 0.0 for field, attribute in model.MODE_FIELDS.items()})
    _collect_field_sources("power", spec.power, field_sources)
    price = None
    if spec.price is not None:
        _collect_field_sources("price", spec.price, field_sources)
        price = spec.price.per_hour
    efficiency = None
    if spec.efficiency is not None:
        _collect_field_sources("efficiency", spec.efficiency, field_sources)
        efficiency = model.Parameters(name=spec.efficiency.name, compute_efficiency=dict(spec.efficiency.compute),
                                      memory_efficiency=dict(spec.efficiency.memory),
                                      scheduling_scale=spec.efficiency.scheduling_scale or 1.0,
                                      compute_latency_s=dict(spec.efficiency.compute_latency),
                                      memory_latency_s=dict(spec.efficiency.memory_latency),
                                      link_efficiency=dict(spec.efficiency.link),
                                      collective_latency_s=dict(spec.efficiency.collective_latency),
                                      kind=spec.efficiency.kind, fit=_fit_covariance(spec.efficiency.fit))
    sources = {key: model.Source(url=value.url, kind=value.kind, note=value.note)
               for key, value in spec.sources.items()}
    alternatives = tuple(
        model.Alternative(field=item.field, used=item.used, reason=item.reason,
                          others=tuple((other.value, other.source) for other in item.others))
        for item in spec.alternatives)
    return model.Hardware(
        name=spec.name, family=spec.family, vendor=spec.vendor, description=spec.description,
        compute=compute, memory=tuple(memory), links=links,
        scheduling=model.Scheduling(default_mode=spec.scheduling.default_mode, modes=modes),
        power=model.Power(tdp_watts=spec.power.tdp, idle_watts=spec.power.idle),
        price_usd_per_hour=price, sources=sources, field_sources=field_sources,
        alternatives=alternatives, notes=spec.notes, origin=origin, efficiency=efficiency)
