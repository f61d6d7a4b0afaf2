"""Workload graphs as YAML or JSON files, read back identically (edge module).

Format (schema_version 1)::

    schema_version: 1
    name: transformer_block
    ops:
      - name: layers.attn.q_proj
        kind: matmul
        provenance: aten.mm
        count: 32
        inputs: [{shape: [2048, 4096], dtype: bf16}, {shape: [4096, 4096], dtype: bf16, role: weight}]
        outputs: [{shape: [2048, 4096], dtype: bf16}]
        attrs: {m: 2048, n: 4096, k: 4096}
    edges: [[layers.input_norm, layers.attn.q_proj]]

Problems are reported all at once with file, line and field, as ``WorkloadError``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from perfmodel.errors import Problem, WorkloadError
from perfmodel.paths import data_directory
from perfmodel.workload.ir import Graph, Op, TensorSpec
from perfmodel.yaml_source import YamlDocument, parse_yaml, write_text_atomically

SCHEMA_VERSION = 1
OP_KEYS = {"name", "kind", "provenance", "count", "inputs", "outputs", "attrs"}
TENSOR_KEYS = {"shape", "dtype", "role"}


def _scalar(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        raise WorkloadError([Problem(file="<graph>", line=None, field="attrs",
                                     message="array-valued (sweep) graphs cannot be written to a file")])
    return value


def _tensor_data(tensor: TensorSpec) -> dict:
    data = {"shape": [int(dim) for dim in tensor.shape], "dtype": tensor.dtype}
    if tensor.role != "activation":
        data["role"] = tensor.role
    return data


def graph_to_data(graph: Graph) -> dict:
    ops = []
    for op in graph.ops:
        item = {"name": op.name, "kind": op.kind}
        if op.provenance:
            item["provenance"] = op.provenance
        if op.count != 1:
            item["count"] = op.count
        item["inputs"] = [_tensor_data(t) for t in op.inputs]
        item["outputs"] = [_tensor_data(t) for t in op.outputs]
        if op.attrs:
            item["attrs"] = {key: _scalar(value) for key, value in op.attrs.items()}
        ops.append(item)
    return {"schema_version": SCHEMA_VERSION, "name": graph.name, "ops": ops,
            "edges": [list(edge) for edge in graph.edges]}


def dumps(graph: Graph, fmt: str = "yaml") -> str:
    data = graph_to_data(graph)
    if fmt == "json":
        return json.dumps(data, indent=1) + "\n"
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)


def save_graph(graph: Graph, path: str | Path) -> None:
    path = Path(path)
    write_text_atomically(path, dumps(graph, "json" if path.suffix == ".json" else "yaml"))


def _problem(document: YamlDocument, path: str, message: str) -> Problem:
    line = document.lines.get(path)
    probe = path
    while line is None and "." in probe:
        probe = probe.rpartition(".")[0]
        line = document.lines.get(probe)
    return Problem(file=document.file, line=line, field=path, message=message)


def graph_from_document(document: YamlDocument) -> Graph:
    problems = list(document.problems)
    data = document.data
    if problems:
        raise WorkloadError(problems)
    if not isinstance(data, dict):
        raise WorkloadError([_problem(document, "", "a workload must be a mapping with 'name' and 'ops'")])
    unknown = sorted(set(data) - {"schema_version", "name", "ops", "edges"})
    for key in unknown:
        problems.append(_problem(document, key, "unknown key; allowed: schema_version, name, ops, edges"))
    if data.get("schema_version") != SCHEMA_VERSION:
        problems.append(_problem(document, "schema_version", f"must be {SCHEMA_VERSION}"))
    if not isinstance(data.get("name"), str) or not data.get("name"):
        problems.append(_problem(document, "name", "required: a non-empty string"))
    raw_ops = data.get("ops")
    if not isinstance(raw_ops, list) or not raw_ops:
        problems.append(_problem(document, "ops", "required: a non-empty list of ops"))
        raise WorkloadError(problems)
    ops = []
    for index, raw in enumerate(raw_ops):
        path = f"ops.{index}"
        if not isinstance(raw, dict):
            problems.append(_problem(document, path, "an op must be a mapping"))
            continue
        for key in sorted(set(raw) - OP_KEYS):
            problems.append(_problem(document, f"{path}.{key}", f"unknown key; allowed: {', '.join(sorted(OP_KEYS))}"))
        for key in ("name", "kind"):
            if not isinstance(raw.get(key), str):
                problems.append(_problem(document, f"{path}.{key}", "required: a string"))
        tensors = {}
        for group in ("inputs", "outputs"):
            tensors[group] = []
            items = raw.get(group, [])
            if not isinstance(items, list):
                problems.append(_problem(document, f"{path}.{group}", "must be a list of {shape, dtype} tensors"))
                continue
            for slot, item in enumerate(items):
                where = f"{path}.{group}.{slot}"
                if not isinstance(item, dict) or not {"shape", "dtype"} <= set(item) or set(item) - TENSOR_KEYS:
                    problems.append(_problem(document, where, "a tensor is {shape: [..], dtype: .., role: ..}"))
                    continue
                if not isinstance(item["shape"], list):
                    problems.append(_problem(document, f"{where}.shape", "must be a list of positive integers"))
                    continue
                tensors[group].append(TensorSpec(shape=tuple(item["shape"]), dtype=str(item["dtype"]),
                                                 role=item.get("role", "activation")))
        attrs = raw.get("attrs", {})
        if not isinstance(attrs, dict):
            problems.append(_problem(document, f"{path}.attrs", "must be a mapping"))
            attrs = {}
        ops.append(Op(name=str(raw.get("name", "")), kind=str(raw.get("kind", "other")), inputs=tensors["inputs"],
                      outputs=tensors["outputs"], attrs=attrs, count=raw.get("count", 1),
                      provenance=str(raw.get("provenance", ""))))
    edges = data.get("edges", [])
    if not isinstance(edges, list):
        problems.append(_problem(document, "edges", "must be a list of [producer, consumer] pairs of op names"))
        edges = []
    for number, edge in enumerate(edges):
        if not isinstance(edge, list) or len(edge) != 2 or not all(isinstance(name, str) for name in edge):
            problems.append(_problem(document, f"edges.{number}", f"an edge is [producer, consumer], two op names; "
                                                                  f"got {edge!r}"))
    if problems:
        raise WorkloadError(problems)
    try:
        return Graph(name=data["name"], ops=ops, edges=[tuple(edge) for edge in edges])
    except WorkloadError as error:  # the IR's own checks, with file lines added
        raise WorkloadError([_locate(document, problem) for problem in error.problems]) from None


def _locate(document: YamlDocument, problem: Problem) -> Problem:
    """Map an IR problem path like ``ops.3(name).inputs.0.shape`` to the file's line."""
    path = problem.field
    if path.startswith("ops.") and "(" in path:
        head, _, rest = path.partition("(")
        path = head + rest.partition(")")[2]
    located = _problem(document, path, problem.message)
    return Problem(file=located.file, line=located.line, field=problem.field, message=problem.message)


def load_graph(name_or_path: str | Path) -> Graph:
    """A workload file (YAML or JSON), or the name of a shipped one (``transformer_block``)."""
    path = Path(name_or_path)
    if not path.is_file():
        shipped = data_directory("workloads") / f"{name_or_path}.yaml"
        if shipped.is_file():
            path = shipped
        else:
            known = sorted(p.stem for p in data_directory("workloads").glob("*.yaml"))
            raise WorkloadError([Problem(file=str(name_or_path), line=None, field="",
                                         message=f"no such file, and not a shipped workload ({', '.join(known)})")])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise WorkloadError([Problem(file=str(path), line=None, field="", message=f"cannot read: {error}")]) from None
    return graph_from_document(parse_yaml(text, str(path)))  # JSON is YAML, so one reader serves both
