"""perfmodel: an analytical three-bottleneck (compute, memory, scheduling) performance model.

The public API is loaded lazily so that ``import perfmodel`` stays fast and imports neither torch,
matplotlib, scipy nor pydantic.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "load_hardware": "perfmodel.hardware.loader",
    "catalog": "perfmodel.hardware.loader",
    "parse_quantity": "perfmodel.units",
    "format_quantity": "perfmodel.units",
    "get_dtype": "perfmodel.dtypes",
    "Hardware": "perfmodel.hardware.model",
    "PerfmodelError": "perfmodel.errors",
    "SpecError": "perfmodel.errors",
    "UnitError": "perfmodel.errors",
    "evaluate": "perfmodel.roofline.results",
    "Evaluation": "perfmodel.roofline.results",
    "Parameters": "perfmodel.hardware.model",
    "sweep": "perfmodel.roofline.sweep",
    "Graph": "perfmodel.workload.ir",
    "Op": "perfmodel.workload.ir",
    "TensorSpec": "perfmodel.workload.ir",
    "load_graph": "perfmodel.workload.io",
    "save_graph": "perfmodel.workload.io",
    "capture": "perfmodel.workload.capture",
    "llm_predict": "perfmodel.llm.metrics",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
