"""Adding an execution mode is one registry entry, from outside the package (DESIGN.md, "Adding an
execution mode"): a toy mode registered here is accepted by the spec schema, priced by the evaluator
and the charts, and offered by every command's --mode; one vocabulary for modes across commands."""

from __future__ import annotations

import pytest

from perfmodel.cli import build_parser, main
from perfmodel.hardware import execution_models
from perfmodel.hardware.execution_models import ExecutionModel, mode_choices, resolve_mode
from perfmodel.hardware.loader import load_hardware
from perfmodel.roofline import evaluate
from perfmodel.roofline.charts import launch_cost_s
from perfmodel.workload import builders

TOY_PROGRAM_S = 1e-3


def _toy_program_s(execution) -> float:
    return TOY_PROGRAM_S


@pytest.fixture
def toy_mode(monkeypatch):
    """A stream-ordered toy: no fusion; each kernel pays the spec's ``sync`` on the device, in series;
    each program a constant 1 ms."""
    model = ExecutionModel(name="toy", style="compiled", summary="a toy mode for the registry test", fuses=False,
                           kernel_overhead="sync_s", program_overhead=_toy_program_s)
    monkeypatch.setitem(execution_models.EXECUTION_MODELS, "toy", model)
    return model


@pytest.fixture
def toy_spec(tmp_path, toy_mode):
    path = tmp_path / "h100-toy.yaml"
    path.write_text("schema_version: 1\nname: h100-toy\nextends: h100-sxm\nsources:\n  toy: {url: 'repo:tests', "
                    "kind: estimate, note: registry test}\nscheduling:\n  default_mode: toy\n  modes:\n"
                    "    toy: {sync: 7 us, source: toy}\n")
    return path


def test_a_toy_mode_is_one_registry_entry(toy_spec):
    hardware = load_hardware(toy_spec)
    assert hardware.scheduling.default_mode == "toy" and {"dynamic", "graph", "toy"} <= set(hardware.scheduling.modes)
    graph = builders.elementwise_chain(elements=1 << 10, length=4)
    toy = evaluate(graph, hardware)
    assert toy.mode == "toy"
    # Not fused: every op is its own kernel, paying device time + 7 us in series; one 1 ms program launch.
    device = evaluate(graph, hardware, mode="graph", fuse=False)
    kernels_s = sum(op.total_s for op in device.ops if op.kind != "launch")
    graph_gaps_s = len(graph.ops) * hardware.scheduling.modes["graph"].per_node_s
    program = hardware.scheduling.modes["graph"].program_launch_s
    assert toy.total_s == pytest.approx(kernels_s - graph_gaps_s + len(graph.ops) * 7e-6 + TOY_PROGRAM_S)
    assert device.total_s == pytest.approx(kernels_s + program)
    assert launch_cost_s(hardware, "toy") == pytest.approx(7e-6)
    # The command line offers it, in the one vocabulary every command shares.
    assert "toy" in mode_choices()
    parser = build_parser()
    for command in (["predict", "elementwise_chain", "--on", "x"], ["llm", "--model", "m", "--on", "x"],
                    ["sweep", "--on", "x", "--grid", "batch=1"],
                    ["size", "--model", "m", "--ttft", "1s", "--tpot", "1s", "--rate", "1/s"],
                    ["roofline", "elementwise_chain", "--on", "x", "-o", "chart.png"]):
        assert parser.parse_args([*command, "--mode", "toy"]).mode == "toy"


def test_an_unregistered_mode_in_a_spec_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "bad-mode.yaml"
    path.write_text("schema_version: 1\nname: bad-mode\nextends: h100-sxm\nscheduling:\n  default_mode: warp\n"
                    "  modes:\n    warp: {kernel_launch: 1 us, source: eager-launch}\n")
    assert main(["predict", "elementwise_chain", "--on", str(path)]) == 2
    error = capsys.readouterr().err
    assert "unknown execution mode(s) 'warp'" in error and "registered modes: dynamic, graph, spatial, static" in error


def test_modes_fall_back_within_a_style_never_across():
    groq, h100, tpu = load_hardware("groq-lpu-v1"), load_hardware("h100-sxm"), load_hardware("tpu-v5e")
    assert resolve_mode(groq, "graph") == "static" and resolve_mode(groq, "compiled") == "static"
    assert resolve_mode(h100, "eager") == "dynamic" and resolve_mode(h100, "compiled") == "graph"
    assert resolve_mode(h100, "static") == "graph"
    for hardware in (groq, tpu):  # eager PyTorch does not run on a compiler-scheduled machine
        with pytest.raises(execution_models.PerfmodelError, match="none of them eager"):
            resolve_mode(hardware, "eager")


def test_llm_eager_on_a_static_only_spec_is_an_error_and_size_reports_it(capsys):
    assert main(["llm", "--model", "llama-2-7b", "--on", "groq-lpu-v1", "--mode", "eager"]) == 2
    assert "none of them eager" in capsys.readouterr().err
    assert main(["size", "--model", "llama-2-7b", "--on", "h100-sxm,groq-lpu-v1", "--ttft", "1s", "--tpot", "50ms",
                 "--rate", "1/s", "--mode", "eager", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert "none of them eager" in data["groq-lpu-v1"]["unavailable"] and data["groq-lpu-v1"]["best"] is None
    assert data["h100-sxm"]["best"] is not None


# ------------------------------------------------------------------------------------- op kinds
def test_every_op_kind_has_a_cost_rule_and_the_collectives_match():
    from perfmodel.costs.rules import COLLECTIVE_TRAFFIC, COST_RULES
    from perfmodel.workload.op_kinds import COLLECTIVES, OP_KIND_TABLE

    assert set(OP_KIND_TABLE) == set(COST_RULES)
    assert set(COLLECTIVES) == set(COLLECTIVE_TRAFFIC)


def test_a_toy_op_kind_is_one_table_entry_plus_its_rule(monkeypatch):
    """A prefix scan: vector engine, fusible, one required dimension; priced by its own rule."""
    from perfmodel.costs import rules
    from perfmodel.errors import WorkloadError
    from perfmodel.workload import op_kinds
    from perfmodel.workload.ir import Graph, Op, TensorSpec

    kind = op_kinds.OpKind(name="scan", engine="vector", fusible=True, summary="a toy prefix scan",
                           attributes={"length": op_kinds.REQUIRED_DIMENSION}, aten=frozenset({"cumsum_toy"}))
    monkeypatch.setitem(op_kinds.OP_KIND_TABLE, "scan", kind)

    def scan_cost(op, context):  # 2 FLOPs per element (add + carry), streamed like any vector op
        engine, dtype = rules.select_engine(context.hardware, op.kind, op.dtype)
        return rules.OpCost(flops=2.0 * op.attrs["length"], executed_flops=2.0 * op.attrs["length"],
                            engine=engine.name, peak_dtype=dtype, bytes_by_level=rules.streaming_bytes(op, context))

    monkeypatch.setitem(rules.COST_RULES, "scan", scan_cost)
    tensor = TensorSpec(shape=(1 << 20,), dtype="fp32")
    producer = Op(name="x2", kind="elementwise", inputs=(tensor,), outputs=(tensor,))
    scan = Op(name="scan", kind="scan", inputs=(tensor,), outputs=(tensor,), attrs={"length": 1 << 20})
    graph = Graph(name="toy", ops=[producer, scan], edges=[("x2", "scan")])
    hardware = load_hardware("h100-sxm")
    eager, compiled = evaluate(graph, hardware, mode="dynamic"), evaluate(graph, hardware, mode="graph")
    assert eager.ops[1].flops == 2 * (1 << 20) and eager.ops[1].kind == "scan"
    assert compiled.kernels == 1 and eager.kernels == 2  # fusible, so it joins its producer's kernel
    from perfmodel.workload.capture import aten_kind

    assert aten_kind("cumsum_toy") == "scan"
    with pytest.raises(WorkloadError, match="a scan op needs attribute 'length'"):
        Graph(name="bad", ops=[Op(name="scan", kind="scan", inputs=(tensor,), outputs=(tensor,))])


# ------------------------------------------------------------------------------- spec what-ifs
def _sweepable_fields(hardware):
    from perfmodel.roofline.sweep import LEVEL_FIELDS, MODE_FIELDS

    for level in hardware.memory:
        for field, attribute in LEVEL_FIELDS.items():
            if getattr(level, attribute):
                yield f"memory.{level.name}.{field}", getattr(level, attribute)
    for engine in hardware.compute.values():
        for dtype, peak in engine.peak_flops_per_s.items():
            yield f"compute.{engine.name}.peak.{dtype}", peak
    for mode, execution in hardware.scheduling.modes.items():
        for field, attribute in MODE_FIELDS.items():
            yield f"scheduling.modes.{mode}.{field}", getattr(execution, attribute) or 1e-6


@pytest.mark.parametrize("name", ["h100-sxm", "ibm-spyre", "tpu-v5e", "groq-lpu-v1"])
def test_set_and_grid_give_the_same_result_for_every_field(name):
    """--set edits the YAML before the schema; --grid edits the validated record: one resolver's worth
    of semantics (usable capacity scales with capacity in both), so the same value gives the same time."""
    from perfmodel.roofline.sweep import as_override, hardware_with

    hardware = load_hardware(name)
    graph = builders.transformer_block(seq=128, dtype="fp16" if name in ("ibm-spyre", "groq-lpu-v1") else "bf16")
    checked = 0
    for field, current in _sweepable_fields(hardware):
        value = current * 0.5
        via_grid = evaluate(graph, hardware_with(hardware, {field: value}))
        via_set = evaluate(graph, load_hardware(name, {field: as_override(field, value)}))
        assert via_grid.total_s == pytest.approx(via_set.total_s, rel=1e-12), field
        checked += 1
    assert checked >= 8


def test_a_swept_value_goes_through_the_spec_schema(capsys):
    assert main(["sweep", "--on", "h100-sxm", "--grid", "memory.hbm.bandwidth=-1TB/s,2TB/s"]) == 2
    assert "memory.hbm.bandwidth: must be more than zero" in capsys.readouterr().err
    assert main(["sweep", "--on", "h100-sxm", "--grid", "memory.hbm.latency=1us"]) == 2  # read by no rule
    assert "cannot sweep 'memory.hbm.latency'" in capsys.readouterr().err


def test_the_mode_field_table_is_the_schema_and_the_record():
    """One table (hardware.model.MODE_FIELDS) names every overhead of an execution mode: the YAML
    schema, the record, the loader, 'specs show' and sweeps all read it."""
    import dataclasses

    from perfmodel.hardware.model import MODE_FIELDS, ExecutionMode
    from perfmodel.hardware.schema import ModeSpec

    # host_overlap is a flag and library_dispatch a per-op table, not overheads of the mode itself
    # (engine_step: a serving engine's host work per step, a record of its own)
    schema_fields = set(ModeSpec.model_fields) - {"host_overlap", "library_dispatch", "engine_step", "source",
                                                  "field_sources"}
    assert schema_fields == set(MODE_FIELDS)
    record_fields = {field.name for field in dataclasses.fields(ExecutionMode)} - {"name", "host_overlap",
                                                                                  "library_dispatch_s", "engine_step"}
    assert record_fields == set(MODE_FIELDS.values())
