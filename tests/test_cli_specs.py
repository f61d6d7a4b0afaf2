"""The command line through main(argv): output, --json contracts, exit code 2 on bad input."""

import json

import pytest

from perfmodel.cli import main
from perfmodel.hardware.loader import load_hardware


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_specs_list_json(capsys):
    code, out, _ = run(capsys, "specs", "list", "--json")
    assert code == 0
    entries = json.loads(out)
    assert len(entries) >= 14
    assert {"name", "family", "vendor"} <= set(entries[0])
    assert {entry["family"] for entry in entries} == {"gpu", "tpu", "wafer", "lpu", "spyre", "cpu"}


def test_specs_list_table_and_family_filter(capsys):
    code, out, _ = run(capsys, "specs", "list", "--family", "tpu")
    assert code == 0 and "tpu-v5e" in out and "h100-sxm" not in out
    code, _, err = run(capsys, "specs", "list", "--family", "fpga")
    assert code == 2 and "no spec of family 'fpga'" in err


def test_specs_show_text_and_json(capsys):
    code, out, _ = run(capsys, "specs", "show", "h100-sxm")
    assert code == 0
    assert "memory.hbm.bandwidth" in out and "3.35 TB/s" in out and "hpctech (datasheet-secondary)" in out
    code, out, _ = run(capsys, "specs", "show", "ibm-spyre", "--json")
    data = json.loads(out)
    assert data["memory"][0]["transfer_granule_bytes"] == 128
    assert data["field_sources"]["compute.pt_array.peak.fp16"] == "work-division"


def test_specs_validate(capsys, tmp_path):
    good = load_hardware("h100-sxm").origin
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nname: bad\n")
    code, out, _ = run(capsys, "specs", "validate", good, str(bad), "--json")
    assert code == 2
    results = json.loads(out)
    assert results[0]["valid"] and not results[1]["valid"]
    assert {problem["field"] for problem in results[1]["problems"]} >= {"family", "vendor", "compute"}
    code, out, _ = run(capsys, "specs", "validate", good)
    assert code == 0 and out.startswith("ok")


def test_specs_detect_writes_a_loadable_spec(capsys, tmp_path):
    target = tmp_path / "local.yaml"
    code, out, _ = run(capsys, "specs", "detect", "-o", str(target))
    assert code == 0 and target.exists()
    hardware = load_hardware(target)
    assert hardware.family == "cpu"
    assert hardware.source_of("compute.simd.peak.fp32").kind == "estimate"
    # An eager view costs the host a dispatch (priced by host_op): a detected spec must not price it at 0.
    assert hardware.scheduling.modes["dynamic"].host_op_s == pytest.approx(2.06e-6)
    assert hardware.source_of("scheduling.modes.dynamic.host_op").kind == "estimate"
    code, out, _ = run(capsys, "specs", "detect", "--json")
    assert json.loads(out)["compute"]["simd"]["units"] >= 1


def test_specs_compare_with_chart(capsys, tmp_path):
    chart = tmp_path / "rooflines.svg"
    code, out, _ = run(capsys, "specs", "compare", "h100-sxm", "ibm-spyre", "--json", "--chart", str(chart))
    assert code == 0 and chart.stat().st_size > 1000
    records = json.loads(out)
    h100 = records[0]
    assert h100["ridge_flop_per_byte"] == pytest.approx(989.4e12 / 3.35e12)


@pytest.mark.parametrize("argv, fragment", [
    (["specs", "show", "no-such-device"], "no spec named 'no-such-device'"),
    (["specs", "bogus"], "invalid choice: 'bogus'"),
    (["specs", "compare", "h100-sxm", "--chart", "x.gif"], "must end in .png, .svg or .pdf"),
    (["nonsense"], "invalid choice"),
])
def test_bad_input_exits_2_without_traceback(capsys, argv, fragment):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert fragment in err and "Traceback" not in err
    assert err.startswith("perfmodel: error:")


def test_models_and_workloads_list_and_names_in_any_case(capsys):
    import json

    from perfmodel.cli import main
    from perfmodel.llm.catalog import load_architecture, model_names

    assert main(["models", "list", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in models] == model_names()
    assert next(row for row in models if row["name"] == "mixtral-8x7b")["experts"] == 8
    assert main(["workloads", "list", "--json"]) == 0
    assert "transformer_block" in {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert main(["models"]) == 2  # an action is required: a clear error, no traceback
    assert "required" in capsys.readouterr().err
    assert load_architecture("Llama-2-7B").name == "llama-2-7b"
    assert load_hardware("H100-SXM").name == "h100-sxm"


def test_show_lists_the_cpu_execution_details(capsys):
    """The CPU spec's attention block, serial vector kernels and oneDNN call cost appear in 'specs show'."""
    code, out, _ = run(capsys, "specs", "show", "epyc-zen4-2vcpu")
    assert code == 0
    assert "compute.simd.attention_kv_block" in out and "512 keys" in out
    assert "compute.simd.vector_kernels_hide_memory" in out
    assert "scheduling.modes.dynamic.library_dispatch.gelu  4.4 us" in out
