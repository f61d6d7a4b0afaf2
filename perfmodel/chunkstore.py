"""Finished chunks of a long run, kept on disk so that an interrupted run resumes where it stopped.

A run that streams its table in chunks (``perfmodel sweep -o FILE``) keeps every chunk it finishes in a
*parts directory* beside its output (``FILE.parts/``): ``manifest.json``, what the run is (its
arguments and the content its numbers rest on: :func:`open_parts` compares it), and one
``chunk-<index>.npz`` per finished chunk, each written to a temporary file, flushed to disk and renamed,
so a chunk file is whole or absent whatever kills the process. Running the same command again finds
the directory, computes only the chunks missing from it (:func:`resumed`) and assembles the table from
both, in order: the chunks are the same arrays either way (numpy's own format keeps every bit), so the
table equals that of an uninterrupted run to the last bit. Where the chunks are computed (this
process, a Dask cluster) is the mapper's business (``perfmodel.fanout``); the chunks are written here,
by the process that gathers them, so the workers need no shared disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.fanout import Mapper

MANIFEST = "manifest.json"
FORMAT = 1  # of the parts directory; a directory of another format is another run's
_PACKAGE = Path(__file__).resolve().parent

Columns = dict[str, np.ndarray]
T = TypeVar("T")
R = TypeVar("R")


def parts_path(output: Path) -> Path:
    """The parts directory of the run that writes ``output``: ``<output>.parts`` beside it."""
    return output.with_name(output.name + ".parts")


def source_digest() -> str:
    """sha256 of every perfmodel source file (relative path and bytes): chunks computed by other code
    may hold other numbers, so a run does not resume from them."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def content_digest(value: Any) -> str:
    """sha256 of a JSON-ready value's canonical text (keys sorted; floats as Python's repr, which
    round-trips every bit)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()


@dataclass(frozen=True)
class Parts:
    """The parts directory ``path`` of a run of ``chunks`` chunks; ``done``: the chunks it held when
    opened."""

    path: Path
    chunks: int
    done: frozenset[int]

    def chunk_path(self, index: int) -> Path:
        return self.path / f"chunk-{index:08d}.npz"

    def save(self, index: int, columns: Mapping[str, np.ndarray]) -> None:
        """Keep chunk ``index`` (column -> array): a temporary file, flushed to disk, then renamed."""
        _write_durably(self.chunk_path(index), lambda stream: np.savez(stream, allow_pickle=False, **columns))

    def load(self, index: int) -> Columns:
        """Chunk ``index`` as it was saved (the columns in their order, every bit)."""
        path = self.chunk_path(index)
        try:
            with np.load(path, allow_pickle=False) as archive:
                return {name: archive[name] for name in archive.files}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise PerfmodelError(f"{path}: cannot read this kept chunk ({error}); delete the file (the run "
                                 "computes that chunk again) and rerun") from None

    def remove(self) -> None:
        """Delete the directory (the run's table is written: its chunks are not needed any more)."""
        shutil.rmtree(self.path, ignore_errors=True)


def _write_durably(path: Path, write: Callable[[Any], None]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        raise PerfmodelError(f"cannot write {path}: {error.strerror or error}") from None
    finally:
        temporary.unlink(missing_ok=True)


def open_parts(path: Path, manifest: Mapping[str, Any], chunks: int, *, restart: bool = False,
               how_to_restart: str = "--restart") -> Parts:
    """The parts directory at ``path`` for the run ``manifest`` describes (JSON-ready; what differs is
    named field by field), of ``chunks`` chunks: created when absent (or, with ``restart``, emptied
    first); an existing one whose manifest is this run's keeps its chunks (the run resumes); one of
    another run is refused (``how_to_restart``: the option that discards it, for the message)."""
    manifest = {"format": FORMAT, **manifest}
    if path.exists() and not path.is_dir():
        raise PerfmodelError(f"{path}: exists and is not a directory; this run keeps its finished chunks there: "
                             "move or delete that file")
    if restart:
        shutil.rmtree(path, ignore_errors=True)
    recorded = _read_manifest(path, how_to_restart)
    if recorded is None:
        if path.is_dir() and any(path.glob("chunk-*.npz")):
            raise PerfmodelError(f"{path}: holds chunks but no {MANIFEST}, so what run they belong to is unknown; "
                                 f"delete the directory (rm -r {path}) or pass {how_to_restart}")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise PerfmodelError(f"cannot create {path}: {error.strerror or error}") from None
        _write_durably(path / MANIFEST, lambda stream: stream.write(json.dumps(manifest, indent=1).encode()))
        return Parts(path=path, chunks=chunks, done=frozenset())
    differences = [f"{key}: {_short(recorded.get(key))} there, {_short(manifest.get(key))} here"
                   for key in dict.fromkeys([*recorded, *manifest]) if recorded.get(key) != manifest.get(key)]
    if differences:
        raise PerfmodelError(f"{path} holds the finished chunks of another run, so this one cannot resume from them ("
                             + "; ".join(differences) + f"). Rerun with that run's arguments to finish it, or "
                             f"delete the directory (rm -r {path}) or pass {how_to_restart} to discard its chunks "
                             "and start over")
    for stale in path.glob(".chunk-*.tmp"):  # a chunk being written when the run was killed
        stale.unlink(missing_ok=True)
    done = frozenset(index for index in range(chunks) if (path / f"chunk-{index:08d}.npz").is_file())
    return Parts(path=path, chunks=chunks, done=done)


def _read_manifest(path: Path, how_to_restart: str) -> dict | None:
    file = path / MANIFEST
    if not file.is_file():
        return None
    try:
        recorded = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PerfmodelError(f"{file}: cannot read it ({error}); delete {path} (rm -r {path}) or pass "
                             f"{how_to_restart} to start over") from None
    if not isinstance(recorded, dict):
        raise PerfmodelError(f"{file}: not a manifest of perfmodel (expected a JSON object); delete {path} "
                             f"(rm -r {path}) or pass {how_to_restart} to start over")
    return recorded


def _short(value: Any, limit: int = 120) -> str:
    """``value`` as JSON, a long list as its first and last items and its length."""
    text = "(none)" if value is None else json.dumps(value)
    if len(text) <= limit:
        return text
    if isinstance(value, list) and len(value) > 5:
        return (f"[{', '.join(json.dumps(item) for item in value[:3])}, ..., "
                f"{', '.join(json.dumps(item) for item in value[-2:])}] ({len(value)} values)")[: 3 * limit]
    return text[: limit - 3] + "..."


def resumed(parts: Parts, mapper: Mapper, compute: Callable[[T], R], items: Sequence[T], *,
            keep: Callable[[R], Mapping[str, np.ndarray]], restore: Callable[[T, Columns], R]) -> Iterator[R]:
    """``compute(item)`` for every item, in order (chunk ``index``: ``items[index]``): the kept chunks
    restored (``restore(item, arrays)``), the missing ones computed through ``mapper`` (which may send
    them to another process) and kept as they arrive (``keep(result)``: the arrays to write; they must
    restore to a result equal to the bit). Holds one chunk, plus what the mapper has in flight."""
    missing = [items[index] for index in range(parts.chunks) if index not in parts.done]
    computed = mapper(compute, missing)
    try:
        for index in range(parts.chunks):
            if index in parts.done:
                yield restore(items[index], parts.load(index))
                continue
            result = next(computed)
            parts.save(index, keep(result))
            yield result
    finally:  # now, while the mapper's cluster is up: a Dask mapper cancels the chunks still in flight
        close = getattr(computed, "close", None)
        if close is not None:
            close()


__all__ = ["Parts", "content_digest", "open_parts", "parts_path", "resumed", "source_digest"]
