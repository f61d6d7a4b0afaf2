"""Charts (edge module): matplotlib is imported only when a chart is drawn.

Plotting functions take ``ax=None``, return the Axes and never call ``show()``. The data comes from
the pure functions of :mod:`perfmodel.roofline.charts`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.units import format_quantity
from perfmodel.yaml_source import atomic_output

INTENSITY_RANGE_FLOP_PER_BYTE = (1e-2, 1e5)
TERA = 1e12
BOUND_COLOURS = {"compute": "tab:red", "scheduling": "tab:purple", "measured": "black"}
LEVEL_COLOURS = ("tab:blue", "tab:green", "tab:orange", "tab:cyan", "tab:olive", "tab:brown")
MARKER_AREA = (12, 400)  # points^2 for the smallest and the largest time share


def pyplot():
    import matplotlib

    # Without a display a GUI backend (Tk, Qt...) cannot open a window: draw into files instead. A
    # notebook's backends (inline, widget: "module://..." or nbagg) need no display and must stay, or
    # every later figure of the notebook disappears.
    backend = matplotlib.get_backend().lower()
    if (not os.environ.get("DISPLAY") and not backend.startswith("module://")
            and backend not in ("agg", "pdf", "svg", "cairo", "pgf", "ps", "template", "nbagg", "webagg",
                                "inline", "widget", "ipympl")):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _new_axes(ax, size=(8, 5.5)):
    if ax is not None:
        return ax
    _, ax = pyplot().subplots(figsize=size, layout="constrained")
    return ax


def bound_colour(bound: str, level_names: Sequence[str] = ()) -> str:
    if bound in BOUND_COLOURS:
        return BOUND_COLOURS[bound]
    name = bound.split(":", 1)[-1]
    if name in level_names:
        return LEVEL_COLOURS[list(level_names).index(name) % len(LEVEL_COLOURS)]
    return "tab:gray"


def _marker_sizes(shares) -> np.ndarray:
    shares = np.asarray(shares, dtype=float)
    low, high = MARKER_AREA
    return low + (high - low) * np.sqrt(np.clip(shares, 0, 1))


SIZE_LEGEND_SHARES = (0.01, 0.1, 0.5)
SLOWEST_LABELLED = 3


def _size_legend(ax) -> None:
    """Legend entries for the marker area (an op's share of the total time)."""
    for share in SIZE_LEGEND_SHARES:
        ax.scatter([], [], s=_marker_sizes([share]), color="tab:gray", alpha=0.35, label=f"size: {share:.0%} of time")


def _label_slowest(ax, points, x_of) -> None:
    """Name the ops that take the most time: the points a reader asks about first (an op drawn at
    several memory levels is named once, at its first point)."""
    named: list[str] = []
    for point in sorted(points, key=lambda p: -p.time_share):
        if point.name in named:
            continue
        if len(named) == SLOWEST_LABELLED:
            break
        named.append(point.name)
        x = x_of(point)
        if point.time_share > 0 and 0 < x < math.inf and point.achieved_flops_per_s > 0:
            # Staggered offsets keep neighbouring names (the projections of one layer) apart.
            offset = (5, (4, -12, 16)[(len(named) - 1) % 3])
            ax.annotate(point.name, (x, point.achieved_flops_per_s / TERA), xytext=offset, textcoords="offset points",
                        fontsize=MIN_FONT_PT, alpha=0.85)


def _x_range(data, points) -> tuple[float, float]:
    xs = [p.intensity_flop_per_byte for p in points if 0 < p.intensity_flop_per_byte < math.inf]
    ridges = [roof.ridge_flop_per_byte for roof in data.roofs]
    low = min([*xs, *ridges, 1.0]) / 10
    high = max([*xs, *ridges, 10.0]) * 10
    return low, high


BOUND_MARKERS = {"compute": "^", "scheduling": "s"}
MIN_FONT_PT = 8  # no label, legend entry or annotation smaller (legibility)
# One line style per roof, so that two levels of equal bandwidth (an L2 and an L3 at the same rate) stay visible.
ROOF_STYLES = ("-", "--", ":", "-.")


def _scatter_points(ax, points, level_names, *, by_level=False, measured=False, edge=None):
    """Colour by bound (classic) or by memory level (hierarchical, matching the roofs; the marker
    shape then tells the bound: triangle compute, circle memory, square scheduling). An op that moves
    no bytes at the chart's levels (infinite intensity) is drawn at ``edge`` as a right-pointing
    triangle."""
    seen = set()
    for point in points:
        if point.intensity_flop_per_byte == math.inf:
            label = None if "edge" in seen else "no traffic at the roof's level (drawn at the edge)"
            seen.add("edge")
            ax.scatter([edge], [point.achieved_flops_per_s / TERA], s=_marker_sizes([point.time_share]), marker=">",
                       label=label, alpha=0.75, color=bound_colour(point.bound, level_names))
            continue
        if by_level and not measured:
            colour = LEVEL_COLOURS[level_names.index(point.level) % len(LEVEL_COLOURS)]
            key = f"at {point.level}"
            marker = BOUND_MARKERS.get(point.bound, "o")
        else:
            colour = bound_colour(point.bound, level_names)
            key = point.bound
            marker = "D" if measured else BOUND_MARKERS.get(point.bound, "o")
        label = None if key in seen else ("measured" if measured else key)
        seen.add(key)
        ax.scatter([point.intensity_flop_per_byte], [point.achieved_flops_per_s / TERA],
                   s=_marker_sizes([point.time_share]), marker=marker, label=label, alpha=0.75,
                   facecolors="none" if measured else colour, edgecolors=colour, linewidths=1.2)


def plot_roofline(data, ax=None, *, measured=(), title: str | None = None):
    """Classic or hierarchical roofline: one bandwidth roof per level in ``data.roofs``, the compute
    roof, and the op points (size = time share, colour = bound); measured points as open squares."""
    ax = _new_axes(ax)
    points = [*data.points, *measured]
    low, high = _x_range(data, points)
    intensity = np.logspace(np.log10(low), np.log10(high), 400)
    level_names = [roof.label for roof in data.roofs]
    for index, roof in enumerate(data.roofs):
        attainable = np.minimum(data.peak_flops_per_s, intensity * roof.bandwidth_bytes_per_s)
        colour = LEVEL_COLOURS[index % len(LEVEL_COLOURS)]
        ax.loglog(intensity, attainable / TERA, color=colour, linewidth=2.5 if index == 0 else 2,
                  linestyle=ROOF_STYLES[index % len(ROOF_STYLES)],
                  label=f"{roof.label} roof ({format_quantity(roof.bandwidth_bytes_per_s, 'bytes_per_s')}, "
                        f"ridge {roof.ridge_flop_per_byte:.3g} FLOP/B)")
    ax.axhline(data.peak_flops_per_s / TERA, color="tab:red", linestyle=":", linewidth=1)
    peak_label = f"{data.dtype} peak {format_quantity(data.peak_flops_per_s, 'flops_per_s')}"
    ax.text(low * 1.3, data.peak_flops_per_s / TERA * 0.6, peak_label, fontsize="small", color="tab:red")
    _scatter_points(ax, data.points, level_names, by_level=len(data.roofs) > 1, edge=high / 2)
    _label_slowest(ax, data.points, lambda p: high / 2 if p.intensity_flop_per_byte == math.inf
                   else p.intensity_flop_per_byte)
    _size_legend(ax)
    if measured:
        _scatter_points(ax, measured, level_names, measured=True)
    if len(data.roofs) > 1:  # the marker key, in the legend: the shape tells the bound, the colour the level
        bounds = {point.bound if point.bound in BOUND_MARKERS else "memory" for point in data.points}
        for bound, marker in (("compute", "^"), ("memory", "o"), ("scheduling", "s")):
            if bound in bounds:
                ax.scatter([], [], marker=marker, facecolors="none", edgecolors="black", label=f"marker: {bound}-bound")
    ax.set_xlim(low, high)
    ax.set_xlabel("arithmetic intensity (FLOP/byte at the level)")
    ax.set_ylabel("performance (TFLOP/s)")
    ax.set_title(title or f"{data.hardware}: {'hierarchical ' if len(data.roofs) > 1 else ''}roofline ({data.dtype})")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=MIN_FONT_PT, loc="best", markerscale=0.6)
    return ax


def plot_scheduling_roofline(data, ax=None, *, title: str | None = None):
    """Achieved FLOP/s against granularity (FLOPs per launch) under the compute roof and the
    scheduling ceiling ``granularity / launch_s`` (the ridge is ``peak x launch_s`` FLOPs per launch), and
    the device-side ceiling of the kernels' fixed time where the spec gives one."""
    ax = _new_axes(ax)
    points = [p for p in data.points if p.granularity_flops_per_launch > 0]
    if data.launch_s <= 0:
        raise PerfmodelError(f"{data.hardware} charges no launch cost in this mode: no scheduling ceiling to draw")
    ridge = data.scheduling_ridge_flops_per_launch
    xs = [p.granularity_flops_per_launch for p in points] + [ridge]
    low, high = min(xs) / 10, max(xs) * 10
    granularity = np.logspace(np.log10(low), np.log10(high), 400)
    ax.loglog(granularity, np.minimum(data.peak_flops_per_s, granularity / data.launch_s) / TERA, color="tab:purple",
              linewidth=2, label=f"scheduling ceiling ({data.launch_s * 1e6:.3g} us per launch; ridge {ridge:.3g} FLOP)")
    if data.kernel_fixed_s > 0:
        ax.loglog(granularity, data.kernel_ceiling_flops_per_s(granularity) / TERA, color="tab:olive",
                  linestyle="--", linewidth=1.5,
                  label=f"kernel fixed time ({format_quantity(data.kernel_fixed_s, 'seconds')} start-up + tail)")
    ax.axhline(data.peak_flops_per_s / TERA, color="tab:red", linestyle=":", linewidth=1,
               label=f"{data.dtype} peak {format_quantity(data.peak_flops_per_s, 'flops_per_s')}")
    seen = set()
    for point in points:
        colour = bound_colour(point.bound, [roof.label for roof in data.roofs])
        label = point.bound if point.bound not in seen else None
        seen.add(point.bound)
        ax.scatter([point.granularity_flops_per_launch], [point.achieved_flops_per_s / TERA], color=colour, alpha=0.75,
                   s=_marker_sizes([point.time_share]), label=label, marker="*" if point.kind == "program" else "o")
    _label_slowest(ax, points, lambda p: p.granularity_flops_per_launch)
    _size_legend(ax)
    ax.set_xlim(low, high)
    ax.set_xlabel("granularity (FLOPs per launch)")
    ax.set_ylabel("performance (TFLOP/s)")
    ax.set_title(title or f"{data.hardware}: scheduling-aware roofline")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=MIN_FONT_PT, loc="lower right", markerscale=0.6)
    return ax


def plot_side_by_side(datas, kind: str = "classic", measured=()):
    """One panel per system (the same workload on each); returns the array of Axes."""
    plt = pyplot()
    columns = min(len(datas), 3)
    rows = -(-len(datas) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.2 * rows), layout="constrained", squeeze=False)
    for ax, data in zip(axes.flat, datas, strict=False):
        if kind == "scheduling":
            plot_scheduling_roofline(data, ax)
        else:
            plot_roofline(data, ax, measured=measured)
    for ax in list(axes.flat)[len(datas):]:
        ax.set_visible(False)
    return axes


# One marker and colour per lab, the same in every panel of plot_labs_rooflines.
LAB_MARKERS = ("o", "s", "^", "D", "v", "P", "*")
LAB_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink")


def plot_labs_rooflines(datas):
    """One panel per system: its roof (outermost on-device memory), its compute peak, and one point per workload
    (``perfmodel.lab_workloads.labs_roofline``: each lab's workload, predicted), the same marker for a workload in
    every panel; one legend for the workloads under the panels. Returns the array of Axes."""
    plt = pyplot()
    columns = min(len(datas), 3)
    rows = -(-len(datas) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5.4 * columns, 4.3 * rows + 1.2), layout="constrained",
                                squeeze=False)
    labels = list(dict.fromkeys(point.name for data in datas for point in data.points))
    if len(labels) > len(LAB_MARKERS):
        raise PerfmodelError(f"plot_labs_rooflines draws at most {len(LAB_MARKERS)} workloads, got {len(labels)}")
    for ax, data in zip(axes.flat, datas, strict=False):
        low, high = _x_range(data, data.points)
        intensity = np.logspace(np.log10(low), np.log10(high), 400)
        roof = data.roofs[0]
        ax.loglog(intensity, np.minimum(data.peak_flops_per_s, intensity * roof.bandwidth_bytes_per_s) / TERA,
                  color="black", linewidth=2.5,
                  label=f"{roof.label} roof {format_quantity(roof.bandwidth_bytes_per_s, 'bytes_per_s')}, "
                        f"{data.dtype} peak {format_quantity(data.peak_flops_per_s, 'flops_per_s')}")
        for point in data.points:
            index = labels.index(point.name)
            at_edge = point.intensity_flop_per_byte == math.inf  # no traffic at the roof's level
            # later workloads drawn smaller, on top: two that land on the same spot both stay visible
            area = (190 - 14 * index) * (1.8 if LAB_MARKERS[index] == "*" else 1.0)
            ax.scatter([high / 2 if at_edge else point.intensity_flop_per_byte], [point.achieved_flops_per_s / TERA],
                       s=area, marker=">" if at_edge else LAB_MARKERS[index], color=LAB_COLOURS[index],
                       edgecolors="white", linewidths=0.8, zorder=3 + index)
        achieved = [point.achieved_flops_per_s / TERA for point in data.points if point.achieved_flops_per_s > 0]
        ax.set_ylim(min([*achieved, data.peak_flops_per_s / TERA]) / 5, data.peak_flops_per_s / TERA * 3)
        ax.set_xlim(low, high)
        ax.set_title(f"{data.hardware} ({data.dtype})", fontsize=10)
        ax.set_xlabel(f"FLOP / byte at {roof.label}", fontsize=9)
        ax.set_ylabel("predicted TFLOP/s", fontsize=9)
        ax.tick_params(labelsize=MIN_FONT_PT)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=MIN_FONT_PT, loc="lower right")
    for ax in list(axes.flat)[len(datas):]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], marker=LAB_MARKERS[index], color=LAB_COLOURS[index], linestyle="none", markersize=9,
                          label=label) for index, label in enumerate(labels)]
    figure.legend(handles=handles, loc="outside lower center", ncols=min(len(labels), 3), fontsize=9,
                  title="each lab's workload, predicted by perfmodel on each system (whole workload: its FLOPs over "
                        "its bytes at the roof's memory, over its predicted time)", title_fontsize=9)
    return axes


def plot_time_breakdown(evaluations, ax=None, *, by: str = "bound", total_intervals: Sequence | None = None):
    """Stacked bars: each system's predicted time split by bound (or by module), in milliseconds; with
    ``total_intervals`` (one ``Interval`` of the total a system, or None), error bars on the totals."""
    ax = _new_axes(ax, size=(8, 4.5))
    groups = [getattr(evaluation, f"time_by_{by}") for evaluation in evaluations]
    keys = sorted({key for group in groups for key in group}, key=lambda key: -sum(g.get(key, 0) for g in groups))
    labels = [evaluation.hardware for evaluation in evaluations]
    bottom = np.zeros(len(evaluations))
    cmap = pyplot().get_cmap("tab20")
    for index, key in enumerate(keys):
        values = np.array([group.get(key, 0.0) for group in groups]) * 1e3
        colour = BOUND_COLOURS.get(key, cmap(index % 20)) if by == "bound" else cmap(index % 20)
        ax.bar(labels, values, bottom=bottom, label=key, color=colour)
        bottom += values
    if total_intervals is not None:
        _interval_bars(ax, range(len(evaluations)), total_intervals, scale=1e3, label="total")
    ax.set_yscale("log" if bottom.max() / max(bottom.min(), 1e-12) > 100 else "linear")
    ax.set_ylabel("predicted time (ms)")
    ax.set_title(f"{evaluations[0].workload}: time by {by}")
    ax.legend(fontsize=MIN_FONT_PT, ncols=2)
    ax.tick_params(axis="x", labelrotation=20)
    return ax


DODGE = 1.06  # x factor between sized deployments that share a chip count (log axis)


def plot_pareto(options_by_system: dict, ax=None, *, chosen: dict | None = None, chosen_intervals: dict | None = None,
                tpot_targets_s: Sequence[tuple[str, float]] = (), title: str | None = None):
    """Sizing options: chips against TPOT per system (``llm.sizing.SizingOption``s: the steady-state
    screen), Pareto-optimal options joined by a line. ``chosen``: system -> ``(chips, TPOT in s)`` of the
    deployment it was sized to, a star each; ``chosen_intervals``: system -> the ``Interval`` of that TPOT
    (or None), its error bar; ``tpot_targets_s``: ``(label, seconds)`` of TPOT targets, dashed lines.
    Deployments of several systems on the same number of chips are drawn a few percent apart
    (``DODGE``) so that their error bars do not hide each other."""
    from perfmodel.llm.sizing import pareto

    ax = _new_axes(ax)
    chosen, chosen_intervals = chosen or {}, chosen_intervals or {}
    sharing: dict[int, list[str]] = {}
    for name, (chips, _) in chosen.items():
        sharing.setdefault(chips, []).append(name)
    for index, (name, options) in enumerate(options_by_system.items()):
        colour = f"C{index % 10}"  # one colour a system for its options, front, deployment and error bar
        if options:
            ax.scatter([o.chips for o in options], [o.tpot_s * 1e3 for o in options], alpha=0.35, color=colour)
            front = sorted(pareto(options), key=lambda o: o.chips)
            if front:
                ax.plot([o.chips for o in front], [o.tpot_s * 1e3 for o in front], marker="o", color=colour,
                        label=f"{name} (Pareto front)")
        if name in chosen:
            chips, tpot_s = chosen[name]
            peers = sharing[chips]
            chips = chips * DODGE ** (peers.index(name) - (len(peers) - 1) / 2)
            ax.plot([chips], [tpot_s * 1e3], marker="*", markersize=14, color=colour, markeredgecolor="black",
                    linestyle="none", label=f"{name}: sized deployment")
            if chosen_intervals.get(name) is not None:
                _interval_bars(ax, [chips], [chosen_intervals[name]], scale=1e3, colour=colour, label=name)
    for index, (label, seconds) in enumerate(tpot_targets_s):
        ax.axhline(seconds * 1e3, color="gray", linestyle=(0, (4, 2 + 2 * index)), linewidth=1, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chips")
    ax.set_ylabel("TPOT (ms)")
    ax.set_title(title or "Sizing options: chips vs time per output token", fontsize="medium")
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=MIN_FONT_PT)
    return ax


def plot_search(result, ax=None, *, front_intervals: Sequence | None = None):
    """``serving.search``: every configuration (tokens/s per user against tokens/s per chip; aggregated and
    disaggregated marked apart), the Pareto front joined by a line, the SLO region shaded; with
    ``front_intervals`` (one ``(per user, per chip)`` pair of ``Interval`` a front point), their error bars."""
    ax = _new_axes(ax)
    configurations = result.configurations
    for disaggregated, marker, name in ((False, "o", "aggregated"), (True, "^", "disaggregated")):
        chosen = [c for c in configurations if c.disaggregated == disaggregated]
        if chosen:
            ax.scatter([c.tokens_per_s_per_user for c in chosen], [c.tokens_per_s_per_chip for c in chosen], s=6,
                       alpha=0.25, marker=marker, label=f"{name} ({len(chosen)})")
    front = list(result.front)
    ax.plot([c.tokens_per_s_per_user for c in front], [c.tokens_per_s_per_chip for c in front], "k.-",
            label=f"Pareto front ({len(front)})")
    if front_intervals is not None:
        users, chips = [pair[0] for pair in front_intervals], [pair[1] for pair in front_intervals]
        _interval_bars(ax, [c.tokens_per_s_per_user for c in front], chips, colour="dimgray", label="per chip")
        _interval_bars(ax, [c.tokens_per_s_per_chip for c in front], users, horizontal=True, colour="darkgray",
                       label="per user")
    inside = [c for c in front if c.meets_slo]
    if inside:
        ax.scatter([c.tokens_per_s_per_user for c in inside], [c.tokens_per_s_per_chip for c in inside], s=30,
                   facecolors="none", edgecolors="tab:green", label="front in the SLO region")
    if result.tpot_slo_s is not None:
        ax.axvspan(1 / result.tpot_slo_s, ax.get_xlim()[1], color="tab:green", alpha=0.08,
                   label=f"TPOT <= {format_quantity(result.tpot_slo_s, 'seconds')}")
    ax.set_xscale("log")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("tokens/s per chip")
    ax.set_title(f"{result.model} on {result.chips} chips: prompt {result.prompt_tokens}, output "
                 f"{result.output_tokens}", fontsize="medium")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="x-small")
    return ax


def plot_spec_rooflines(records: Sequence[dict], ax=None):
    """The classic roofline of each spec record (``perfmodel specs compare --json`` rows)."""
    ax = _new_axes(ax)
    intensity = np.logspace(*np.log10(INTENSITY_RANGE_FLOP_PER_BYTE), 400)
    for record in records:
        attainable = np.minimum(record["peak_flops_per_s"], intensity * record["bandwidth_bytes_per_s"])
        # A roofline drawn from an estimated peak or bandwidth is dashed and says so (``estimated``: the
        # figures of the record whose source is an estimate, 'perfmodel specs compare').
        guessed = [key for key in record.get("estimated", ()) if key in ("peak", "bandwidth")]
        label = f"{record['name']} ({record['dtype']}, {record['memory_level']})"
        label += f" [estimated {' and '.join(guessed)}]" if guessed else ""
        line, = ax.loglog(intensity, attainable / TERA, label=label, linestyle="--" if guessed else "-")
        ridge = record["peak_flops_per_s"] / record["bandwidth_bytes_per_s"]
        ax.plot([ridge], [record["peak_flops_per_s"] / TERA], "o", color=line.get_color(), markersize=4)
    ax.set_xlabel("arithmetic intensity (FLOP/byte of the outermost on-device memory)")
    ax.set_ylabel("attainable performance (TFLOP/s)")
    ax.set_title("Rooflines of the compared devices (dots: ridge points)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small", loc="lower right")
    return ax


def save_figure(figure_or_ax, path: str | Path) -> None:
    """Save a figure (or the figure of an Axes or array of Axes) through a temporary file and a rename."""
    path = Path(path)
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in ("png", "svg", "pdf"):
        raise PerfmodelError(f"chart file {path} must end in .png, .svg or .pdf")
    figure = figure_or_ax
    if isinstance(figure, np.ndarray):
        figure = figure.flat[0]
    figure = getattr(figure, "figure", figure)
    try:
        with atomic_output(path, path.suffix) as temporary:
            figure.savefig(temporary, format=suffix, dpi=150)
    finally:
        pyplot().close(figure)


def save_spec_rooflines(records: Sequence[dict], path: str | Path) -> None:
    save_figure(plot_spec_rooflines(records), path)


def interval_label(found: Sequence) -> str | None:
    """The legend entry of a set of prediction intervals (``perfmodel.uncertainty.Interval``): their
    confidence; None when none of them has evidence (nothing is drawn)."""
    known = [item for item in found if item is not None and item.low is not None and item.high is not None]
    return f"{round(100 * known[0].confidence, 1):g}% interval" if known else None


def _interval_bars(ax, positions, found: Sequence, *, scale: float = 1.0, horizontal: bool = False,
                   colour: str = "black", label: str | None = None):
    """Error bars of the intervals ``found`` (``Interval``, or None) at ``positions`` (x for vertical
    bars, y for horizontal ones), values times ``scale``; the ones without evidence are left out. Returns
    the ErrorbarContainer, or None when no interval has evidence."""
    legend = interval_label(found)
    kept = [(position, item) for position, item in zip(positions, found, strict=True)
            if item is not None and item.low is not None and item.high is not None]
    if legend is None or not kept:
        return None
    where = [position for position, _ in kept]
    # Drawn about the interval's middle, not the prediction: a biased band's interval can lie wholly on
    # one side of the value (the datasheet's times are all optimistic), which an error bar about the
    # value cannot draw (negative lengths).
    values = np.array([(item.low + item.high) / 2 for _, item in kept]) * scale
    half = np.array([(item.high - item.low) / 2 for _, item in kept]) * scale
    spread = np.array([half, half])
    if horizontal:
        return ax.errorbar(values, where, xerr=spread, fmt="none", ecolor=colour, capsize=4, elinewidth=1.4,
                           label=f"{label}: {legend}" if label else legend)
    return ax.errorbar(where, values, yerr=spread, fmt="none", ecolor=colour, capsize=4, elinewidth=1.4,
                       label=f"{label}: {legend}" if label else legend)


def plot_training_breakdown(results: Sequence, ax=None, *, step_intervals: Sequence | None = None):
    """Stacked horizontal bars: each training layout's step time split by phase (forward, backward,
    recompute, pipeline bubble, exposed communication, optimizer...), in seconds; with
    ``step_intervals`` (one ``Interval`` of the step time a layout), its interval as an error bar."""
    ax = _new_axes(ax, size=(9, 1.2 + 0.45 * len(results)))
    phases = [phase for phase in results[0].time_by_phase if any(r.time_by_phase[phase] > 0 for r in results)]
    labels = [f"{r.layout.label()}, recompute {r.setup.recompute}" for r in results]
    left = np.zeros(len(results))
    cmap = pyplot().get_cmap("tab10")
    for index, phase in enumerate(phases):
        values = np.array([r.time_by_phase[phase] for r in results])
        ax.barh(labels, values, left=left, label=phase.replace("_", " "), color=cmap(index % 10))
        left += values
    if step_intervals is not None:
        _interval_bars(ax, range(len(results)), step_intervals, horizontal=True, label="step time")
    ax.invert_yaxis()
    ax.set_xlabel("predicted step time (s)")
    first = results[0]
    ax.set_title(f"{first.model} on {first.chips} x {first.hardware}: step time by phase ({first.parameters})",
                 fontsize="medium")
    ax.legend(fontsize=MIN_FONT_PT, ncols=4, loc="lower right")
    return ax


def _ecdf(ax, values, label: str, colour: str) -> None:
    """An empirical CDF of ``values`` in milliseconds (NaNs dropped), p50 and p99 marked."""
    data = np.sort(np.asarray(values, dtype=float))
    data = data[np.isfinite(data)] * 1e3
    if not data.size:
        return
    shares = np.arange(1, data.size + 1) / data.size
    p50, p99 = np.percentile(data, [50, 99])
    ax.step(data, shares, where="post", color=colour, linewidth=1.6,
            label=f"{label} (p50 {format_quantity(p50 / 1e3, 'seconds')}, p99 {format_quantity(p99 / 1e3, 'seconds')})")
    ax.plot([p50, p99], [0.5, 0.99], "o", color=colour, markersize=4)


def plot_serving_latency(result, ax=None, *, p50_intervals: dict | None = None):
    """Distributions (empirical CDFs) of one serving run's TTFT, TPOT and inter-token latency
    (``perfmodel.serving.ServingResult``), with p50 and p99 marked and the SLOs drawn where given; with
    ``p50_intervals`` (``ttft_p50_s``/``tpot_p50_s`` -> ``Interval``), the p50s' intervals as
    horizontal error bars at the median."""
    ax = _new_axes(ax)
    _ecdf(ax, result.ttft_s, "TTFT", "tab:blue")
    _ecdf(ax, result.tpot_s, "TPOT (per request)", "tab:green")
    for name, label, colour in (("ttft_p50_s", "TTFT p50", "tab:blue"), ("tpot_p50_s", "TPOT p50", "tab:green")):
        if p50_intervals is not None and name in p50_intervals:
            _interval_bars(ax, [0.5], [p50_intervals[name]], scale=1e3, horizontal=True, colour=colour, label=label)
    _ecdf(ax, result.itl_samples_s, "inter-token latency", "tab:orange")
    for slo, name, colour in ((result.ttft_slo_s, "TTFT SLO", "tab:blue"), (result.tpot_slo_s, "TPOT SLO", "tab:green")):
        if slo is not None:
            ax.axvline(slo * 1e3, color=colour, linestyle="--", linewidth=1,
                       label=f"{name} {format_quantity(slo, 'seconds')}")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("share of requests (tokens, for inter-token latency) at or below")
    ax.set_title(f"{result.model} on {result.parallelism.chips} x {result.hardware}\n{result.workload}",
                 fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=MIN_FONT_PT, loc="lower right")
    return ax


def plot_serving_rates(rates: Sequence[float], results: Sequence, ax=None, *, knee: float | None = None,
                       ttft_slo_s: float | None = None, throughput_intervals: Sequence | None = None):
    """Throughput (output tokens/s, left axis) and p99 TTFT and TPOT (right axis, log) against the
    arrival rate, one point per serving run, the knee marked; with ``throughput_intervals`` (one
    ``Interval`` a run), the throughput's intervals as error bars. Returns the throughput Axes."""
    ax = _new_axes(ax)
    rates = [float(rate) for rate in rates]
    ax.plot(rates, [r.tokens_per_s for r in results], "o-", color="tab:blue", label="throughput (output tokens/s)")
    if throughput_intervals is not None:
        _interval_bars(ax, rates, throughput_intervals, colour="tab:blue", label="throughput")
    ax.set_xscale("log")
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("throughput (output tokens/s)", color="tab:blue")
    ax.set_ylim(bottom=0)
    latency = ax.twinx()
    latency.plot(rates, [r.ttft.p99 * 1e3 for r in results], "s--", color="tab:red", label="p99 TTFT")
    latency.plot(rates, [r.tpot.p99 * 1e3 for r in results], "^--", color="tab:green", label="p99 TPOT")
    if ttft_slo_s is not None:
        latency.axhline(ttft_slo_s * 1e3, color="tab:red", linestyle=":", linewidth=1,
                        label=f"TTFT SLO {format_quantity(ttft_slo_s, 'seconds')}")
    latency.set_yscale("log")
    latency.set_ylabel("p99 latency (ms)", color="tab:red")
    if knee is not None:
        ax.axvline(knee, color="black", linestyle="-.", linewidth=1.2, label=f"knee: {knee:g}/s")
    lines = ax.get_legend_handles_labels()
    more = latency.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=MIN_FONT_PT, loc="upper left")
    first = results[0]
    ax.set_title(f"{first.model} on {first.parallelism.chips} x {first.hardware}: throughput and p99 latency "
                 "against the rate", fontsize="medium")
    ax.grid(True, which="major", alpha=0.3)
    return ax
