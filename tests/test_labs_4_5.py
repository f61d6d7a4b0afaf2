"""Labs 4 and 5: the profiler's memory timeline for real, three planted bugs with hidden solutions (issue 16).

Each notebook is executed once (the session's ``notebook_runs``) in its own empty working directory, as
``tests/test_notebooks.py`` does; the tests then read the executed cells. Lab 4 must profile with
``profile_memory=True``, export the memory timeline and draw it; Lab 5 must set three exercises whose
check cells reproduce the symptom and then fail until the fix is written (Exercise 3's bug is first found
with ``torch.profiler``), and whose reference solutions, kept in ``notebooks/solutions/05_solutions.md``,
appear nowhere in the executed outputs, yet pass the same checks when pasted into the exercise cells
(tests/test_notebooks.py runs them). Both labs measure on the GPU in branches guarded by
``torch.cuda.is_available()`` (else on this CPU) and add one row, with finite numbers, to Lab 1's landscape
table: Lab 4 this machine's memory at the bandwidth measured streaming a KV cache, Lab 5 its worked
example's HBM what-if.
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
    printed_landscape_row,
    solution_blocks,
)

LAB4 = "04_memory_systems"
LAB5 = "05_debugging_across_the_stack"
SOLUTIONS = NOTEBOOKS / "solutions" / "05_solutions.md"
# Both labs together run in ~40 s on the 2-core development machine; the bound leaves room for a busy runner.
BOTH_LABS_S = 180
# Phrases of the reference solutions that give an answer away: none may be printed by the notebook.
GIVEAWAYS = ["probs.amax(", "x32 = x.float()", "temperatures[:, None]", "dispatch-bound", "rsqrt(inf)",
             "data-dependent shape", "LlamaRMSNorm", "count % (256 * 5)"]


@pytest.fixture(scope="module")
def executed(notebook_runs):
    """name -> (executed notebook, files left in its working directory, seconds)."""
    return {name: notebook_runs(name) for name in (LAB4, LAB5)}


# --- both labs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [LAB4, LAB5])
def test_a_figure_is_shown_inline(executed, name):
    notebook = executed[name][0]
    assert sum(figure_count(cell) for cell in notebook.cells) >= 2, f"{name} displays fewer than two figures"


@pytest.mark.parametrize("name", [LAB4, LAB5])
def test_nothing_is_written_to_the_working_directory(executed, name):
    assert executed[name][1] == [], f"{name} wrote {executed[name][1]} into its working directory"


@pytest.mark.parametrize("name", [LAB4, LAB5])
def test_the_local_cpu_spec_comes_from_specs_detect(executed, name):
    assert len(check_cpu_spec_from_detect(executed[name][0], name)) == 1  # only the fallback


@pytest.mark.parametrize("name", [LAB4, LAB5])
def test_lab_layout(name):
    """Concepts first, a guarded Colab install cell first among the code, exercises with checks, questions last."""
    cells = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells
    code = [cell for cell in cells if cell.cell_type == "code"]
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# Lab")
    assert "**Concepts first.**" in cells[0].source
    assert 'if "google.colab" in sys.modules:' in code[0].source and "pip" in code[0].source
    checks = [cell for cell in code if "check" in cell.metadata.get("tags", [])]
    assert checks and all("assert" in cell.source for cell in checks)
    assert cells[-1].cell_type == "markdown" and "## Questions" in cells[-1].source


# notebook -> [(what the guarded GPU code must contain, what its cell must call, what it prints on each path)]
GPU_PATHS = {
    LAB4: [("'cuda'", "export_memory_timeline(", {True: "generate on cuda", False: "generate on cpu"}),
           ("torch.cuda.get_device_name()", "F.scaled_dot_product_attention(q, k, v)",
            {True: "(CUDA, bf16): K and V of one layer", False: "this CPU ("})],
    LAB5: [("torch.cuda.get_device_name()", "timing.measure(",
            {True: "on cuda, predicted on", False: "on cpu, predicted on"})],
}


@pytest.mark.parametrize("name", [LAB4, LAB5])
def test_a_gpu_path_measures_on_the_gpu_only_when_cuda_is_present(executed, name):
    notebook = executed[name][0]
    for on_gpu, calls, prints in GPU_PATHS[name]:
        branches = [(cell, code) for cell, code in gpu_branches(notebook) if on_gpu in code and calls in cell.source]
        assert branches, f"{name}: no branch guarded by torch.cuda.is_available() runs {on_gpu} in the cell calling {calls}"
        assert prints[torch.cuda.is_available()] in output_text(branches[0][0]), output_text(branches[0][0])
    if name == LAB4:
        timeline = code_cells(notebook, calling="export_memory_timeline(")[0].source
        assert 'device="cuda:0" if DEVICE == "cuda" else "cpu"' in timeline and "activities=ACTIVITIES" in timeline


def test_lab4_landscape_row_is_the_bandwidth_measured_on_the_kv_cache(executed):
    notebook = executed[LAB4][0]
    streamed = output_text(code_cells(notebook, calling="F.scaled_dot_product_attention(q, k, v)")[0])
    achieved = number_in(r"read in [\d.]+ ms \(median; IQR [\d.]+ ms\) = ([\d.]+) GB/s", streamed)
    assert achieved > 0 and number_in(r"measured / predicted ([\d.]+)", streamed) > 0
    row = printed_landscape_row(notebook, 4)
    assert row["bandwidth"] == pytest.approx(achieved, rel=0.05)  # .1f in one print, 4 digits in the other
    assert row["label"].endswith("measured on a KV cache (lab 4)") and row["add bound"].startswith("memory")


def test_lab5_landscape_row_is_the_hbm_what_if(executed):
    row = printed_landscape_row(executed[LAB5][0], 5)
    assert row["label"] == "h100-sxm, HBM 4.2 TB/s what-if (lab 5)" and row["bandwidth"] == pytest.approx(4200)
    add = number_in(r"add 64M ([\d.]+)% faster", row["text"])
    assert 15 < add <= 20.3  # HBM-bound: at most 1 - 3.35 / 4.2 = 20.2% faster
    assert number_in(r"gemm 4096 ([\d.]+)% faster", row["text"]) < add


@pytest.mark.parametrize("name", [LAB4, LAB5])
def test_perfmodel_plotting_helpers_draw_on_the_callers_axes(executed, name):
    source = "\n".join(cell.source for cell in code_cells(executed[name][0]))
    for call in re.findall(r"plotting\.plot_\w+\((?:[^()]|\([^()]*\))*\)", source):
        assert "ax=" in call, f"{name}: {call} draws on a figure of its own"


def test_both_labs_run_in_time(executed):
    assert sum(seconds for _, _, seconds in executed.values()) < BOTH_LABS_S


# --- Lab 4: the memory timeline -------------------------------------------------------------------------------


def test_lab4_profiles_memory_and_exports_the_timeline(executed):
    notebook = executed[LAB4][0]
    cells = code_cells(notebook, calling="profile_memory=True, record_shapes=True, with_stack=True")
    assert cells and "export_memory_timeline(" in cells[0].source and "tempfile.TemporaryDirectory()" in cells[0].source
    text = output_text(cells[0])
    assert number_in(r"export_memory_timeline: (\d+) time steps", text) > 100
    assert number_in(r"parameter\s+([\d.]+)", text) > 1  # the weights, MiB
    assert number_in(r"activation\s+([\d.]+)", text) > 1
    assert number_in(r"peak total: ([\d.]+) MiB", text) > number_in(r"live when generate returned: ([\d.]+) MiB", text)
    drawn = code_cells(notebook, calling="ax.stackplot(timeline.ms")
    assert drawn and figure_count(drawn[0]) == 1, "the memory timeline is not drawn"


def test_lab4_measured_weights_and_kv_cache_agree_with_perfmodel(executed):
    notebook = executed[LAB4][0]
    cells = code_cells(notebook, calling="memory_per_chip(tiny, scenario, Parallelism())")
    assert cells and "from_hf_config(config.to_dict()" in cells[0].source
    table = output_text(code_cells(notebook, calling="comparison = pd.DataFrame(rows)")[0])
    assert re.search(r"weights\s+6\.958\s+6\.958", table), table
    growth = output_text(code_cells(notebook, calling="measured = np.array(probe.points")[0])
    measured = number_in(r"= (\d+) per sequence", growth)
    assert measured == number_in(r"kv_bytes_per_token \(fp32\): (\d+)", growth) == 4096


def test_lab4_largest_single_op_allocation_is_one_call(executed):
    notebook = executed[LAB4][0]
    cells = code_cells(notebook, calling="light.key_averages()")
    assert cells and "with_stack=False" in cells[0].source and "profile_memory=True" in cells[0].source
    text = output_text(cells[0])
    total = number_in(r"the old label's number: ([\d.]+) MiB = what \S+ allocated over \d+ calls", text)
    single = number_in(r"largest single-op allocation: ([\d.]+) MiB by one call of aten::", text)
    jump = number_in(r"largest single jump in the memory timeline: ([\d.]+) MiB", text)
    assert single == pytest.approx(jump, rel=0.05) and total > 10 * single
    source = "\n".join(cell.source for cell in code_cells(notebook))
    assert "max(event.cpu_memory_usage for event in" not in source  # the old, mislabelled computation


# --- Lab 5: three planted bugs ----------------------------------------------------------------------------------


# What each check of Lab 5 says on the untouched skeleton, in order: the three planted bugs' symptoms, and
# Exercise 3's profiler step (before its fix) not done yet.
LAB5_UNTOUCHED = ["Exercise 1: symptom reproduced", "Exercise 2: symptom reproduced",
                  "Exercise 3, step 1: not done yet", "Exercise 3: symptom reproduced"]


def test_lab5_has_three_bugs_each_with_checks_that_see_the_symptom_and_fail_until_fixed(executed):
    notebook = executed[LAB5][0]
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    exercises = [cell for cell in code if "exercise" in cell.metadata.get("tags", [])]
    assert len(exercises) == len(LAB5_UNTOUCHED)
    for expected, cell in zip(LAB5_UNTOUCHED, exercises, strict=True):
        assert re.search(r"^\w+ = None$", cell.source, re.M), "the exercise cell should leave the fix to the student"
        check = code[code.index(cell) + 1]
        assert "check" in check.metadata.get("tags", []) and "assert" in check.source
        errors = [output for output in check.get("outputs", []) if output.output_type == "error"]
        assert errors and errors[0].ename == "AssertionError" and expected in errors[0].evalue, output_text(check)
    failures = output_text(code_cells(notebook, calling="for tool, failure in capture_failures(moe")[0])
    assert "TraceError" in failures and "DynamicOutputShapeException" in failures
    assert re.search(r"line \d+ of forward: if rows.numel\(\) == 0", failures), failures
    assert "inf or NaN in the output: 0" in output_text(code_cells(notebook, calling="out16 = rms_norm(x16")[0])
    timed = output_text(code_cells(notebook, calling='timing.measure("f(logits, temperatures)"')[0])
    assert "measured median" in timed and "IQR" in timed and re.search(r"IQR \d+% over \d+ blocks", timed)


def test_lab5_solutions_live_in_their_own_file_and_are_not_printed(executed):
    notebook = executed[LAB5][0]
    assert any("solutions/05_solutions.md" in cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    blocks = solution_blocks(SOLUTIONS)
    assert len(blocks) == 4, "one python block per exercise cell in the solutions file"
    printed = "".join(output_text(cell) for cell in notebook.cells if cell.cell_type == "code")
    sources = "\n".join(cell.source for cell in notebook.cells)
    for phrase in GIVEAWAYS:
        assert phrase in SOLUTIONS.read_text(encoding="utf-8"), f"{phrase!r} is not in the solutions any more"
        assert phrase not in printed and phrase not in sources, f"the notebook gives away {phrase!r}"
    for block in blocks:
        for line in (line.strip() for line in block.splitlines() if len(line.strip()) > 15):
            assert line not in printed, f"the notebook prints the solution line {line!r}"


def test_lab5_finds_the_performance_bug_with_the_profiler():
    """Exercise 3 is found with torch.profiler before it is fixed: the student's profile_ops returns
    ``key_averages()``, and the check compares the ops it names with call counts at two batch sizes (the
    reference solutions pass it: tests/test_notebooks.py, SKELETON_LABS)."""
    notebook = nbformat.read(NOTEBOOKS / f"{LAB5}.ipynb", as_version=4)
    step = next(cell for cell in code_cells(notebook, tag="exercise") if "def profile_ops" in cell.source)
    assert "raise NotImplementedError" in step.source and "PER_SEQUENCE_OPS = None" in step.source
    check = code_cells(notebook, calling="profile_ops(softmax_per_sequence", tag="check")
    assert len(check) == 1 and 'sort_by="self_cpu_time_total"' in check[0].source
    setup = code_cells(notebook, calling="from torch.profiler import")[0].source
    assert "ProfilerActivity.CUDA] if torch.cuda.is_available() else" in setup  # the kernels too, on a GPU
    block = solution_blocks(SOLUTIONS)[2]
    assert "prof.key_averages()" in block and 'sort_by="self_cpu_time_total"' in block
