"""Issue 38 ("Hardening II"): each reproducer of the issue gives a right answer or a clear error
(what, where, the allowed range; exit 2 from the command line, no traceback)."""

from __future__ import annotations

import json
import math

import pytest

from perfmodel.cli import main
from perfmodel.errors import WorkloadError
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.roofline import evaluate
from perfmodel.workload.ir import Graph, Op, TensorSpec
from perfmodel.workload.op_kinds import MAX_SIZE


def _workload(tmp_path, ops: str, name: str = "w.yaml"):
    path = tmp_path / name
    path.write_text(f"schema_version: 1\nname: t\nops:\n{ops}", encoding="utf-8")
    return path


def _refused(capsys, argv: list[str]) -> str:
    """The command exits 2 with an error and no traceback; returns the error text."""
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and "internal error" not in error, error
    return error


def _predict_json(capsys, path, spec: str = "h100-sxm") -> dict:
    assert main(["predict", str(path), "--on", spec, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------------- 1: attention by attrs
ATTENTION_ATTRS = "{batch: 1, heads: 8, seq_q: 128, seq_kv: 128, head_dim: 64}"


def test_attention_given_by_attributes_alone_is_priced_like_its_tensors(tmp_path, capsys):
    """Issue 38 item 1: the attributes say everything; the dtype is the op's (fp32 without tensors),
    so the same op with fp32 tensors costs the same FLOPs and compute time."""
    alone = _predict_json(capsys, _workload(tmp_path, f"  - {{name: a, kind: attention, attrs: {ATTENTION_ATTRS}}}\n"))
    tensor = "{shape: [1, 8, 128, 64], dtype: fp32}"
    given = _predict_json(capsys, _workload(tmp_path, f"  - {{name: a, kind: attention, attrs: {ATTENTION_ATTRS}, "
                                                      f"inputs: [{tensor}, {tensor}, {tensor}], outputs: [{tensor}]}}\n",
                                            "tensors.yaml"))
    # 4 x batch x heads x seq_q x seq_kv x head_dim for QK^T and PV, plus the softmax's 5 per score
    assert alone["flops_total"] == given["flops_total"] == 8 * 128 * 128 * (4 * 64 + 5)
    assert alone["ops"][0]["compute_s"] == pytest.approx(given["ops"][0]["compute_s"], rel=1e-12)
    assert alone["total_s"] > 0 and math.isfinite(alone["total_s"])


def test_a_matmul_given_by_attributes_alone_is_priced(tmp_path, capsys):
    data = _predict_json(capsys, _workload(tmp_path, "  - {name: a, kind: matmul, attrs: {m: 64, n: 32, k: 16}}\n"))
    assert data["flops_total"] == 2 * 64 * 32 * 16 and data["total_s"] > 0


# ------------------------------------------------------------------------ 2, 3, 5, 7: sizes
def _matmul(shape: str) -> str:
    return (f"  - {{name: mm, kind: matmul, inputs: [{{shape: {shape}, dtype: bf16}}, "
            "{shape: [64, 64], dtype: bf16, role: weight}]}\n")


@pytest.mark.parametrize("ops, field, says", [
    # item 2: a dimension past int64 (it overflowed converting to C long), and an attribute of 1e308
    (_matmul("[100000000000000000000, 64, 64]"), "ops.0(mm).inputs.0.shape", "positive integer of at most 2**62"),
    ("  - {name: mm, kind: matmul, attrs: {m: 1.0e+308, n: 4, k: 4}}\n", "ops.0(mm).attrs.m",
     "must be a whole number from 1 to 2**62"),
    # item 3: leading dimensions whose int64 product wrapped to 0 (a ZeroDivisionError)
    (_matmul("[4294967296, 4294967296, 64, 64]"), "ops.0(mm).inputs.0.shape", "holds 7.56e+22 elements"),
    # item 5: an element-wise shape of 10**200 x 10**200 (an OverflowError converting to float)
    (f"  - {{name: ew, kind: elementwise, inputs: [{{shape: [{10**200}, {10**200}], dtype: bf16}}]}}\n",
     "ops.0(ew).inputs.0.shape", "positive integer of at most 2**62"),
    # item 7: a product past int64 that printed flops_total -2.5e24
    (_matmul("[23536862382, 580209510, 64, 64]"), "ops.0(mm).inputs.0.shape", "holds 5.59e+22 elements"),
])
def test_sizes_past_the_limit_are_refused_with_op_and_field(tmp_path, capsys, ops, field, says):
    error = _refused(capsys, ["predict", str(_workload(tmp_path, ops)), "--on", "h100-sxm"])
    assert f"w.yaml:4: {field}" in error and says in error, error


def test_the_largest_sizes_allowed_give_finite_non_negative_numbers():
    """Item 7's principle at the limit: a tensor of 2**62 elements and a count of 2**62 still give
    exact sizes and finite, non-negative FLOPs, bytes and times."""
    big = Op(name="mm", kind="matmul", count=MAX_SIZE,
             inputs=(TensorSpec(shape=(2**29, 2**29, 4, 4), dtype="bf16"), TensorSpec(shape=(4, 4), dtype="bf16")),
             outputs=(TensorSpec(shape=(2**29, 2**29, 4, 4), dtype="bf16"),))
    assert big.inputs[0].numel == MAX_SIZE
    evaluation = evaluate(Graph(name="g", ops=[big]), load_for_prediction("h100-sxm"))
    op = evaluation.ops[0]
    assert op.flops == 2.0 * 2**58 * 4 * 4 * 4 * MAX_SIZE  # batch 2**58 of 4x4x4 products, 2**62 times
    for value in (op.flops, op.compute_s, op.total_s, evaluation.total_s, *op.memory_s.values()):
        assert math.isfinite(value) and value >= 0


def test_one_past_the_limit_is_refused():
    tensor = TensorSpec(shape=(2**31, 2**31 + 1), dtype="bf16")
    with pytest.raises(WorkloadError, match=r"inputs\.0\.shape.*at most 2\*\*62"):
        Graph(name="g", ops=[Op(name="e", kind="elementwise", inputs=(tensor,))])
    with pytest.raises(WorkloadError, match=r"count must be a positive integer of at most 2\*\*62"):
        Graph(name="g", ops=[Op(name="e", kind="copy", count=MAX_SIZE + 1)])


# -------------------------------------------------------------------- 8: flops_per_element
@pytest.mark.parametrize("value, says", [("1.0e+300", "must be a number from 0 to 1e+06, got 1e+300"),
                                         (".inf", "must be finite"), ("-1", "must not be negative")])
def test_flops_per_element_out_of_range_is_refused(tmp_path, capsys, value, says):
    ops = (f"  - {{name: ew, kind: elementwise, attrs: {{flops_per_element: {value}}}, "
           "inputs: [{shape: [1000000, 1000000], dtype: bf16}]}\n")
    error = _refused(capsys, ["predict", str(_workload(tmp_path, ops)), "--on", "h100-sxm"])
    assert "w.yaml:4: ops.0(ew).attrs.flops_per_element" in error and says in error, error


# ------------------------------------------------------------------ 4: a graph that takes no time
def test_a_graph_that_takes_no_time_prints_no_share(tmp_path, capsys):
    """Issue 38 item 4: a copy of no tensors on groq-lpu-v1 (static mode, no launch cost) takes 0 s;
    the table printed 'share' by dividing by that total. A share of nothing is '-'."""
    path = _workload(tmp_path, "  - {name: a, kind: copy}\n")
    assert main(["predict", str(path), "--on", "groq-lpu-v1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line.split() for line in lines if line.startswith("a "))
    # (the total names its interval's basis, issue 32: here none, too few lpu measurements)
    assert row[-2:] == ["-", "compute"] and lines[-1].startswith("total 0 s") \
        and lines[-1].endswith("; by bound: compute -")
    assert _predict_json(capsys, path, "groq-lpu-v1")["total_s"] == 0.0


def test_the_scheduling_chart_of_a_graph_without_flops_has_no_program_point(tmp_path, capsys):
    """Item 4 through ``roofline --kind scheduling``: the whole-program point divided the FLOPs by a
    total of 0 s; a program without FLOPs or time has no point on a FLOP/s chart (as an op has none)."""
    from perfmodel.roofline.charts import scheduling_roofline
    from perfmodel.workload.io import load_graph

    path = _workload(tmp_path, "  - {name: a, kind: copy}\n")
    groq = load_for_prediction("groq-lpu-v1")
    evaluation = evaluate(load_graph(path), groq)
    assert evaluation.total_s == 0.0
    assert all(point.kind != "program" for point in scheduling_roofline(groq, evaluation).points)
    error = _refused(capsys, ["roofline", str(path), "--on", "groq-lpu-v1", "--kind", "scheduling",
                              "-o", str(tmp_path / "chart.png")])
    assert "groq-lpu-v1 charges no launch cost in this mode: no scheduling ceiling to draw" in error


# --------------------------------------------------------------------------- 6: torch traces
@pytest.mark.parametrize("duration", [{"a": 1}, [1, 2], True, "soon"])
def test_a_trace_event_whose_duration_is_not_a_number_is_named(tmp_path, duration):
    """Issue 38 item 6: a cpu_op whose ``dur`` is an object or a list, then a second cpu_op on the
    same thread: ordering the thread's ops raised a TypeError; now a reader error names the file, the
    event and the field."""
    from calibration.readers import read_torch_trace
    from calibration.readers.common import ReaderError

    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": duration},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    with pytest.raises(ReaderError) as error:
        read_torch_trace(path)
    assert str(error.value) == (f"{path}:event 0: column 'dur': missing or non-numeric duration in 'aten::mm': "
                                f"expected a number of microseconds, got {duration!r}")


def test_a_trace_event_whose_start_is_not_a_number_is_named(tmp_path):
    from calibration.readers import read_torch_trace
    from calibration.readers.common import ReaderError

    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 20},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": [10], "dur": 5}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    with pytest.raises(ReaderError, match=r"trace\.json:event 1: column 'ts': expected a start time in microseconds "
                                          r"in 'aten::add', got \[10\]"):
        read_torch_trace(path)


# ------------------------------------------------------------------------ 9: validation rows
@pytest.mark.parametrize("batch", ["-8", "0", "2.5", "+8"])
def test_a_validation_row_with_a_count_that_is_not_one_is_refused(tmp_path, capsys, batch):
    """Issue 38 item 9: batch -8 was read as no batch and predicted as batch 1 (-96% error, exit 0).
    A count column that starts with a number must start with a positive whole one."""
    from perfmodel.validation import default_csv

    header, row = default_csv().read_text(encoding="utf-8").splitlines()[:2]
    fields = row.split(",")
    assert header.split(",")[5] == "batch" and fields[5] == "768"
    fields[5] = batch
    path = tmp_path / "measurements.csv"
    path.write_text(f"{header}\n{','.join(fields)}\n", encoding="utf-8")
    error = _refused(capsys, ["validate", "--csv", str(path)])
    assert f"measurements.csv: row 2: column 'batch': '{batch}' is not a count; expected a positive whole number" \
        in error, error
    fields[5] = "768 (static)"  # a note after the count is read as before
    path.write_text(f"{header}\n{','.join(fields)}\n", encoding="utf-8")
    assert main(["validate", "--csv", str(path), "--json"]) == 0
    (predicted,) = json.loads(capsys.readouterr().out)["rows"]
    assert predicted["predicted"] > 0 and "batch 768" in predicted["how"]


# ------------------------------------------------------------------ 12: extends through a link
SPEC = """\
schema_version: 1
name: {name}
family: gpu
vendor: Test
description: a minimal valid spec
sources:
  sheet: {{url: https://example.com/sheet, kind: datasheet}}
compute:
  mma: {{kind: matrix, units: 4, peak: {{bf16: 100 TFLOP/s}}, source: sheet}}
memory:
  hbm: {{kind: dram, managed: hardware, capacity: 16 GB, bandwidth: 1 TB/s, source: sheet}}
scheduling:
  default_mode: dynamic
  modes:
    dynamic: {{kernel_launch: 5 us, source: sheet}}
power: {{tdp: 300 W, source: sheet}}
"""
CHILD = "schema_version: 1\nname: child\nextends: base.yaml\nfamily: gpu\nvendor: Test\ndescription: what-if\n"


def test_extends_through_a_link_that_leaves_the_directory_is_refused(tmp_path, capsys):
    """Issue 38 item 12: 'extends: base.yaml' where base.yaml is a link beside the spec to a file in
    another directory was followed (a name with a '/' or '..' was refused already)."""
    from perfmodel.hardware.loader import load_hardware, validate_spec_file

    outside, specs = tmp_path / "outside", tmp_path / "specs"
    outside.mkdir()
    specs.mkdir()
    (outside / "base.yaml").write_text(SPEC.format(name="base"), encoding="utf-8")
    (specs / "base.yaml").symlink_to(outside / "base.yaml")
    child = specs / "child.yaml"
    child.write_text(CHILD, encoding="utf-8")
    [problem] = validate_spec_file(child)
    assert problem.field == "extends" and problem.line == 3
    assert problem.message == (f"'extends: base.yaml' is a link to {(outside / 'base.yaml').resolve()}, outside the spec's "
                               f"directory ({specs}); extends reads only files in that directory (copy the file there)")
    error = _refused(capsys, ["predict", "elementwise_chain", "--on", str(child)])
    assert "is a link to" in error and "outside the spec's directory" in error
    # A link to a file in the same directory is that directory's file, and is read.
    (specs / "base.yaml").unlink()
    (specs / "real.yaml").write_text(SPEC.format(name="base"), encoding="utf-8")
    (specs / "base.yaml").symlink_to(specs / "real.yaml")
    assert load_hardware(child).peak_flops_per_s("bf16") == 100e12


# ---------------------------------------------------------------------------- 13: atomic writes
def test_rewriting_an_output_keeps_its_mode_and_leaves_no_temporary_file(tmp_path):
    """Issue 38 item 13: a rewritten 0600 file came back 0644; a new file gets what open() would give;
    missing parent directories are created; nothing is left beside the output."""
    import os
    import stat

    from perfmodel.yaml_source import default_file_mode, write_text_atomically

    private = tmp_path / "private.yaml"
    private.write_text("old\n", encoding="utf-8")
    private.chmod(0o600)
    write_text_atomically(private, "new\n")
    assert private.read_text(encoding="utf-8") == "new\n" and stat.S_IMODE(private.stat().st_mode) == 0o600
    fresh = tmp_path / "made" / "for" / "it.yaml"
    write_text_atomically(fresh, "x\n")
    assert fresh.read_text(encoding="utf-8") == "x\n"
    assert stat.S_IMODE(fresh.stat().st_mode) == default_file_mode()
    assert sorted(os.listdir(tmp_path)) == ["made", "private.yaml"] and os.listdir(fresh.parent) == ["it.yaml"]


def test_a_failed_write_removes_its_temporary_file_and_keeps_the_old_output(tmp_path):
    from perfmodel.errors import PerfmodelError
    from perfmodel.yaml_source import atomic_output

    output = tmp_path / "table.parquet"
    output.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="writer failed"), atomic_output(output, ".parquet") as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("writer failed")
    assert [path.name for path in tmp_path.iterdir()] == ["table.parquet"] and output.read_bytes() == b"old"
    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    with pytest.raises(PerfmodelError, match=r"cannot write .*file/out\.yaml: .*file is a file, not a directory"):
        with atomic_output(blocked / "out.yaml"):
            pass


def test_a_rewritten_sweep_table_and_chart_keep_their_mode(tmp_path, capsys):
    """The Parquet writer of ``sweep -o`` and the chart writer go through the same helper."""
    import stat

    pytest.importorskip("pyarrow")
    table, chart = tmp_path / "sweep.parquet", tmp_path / "chart.png"
    for path in (table, chart):
        path.write_bytes(b"")
        path.chmod(0o600)
    assert main(["sweep", "--on", "h100-sxm", "--grid", "batch=1,2", "-o", str(table), "--json"]) == 0
    assert main(["roofline", "elementwise_chain", "--on", "h100-sxm", "-o", str(chart)]) == 0
    capsys.readouterr()
    for path in (table, chart):
        assert path.stat().st_size > 0 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(path.name for path in tmp_path.iterdir()) == ["chart.png", "sweep.parquet"]


# ------------------------------------------------------------- 14: the dtype options of a command
def test_a_missing_engine_names_the_options_of_the_command_that_set_dtypes(tmp_path, capsys):
    """Issue 38 item 14: the error suggested '--dtype', which llm does not have (nor predict)."""
    llm = _refused(capsys, ["llm", "--model", "llama-3.1-8b", "--on", "tpu-v5e", "--weights", "fp8",
                            "--activations", "fp8"])
    assert "has no engine for a matmul op in fp8" in llm and "--dtype" not in llm
    assert "Here --weights, --activations and --kv set the dtypes (e.g. --weights bf16 --activations bf16)." in llm
    ops = ("  - {name: mm, kind: matmul, inputs: [{shape: [64, 64], dtype: fp8}, "
           "{shape: [64, 64], dtype: fp8, role: weight}]}\n")
    predict = _refused(capsys, ["predict", str(_workload(tmp_path, ops)), "--on", "tpu-v5e"])
    assert "--dtype" not in predict
    assert predict.rstrip().endswith("Choose another dtype or device. Here the workload file sets the dtypes "
                                     "(each tensor's dtype, or an op's attrs.dtype).")


# ------------------------------------------------------------------ 10: fusion and added ops
FUSING = [("h100-sxm", "graph"), ("mi300x", "graph"), ("tpu-v5e", "graph"), ("groq-lpu-v1", "static"),
          ("ibm-spyre", "static"), ("cerebras-wse-3", "static")]
SHAPE_KEEPING = ("elementwise", "copy", "norm", "softmax")  # one input, one output of the same shape


def _activation(shape) -> TensorSpec:
    return TensorSpec(shape=tuple(shape), dtype="bf16")


def _shape_keeping(kind: str, name: str, shape) -> Op:
    return Op(name=name, kind=kind, inputs=(_activation(shape),), outputs=(_activation(shape),))


def _consistent_chain(draw, st) -> Graph:
    """A chain whose every op reads exactly what the op before it wrote: a matmul (tokens x width by a
    width x out weight), shape-keeping ops and a reduction over the last axis."""
    rows, width = draw(st.integers(1, 4096)), draw(st.integers(1, 8192))
    ops: list[Op] = []
    for index in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("matmul", "reduction", *SHAPE_KEEPING)))
        name = f"op{index}"
        if kind == "matmul":
            out = draw(st.integers(1, 8192))
            ops.append(Op(name=name, kind="matmul", inputs=(_activation((rows, width)), TensorSpec(
                shape=(width, out), dtype="bf16", role="weight")), outputs=(_activation((rows, out)),)))
            width = out
        elif kind == "reduction":
            ops.append(Op(name=name, kind="reduction", inputs=(_activation((rows, width)),),
                          outputs=(_activation((rows, 1)),)))
            width = 1
        else:
            ops.append(_shape_keeping(kind, name, (rows, width)))
    return Graph(name="chain", ops=ops, edges=[(a.name, b.name) for a, b in zip(ops, ops[1:], strict=False)])


def test_adding_an_op_that_reads_what_its_producer_wrote_never_makes_a_graph_faster():
    """Issue 38 item 10. In a fusing mode an added op may rightly save time where shapes do not match:
    the IR's graph inputs and outputs are the tensors no op writes or reads, so a consumer that now also
    reads an op's whole output makes it an intermediate, and a consumer whose inputs are larger than its
    producer's output (a residual add: the rest is a graph input) reads more from its kernel once an added
    op in that kernel writes the rest (costs/fusion.py). Mismatched shapes cannot be refused: the
    project's own graphs link ops whose shapes differ (a fused gate/up projection read as two halves,
    backward graphs' ordering edges, LLM stage graphs written by llm --graph-out). What must hold: in a
    graph where every op reads what its producer wrote, adding a connected op that reads its producer's
    whole output and writes the same shape (fed on to the next op) changes no graph input or output,
    so it never makes the graph faster."""
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from perfmodel.hardware.loader import load_hardware
    from perfmodel.roofline.arrays import evaluate_arrays

    def total(graph, hardware, mode) -> float:
        evaluation = evaluate_arrays(graph, hardware, mode=mode)
        return float(evaluation.total_s.sum() + evaluation.program_s)

    @seed(38)
    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data):
        spec, mode = data.draw(st.sampled_from(FUSING), label="spec, mode")
        hardware = load_hardware(spec)
        graph = _consistent_chain(data.draw, st)
        position = data.draw(st.integers(1, len(graph.ops)), label="after op")
        producer = graph.ops[position - 1]
        extra = _shape_keeping(data.draw(st.sampled_from(SHAPE_KEEPING), label="added kind"), "extra",
                               producer.outputs[0].shape)
        ops = [*graph.ops[:position], extra, *graph.ops[position:]]
        edges = [(producer.name, extra.name)]
        edges += [(a.name, b.name) for a, b in zip(graph.ops, graph.ops[1:], strict=False) if a is not producer]
        if position < len(graph.ops):  # the added op feeds the op that read the producer instead
            edges.append((extra.name, graph.ops[position].name))
        bigger = Graph(name="bigger", ops=ops, edges=edges)
        before, after = total(graph, hardware, mode), total(bigger, hardware, mode)
        assert after >= before * (1 - 1e-9), (spec, mode, [op.kind for op in graph.ops], extra.kind, position,
                                              before, after)

    check()


# ------------------------------------------------------------------ 15: bench's default threads
def _tiny_suite(quick: bool = False):
    from calibration.harness import _cases

    return [case for case in _cases() if case.name in ("add_1000", "gemm_fp32_64")]


def test_bench_runs_one_thread_by_default_and_says_so(tmp_path, capsys, monkeypatch):
    """Issue 38 item 15: all CPUs by default gave a 2-CPU machine data that ``calibrate`` refused (a
    parallel region waits whole scheduler slices for a preempted thread); one thread is the default,
    printed, recorded in every row, and --threads still chooses."""
    import csv

    import calibration.harness as harness

    monkeypatch.setattr(harness, "suite", _tiny_suite)
    out = tmp_path / "bench.csv"
    assert main(["bench", "--quick", "--rounds", "1", "-o", str(out)]) == 0
    error = capsys.readouterr().err
    assert f"threads: 1 of {harness.available_cpus()} CPUs (the default" in error
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert sorted(row["name"] for row in rows) == ["add_1000", "gemm_fp32_64"]
    assert {row["threads"] for row in rows} == {"1"} and all("1 thread)" in row["device"] for row in rows)
    assert main(["bench", "--quick", "--rounds", "1", "--threads", "2", "-o", str(out)]) == 0
    assert "threads: 2 of" in capsys.readouterr().err
    assert {row["threads"] for row in csv.DictReader(out.open(encoding="utf-8"))} == {"2"}


def test_the_harness_default_is_the_documented_one():
    from calibration.harness import DEFAULT_THREADS, run_suite
    from perfmodel.hardware.loader import load_hardware

    records = run_suite(load_hardware("epyc-zen4-2vcpu"), cases=_tiny_suite()[:1], rounds=1, quick=True)
    assert DEFAULT_THREADS == 1 and records[0].threads == DEFAULT_THREADS


# ------------------------------------------------------------------ 13: SIGTERM during a streamed write
def test_a_terminated_sweep_leaves_no_temporary_file(tmp_path):
    """``kill PID`` (SIGTERM) while ``sweep`` streams a 64-million-point grid to Parquet left its
    temporary file behind (1.6 GB, found while checking item 11): SIGTERM now unwinds like Ctrl-C, the
    atomic write's ``finally`` removes the temporary file, and the exit code is 143. What stays is what
    the run is meant to keep (issue 34): its finished chunks, whole, in ``table.parquet.parts/``, for
    the same command to resume from."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    grid = ",".join(str(value) for value in range(1, 401))
    root = Path(__file__).resolve().parent.parent
    process = subprocess.Popen(
        [sys.executable, "-m", "perfmodel", "sweep", "--on", "h100-sxm", "--grid", f"batch={grid}", "--grid",
         f"seq={grid}", "--grid", f"heads={grid}", "-o", str(tmp_path / "table.parquet")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    parts = tmp_path / "table.parquet.parts"
    deadline = time.monotonic() + 120
    while not (list(tmp_path.glob(".table.parquet.*")) and list(parts.glob("chunk-*.npz"))) and \
            process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process.poll() is None, process.communicate()[1].decode()[-500:]  # still streaming
    process.send_signal(signal.SIGTERM)
    _, error = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM and "perfmodel: terminated" in error.decode()
    assert "Traceback" not in error.decode() and [path.name for path in tmp_path.iterdir()] == [parts.name]
    kept = sorted(path.name for path in parts.iterdir())
    assert kept[-1] == "manifest.json" and kept[:-1] == [f"chunk-{index:08d}.npz" for index in range(len(kept) - 1)]
    assert f"{len(kept) - 1} of 256 chunks of this sweep are kept" in error.decode()
