"""``perfmodel validate``: predicted vs published measurements."""

from __future__ import annotations

from pathlib import Path

from perfmodel.cli.confidence import add_confidence_argument
from perfmodel.cli.overrides import add_fanout_arguments, add_ideal_argument, fanout
from perfmodel.jsonable import json_text, to_jsonable
from perfmodel.tables import format_table


def register(commands) -> None:
    validate = commands.add_parser("validate", help="predict the published measurements and report the errors")
    validate.add_argument("--csv", type=Path, help="measurements CSV (default: the shipped published_measurements.csv)")
    validate.add_argument("--json", action="store_true")
    validate.add_argument("--skipped", action="store_true", help="also list the skipped rows with their reasons")
    add_ideal_argument(validate)
    add_confidence_argument(validate)
    from perfmodel.hardware.loader import NO_ENGINE, SERVING_ENGINES

    validate.add_argument("--engine", choices=SERVING_ENGINES + (NO_ENGINE,), default=None, help=(
        "price every GPU LLM row with this engine's overlay where one ships (default: the engine the row names, "
        f"its system's 'TensorRT-LLM', 'vLLM' or 'SGLang'; {NO_ENGINE}: the engine-independent achievable overlays)"))
    add_fanout_arguments(validate)
    validate.set_defaults(handler=_validate)


def _coverage_line(rows, confidence: float) -> str:
    """Held-out coverage of the intervals by family (each source's rows held out together)."""
    from perfmodel.intervals import heldout_coverage, percent, residuals_of

    parts = [f"{item.family} " + (f"no interval ({item.rows} rows)" if item.share is None else
                                  f"{100 * item.share:.0f}% of {item.rows} rows (median width {item.median_width:.2f}x)")
             for item in heldout_coverage(residuals_of(rows), confidence)]
    return f"{percent(confidence)} intervals, held-out coverage by family (sources held out): " + ", ".join(parts)


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _validate(args) -> int:
    from perfmodel.intervals import heldout_coverage, residuals_of
    from perfmodel.validation import summary, validate

    with fanout(args, "row") as mapper:
        rows = validate(args.csv, ideal=args.ideal, engine=args.engine, mapper=mapper)
    totals = summary(rows)
    if args.json:
        coverage = [to_jsonable(item) for item in heldout_coverage(residuals_of(rows), args.confidence)]
        print(json_text({"rows": [{**to_jsonable(row), "error": row.error} for row in rows], "summary": totals,
                         "interval_coverage": {"confidence": args.confidence, "families": coverage}}))
        return 0
    predicted = [row for row in rows if row.predicted is not None]
    table = [[row.line, row.group, row.hardware, _short(row.workload, 34), _short(row.metric, 28),
              f"{row.measured:g} {_short(row.unit, 12)}", f"{row.predicted:.4g}", f"{100 * row.error:+.0f}%",
              _short(row.how, 60)] for row in predicted]
    print(format_table(["line", "group", "spec", "workload", "metric", "measured", "predicted", "error", "how"], table))
    overlays = sorted({row.hardware for row in predicted if row.hardware.endswith("-achievable")})
    from perfmodel.hardware.loader import SERVING_ENGINES

    engines = sorted({row.hardware for row in predicted if row.hardware.endswith(tuple(f"-{e}" for e in SERVING_ENGINES))})
    print("\nparameters: " + ("ideal (datasheet) everywhere" if args.ideal else
                             f"achievable overlays where they ship ({', '.join(overlays)}), serving-engine overlays for "
                             f"the LLM rows of the engine each names ({', '.join(engines) or 'none'}), datasheet elsewhere"))
    print(f"{totals['predicted']} rows predicted, {totals['skipped']} skipped; median |error| "
          f"{100 * totals['all']:.0f}%" if totals["all"] is not None else "no row predicted")
    print("median |error| by group:  " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in totals["group"].items()))
    print("median |error| by family: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in totals["family"].items()))
    print(_coverage_line(rows, args.confidence))
    skipped = [row for row in rows if row.skipped]
    if args.skipped:
        print("\nskipped:")
        print(format_table(["line", "group", "system", "workload", "reason"],
                           [[row.line, row.group, _short(row.system, 30), _short(row.workload, 34), row.skipped]
                            for row in skipped]))
    else:
        reasons: dict[str, int] = {}
        for row in skipped:
            reasons[row.skipped] = reasons.get(row.skipped, 0) + 1
        print("skipped (use --skipped for each row): " + "; ".join(f"{n} x {r}" for r, n in reasons.items()))
    return 0
