"""Workloads: the IR (``ir``), builders of common graphs, and (edge) YAML/JSON files."""

from perfmodel.workload.ir import Graph, Op, TensorSpec

__all__ = ["Graph", "Op", "TensorSpec"]
