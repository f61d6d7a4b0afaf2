"""Safe YAML reading that remembers where every value came from (edge module).

``read_yaml`` returns plain Python data plus a map from dotted field path to line number, and the
problems it found on the way: syntax errors, duplicate keys and language-specific tags
(``!!python/object`` and friends), which are refused rather than constructed.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        self._constructor = yaml.SafeLoader("")

    def problem(self, node: yaml.Node, path: str, message: str) -> None:
        self.problems.append(Problem(file=self.file, line=node.start_mark.line + 1, field=path, message=message))

    def convert(self, node: yaml.Node, path: str) -> Any:
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


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse YAML text safely, tracking lines; never raises on bad YAML (problems are returned)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        reason = getattr(error, "problem", None) or str(error)
        problem = Problem(file=file, line=line, field="", message=f"not valid YAML: {reason}")
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


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so nothing is half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, default_file_mode())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
