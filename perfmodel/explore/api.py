"""The explorer's JSON API: one pure function per view, each taking the page's inputs (a dict of JSON
values) and returning JSON-ready data computed by the engine's public API. The server
(``perfmodel.explore.server``) only routes ``POST /api/<name>`` to ``VIEWS[name]``; the browser tests
call these same functions for the numbers they expect on the page.

Inputs use the command line's vocabulary: spec names as ``perfmodel specs list`` prints them, what-ifs
as ``--set FIELD=VALUE`` (``{"memory.hbm.bandwidth": "6.4 TB/s"}``), parameter sets ``achievable``
(the fitted overlay where one ships, as ``perfmodel llm`` without ``--ideal``) or ``ideal`` (datasheet).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from perfmodel.errors import PerfmodelError
from perfmodel.jsonable import to_jsonable

PARAMETER_SETS = ("achievable", "ideal")
ROOFLINE_KINDS = ("classic", "hierarchical", "scheduling")
LLM_PREFIX = "llm:"  # a roofline workload "llm:MODEL:prefill" is one pipeline stage of that LLM phase
QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")
MAX_RATES, MAX_REQUESTS = 12, 2000


def _text(inputs: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = inputs.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise PerfmodelError(f"input {key!r}: expected a non-empty string, got {value!r}")
    return value.strip()


def _count(inputs: Mapping[str, Any], key: str, default: int, low: int = 1, high: int = 10**7) -> int:
    value = inputs.get(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise PerfmodelError(f"input {key!r}: expected a whole number, got {value!r}") from None
    if not low <= number <= high or number != float(value):
        raise PerfmodelError(f"input {key!r}: expected a whole number from {low} to {high}, got {value!r}")
    return number


def _confidence(inputs: Mapping[str, Any]) -> float:
    """The intervals' coverage, 0 < c < 1 (``--confidence``; default ``uncertainty.DEFAULT_CONFIDENCE``)."""
    from perfmodel.uncertainty import DEFAULT_CONFIDENCE

    value = inputs.get("confidence", DEFAULT_CONFIDENCE)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PerfmodelError(f"input 'confidence': expected a number between 0 and 1, got {value!r}") from None
    if not 0 < number < 1:
        raise PerfmodelError(f"input 'confidence': expected a number between 0 and 1 (exclusive), got {value!r}")
    return number


def _overrides(inputs: Mapping[str, Any]) -> dict[str, str] | None:
    """The what-ifs, ``{field: value}`` as ``--set field=value`` takes them (None: none)."""
    given = inputs.get("set") or {}
    if not isinstance(given, Mapping):
        raise PerfmodelError(f"input 'set': expected a mapping of spec field to value, got {given!r}")
    return {str(field): str(value) for field, value in given.items()} or None


def load_system(name: str, parameters: str = "achievable", overrides: Mapping[str, str] | None = None):
    """The spec a view prices: ``perfmodel llm --on NAME [--ideal] [--set ...]`` loads the same."""
    from perfmodel.hardware.loader import load_for_prediction

    if parameters not in PARAMETER_SETS:
        raise PerfmodelError(f"parameter set {parameters!r}: expected one of {', '.join(PARAMETER_SETS)}")
    return load_for_prediction(name, overrides=overrides, ideal=parameters == "ideal", engine=None)


# --- the pickers -------------------------------------------------------------------------------------------

def options(_inputs: Mapping[str, Any] | None = None) -> dict:
    """What the pickers offer: devices (the catalog without overlays), every spec, models, workloads."""
    return _options()


@lru_cache(maxsize=1)
def _options() -> dict:
    from perfmodel.hardware.loader import catalog
    from perfmodel.llm.catalog import model_names
    from perfmodel.paths import data_directory

    entries = catalog()
    names = {entry.name for entry in entries}
    overlay = re.compile(r"-(achievable|fitted|trtllm|vllm|sglang)$")
    devices = [entry.name for entry in entries if not (overlay.search(entry.name)
                                                       and overlay.sub("", entry.name) in names)]
    workloads = sorted(path.stem for path in data_directory("workloads").glob("*.yaml"))
    return {"devices": devices, "specs": sorted(names), "models": model_names(), "workloads": workloads,
            "parameter_sets": list(PARAMETER_SETS), "roofline_kinds": list(ROOFLINE_KINDS)}


# --- what-ifs: the numeric fields of a spec in the --set vocabulary ------------------------------------------

def spec_fields(name: str) -> list[tuple[str, Any]]:
    """Every field of spec ``name`` (its ``extends`` chain merged) as ``(dotted path, value as written)``
    (``hardware.loader.spec_fields``)."""
    from perfmodel.hardware.loader import spec_fields as fields_of

    return [(item.field, item.value) for item in fields_of(name)]


def spec_numbers(name: str) -> list[dict]:
    """Every numeric field of spec ``name`` as written (value with its unit), the field's path being
    what ``--set`` takes; a what-if slider scales the number and keeps the unit."""
    fields = []
    for path, value in spec_fields(name):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            continue
        match = QUANTITY.match(str(value))
        if match is None or not re.fullmatch(r"[A-Za-z/%]*(/[A-Za-z]+)?", match.group(2).replace(" ", "")):
            continue
        number = float(match.group(1))
        if number > 0 and math.isfinite(number):
            fields.append({"field": path, "value": str(value), "number": number, "unit": match.group(2)})
    return fields


def scaled(value: str, factor: float) -> str:
    """A spec value (``3.35 TB/s``) times ``factor``, in its own unit: the text ``--set`` takes."""
    match = QUANTITY.match(value)
    if match is None:
        raise PerfmodelError(f"{value!r} is not a number with a unit")
    number = float(match.group(1)) * factor
    if re.fullmatch(r"[-+]?\d+", match.group(1)) and not match.group(2) and float(number).is_integer():
        return str(int(number))
    return f"{number:.6g} {match.group(2)}".strip()


def whatif_fields(inputs: Mapping[str, Any]) -> dict:
    system = _text(inputs, "system")
    spec = load_system(system, str(inputs.get("parameters", "achievable")))
    return {"system": system, "spec": spec.name, "fields": spec_numbers(spec.origin or spec.name)}


# --- Roofline ---------------------------------------------------------------------------------------------

def roofline_graph(workload: str, phase_inputs: Mapping[str, Any]):
    """A shipped workload name, a workload or captured-graph file, or ``llm:MODEL:prefill|decode`` (one
    pipeline stage of that phase at the page's batch, prompt and generation, as ``perfmodel llm
    --graph-out`` writes it)."""
    from perfmodel.workload.io import load_graph

    if not workload.startswith(LLM_PREFIX):
        return load_graph(workload)
    from perfmodel.llm import Parallelism, Scenario
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.graphs import stage_graph

    model, _, phase = workload[len(LLM_PREFIX):].rpartition(":")
    if phase not in ("prefill", "decode") or not model:
        raise PerfmodelError(f"workload {workload!r}: expected llm:MODEL:prefill or llm:MODEL:decode")
    batch, prompt, gen = (_count(phase_inputs, key, default) for key, default in
                          (("batch", 1), ("prompt", 1024), ("gen", 256)))
    scenario = Scenario(batch=batch, prompt_tokens=prompt, generated_tokens=gen)
    context = prompt if phase == "prefill" else prompt + max(gen // 2, 1)
    return stage_graph(load_architecture(model), scenario, Parallelism(), phase=phase, context=context)


def roofline(inputs: Mapping[str, Any]) -> dict:
    """One chart per system: its roofs and the workload's ops as points (the ``perfmodel roofline`` data)."""
    from perfmodel.roofline import evaluate
    from perfmodel.roofline.charts import classic_roofline, hierarchical_roofline, scheduling_roofline

    kind = str(inputs.get("kind", "classic"))
    if kind not in ROOFLINE_KINDS:
        raise PerfmodelError(f"roofline kind {kind!r}: expected one of {', '.join(ROOFLINE_KINDS)}")
    systems = inputs.get("systems") or []
    if not isinstance(systems, list) or not systems:
        raise PerfmodelError("input 'systems': pick at least one system")
    graph = roofline_graph(_text(inputs, "workload", "transformer_block"), inputs)
    builder = {"classic": classic_roofline, "hierarchical": hierarchical_roofline, "scheduling": scheduling_roofline}[kind]
    overrides = _overrides(inputs)
    charts = []
    for position, system in enumerate(systems):
        hardware = load_system(str(system), str(inputs.get("parameters", "achievable")),
                               overrides if position == 0 else None)
        evaluation = evaluate(graph, hardware)
        data = builder(hardware, evaluation)
        charts.append({"system": str(system), "spec": hardware.name, "total_s": evaluation.total_s,
                       "time_by_bound": dict(evaluation.time_by_bound), **to_jsonable(data),
                       "ridge_flop_per_byte": float(data.ridge_flop_per_byte),
                       "scheduling_ridge_flops_per_launch": float(data.scheduling_ridge_flops_per_launch)})
    return {"workload": graph.name, "kind": kind, "ops": len(graph.ops), "charts": charts}


# --- LLM --------------------------------------------------------------------------------------------------

def llm(inputs: Mapping[str, Any]) -> dict:
    """``perfmodel llm --condensed`` for one model on one or two systems (side by side): TTFT, TPOT,
    throughput, memory per chip, the bound of each phase and its time by bound; the headline figures
    with their intervals at ``confidence`` (``perfmodel llm --confidence``: ``intervals`` holds the
    confidence, the basis and each figure's low and high, None where there is no evidence)."""
    from perfmodel.cli.confidence import sample_runs, scenario_intervals, to_json
    from perfmodel.llm import Parallelism, Scenario, llm_predict
    from perfmodel.llm.catalog import load_architecture

    architecture = load_architecture(_text(inputs, "model", "llama-2-7b"))
    systems = [str(name) for name in (inputs.get("systems") or []) if name]
    if not systems:
        raise PerfmodelError("input 'systems': pick at least one system")
    weights = _text(inputs, "weights", "bf16")
    scenario = Scenario(batch=_count(inputs, "batch", 1), prompt_tokens=_count(inputs, "prompt", 1024),
                        generated_tokens=_count(inputs, "gen", 256), weight_dtype=weights, kv_dtype=weights
                        if weights in ("bf16", "fp16") else "bf16", activation_dtype="bf16")
    parallelism = Parallelism(tp=_count(inputs, "tp", 1, high=4096), pp=_count(inputs, "pp", 1, high=4096))
    overrides = _overrides(inputs)
    confidence = _confidence(inputs)
    results = []
    for position, system in enumerate(systems[:2]):
        hardware = load_system(system, str(inputs.get("parameters", "achievable")),
                               overrides if position == 0 else None)
        result = llm_predict(architecture, hardware, scenario, parallelism)
        # The fit's parameter sets, as perfmodel llm draws and evaluates them.
        runs, basis = sample_runs(hardware, "scenario", confidence,
                                  lambda sampled: llm_predict(architecture, sampled, scenario, parallelism))
        results.append({"system": system, **result.to_dict(), "memory_total_bytes": float(result.memory_bytes.total),
                        "intervals": to_json(scenario_intervals(hardware, result, confidence, runs, basis))})
    return {"model": architecture.name, "confidence": confidence, "results": results}


# --- Serving and sizing --------------------------------------------------------------------------------------

def _lengths(inputs: Mapping[str, Any]):
    from perfmodel.serving import parse_length

    return (parse_length(_text(inputs, "prompt_dist", "fixed:512"), "prompt"),
            parse_length(_text(inputs, "output_dist", "fixed:128"), "output"))


def _seconds(inputs: Mapping[str, Any], key: str) -> float | None:
    from perfmodel.units import parse_quantity

    text = inputs.get(key)
    return None if text in (None, "") else parse_quantity(str(text), "seconds")


def _rates(inputs: Mapping[str, Any]) -> list[float]:
    raw = inputs.get("rates", "0.5,1,2,4,8")
    try:
        rates = [float(item) for item in str(raw).split(",") if item.strip()]
    except ValueError:
        raise PerfmodelError(f"input 'rates': expected a comma list of requests per second, got {raw!r}") from None
    if not rates or len(rates) > MAX_RATES or any(not (rate > 0 and math.isfinite(rate)) for rate in rates):
        raise PerfmodelError(f"input 'rates': 1 to {MAX_RATES} positive rates (requests/s), got {raw!r}")
    return sorted(rates)


def serving(inputs: Mapping[str, Any]) -> dict:
    """``perfmodel serve --rates ...``: one simulation per Poisson rate, and the knee."""
    from perfmodel.llm import Parallelism
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.serving import ArrivalProcess, Server, knee_rate, max_context

    architecture = load_architecture(_text(inputs, "model", "llama-2-7b"))
    hardware = load_system(_text(inputs, "system", "h100-sxm"), str(inputs.get("parameters", "achievable")),
                           _overrides(inputs))
    prompt, output = _lengths(inputs)
    rates = _rates(inputs)
    requests = _count(inputs, "requests", 200, high=MAX_REQUESTS)
    ttft_slo, tpot_slo = _seconds(inputs, "ttft_slo"), _seconds(inputs, "tpot_slo")
    server = Server(architecture, hardware, Parallelism(tp=_count(inputs, "tp", 1, high=4096),
                                                        pp=_count(inputs, "pp", 1, high=4096)),
                    max_context=max_context(prompt, output))
    results = [server.simulate(ArrivalProcess(kind="poisson", rate_per_s=rate), requests, prompt, output,
                               seed=_count(inputs, "seed", 0, low=0), ttft_slo_s=ttft_slo, tpot_slo_s=tpot_slo)
               for rate in rates]
    return {"model": architecture.name, "spec": hardware.name, "mode": server.mode, "rates": rates,
            "knee_rate_per_s": knee_rate(rates, results, ttft_slo),
            "results": [to_jsonable(result.to_dict(per_request=False)) for result in results]}


def size(inputs: Mapping[str, Any]) -> dict:
    """``perfmodel size``: the fewest chips per system meeting p99 TTFT/TPOT targets at a Poisson rate,
    each system's targets held at ``confidence`` as ``size --confidence`` holds them (``cli.held``: the
    simulated times must stay under the target x the system's factor, the model-form one widened by the
    fit's parameter spread; ``at_median``: at the median residual, ``--at-median``)."""
    from perfmodel.cli.confidence import default_sets
    from perfmodel.cli.held import held_targets
    from perfmodel.cli.llm_command import SIZE_PARAMETER_SETS
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.serving import ArrivalProcess
    from perfmodel.serving.sizing import Target, rank, size_deployment

    architecture = load_architecture(_text(inputs, "model", "llama-2-7b"))
    prompt, output = _lengths(inputs)
    targets = [Target(metric=metric, statistic="p99", limit_s=limit) for metric, limit in
               (("ttft", _seconds(inputs, "ttft_slo")), ("tpot", _seconds(inputs, "tpot_slo"))) if limit is not None]
    rate = float(inputs.get("rate", 4.0))
    systems = [str(name) for name in (inputs.get("systems") or [])]
    if not systems:
        raise PerfmodelError("input 'systems': pick at least one system")
    confidence = None if inputs.get("at_median") else _confidence(inputs)
    sizings, held = [], {}
    for system in systems:
        hardware = load_system(system, str(inputs.get("parameters", "achievable")))
        holding = held_targets(architecture, hardware, confidence, default_sets(SIZE_PARAMETER_SETS, confidence),
                               prompt_tokens=max(round(prompt.mean), 1), output_tokens=max(round(output.mean), 1),
                               weight_dtype="bf16", kv_dtype="bf16", activation_dtype="bf16", expert_weight_dtype=None,
                               mode=None)
        sizing = size_deployment(architecture, hardware, holding.screened(targets),
                                 ArrivalProcess(kind="poisson", rate_per_s=rate), prompt, output,
                                 requests=_count(inputs, "requests", 200, high=MAX_REQUESTS),
                                 limit_factor=holding.extra)
        sizings.append(sizing)
        held[sizing.hardware] = holding.block(None if sizing.best is None else sizing.best.parallelism,
                                              [target.metric for target in targets])
    return {"model": architecture.name, "rate_per_s": rate, "targets": [target.to_dict() for target in targets],
            "confidence": confidence,
            "systems": [{**to_jsonable(sizing.to_dict()), "confidence": held[sizing.hardware]}
                        for sizing in rank(sizings)]}


def search(inputs: Mapping[str, Any]) -> dict:
    """``perfmodel search``: the Pareto front of deployments (tokens/s per user against tokens/s per
    chip) on ``chips`` chips of a GPU spec over its serving engines' overlays, the SLO region (TTFT and
    TPOT targets), every configuration tried, the chosen point (the SLO region's highest tokens/s per chip,
    or front point ``pick``, 1 = fewest tokens/s per user, as ``--pick``) and, with ``export`` (vllm,
    sglang, trtllm), its launch settings as ``perfmodel search --export`` prints them."""
    from perfmodel.cli.search_command import export
    from perfmodel.hardware.loader import SERVING_ENGINES, load_for_prediction
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.serving.launch import ENGINES
    from perfmodel.serving.search import search as run

    architecture = load_architecture(_text(inputs, "model", "llama-2-7b"))
    system = _text(inputs, "system", "h100-sxm")
    engines = inputs.get("engines") or list(SERVING_ENGINES)
    if not isinstance(engines, list) or any(engine not in SERVING_ENGINES for engine in engines):
        raise PerfmodelError(f"input 'engines': expected some of {', '.join(SERVING_ENGINES)}, got {engines!r}")
    hardware = {engine: load_for_prediction(system, engine=engine) for engine in dict.fromkeys(engines)}
    result = run(architecture, hardware, _count(inputs, "chips", 8, high=4096),
                 prompt_tokens=_count(inputs, "prompt", 1024), output_tokens=_count(inputs, "output", 256),
                 disaggregation=bool(inputs.get("disagg", True)), ttft_slo_s=_seconds(inputs, "ttft_slo"),
                 tpot_slo_s=_seconds(inputs, "tpot_slo"), simulate=_count(inputs, "simulate", 0, low=0, high=12),
                 seed=_count(inputs, "seed", 0, low=0))
    front = list(result.front)
    pick = inputs.get("pick")
    if pick in (None, ""):
        chosen = result.best
    else:
        index = _count(inputs, "pick", 1, high=len(front))
        chosen = front[index - 1]
    data = {**to_jsonable(result.to_dict()), "system": system, "engines": list(hardware),
            "points": {"tokens_per_s_per_user": [c.tokens_per_s_per_user for c in result.configurations],
                       "tokens_per_s_per_chip": [c.tokens_per_s_per_chip for c in result.configurations],
                       "meets_slo": [c.meets_slo for c in result.configurations]},
            "chosen": None if chosen is None else front.index(chosen) + 1, "launch": None}
    engine = inputs.get("export")
    if engine not in (None, ""):
        if engine not in ENGINES:
            raise PerfmodelError(f"input 'export': expected one of {', '.join(ENGINES)}, got {engine!r}")
        if chosen is None:
            raise PerfmodelError("no front point meets the SLO targets to export; relax them or pick a point")
        launch = export(chosen, str(engine), architecture.name, "bf16")
        data["launch"] = {**launch.to_dict(), "text": launch.text()}
    return data


# --- Specs and accuracy ----------------------------------------------------------------------------------------

def specs(inputs: Mapping[str, Any]) -> dict:
    """Every field of a spec as written, with the source it cites and the file and line it comes from
    (``hardware.loader.spec_fields``; ``perfmodel specs show`` names the same sources)."""
    from pathlib import Path

    from perfmodel.hardware.loader import spec_fields as fields_of

    name = _text(inputs, "system", "h100-sxm")
    hardware = load_system(name, "ideal")
    rows = []
    for item in fields_of(name):
        source = hardware.sources.get(item.source)
        rows.append({"field": item.field, "value": to_jsonable(item.value), "source": item.source,
                     "kind": source.kind if source else "", "url": source.url if source else "",
                     "written": f"{Path(item.file).name}:{item.line}" if item.line else Path(item.file).name})
    return {"system": hardware.name, "description": hardware.description, "family": hardware.family,
            "vendor": hardware.vendor, "fields": rows,
            "sources": {key: {"kind": s.kind, "url": s.url, "note": s.note} for key, s in hardware.sources.items()}}


_VALIDATION_LOCK = threading.Lock()  # one validation at a time: a second request waits for the first's rows


def validation(inputs: Mapping[str, Any] | None = None) -> dict:
    """``perfmodel validate [CSV]``: every row of a validation table and the medians; ``csv`` names a
    table of published measurements in the shipped one's columns (none: the shipped table, ~30 s the
    first time; ``validation.validate`` remembers each file's rows)."""
    from perfmodel.validation import summary
    from perfmodel.validation import validate as run

    path = (inputs or {}).get("csv") or None
    if path is not None and not isinstance(path, str):
        raise PerfmodelError(f"input 'csv': expected a path to a CSV file, got {path!r}")
    with _VALIDATION_LOCK:
        rows = run(path.strip() if path else None)
    return {"csv": path, "rows": [{**to_jsonable(row), "error": row.error} for row in rows],
            "summary": to_jsonable(summary(rows))}


VIEWS: dict[str, Callable[[Mapping[str, Any]], dict]] = {
    "options": options, "whatif_fields": whatif_fields, "roofline": roofline, "llm": llm, "serving": serving,
    "size": size, "search": search, "specs": specs, "validation": validation,
}
