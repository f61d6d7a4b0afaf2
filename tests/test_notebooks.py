"""Every lab notebook runs top to bottom on the CPU, is committed without outputs, and ends with questions."""

import re
from pathlib import Path

import nbformat
import pytest

from tests.notebook_runs import (
    execute,
    exercise_results,
    solution_blocks,
    unbacked_speedups,
    unwarned_noisy_timings,
    with_solutions,
)

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


def test_there_are_six_labs_and_the_optional_seventh():
    assert [path.name[:2] for path in NOTEBOOKS][:6] == ["01", "02", "03", "04", "05", "06"]
    assert [path.name for path in NOTEBOOKS][6:] == ["07_spyre_deep_dive.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean_and_ends_with_questions(path):
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") and cell.get("execution_count") is None
               for cell in notebook.cells if cell.cell_type == "code"), "commit notebooks without outputs"
    assert notebook.cells[-1].cell_type == "markdown" and "## Questions" in notebook.cells[-1].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, notebook_runs):
    notebook_runs(path.stem)  # raises CellExecutionError, with the failing cell, on any error


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_noisy_timing_is_printed_without_its_warning(path, notebook_runs):
    """Run with busy background threads (notebook_runs' load generator), a lab may print noisy timings, but
    each one the labs' noise rule flags (< 5 blocks, IQR > 20% of the median) carries its WARNING."""
    notebook = notebook_runs(path.stem)[0]
    missing = unwarned_noisy_timings(notebook)
    assert not missing, f"{path.stem} prints noisy timings without a warning:\n" + "\n".join(missing)
    unchecked = unbacked_speedups(notebook)
    assert not unchecked, f"{path.stem} prints measured speed-ups without their timings' noise check:\n" + \
        "\n".join(unchecked)


def test_the_noise_checks_find_an_unwarned_timing_and_an_unchecked_speedup():
    """The two rules above fail on what they exist to catch: a noisy timing without its WARNING, a measured
    speed-up printed from raw medians (lab 3's old GPU line), and pass the helper's own lines."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from calibration.timing import Timing, speedup_line

    def printed(text):
        cell = new_code_cell("print(...)")
        cell.outputs = [new_output("stream", name="stdout", text=text)]
        return new_notebook(cells=[cell])

    steady = Timing(label="eager", times_s=(2.0e-3,) * 10, runs_per_block=5, threads=1)
    fast = Timing(label="compiled", times_s=(1.0e-3,) * 10, runs_per_block=5, threads=1)
    noisy = Timing(label="compiled", times_s=(1e-3, 1e-3, 2e-3), runs_per_block=5, threads=1)
    assert unwarned_noisy_timings(printed("compiled: median 1 ms, IQR 50% over 3 blocks of 5 runs on 1 thread\n"))
    assert not unwarned_noisy_timings(printed(f"compiled: {noisy.summary()}\n"))
    raw = "NVIDIA H100: torch.compile speed-up measured 1.52x, predicted on h100-sxm 1.40x\n"
    assert unbacked_speedups(printed(raw)) == [raw.strip()]
    assert unbacked_speedups(printed("correct: 9x faster than the loop\n"))
    for slow_one, fast_one in ((steady, fast), (steady, noisy)):
        text = speedup_line("speed-up", slow_one, fast_one) + "\ncorrect: 2x faster than the loop\n"
        assert not unbacked_speedups(printed(text)) and not unwarned_noisy_timings(printed(text)), text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_cpu_spec_is_built_with_its_dram_bandwidth_measured(path):
    """The OS reports no DRAM bandwidth and ``perfmodel specs detect`` assumes 12 GB/s per core: a lab that builds
    this CPU's spec measures it (``calibration.timing``'s STREAM triad), and the helper never gets a spec without
    the probe (issue 37: the labs' roofs and predictions against the bandwidth the machine streams)."""
    source = "\n".join(_code(cell) for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")
    if not any(call in source for call in ("detected_spec_yaml(", "timing.cpu_spec(", "timing.measured_cpu_spec(")):
        return  # the lab predicts on no CPU spec of its own
    assert "timing.measured_cpu_spec(" in source or "timing.dram_triad(" in source, "no DRAM probe"
    for call in re.findall(r"timing\.cpu_spec\(([^)]*)\)", source):
        assert "dram=" in call, f"timing.cpu_spec({call}) without its triad: use timing.measured_cpu_spec"
    for call in re.findall(r"detected_spec_yaml\((?:[^()]|\([^()]*\))*\)", source):  # one level of nested calls
        assert "dram=" in call, f"a spec that keeps the assumed DRAM bandwidth: {call}"


# Labs whose exercises are skeletons the student fills in; the reference solutions live in notebooks/solutions/.
SKELETON_LABS = ["01_accelerator_landscape", "02_dataflow_execution_models", "03_compilation_for_dataflow",
                 "04_memory_systems", "05_debugging_across_the_stack", "06_performance_modeling", "07_spyre_deep_dive"]


@pytest.mark.parametrize("name", SKELETON_LABS)
def test_no_solution_is_shown_in_the_notebook(name):
    notebook = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert not any("solution" in cell.metadata.get("tags", []) or cell.metadata.get("jupyter", {}).get("source_hidden")
                   for cell in code), "a (collapsed) solution cell is in the notebook"
    solutions = NOTEBOOKS_DIR / "solutions" / f"{name[:2]}_solutions.md"
    blocks = solution_blocks(solutions)
    exercises = [cell for cell in code if "exercise" in cell.metadata.get("tags", [])]
    assert exercises and len(blocks) == len(exercises), (len(blocks), len(exercises))
    sources = "\n".join(cell.source for cell in code)
    for block in blocks:  # no line of a solution that gives an answer away is in the notebook
        for line in (line.strip() for line in block.splitlines()):
            if len(line) > 25 and not line.startswith(("def ", "class ", '"""', "torch", "#")):
                assert line not in sources, f"{name} shows the solution line {line!r}"
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert f"solutions/{name[:2]}_solutions.md" in markdown
    for cell in exercises:  # each check right after its exercise, and allowed to fail in a Run All
        check = code[code.index(cell) + 1]
        assert {"check", "raises-exception"} <= set(check.metadata.get("tags", [])) and "assert" in check.source


@pytest.mark.parametrize("name", SKELETON_LABS)
def test_every_check_fails_on_the_untouched_skeleton(name, notebook_runs):
    results = exercise_results(notebook_runs(name)[0])
    assert results and all(verdict.startswith("failed:") for _, verdict in results), [v for _, v in results]


@pytest.mark.parametrize("name", SKELETON_LABS)
def test_every_check_passes_with_the_solution_file(name, tmp_path):
    """The solutions file's blocks pasted into the exercise cells; the notebook run up to its last check (without
    the background load: the checks verify the solutions, the notebook runs above verify the noise warnings)."""
    notebook = with_solutions(name, NOTEBOOKS_DIR / "solutions" / f"{name[:2]}_solutions.md")
    last_check = max(index for index, cell in enumerate(notebook.cells) if "check" in cell.metadata.get("tags", []))
    notebook.cells = notebook.cells[:last_check + 1]
    execute(notebook, tmp_path, load=0)
    results = exercise_results(notebook)
    assert results and all(verdict == "passed" for _, verdict in results), [v for _, v in results]
    assert list(tmp_path.iterdir()) == []


# --- Colab: each notebook runs as shipped on a fresh runtime (issue 37, item 5) ------------------------------------
# Colab has no checkout beside the notebook: only what the install cell installs (the perfmodel wheel: the packages
# perfmodel and calibration, with the specs, workloads and lab 7's sample trace as package data) and Colab's own
# packages. These checks are static: Colab cannot be run here.
NOT_IN_THE_WHEEL = {"tests", "benchmarks", "notebooks"}  # top-level folders of the checkout that pip does not install
REPO_FOLDERS = ("tests/", "benchmarks/", "notebooks/", "workloads/", "hardware_specs/", "calibration/data/", "../", "./")


def _code(cell) -> str:
    """A code cell's Python, its IPython magics (``%matplotlib``) left out."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())


def _first_string(call) -> str | None:
    import ast

    return call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) and \
        isinstance(call.args[0].value, str) else None


def colab_problems(notebook) -> list[str]:
    """What would break the notebook on a fresh Colab runtime: no install cell first, an import of a checkout folder
    that the wheel does not install, a shell or %run line, a path taken relative to the working directory, or a file
    looked up above the installed package (the checkout's root) without a fallback when it is not there."""
    import ast

    problems = []
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    install = ast.parse(_code(code[0])) if code else None
    guarded = [node for node in ast.walk(install) if isinstance(node, ast.If)
               and "google.colab" in ast.unparse(node.test) and "sys.modules" in ast.unparse(node.test)] if install else []
    pip = [ast.unparse(node) for guard in guarded for node in ast.walk(guard)
           if isinstance(node, ast.Call) and "pip" in ast.unparse(node) and "install" in ast.unparse(node)]
    if not pip or not any("[torch]" in ast.unparse(guard) for guard in guarded):
        problems.append("the first code cell is not the install cell (pip install perfmodel[torch] when google.colab "
                        "is loaded)")
    for number, cell in enumerate(code):
        if any(line.lstrip().startswith(("!", "%run", "%load", "%cd")) for line in cell.source.splitlines()):
            problems.append(f"code cell {number}: a shell, %run, %load or %cd line (paths of the checkout)")
        tree = ast.parse(_code(cell))
        for node in ast.walk(tree):
            roots = []
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                roots = [node.module.split(".")[0]]
            problems += [f"code cell {number}: imports {root} (not installed by pip)" for root in roots
                         if root in NOT_IN_THE_WHEEL]
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                first = _first_string(node)
                if name.endswith(("getcwd", "Path.cwd", "chdir")):
                    problems.append(f"code cell {number}: {name}() (the working directory is not the checkout on Colab)")
                if first is not None and first.startswith(REPO_FOLDERS):
                    problems.append(f"code cell {number}: {name}({first!r}): a path relative to the checkout")
        source = _code(cell)
        if ".parents[" in source and not any(fallback in source for fallback in ("is_file()", "exists()", "except")):
            problems.append(f"code cell {number}: looks above the installed package (.parents[...]) with no fallback")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_on_colab_as_shipped(path):
    assert colab_problems(nbformat.read(path, as_version=4)) == []


def test_the_colab_check_finds_what_breaks_outside_the_checkout():
    """The check above fails on each thing that breaks a notebook outside the checkout."""
    from nbformat.v4 import new_code_cell, new_notebook

    install = nbformat.read(NOTEBOOKS[0], as_version=4).cells[1]
    assert colab_problems(new_notebook(cells=[install])) == []
    broken = ['import pandas as pd\ndf = pd.read_csv("workloads/validation/published_measurements.csv")',
              "from tests.notebook_runs import NOTEBOOKS", "!ls notebooks",
              'from pathlib import Path\nhere = Path.cwd() / "x"',
              'import perfmodel\nfrom pathlib import Path\n'
              'trace = Path(perfmodel.__file__).parents[1] / "tests" / "x.json"\nprint(trace.read_text())']
    for source in broken:
        assert colab_problems(new_notebook(cells=[install, new_code_cell(source)])), source
    assert colab_problems(new_notebook(cells=[new_code_cell("import perfmodel")]))  # no install cell
