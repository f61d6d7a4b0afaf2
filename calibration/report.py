"""The calibration report: fitted vs datasheet, predicted vs measured, held-out error, residual chart,
and the fitted spec (a YAML that ``extends`` the datasheet spec)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path

import numpy as np
import yaml

from calibration.fit import FitResult
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.execution_models import execution_model
from perfmodel.hardware.model import FIT_SECTIONS, Hardware, Parameters
from perfmodel.units import format_quantity

DIGITS = 12  # enough that the written spec predicts what the report printed

def spread_median(records) -> float:
    """Median relative spread (slowest minus fastest round, over the fastest) of the measurements."""
    return float(statistics.median(record.spread_s / record.duration_s for record in records))


def to_dict(result: FitResult, records) -> dict:
    return {
        "params": {name: {"value": value, "stderr": error, "datasheet": result.datasheet.get(name)}
                   for name, (value, error) in result.params.items()},
        "n_measurements": len(records),
        "train_median_abs_error": result.median_abs_error,
        "heldout_median_abs_error": result.heldout_median_abs_error,
        "heldout_by_class": result.heldout_by_class,
        "kfold_median_abs_error": result.kfold_median_abs_error,
        "heldout_other_seeds": [{"seed": seed, "median_abs_error": median, "worst_class": worst, "worst_error": error}
                                for seed, median, worst, error in result.heldout_other_seeds],
        "parameters_at_bounds": list(result.at_bounds),
        "parameters_at_ceiling": list(result.at_ceiling),
        "parameters_at_floor": list(result.at_floor),
        "parameters_unidentified": list(result.unidentified),
        "flags": list(result.flags),
        "success": result.success,
        "message": result.message,
        "measurement_spread_median": spread_median(records),
        "rows": [{"name": name, "class": op_class, "measured_s": float(measured), "predicted_s": float(predicted),
                  "error": float(predicted / measured - 1)}
                 for name, op_class, measured, predicted in zip(result.names, result.classes, result.measured_s,
                                                                result.predicted_s, strict=True)],
    }


def _value_text(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    if name.endswith("_s") or name.startswith(("latency:", "memory_latency:", "collective_latency:")):
        return format_quantity(value, "seconds")
    return f"{value:.3g}"


def text_report(result: FitResult, records, spec: Hardware) -> str:
    from perfmodel.tables import format_table

    lines = [f"calibration of {spec.name} on {len(records)} measurements "
             f"({records[0].device}; {records[0].tool_version})", ""]
    lines.append(format_table(["parameter", "datasheet", "fitted", "std. error", ""],
                              [[name, _value_text(name, result.datasheet.get(name)), _value_text(name, value),
                                _value_text(name, error),
                                "unidentified: no measurement binds it (not written)" if name in result.unidentified
                                else "at a bound" if name in result.at_bounds
                                else "at its datasheet ceiling (written as 1)" if name in result.at_ceiling
                                else "at its floor: no fixed cost (written as 0)" if name in result.at_floor else ""]
                               for name, (value, error) in result.params.items()]))
    lines.append(result.message)
    lines.extend(f"warning: {flag}" for flag in result.flags)
    lines.append("")
    rows = [[name, op_class, format_quantity(measured, "seconds"), format_quantity(predicted, "seconds"),
             f"{100 * (predicted / measured - 1):+.0f}%"]
            for name, op_class, measured, predicted in zip(result.names, result.classes, result.measured_s,
                                                           result.predicted_s, strict=True)]
    lines.append(format_table(["measurement", "class", "measured", "fitted model", "error"], rows))
    lines.append("")
    lines.append(f"fit (all data): median |error| {100 * result.median_abs_error:.1f}%")
    if result.heldout_median_abs_error is not None:
        lines.append(f"held out (fit on a random half per class, predict the other half): median |error| "
                     f"{100 * result.heldout_median_abs_error:.1f}%")
        lines.append("  by class: " + ", ".join(f"{name} {100 * value:.0f}%"
                                                for name, value in result.heldout_by_class.items()))
    for seed, median, worst, error in result.heldout_other_seeds:
        lines.append(f"  another random half (seed {seed}): median |error| {100 * median:.1f}%, worst class {worst} "
                     f"{100 * error:.0f}%")
    if result.kfold_median_abs_error is not None:
        lines.append(f"5-fold held out: median |error| {100 * result.kfold_median_abs_error:.1f}%")
    lines.append(f"measurement spread (slowest vs fastest round, median over cases): {100 * spread_median(records):.1f}%")
    return "\n".join(lines)


def save_residual_chart(result: FitResult, path: str | Path) -> None:
    from perfmodel import plotting

    plt = plotting.pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5), layout="constrained")
    classes = sorted(set(result.classes))
    cmap = plt.get_cmap("tab10")
    for index, name in enumerate(classes):
        mask = np.asarray(result.classes) == name
        left.loglog(result.measured_s[mask], result.predicted_s[mask], "o", color=cmap(index % 10), label=name,
                    alpha=0.8)
        right.semilogx(result.measured_s[mask], 100 * result.errors[mask], "o", color=cmap(index % 10), alpha=0.8)
    low, high = result.measured_s.min() / 2, result.measured_s.max() * 2
    left.plot([low, high], [low, high], color="black", linewidth=1)
    left.set_xlabel("measured time (s)")
    left.set_ylabel("fitted model (s)")
    left.set_title("predicted vs measured")
    left.legend(fontsize="x-small")
    right.axhline(0, color="black", linewidth=1)
    right.set_xlabel("measured time (s)")
    right.set_ylabel("error (%)")
    right.set_title("residuals of the fit")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    plotting.save_figure(figure, path)


def fitted_spec_yaml(result: FitResult, spec: Hardware, base: str, measurements: Path, output: Path,
                     records, *, name: str | None = None, kind: str = "calibrated",
                     provenance: dict | None = None, description: str | None = None,
                     overrides: dict | None = None) -> str:
    """A spec that extends ``base`` (a catalog name, or a file in the output's directory).

    ``provenance`` replaces the ``calibration`` source entry (kind and note) and ``description`` the
    spec's description, for parameters that were not fitted to ``spec`` itself (a sibling's estimate).
    ``overrides``: top-level sections merged over the base's (``links``: a datasheet figure the fit
    replaced, with ``field_sources`` naming the calibration)."""
    from perfmodel.hardware.loader import catalog_index

    if base not in catalog_index():
        base_path = Path(base).resolve()
        if base_path.parent != output.resolve().parent:
            raise PerfmodelError(f"the fitted spec must extend {base} by catalog name or sit beside it: write it into "
                                 f"{base_path.parent} or use a catalog spec")
        base = base_path.name
    parameters = result.parameters(name or f"{spec.name}-fitted", kind)
    url = measurements.resolve().as_uri()
    repository = Path(__file__).resolve().parent.parent
    try:
        url = "repo:" + measurements.resolve().relative_to(repository).as_posix()
    except ValueError:
        pass
    data = {
        "schema_version": 1,
        "name": parameters.name,
        "extends": base,
        "description": description or f"{spec.description} ({kind}: {len(records)} measurements)",
        "sources": {"calibration": {"url": url, **(provenance or {
            "kind": "measured",
            "note": (f"fitted by perfmodel on {len(records)} measurements ({records[0].tool_version}); "
                     f"held-out median |error| {100 * (result.heldout_median_abs_error or 0):.1f}%"
                     + (f"; not identified by these data, so left at the datasheet: {', '.join(result.unidentified)}"
                        if result.unidentified else "")
                     + (f"; at a bound of the fit, so not written: {', '.join(result.at_bounds)}"
                        if result.at_bounds else ""))})}},
    }
    for key, value in (overrides or {}).items():  # a mapping merges into the section written above
        data[key] = {**data[key], **value} if isinstance(data.get(key), dict) and isinstance(value, dict) else value
    identified = result.identified()
    if "kernel_launch_s" in identified:
        mode = spec.scheduling.default_mode
        execution = spec.scheduling.modes[mode]
        # The field whose cost the fit scaled (calibration.fit.components asks the same registry).
        launch_field = execution_model(mode).launch_field(execution).removesuffix("_s")
        data["scheduling"] = {"modes": {mode: {launch_field: format_quantity(identified["kernel_launch_s"], "seconds",
                                                                             digits=DIGITS),
                                               "source": "calibration"}}}

    def numbers(table):
        return {key: float(f"{value:.{DIGITS}g}") for key, value in table.items()}

    def seconds(table):
        return {key: format_quantity(value, "seconds", digits=DIGITS) for key, value in table.items()}

    efficiency = {"name": parameters.name, "kind": kind,
                  "compute": numbers(parameters.compute_efficiency), "memory": numbers(parameters.memory_efficiency),
                  "compute_latency": seconds(parameters.compute_latency_s),
                  "memory_latency": seconds(parameters.memory_latency_s), "link": numbers(parameters.link_efficiency),
                  "collective_latency": seconds(parameters.collective_latency_s), "source": "calibration"}
    data["efficiency"] = {key: value for key, value in efficiency.items() if value != {}}
    header = (f"# Written by perfmodel ({kind} parameters: 'perfmodel calibrate' or 'python -m calibration.achievable').\n"
              "# Efficiencies multiply the datasheet peaks and bandwidths; latencies add per kernel or collective.\n")
    text = header + yaml.safe_dump(data, sort_keys=False, width=120)
    # A sibling's estimate carries no covariance: the sibling's fit error does not describe how far the
    # estimate is from this device.
    fit_block = written_covariance(result, parameters) if kind != "estimated" else None
    if fit_block is None:
        return text
    names, covariance = fit_block
    # Appended under ``efficiency`` (the last section), so the values above are byte for byte what they
    # were without it: the names one a line, the matrix one row a line.
    lines = ["fit:", f"  measurements: {len(records)}", "  parameters:"]
    lines += [f"  - {yaml.safe_dump(name, default_style=None).splitlines()[0]}" for name in names]
    lines.append("  relative_covariance:")
    lines += ["  - " + yaml.safe_dump([float(f"{value:.{COVARIANCE_DIGITS}g}") for value in row],
                                      default_flow_style=True, width=10**6).strip() for row in covariance]
    return text + "".join(f"  {line}\n" for line in lines)


COVARIANCE_DIGITS = 4
_STEP = 1e-3  # the log step of the written values' derivative (they are log-linear in the fitted ones)


def _written_logs(parameters: Parameters) -> dict[str, float]:
    """Each written value of ``parameters`` as ``section:key`` (``FIT_SECTIONS``) -> its logarithm."""
    return {f"{section}:{key}": math.log(value) for section, table in FIT_SECTIONS.items()
            for key, value in getattr(parameters, table).items() if value > 0}


def written_covariance(result: FitResult, parameters: Parameters) -> tuple[tuple[str, ...], np.ndarray] | None:
    """The covariance of the relative changes of the values written from ``result`` (``parameters``, from
    ``FitResult.parameters``), from the fit's posterior one (``FitResult.posterior_relative_covariance``):
    each written value is a fitted one, a copy of one (a class written for each of its kinds) or a
    geometric mean of several (a kind-level entry), so its logarithm is linear in the fitted logarithms,
    ``w = A f``; a relative change is a log change to first order, so the written covariance is
    ``A C A^T`` (exact for copies, first order for means). ``A`` is taken by a step of each fitted
    parameter through ``FitResult.parameters`` itself, so it follows that function's rules exactly.
    None: no posterior covariance, or no fitted parameter with a finite variance is written."""
    identified = result.identified()
    names = [name for name in result.covariance_names if name in identified]
    index = {name: position for position, name in enumerate(result.covariance_names)}
    if result.posterior_relative_covariance is None:  # calibration.fit.posterior_covariance: why not the other
        return None
    covariance = np.asarray(result.posterior_relative_covariance, dtype=float)
    names = [name for name in names if np.all(np.isfinite(covariance[index[name], [index[other] for other in names]]))]
    if not names or covariance.shape != (len(result.covariance_names),) * 2:
        return None
    base = _written_logs(parameters)
    keys = list(base)
    jacobian = np.zeros((len(keys), len(names)))
    for column, name in enumerate(names):
        value, error = result.params[name]
        stepped = dataclasses.replace(result, params={**result.params, name: (value * math.exp(_STEP), error)})
        moved = _written_logs(stepped.parameters(parameters.name, parameters.kind))
        jacobian[:, column] = [(moved[key] - base[key]) / _STEP for key in keys]
    jacobian = np.round(jacobian, 6)  # log-linear: the entries are 0, 1 or 1/k up to rounding
    rows = [row for row, key in enumerate(keys) if np.any(jacobian[row] != 0)]
    if not rows:
        return None
    positions = [index[name] for name in names]
    written = jacobian[rows] @ covariance[np.ix_(positions, positions)] @ jacobian[rows].T
    return tuple(keys[row] for row in rows), (written + written.T) / 2
