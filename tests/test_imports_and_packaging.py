"""``import perfmodel`` stays light; the wheel carries the specs and workloads."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_perfmodel_imports_no_heavy_modules():
    code = ("import sys, perfmodel, perfmodel.units, perfmodel.hardware.model; "
            "print(__import__('json').dumps(sorted(m for m in ('torch','matplotlib','scipy','pandas','pydantic') "
            "if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []


def test_loading_a_spec_does_not_import_torch_or_matplotlib():
    code = ("import sys, perfmodel; perfmodel.load_hardware('h100-sxm'); "
            "print(__import__('json').dumps([m for m in ('torch','matplotlib','scipy') if m in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []


def test_wheel_contains_specs_and_workloads(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("perfmodel-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(name).name for name in names if name.startswith("perfmodel/data/hardware_specs/")}
    expected = {path.name for path in (ROOT / "hardware_specs").rglob("*.yaml")}
    assert expected and expected <= shipped
    assert any(name.startswith("perfmodel/data/workloads/") for name in names)
    assert any(name.startswith("calibration/") for name in names)
    assert "calibration/data/samples/spyre_ops_trace.json" in names  # lab 7's sample trace, where Colab finds it


def test_the_public_api_in_the_readme_resolves():
    import perfmodel

    for name in ("load_hardware", "evaluate", "sweep", "load_graph", "capture", "llm_predict", "parse_quantity",
                 "Graph", "Op", "TensorSpec", "Parameters", "catalog"):
        assert callable(getattr(perfmodel, name)), name
    block = perfmodel.load_graph("transformer_block")
    assert perfmodel.evaluate(block, perfmodel.load_hardware("ibm-spyre")).time_by_bound
