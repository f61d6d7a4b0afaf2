"""The shipped specs, validated once and stored: what a cold start reads instead of validating them.

Validating a spec needs the schema (pydantic models) and the YAML reader; importing and building
those is most of what a fresh ``perfmodel llm`` process spends beyond numpy. The shipped catalog
does not change between runs, so ``python -m perfmodel.hardware.compiled`` loads every shipped spec
through the full loader once and pickles the resulting :class:`~perfmodel.hardware.model.Hardware`
records into ``hardware_specs/catalog.pickle``, beside two digests:

* the catalog's: every ``*.yaml`` under the shipped directory, by relative path and content;
* the code's: the modules that turn a spec into a record (``perfmodel/hardware/*.py``, units, dtypes,
  the YAML reader, the data paths).

A catalog name is served from the pickle only when both digests match the files as they are now,
and only when ``$PERFMODEL_SPEC_PATH`` adds no directory (a spec there could take a shipped name).
Anything else (an edited spec, an edited loader, a missing, truncated or foreign pickle, overrides,
a path) goes through the full loader, so the pickle can make a load faster but never different;
``tests/test_compiled_catalog.py`` checks that the committed pickle is current and equal record for
record to a fresh load. Unpickling can run code, so the catalog is read only from the package's own
spec directory (as trusted as the package's modules), never from a path a user gives.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfmodel.hardware.model import Hardware
from perfmodel.paths import data_directory

FILE_NAME = "catalog.pickle"
FORMAT = 1
_PACKAGE = Path(__file__).resolve().parents[1]


def _code_files() -> list[Path]:
    hardware = sorted((_PACKAGE / "hardware").glob("*.py"))
    return [*hardware, *(_PACKAGE / name for name in ("units.py", "dtypes.py", "yaml_source.py", "paths.py"))]


def _digest(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def shipped_directory() -> Path:
    return data_directory("hardware_specs")


def catalog_digest() -> str:
    """Every shipped spec file, by relative path and content (added, removed or edited: a new digest)."""
    root = shipped_directory()
    return _digest(sorted(root.rglob("*.yaml")), root)


def code_digest() -> str:
    return _digest(_code_files(), _PACKAGE)


def _mapping_proxy(items: dict) -> MappingProxyType:
    return MappingProxyType(items)


class _Pickler(pickle.Pickler):
    """Pickles the records' read-only mappings (``MappingProxyType`` has no pickle support of its own)
    without registering anything process-wide."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is MappingProxyType:
            return _mapping_proxy, (dict(obj),)
        return NotImplemented


def _relative_origins(records: dict[str, Hardware], root: Path) -> dict[str, Hardware]:
    return {name: replace(record, origin=str(Path(record.origin).resolve().relative_to(root.resolve())))
            for name, record in records.items()}


def compile_catalog() -> bytes:
    """Every shipped spec loaded through the full loader, pickled with the digests that keep it honest."""
    from perfmodel.hardware import loader

    # The files as they are now: a process that wrote specs (calibration.achievable --write) has read
    # the catalog before, and its index would miss an added overlay and keep an edited one's old record.
    loader.forget_spec_files()
    root = shipped_directory()
    index = {name: path for name, path in loader.catalog_index().items() if path.resolve().is_relative_to(root.resolve())}
    records = {name: loader.full_load(path) for name, path in index.items()}
    payload = {"format": FORMAT, "python": sys.version_info[:2], "catalog": catalog_digest(), "code": code_digest(),
               "specs": _relative_origins(records, root)}
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(payload)
    return buffer.getvalue()


def write_catalog(path: Path | None = None) -> Path:
    from perfmodel.yaml_source import write_bytes_atomically

    target = path or shipped_directory() / FILE_NAME
    write_bytes_atomically(target, compile_catalog())
    _verified.cache_clear()  # read the written catalog, not the one this process trusted before
    _with_origin.cache_clear()
    return target


def _read(path: Path) -> dict | None:
    """The stored payload if it is current for these files and this code; None otherwise."""
    try:
        payload = pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - missing, truncated or written by other code: load specs the full way
        return None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or payload.get("python") != sys.version_info[:2]:
        return None
    if payload.get("catalog") != catalog_digest() or payload.get("code") != code_digest():
        return None
    return payload


def _current() -> dict | None:
    if any(item and Path(item).is_dir() for item in os.environ.get("PERFMODEL_SPEC_PATH", "").split(os.pathsep)):
        return None
    return _verified()


@lru_cache(maxsize=1)
def _verified() -> dict | None:
    return _read(shipped_directory() / FILE_NAME)


def stored_names() -> frozenset[str] | None:
    """The catalog names the current stored catalog holds (None when there is none to trust)."""
    payload = _current()
    return None if payload is None else frozenset(payload["specs"])


def stored_hardware(name: str) -> Hardware | None:
    """The shipped spec ``name`` (exactly its catalog name) as the full loader returns it, from the
    stored catalog; None when the catalog is not current or does not hold the name."""
    return None if _current() is None else _with_origin(name)


@lru_cache(maxsize=64)
def _with_origin(name: str) -> Hardware | None:
    """One record per name per process, as the full loader caches one per file."""
    payload = _verified()
    record = None if payload is None else payload["specs"].get(name)
    if record is None:
        return None
    return replace(record, origin=str(shipped_directory() / record.origin))


def main() -> int:
    target = write_catalog()
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    # Run from the importable module, not from ``__main__``: the pickle refers to this module's
    # functions by their importable name.
    from perfmodel.hardware.compiled import main as _main

    sys.exit(_main())
