"""Charts (edge module): matplotlib is imported only when a chart is drawn.

Plotting functions take ``ax=None``, return the Axes and never call ``show()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

INTENSITY_RANGE_FLOP_PER_BYTE = (1e-2, 1e5)


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "pdf", "svg") and not matplotlib.is_interactive():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_spec_rooflines(records: Sequence[dict], ax=None):
    """Draw the classic roofline (outermost on-device memory, dense peak) of each spec record.

    Each record has ``name``, ``dtype``, ``peak_flops_per_s``, ``bandwidth_bytes_per_s`` and
    ``memory_level`` (as printed by ``perfmodel specs compare --json``).
    """
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5.5), layout="constrained")
    intensity = np.logspace(*np.log10(INTENSITY_RANGE_FLOP_PER_BYTE), 400)
    for record in records:
        attainable = np.minimum(record["peak_flops_per_s"], intensity * record["bandwidth_bytes_per_s"])
        label = f"{record['name']} ({record['dtype']}, {record['memory_level']})"
        line, = ax.loglog(intensity, attainable / 1e12, label=label)
        ridge = record["peak_flops_per_s"] / record["bandwidth_bytes_per_s"]
        ax.plot([ridge], [record["peak_flops_per_s"] / 1e12], "o", color=line.get_color(), markersize=4)
    ax.set_xlabel("arithmetic intensity (FLOP/byte of the outermost on-device memory)")
    ax.set_ylabel("attainable performance (TFLOP/s)")
    ax.set_title("Rooflines of the compared devices (dots: ridge points)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return ax


def save_figure(ax, path: str | Path) -> None:
    """Save the figure of ``ax`` to ``path`` (format from the suffix) through a temporary file."""
    import os
    import tempfile

    path = Path(path)
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in ("png", "svg", "pdf"):
        from perfmodel.errors import PerfmodelError

        raise PerfmodelError(f"chart file {path} must end in .png, .svg or .pdf")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(handle)
    try:
        ax.figure.savefig(temporary, format=suffix, dpi=150)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)
        _pyplot().close(ax.figure)


def save_spec_rooflines(records: Sequence[dict], path: str | Path) -> None:
    save_figure(plot_spec_rooflines(records), path)
