"""Labs 2 and 3 use the real PyTorch tools, show their figures, and leave the working directory alone (issue 16).

Each notebook is executed once (the session's ``notebook_runs``) in its own empty working directory, as
``tests/test_notebooks.py`` does; the tests then read the executed cells: the named tool is called in a
cell whose outputs are not empty, at least one PNG figure is displayed, and nothing was written to the
working directory (none of these cells announces a file). Both labs build this CPU's spec with
``perfmodel specs detect`` (no other hard-coded CPU spec), measure on the GPU in a branch guarded by
``torch.cuda.is_available()`` (else on this CPU), and add one row, with finite numbers, to Lab 1's
landscape table.
"""

import re

import nbformat
import pytest
import torch

from tests.notebook_runs import (
    NOTEBOOKS,
    check_cpu_spec_from_detect,
    code_cells,
    figure_count,
    gpu_branches,
    number_in,
    output_text,
    plain_text,
    printed_landscape_row,
)

LAB2 = "02_dataflow_execution_models"
LAB3 = "03_compilation_for_dataflow"
# Both labs together run in well under 90 s on the 2-core development machine (torch.compile included);
# the bound leaves room for a cold Inductor cache and a busy CI runner.
BOTH_LABS_S = 240

# tool call -> (notebook, a string its cell's output must contain)
TOOLS = {
    "torch.fx.symbolic_trace(block)": (LAB2, "call_module"),
    "torch.fx.symbolic_trace(encoder": (LAB2, "TraceError"),
    "capture(block16": (LAB2, "aten.addmm"),
    "torch._dynamo.explain(module)": (LAB3, "graph breaks"),
    "run_and_get_code(compiled_block": (LAB3, "cpp_fused"),
    "timing.measure(statement": (LAB3, "measured median"),  # torch.utils.benchmark.Timer, through the labs' helper
}


@pytest.fixture(scope="module")
def executed(notebook_runs):
    """name -> (executed notebook, files left in its working directory, seconds)."""
    return {name: notebook_runs(name) for name in (LAB2, LAB3)}


@pytest.mark.parametrize("call", TOOLS)
def test_each_tool_is_called_and_prints_its_result(executed, call):
    name, expected = TOOLS[call]
    notebook = executed[name][0]
    cells = code_cells(notebook, calling=call)
    assert cells, f"{name} has no cell calling {call}"
    outputs = [output_text(cell) for cell in cells]
    assert any(text.strip() for text in outputs), f"the cell calling {call} printed nothing"
    assert any(expected in text for text in outputs), f"the output of {call} lacks {expected!r}"


@pytest.mark.parametrize("name", [LAB2, LAB3])
def test_a_figure_is_shown_inline(executed, name):
    notebook = executed[name][0]
    assert sum(figure_count(cell) for cell in code_cells(notebook)), f"{name} displays no figure"


@pytest.mark.parametrize("name", [LAB2, LAB3])
def test_nothing_is_written_to_the_working_directory(executed, name):
    assert executed[name][1] == [], f"{name} wrote {executed[name][1]} into its working directory"


@pytest.mark.parametrize("name", [LAB2, LAB3])
def test_lab_layout(name):
    """A guarded Colab install cell first, an exercise and its check (the solution in notebooks/solutions/:
    tests/test_notebooks.py), questions last."""
    cells = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells
    code = [cell for cell in cells if cell.cell_type == "code"]
    assert 'if "google.colab" in sys.modules:' in code[0].source and "pip" in code[0].source
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# Lab")
    exercises = [cell for cell in code if "exercise" in cell.metadata.get("tags", [])]
    checks = [cell for cell in code if "check" in cell.metadata.get("tags", [])]
    assert checks and all("assert" in cell.source for cell in checks)
    assert exercises and code.index(exercises[0]) < code.index(checks[0])
    assert cells[-1].cell_type == "markdown" and "## Questions" in cells[-1].source


def test_both_labs_run_in_time(executed):
    assert sum(seconds for _, _, seconds in executed.values()) < BOTH_LABS_S


# --- this CPU's spec, the GPU path and the landscape row (issue 16, item 8) ------------------------------------


@pytest.mark.parametrize("name", [LAB2, LAB3])
def test_the_local_cpu_spec_comes_from_specs_detect(executed, name):
    check_cpu_spec_from_detect(executed[name][0], name)


# notebook -> (what the guarded GPU code must call, what its cell must call, what the cell prints on each path)
GPU_PATHS = {
    LAB2: ("torch.cuda.CUDAGraph()", "timing.measure(", {True: "(CUDA, bf16)", False: "this CPU (one thread, fp32)"}),
    LAB3: ("torch.compile(gpu_block)", "timing.measure(", {True: "torch.compile speed-up predicted on",
                                                          False: "threads. torch.compile speed-up"}),
}


@pytest.mark.parametrize("name", [LAB2, LAB3])
def test_a_gpu_path_measures_on_the_gpu_only_when_cuda_is_present(executed, name):
    notebook = executed[name][0]
    on_gpu, calls, prints = GPU_PATHS[name]
    branches = [(cell, code) for cell, code in gpu_branches(notebook) if on_gpu in code]
    assert branches, f"{name} has no GPU path guarded by torch.cuda.is_available() that calls {on_gpu}"
    cell, code = branches[0]
    assert calls in cell.source and "cuda" in code
    assert prints[torch.cuda.is_available()] in output_text(cell), output_text(cell)


def test_lab2_block_is_measured_here_beside_its_prediction(executed):
    cells = code_cells(executed[LAB2][0], calling="timed[\"eager\"] = timing.measure(")
    assert len(cells) == 1
    text = plain_text(cells[0])
    calls = re.search(r"one eager forward dispatches (\d+) aten calls \((\d+) of them priced ops", text)
    assert calls and int(calls.group(1)) > int(calls.group(2)) > 0, text
    rows = re.findall(r"^(eager|CUDA graph)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(dynamic|graph)\s", text, re.M)
    assert [row[0] for row in rows] == (["eager", "CUDA graph"] if torch.cuda.is_available() else ["eager"]), text
    assert all(float(value) > 0 for row in rows for value in (row[1], row[3], row[4]))


@pytest.mark.parametrize("name, lab", [(LAB2, 2), (LAB3, 3)])
def test_the_landscape_grows_the_row_of_this_lab(executed, name, lab):
    row = printed_landscape_row(executed[name][0], lab)
    if lab == 2:  # the H100 as a CUDA graph: the same peak and bandwidth, a program launch instead of a kernel launch
        assert row["label"] == "h100-sxm, graph mode: a CUDA graph (lab 2)"
        assert row["peak"] == pytest.approx(989.4) and row["bandwidth"] == pytest.approx(3350)
        ratios = re.search(r"gemm 4096 ([\d.]+)x, add 64M ([\d.]+)x the time; the attention block of section 5: ([\d.]+)x",
                           row["text"])
        assert ratios and float(ratios.group(1)) > 1 and float(ratios.group(2)) > 1 and float(ratios.group(3)) < 1
    else:  # this CPU at the measured GEMM rate: the peak column is the measured rate, the bandwidth is untouched
        rate = re.search(r"the GEMMs measured in section 6: ([\d.]+) GFLOP/s", row["text"])
        assert rate and row["peak"] * 1e3 == pytest.approx(float(rate.group(1)), rel=0.02)
        assert row["gemm bound"] == "compute"


@pytest.mark.parametrize("name", [LAB2, LAB3])
def test_perfmodel_plotting_helpers_draw_on_the_callers_axes(executed, name):
    source = "\n".join(cell.source for cell in code_cells(executed[name][0]))
    for call in re.findall(r"plotting\.plot_\w+\((?:[^()]|\([^()]*\))*\)", source):
        assert "ax=" in call, f"{name}: {call} draws on a figure of its own"


def test_lab3_reduce_overhead_runs_only_on_a_gpu_and_is_predicted_without_one(executed):
    """``torch.compile(mode="reduce-overhead")`` (CUDA graphs) is guarded by ``torch.cuda.is_available()``; without
    a GPU the cell prints what perfmodel predicts for the three versions on an H100, the CUDA-graph replay (graph
    mode, one launch) faster than the fused kernels launched one by one."""
    notebook = executed[LAB3][0]
    branches = [(cell, code) for cell, code in gpu_branches(notebook) if "mode='reduce-overhead'" in code]
    assert branches, "torch.compile(mode='reduce-overhead') is not guarded by torch.cuda.is_available()"
    outside = [cell for cell in code_cells(notebook, calling="reduce-overhead") if cell is not branches[0][0]]
    assert not any('mode="reduce-overhead"' in cell.source for cell in outside)
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert 'mode="reduce-overhead"' in markdown and "torch.cuda.is_available()" in markdown  # what it does on a GPU
    text = output_text(branches[0][0])
    if torch.cuda.is_available():
        assert "reduce-overhead (CUDA graph) measured" in text, text
    else:
        predicted = {label: number_in(rf"{label} ([\d.]+) ms", text.split("predicted on h100-sxm:", 1)[1])
                     for label in ("eager", "compiled", "reduce-overhead")}
        assert predicted["reduce-overhead"] < predicted["compiled"] <= predicted["eager"], predicted
