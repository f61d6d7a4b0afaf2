"""No traceback on any input and nothing impossible accepted (issue 17): the seeded mutation fuzzer of
tests/fuzzing.py over every input kind of the command line (tests/fuzz_inputs.py; 4,000 cases over
five areas here, issue 38; thousands per kind in benchmarks/fuzz.py), and one small explicit
regression test per class of bug it found."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.errors import PerfmodelError
from tests.fuzz_inputs import KINDS
from tests.fuzzing import ALIAS_BOMB, FIXTURES, ROOT, run_case

# Cases per kind, in chunks of CHUNK (one test each). 4,000 inputs over the five areas of issue 38
# (AREAS): about 40 s of CPU on the development machine (`benchmarks/fuzz.py` prints the time per case;
# it runs the same kinds with thousands of cases each). The slowest kinds get fewer cases: an accepted
# spec also predicts a workload, an LLM config builds the model's graphs, a bench row prices its graph,
# the command lines include charts.
CASES = {"spec": 300, "workload": 400, "llm-config": 200, "ncu": 300, "torch-trace": 300, "spyre": 300,
         "generic": 300, "bench": 250, "serve-trace": 300, "length-csv": 250, "args": 300, "extremes": 800}
CHUNK = 50
AREAS = {"specs": ("spec",), "workloads": ("workload", "llm-config"),
         "calibration readers": ("ncu", "torch-trace", "spyre", "generic", "bench"),
         "command lines": ("args", "serve-trace", "length-csv"), "extreme values": ("extremes",)}
MINIMUM_CASES = 4000  # issue 38: ">= 4,000 inputs across the same five areas"


@pytest.mark.parametrize("kind, start", [(kind, start) for kind, count in CASES.items()
                                         for start in range(0, count, CHUNK)])
def test_mutated_inputs_exit_0_or_2_and_accept_nothing_impossible(kind, start, tmp_path):
    """Every case exits 0 (accepted, physical values only) or 2 (one clear error), never 70, never a
    traceback; the mutations do break inputs (some exit 2) and some survive (exit 0)."""
    verdicts = [run_case(kind, index, tmp_path / str(index)) for index in range(start, start + CHUNK)]
    crashes = [verdict for verdict in verdicts if verdict.crashed]
    assert not crashes, f"{len(crashes)} of {CHUNK} cases failed:\n\n" + "\n\n".join(
        verdict.reproducer() for verdict in crashes[:3])
    codes = {verdict.code for verdict in verdicts}
    assert codes == {0, 2}, f"{kind} cases {start}..{start + CHUNK - 1} only exit {codes}"


def test_kinds_cover_every_input_of_the_issue():
    assert set(CASES) == set(KINDS) == {kind for kinds in AREAS.values() for kind in kinds}
    assert sum(CASES.values()) >= MINIMUM_CASES
    assert all(count % CHUNK == 0 for count in CASES.values())  # every case of CASES runs


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err + captured.out


# -------------------------------------------------------------------------------- LLM configs
LLAMA = json.loads((ROOT / "workloads" / "llm" / "llama-3.1-8b.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("field, value, expected", [
    ("num_attention_heads", 0, "'num_attention_heads': expected a whole number from 1"),
    ("num_key_value_heads", 0, "'num_key_value_heads': expected a whole number from 1"),
    ("hidden_size", "4096", "'hidden_size': expected a whole number"),
    ("hidden_size", 4096.5, "'hidden_size': expected a whole number"),
    ("num_hidden_layers", -3, "'num_hidden_layers': expected a whole number"),
    ("vocab_size", 10**30, "'vocab_size': expected a whole number from 1 to 2147483647"),
    ("intermediate_size", None, "config lacks intermediate_size"),
    ("intermediate_size", [14336], "'intermediate_size': expected a whole number"),
    ("tie_word_embeddings", "false", "'tie_word_embeddings': expected true or false"),
    ("hidden_act", "bogus", "'hidden_act': unknown activation 'bogus'"),
    ("num_experts_per_tok", 4, "'num_experts_per_tok' (4) exceeds 'num_local_experts' (1)"),
    ("rope_theta", "bogus", "'rope_theta': expected RoPE's base"),
    ("rope_theta", 10**30, "'rope_theta': expected RoPE's base"),
    ("rope_theta", None, "'rope_theta': expected RoPE's base"),
])
def test_llm_config_fields_are_checked_where_they_are_read(field, value, expected, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, field: value}), encoding="utf-8")
    code, output = _run(["llm", "--model", str(path), "--on", "h100-sxm", "--condensed"], capsys)
    assert code == 2 and expected in output and str(path) in output


@pytest.mark.parametrize("raw, expected", [
    (b"[1, 2]", "a model config is a JSON object"),
    (b'{"hidden_size": NaN}', "NaN is not a JSON number"),
    (b'{"hidden_size": 4096, \xff}', "not a UTF-8 text file"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
], ids=["list", "nan", "not-utf8", "deep"])
def test_llm_config_files_that_are_not_configs(raw, expected, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_bytes(raw)
    code, output = _run(["llm", "--model", str(path), "--on", "h100-sxm", "--condensed"], capsys)
    assert code == 2 and expected in output


def test_llm_eager_capture_reports_a_config_field_transformers_refuses(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "rms_norm_eps": [1, 2]}), encoding="utf-8")
    code, output = _run(["llm", "--model", str(path), "--on", "h100-sxm"], capsys)
    assert code == 2 and "rms_norm_eps" in output


# -------------------------------------------------------------------------------- YAML documents
def test_yaml_alias_bombs_and_deep_nesting_are_refused_quickly(tmp_path, capsys):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_bytes(ALIAS_BOMB)
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000)
    for path in (bomb, deep):
        code, output = _run(["specs", "validate", str(path)], capsys)
        assert code == 2 and "refused" in output and str(path) in output
        code, output = _run(["predict", str(path), "--on", "h100-sxm"], capsys)
        assert code == 2 and "refused" in output


def test_workload_edges_must_be_pairs_of_op_names(tmp_path, capsys):
    text = (ROOT / "workloads" / "attention_naive.yaml").read_text(encoding="utf-8")
    path = tmp_path / "workload.yaml"
    path.write_text(text.replace("edges: []", "edges: [[attn.sdpa, [1, 2]]]"), encoding="utf-8")
    code, output = _run(["predict", str(path), "--on", "h100-sxm"], capsys)
    assert code == 2 and "edges.0: an edge is [producer, consumer], two op names" in output


@pytest.mark.parametrize("seq_q", [4096, 2**63])
def test_causal_attention_needs_no_more_queries_than_keys(seq_q, tmp_path, capsys):
    text = (ROOT / "workloads" / "attention_naive.yaml").read_text(encoding="utf-8")
    path = tmp_path / "workload.yaml"
    path.write_text(text.replace("seq_q: 2048", f"seq_q: {seq_q}"), encoding="utf-8")
    code, output = _run(["predict", str(path), "--on", "h100-sxm", "--json"], capsys)
    assert code == 2 and "seq_q" in output


# -------------------------------------------------------------------------------- hardware specs
ACHIEVABLE = (ROOT / "hardware_specs" / "gpu" / "h100-sxm-achievable.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("value", [".inf", "0", "-0.5", "1e300", ".nan"])
def test_efficiencies_are_finite_positive_and_plausible(value, tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    text, replaced = re.subn(r"(?m)^(    l2: )[0-9.e+-]+$", rf"\g<1>{value}", ACHIEVABLE)
    assert replaced == 1  # the overlay's fitted L2 efficiency (refits change its digits)
    path.write_text(text, encoding="utf-8")
    code, output = _run(["specs", "validate", str(path)], capsys)
    assert code == 2 and "efficiency.memory.l2: an efficiency multiplies a datasheet figure" in output


@pytest.mark.parametrize("override, expected", [
    ("memory.hbm.bandwidth=1e30TB/s", "outside the plausible range 1 kB/s .. 10 EB/s"),
    ("memory.hbm.bandwidth=1e-30TB/s", "outside the plausible range"),
    ("memory.hbm.capacity=1e30GB", "outside the plausible range 1 B .. 1 EB"),
    ("compute.tensor_cores.peak.bf16=1e30TFLOP/s", "outside the plausible range"),
])
def test_implausible_spec_quantities_are_refused(override, expected, capsys):
    code, output = _run(["predict", "attention_naive", "--on", "h100-sxm", "--set", override], capsys)
    assert code == 2 and expected in output


# -------------------------------------------------------------------------------- measurement files
def _calibrate(path: Path, spec: str, capsys, *extra: str) -> tuple[int, str]:
    return _run(["calibrate", "--spec", spec, "--measurements", str(path), "-o",
                 str(path.parent / "fitted.yaml"), *extra], capsys)


def test_a_csv_field_over_the_size_limit_names_the_file_and_line(tmp_path, capsys):
    text = (FIXTURES / "ncu_details_2023.csv").read_text(encoding="utf-8")
    path = tmp_path / "ncu.csv"
    path.write_text(text + '"0","' + "x" * 200_000 + "\n", encoding="utf-8")
    code, output = _calibrate(path, "h100-sxm", capsys)
    assert code == 2 and f"{path}:" in output and "field larger than field limit" in output


def test_corrupt_gzip_and_non_utf8_traces_are_clear_errors(tmp_path, capsys):
    raw = gzip.compress((FIXTURES / "torch_cpu_trace.json").read_bytes())
    corrupt = tmp_path / "trace.json.gz"
    corrupt.write_bytes(raw[:12] + b"\x00" * 8 + raw[20:])
    code, output = _calibrate(corrupt, "h100-sxm", capsys)
    assert code == 2 and "gzip" in output and str(corrupt) in output
    binary = tmp_path / "trace.json"
    binary.write_bytes(b'{"traceEvents": [{"name": "\xff\xfe"}]}')
    code, output = _calibrate(binary, "h100-sxm", capsys)
    assert code == 2 and "not a UTF-8 JSON file" in output


def _trace(events: list[dict]) -> dict:
    return {"schemaVersion": 1, "traceEvents": events}


MM = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 50.0,
      "args": {"External id": 1, "Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}}
KERNEL = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20.0, "dur": 5.0,
          "args": {"External id": 1}}


@pytest.mark.parametrize("change, expected", [
    (lambda events: events[0].update(args=True), "column 'args': expected a JSON object of arguments"),
    (lambda events: events[1].update(args=[1, 2]), "column 'args': expected a JSON object of arguments"),
    (lambda events: events[1]["args"].update({"External id": [1]}), "column 'External id': expected an integer id"),
    (lambda events: events[0]["args"].update({"External id": {"id": 1}}), "'External id': expected an integer id"),
    (lambda events: events[0]["args"].update({"Input type": [["float"], "float"]}), "column 'Input type': expected"),
    (lambda events: events[0]["args"].update({"Input Dims": [[64, "x"], [64, 64]]}), "Input Dims[0]"),
    (lambda events: events[1].update(dur=None), "column 'dur': expected a number of microseconds"),
    (lambda events: events[1].update(dur="5"), "column 'dur': expected a number of microseconds"),
])
def test_trace_events_are_checked_where_they_are_read(change, expected, tmp_path, capsys):
    events = json.loads(json.dumps([MM, KERNEL]))
    change(events)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(_trace(events)), encoding="utf-8")
    code, output = _calibrate(path, "h100-sxm", capsys)
    assert code == 2 and expected in output and str(path) in output


@pytest.mark.parametrize("event, change, expected", [
    (2, lambda event: event["args"].update(bytes="x"), "column 'bytes': 'x' is not a number"),
    (2, lambda event: event["args"].update(bytes=-5), "column 'bytes': -5.0 is not a count"),
    (0, lambda event: event["args"].update(cycles_ts=[-1, 0, 0, 0, 5]), "is not a 32-bit cycle counter"),
    (0, lambda event: event["args"].update(cycles_ts=[1, 2, 3, 3, 9]), "zero duration"),
])
def test_spyre_counters_and_byte_counts_are_checked(event, change, expected, tmp_path):
    from calibration.readers.spyre import read_spyre_torch_trace

    data = json.loads((FIXTURES / "spyre_torch_trace.json").read_text(encoding="utf-8"))
    change(data["traceEvents"][event])
    path = tmp_path / "spyre.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(PerfmodelError) as error:
        read_spyre_torch_trace(path)
    assert expected in str(error.value) and f"{path}:event {event}" in str(error.value)


BENCH_ROWS = (ROOT / "calibration" / "data" / "cpu_measurements.csv").read_text(encoding="utf-8")


@pytest.mark.parametrize("row, expected", [
    ("mm,0,us,", "zero duration"),
    ("mm,1e400,us,", "is not finite"),
    ("mm,14.968,us,-4", "column 'bytes': -4.0 is not a count"),
    ("mm,14.968,us,1e400", "column 'bytes': '1e400' is not finite"),
])
def test_generic_csv_durations_and_counters_are_physical(row, expected, tmp_path, capsys):
    path = tmp_path / "generic.csv"
    path.write_text(f"name,duration,duration_unit,bytes\n{row}\n", encoding="utf-8")
    code, output = _calibrate(path, "tpu-v5e", capsys)
    assert code == 2 and expected in output and f"{path}:2" in output


@pytest.mark.parametrize("column, value, expected", [
    ("duration_s", "inf", "column 'duration_s' must be more than zero and finite"),
    ("flops", "inf", "column 'flops' must be zero or more and finite"),
    ("spread_s", "-1", "column 'spread_s' must be zero or more"),
    ("count", "0", "column 'count': '0' is not a whole number of at least 1"),
    ("bytes_by_level", '{"dram": -1}', "expected a JSON object of finite numbers of at least 0"),
    ("bytes_by_level", '{"dram": Infinity}', "Infinity is not a JSON number"),
])
def test_bench_csv_values_are_physical(column, value, expected, tmp_path, capsys):
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(BENCH_ROWS)))[:5]
    rows[0][column] = value
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "bench.csv"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    code, output = _calibrate(path, "epyc-zen4-2vcpu", capsys)
    assert code == 2 and expected in output and f"{path}:2" in output


def test_roofline_measured_points_are_finite(tmp_path, capsys):
    path = tmp_path / "measured.csv"
    path.write_text("name,flops,bytes,duration_s\nmm,inf,1e6,1e-4\n", encoding="utf-8")
    code, output = _run(["roofline", "attention_naive", "--on", "h100-sxm", "--measured", str(path), "-o",
                         str(tmp_path / "chart.svg")], capsys)
    assert code == 2 and "column 'flops' must be more than zero and finite" in output


# -------------------------------------------------------------------------------- command lines
@pytest.mark.parametrize("argv, expected", [
    (["sweep", "--on", "h100-sxm", "--grid", "batch=1,8", "-o", "."], "is not a file name"),
    (["sweep", "--on", "h100-sxm", "--grid", "batch=1,8", "-o", ""], "is not a file name"),
    (["sweep", "--on", "h100-sxm", "--grid", "batch=1,8", "-o", "table.svg"], "unknown extension '.svg'"),
    (["roofline", "attention_naive", "--on", "h100-sxm", "-o", "chart.txt"], "unknown extension '.txt'"),
    (["train", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "8", "--global-batch", "16", "--seq",
      "1024", "--chart", "step"], "unknown extension '(none)'"),
    (["calibrate", "--spec", "h100-sxm", "--measurements", "x.csv", "-o", "fitted.txt"], "unknown extension"),
    (["calibrate", "--spec", "h100-sxm", "--measurements", "x.csv", "-o", "fitted.yaml", "--seed", "-1"],
     "--seed must be 0 or more"),
    (["calibrate", "--spec", "h100-sxm", "--measurements", "x.csv", "-o", "fitted.yaml", "--clock-hz", "0"],
     "--clock-hz must be a finite number more than zero"),
    (["bench", "--rounds", "0", "-o", "bench.csv"], "--rounds must be at least 1, got 0"),
    (["capture", "model.txt:build", "--input-shape", "1x8", "-o", "graph.yaml"], "model.txt does not end in .py"),
    (["capture", "model.py:build", "--input-shape", "1x8", "-o", "graph.txt"], "unknown extension '.txt'"),
    # The benchmark's fuzzer found a batch of 10^24 sequences overflowing a tensor size (exit 70).
    (["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--condensed", "--chips", "2", "--batch",
      "999999999999999999999999", "--activations", "tf32"], "is more than 2,147,483,647 sequences"),
    (["llm", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--batch", "1,2147483648"],
     "batch 2147483648 is more than 2,147,483,647 sequences"),
    (["size", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--mode", "graph", "--rate", "2/s", "--ttft-p99", "1s",
      "--requests", "6", "--json", "--seed", "-1"], "the seed must be at least 0, got -1"),
    (["serve", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--rate", "2/s", "--requests", "6", "--seed", "-1"],
     "the seed must be at least 0, got -1"),
    (["roofline", "attention_naive", "--on", "", "-o", "chart.svg"], "argument --on: give at least one spec name"),
    (["predict", "attention_naive", "--on", ","], "argument --on: give at least one spec name"),
])
def test_bad_outputs_and_numbers_exit_2_before_any_work(argv, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, output = _run(argv, capsys)
    assert code == 2 and expected in output
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("where", ["module", "factory"])
def test_a_captured_file_that_calls_sys_exit_is_bad_input(where, tmp_path, monkeypatch, capsys):
    """SystemExit is no Exception: a module (or factory) calling sys.exit(0) ended perfmodel with exit 0."""
    source = tmp_path / "model.py"
    body = "    sys.exit(0)\n" if where == "factory" else "    return None\n"
    source.write_text(("import sys\nsys.exit(0)\n" if where == "module" else "import sys\n")
                      + "def build():\n" + body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, output = _run(["capture", f"{source}:build", "--input-shape", "1x8", "-o", "graph.yaml"], capsys)
    assert code == 2 and "SystemExit" in output and not (tmp_path / "graph.yaml").exists()


def test_every_help_prints(capsys):
    """``calibrate --help`` crashed: a '%' in its help text (argparse formats help with %)."""
    for command in ("calibrate", "bench", "sweep", "roofline", "train", "llm", "serve", "size", "predict", "capture"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0 and "usage:" in capsys.readouterr().out


def test_writing_onto_a_directory_is_a_clear_error(tmp_path):
    from perfmodel.yaml_source import write_text_atomically

    with pytest.raises(PerfmodelError, match="it is a directory"):
        write_text_atomically(tmp_path, "text")
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------------------------- extreme values
@pytest.mark.parametrize("value", ["[4]", "[4, 8]", "{a: 1}"])
def test_a_dimension_attribute_given_as_a_list_is_refused(value, tmp_path, capsys):
    """The fuzzer's extreme-value kind (issue 38): ``batch: [4]`` passed the attribute check (an array is
    a sweep's) and reached the matmul rule as a Python list (exit 70, TypeError)."""
    path = tmp_path / "w.yaml"
    path.write_text("schema_version: 1\nname: t\nops:\n"
                    f"  - {{name: mm, kind: matmul, attrs: {{m: 2, n: 1, k: 2, batch: {value}}}}}\n", encoding="utf-8")
    code, output = _run(["predict", str(path), "--on", "h100-sxm", "--json"], capsys)
    assert code == 2 and "ops.0(mm).attrs.batch: must be a number" in output and str(path) in output


def test_a_matmul_of_a_scalar_tensor_is_refused(tmp_path, capsys):
    """The extreme-value kind, case 2218 (issue 38): a matmul whose second input has shape [] had no
    dimension for the cost rule to read n from (exit 70, IndexError)."""
    path = tmp_path / "w.yaml"
    path.write_text("schema_version: 1\nname: t\nops:\n  - {name: mm, kind: matmul, attrs: {n: 1, k: 64}, inputs: "
                    "[{shape: [256, 8, 2], dtype: bf16}, {shape: [], dtype: bf16}]}\n", encoding="utf-8")
    code, output = _run(["predict", str(path), "--on", "epyc-zen4-2vcpu", "--json", "--compiled"], capsys)
    assert code == 2 and "need at least one dimension each" in output and "ops.0(mm)" in output
