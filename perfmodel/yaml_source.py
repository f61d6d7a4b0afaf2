"""Safe YAML reading that remembers where every value came from (edge module).

``read_yaml`` returns plain Python data plus a map from dotted field path to line number, and the
problems it found on the way: syntax errors, duplicate keys and language-specific tags
(``!!python/object`` and friends), which are refused rather than constructed.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

from perfmodel.errors import PerfmodelError, Problem

_SAFE_TAGS = {
    "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
}


@dataclass(frozen=True, kw_only=True)
class YamlDocument:
    """Parsed YAML: the data, the line of each dotted path, and the problems found."""

    data: Any
    lines: dict[str, int]
    problems: tuple[Problem, ...]
    file: str


def join_path(prefix: str, key: object) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


class _Converter:
    def __init__(self, file: str):
        self.file = file
        self.lines: dict[str, int] = {}
        self.problems: list[Problem] = []
        import yaml

        self._constructor = yaml.SafeLoader("")

    def problem(self, node: yaml.Node, path: str, message: str) -> None:
        self.problems.append(Problem(file=self.file, line=node.start_mark.line + 1, field=path, message=message))

    def convert(self, node: yaml.Node, path: str) -> Any:
        import yaml

        self.lines.setdefault(path, node.start_mark.line + 1)
        if node.tag not in _SAFE_TAGS:
            self.problem(node, path, f"tag {node.tag!r} is not allowed: specs use plain YAML values only "
                                     "(strings, numbers, lists, mappings)")
            return None
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    self.problem(key_node, path, "YAML merge keys ('<<') are not allowed; use 'extends:'")
                    continue
                key = self.convert(key_node, path)
                if not isinstance(key, (str, int)) or isinstance(key, bool):
                    self.problem(key_node, path, f"mapping key {key!r} must be a string")
                    continue
                key = str(key)
                child = join_path(path, key)
                if key in result:
                    self.problem(key_node, child, f"duplicate key {key!r} (first at line {self.lines[child]}); "
                                                  "keep one of them")
                    continue
                self.lines[child] = key_node.start_mark.line + 1
                result[key] = self.convert(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, join_path(path, index)) for index, item in enumerate(node.value)]
        return self._constructor.construct_object(node)


# Bounds on a document, so that a small hostile file cannot take the machine: YAML aliases let 500
# bytes stand for 10^9 values ("billion laughs"), and deep nesting exhausts the stack. A captured
# training step of a 400B-parameter model is ~10^6 values a dozen levels deep.
MAX_YAML_VALUES = 10_000_000
MAX_YAML_DEPTH = 64


_DEEP_FLOW = re.compile(r"(?:[\[{]\s*){" + str(MAX_YAML_DEPTH + 1) + "}")


class _TooLarge(Exception):
    pass


def _expanded_size(node: yaml.Node, sizes: dict[int, int], depth: int = 0) -> int:
    """Values ``node`` expands to with every alias followed (each distinct node counted once, in linear
    time); raises _TooLarge beyond the bounds."""
    import yaml

    if depth > MAX_YAML_DEPTH:
        raise _TooLarge(f"values nested more than {MAX_YAML_DEPTH} levels deep")
    known = sizes.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(key, sizes, depth + 1) + _expanded_size(value, sizes, depth + 1)
                    for key, value in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, sizes, depth + 1) for item in node.value)
    if size > MAX_YAML_VALUES:
        raise _TooLarge(f"more than {MAX_YAML_VALUES:,} values once its aliases (*name) are expanded")
    sizes[id(node)] = size
    return size


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse YAML text safely, tracking lines; never raises on bad YAML (problems are returned)."""
    # PyYAML is imported here, not with the module: a cold start that reads only stored specs
    # (``hardware.compiled``) parses no YAML. libyaml's parser when PyYAML was built with it (~10x
    # faster; the same nodes and line marks).
    import yaml

    safe_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        if _DEEP_FLOW.search(text):  # what the parser would take a second and the whole stack to refuse
            raise _TooLarge(f"values nested more than {MAX_YAML_DEPTH} levels deep")
        root = yaml.compose(text, Loader=safe_loader)
        if root is not None:
            _expanded_size(root, {})
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        reason = getattr(error, "problem", None) or str(error)
        problem = Problem(file=file, line=line, field="", message=f"not valid YAML: {reason}")
        return YamlDocument(data=None, lines={}, problems=(problem,), file=file)
    except (_TooLarge, RecursionError) as error:
        reason = str(error) if isinstance(error, _TooLarge) else f"values nested more than {MAX_YAML_DEPTH} levels deep"
        problem = Problem(file=file, line=None, field="", message=f"refused: the document has {reason}; no spec or "
                                                                  "workload needs that (a corrupt or hostile file?)")
        return YamlDocument(data=None, lines={}, problems=(problem,), file=file)
    if root is None:
        problem = Problem(file=file, line=1, field="", message="the file is empty")
        return YamlDocument(data=None, lines={}, problems=(problem,), file=file)
    converter = _Converter(file)
    data = converter.convert(root, "")
    return YamlDocument(data=data, lines=converter.lines, problems=tuple(converter.problems), file=file)


def read_yaml(path: str | Path) -> YamlDocument:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        problem = Problem(file=str(path), line=None, field="", message=f"cannot read the file: {error}")
        return YamlDocument(data=None, lines={}, problems=(problem,), file=str(path))
    return parse_yaml(text, str(path))


def default_file_mode() -> int:
    """0o666 minus the process umask: what a plain open() would create (mkstemp uses 0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def open_for_reading(path: str | Path, *, encoding: str = "utf-8", error_class=PerfmodelError):
    """Open a text file (CSV: no newline translation) or raise ``error_class`` naming the file."""
    try:
        return Path(path).open(newline="", encoding=encoding)
    except OSError as error:
        raise error_class(f"cannot read {path}: {error}") from None


@contextlib.contextmanager
def csv_failures(path: str | Path, reader: csv.DictReader, error_class=PerfmodelError) -> Iterator[None]:
    """Reading ``reader``'s rows inside: a file that is not UTF-8 text, or a row the csv module cannot
    parse (a field over its size limit, a stray quote), becomes one ``error_class`` naming the file and row."""
    try:
        yield
    except UnicodeDecodeError as error:
        raise error_class(f"{path}: not a text (UTF-8) CSV file: {error.reason} at byte {error.start}") from None
    except csv.Error as error:
        raise error_class(f"{path}:{reader.line_num}: not a readable CSV row ({error})") from None


def check_output_path(path: str | Path, flag: str, suffixes: tuple[str, ...] = ()) -> Path:
    """``path`` as an output file of a command option (``flag``, for the message): not empty, not a
    directory, FIFO or device, and ending in one of ``suffixes`` (any, when empty). Commands check their
    outputs before they compute, so that a typo costs nothing and nothing is half-written."""
    text = str(path)
    example = f"e.g. {flag} out{suffixes[0] if suffixes else '.txt'}"
    if not text.strip() or text in (".", ".."):
        raise PerfmodelError(f"{flag}: {text!r} is not a file name; give one, {example}")
    target = Path(text)
    if text.endswith(("/", os.sep)) or target.is_dir():
        raise PerfmodelError(f"{flag} {text}: is a directory; give a file name inside it, {example}")
    if target.exists() and not target.is_file():
        raise PerfmodelError(f"{flag} {text}: exists and is not a regular file (a FIFO, device or socket); write to "
                             "a file")
    existing = next((parent for parent in target.parents if parent.exists()), None)
    if existing is not None and not existing.is_dir():
        raise PerfmodelError(f"{flag} {text}: {existing} is a file, not a directory to write into")
    if suffixes and target.suffix.lower() not in suffixes:
        raise PerfmodelError(f"{flag} {text}: unknown extension {target.suffix or '(none)'!r}; the file must end in "
                             f"{', '.join(suffixes)}")
    return target


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` as :func:`write_bytes_atomically` does."""
    write_bytes_atomically(path, text.encode("utf-8"))


def write_bytes_atomically(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_output`: nothing is half-written, a rewritten
    file keeps its mode."""
    with atomic_output(path) as temporary, temporary.open("wb") as stream:
        stream.write(data)


@contextlib.contextmanager
def atomic_output(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary file beside ``path`` (named ``.<name>.<random><suffix>``) for the caller to write;
    when the block ends without an exception it replaces ``path`` by a rename, so nothing is
    half-written. The file gets ``path``'s mode when it replaces one (a private 0600 output stays
    private), else what a plain open() would give (``default_file_mode``). Missing parent directories
    are created. The temporary file is removed on every exit path. A directory or a special file (FIFO,
    device) at ``path`` is never replaced; an operating-system failure is a :class:`PerfmodelError`
    naming the file."""
    import stat
    import tempfile

    path = Path(path)
    if path.is_dir() or (path.exists() and not path.is_file()):
        raise PerfmodelError(f"cannot write {path}: it is a {'directory' if path.is_dir() else 'special file'}; give "
                             "a file name")
    existing = next((parent for parent in path.parents if parent.exists()), None)
    if existing is not None and not existing.is_dir():
        raise PerfmodelError(f"cannot write {path}: {existing} is a file, not a directory to write into")
    try:
        mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else default_file_mode()
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
        os.close(handle)
    except OSError as error:
        raise PerfmodelError(f"cannot write {path}: {error.strerror or error}") from None
    temporary = Path(name)
    try:
        yield temporary
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError as error:
        raise PerfmodelError(f"cannot write {path}: {error.strerror or error}") from None
    finally:
        temporary.unlink(missing_ok=True)  # (gone already when it replaced the file)
