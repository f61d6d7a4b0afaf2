"""Run each lab notebook once per test session and read its outputs (shared by the notebook tests).

Every notebook executes top to bottom with nbclient in its own empty working directory, so that a
test can also check that nothing was written there. The helpers below read an executed notebook: its
code cells, what a cell printed, the numbers in it, its GPU-only branches and the row a lab adds to
Lab 1's landscape table; every lab test imports them from here."""

import ast
import contextlib
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CELL_TIMEOUT_S = 600
FIVE = ["h100-sxm", "tpu-v5e", "cerebras-wse-3", "groq-lpu-v1", "ibm-spyre"]  # the labs' five systems
LANDSCAPE_CALL = "landscape_table(lab1_rows + [lab_row])"  # the cell of labs 2-7 that grows the landscape
BACKGROUND_THREADS = 2  # busy threads running beside every notebook, as a student's laptop often has
# A timing as calibration.timing prints it: "median 1.23 ms, IQR 45% over 3 blocks"
TIMING_LINE = re.compile(r"IQR (\d+)% over (\d+) blocks")
# what a lab prints about its CPU spec's DRAM bandwidth: measured now by the triad (calibration.timing.cpu_spec's
# note, or Labs 6 and 7's own line), or the note that the probe was too noisy to replace the assumed figure
DRAM_PROBE_NOTES = ("DRAM bandwidth measured now", "DRAM probe: ", "NOTE: the DRAM probe is noisy")


def kernel_environment() -> dict[str, str]:
    """The notebooks' kernel environment: this process's, plus where the source checkout is
    (``PERFMODEL_SOURCE``), so that a lab finds the sample files it ships (lab 7's Spyre trace under
    ``tests/fixtures``) when perfmodel is installed as a wheel rather than from the checkout, as CI does."""
    return {**os.environ, "PERFMODEL_SOURCE": str(NOTEBOOKS.parent)}


@contextlib.contextmanager
def background_load(threads: int = BACKGROUND_THREADS):
    """``threads`` processes spinning on the CPU while the block runs (a load generator: other work on the
    machine), stopped, by their own ids, when it ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(threads)]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def execute(notebook, workdir: Path, *, load: int = BACKGROUND_THREADS) -> float:
    """Execute ``notebook`` in ``workdir`` with ``load`` busy background threads; the seconds it took."""
    start = time.perf_counter()
    with background_load(load):
        NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                       resources={"metadata": {"path": str(workdir)}}).execute(env=kernel_environment())
    return time.perf_counter() - start


class NotebookRuns:
    """name -> (executed notebook, files left in its working directory, seconds), each run once."""

    def __init__(self, tmp_path_factory):
        self._factory = tmp_path_factory
        self._runs: dict = {}

    def __call__(self, name: str):
        if name not in self._runs:
            workdir = self._factory.mktemp(name)
            notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
            seconds = execute(notebook, workdir)
            self._runs[name] = (notebook, sorted(path.name for path in workdir.iterdir()), seconds)
        return self._runs[name]


def output_text(cell) -> str:
    """Everything a cell printed or displayed as text (tracebacks included)."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.extend(str(output.data.get(kind, "")) for kind in ("text/plain", "text/html"))
        elif output.output_type == "error":
            parts.append("\n".join(output.traceback))
    return "".join(parts)


def code_cells(notebook, *, calling: str = "", tag: str = "") -> list:
    """The notebook's code cells whose source contains ``calling`` (and that carry ``tag``, if given)."""
    return [cell for cell in notebook.cells if cell.cell_type == "code" and calling in cell.source
            and (not tag or tag in cell.metadata.get("tags", []))]


def one_cell(notebook, calling: str):
    """The one code cell whose source contains ``calling`` (asserts there is exactly one)."""
    cells = code_cells(notebook, calling=calling)
    assert len(cells) == 1, f"expected one cell calling {calling!r}, found {len(cells)}"
    return cells[0]


def figure_count(cell) -> int:
    """How many PNG figures a cell displayed."""
    return sum(output.output_type == "display_data" and "image/png" in output.data for output in cell.get("outputs", []))


def plain_text(cell) -> str:
    """A cell's printed text and plain-text results, one output per line (no HTML)."""
    return "\n".join(output.text if output.output_type == "stream" else str(output.data.get("text/plain", ""))
                     for output in cell.get("outputs", []) if output.output_type != "error")


def number_in(pattern: str, text: str) -> float:
    """The finite number that ``pattern``'s first group matches in ``text`` (asserts there is one)."""
    match = re.search(pattern, text)
    assert match, f"no match for {pattern!r} in:\n{text}"
    value = float(match.group(1))
    assert math.isfinite(value), f"{pattern!r} matched a non-finite {value}"
    return value


def solution_blocks(path: Path) -> list[str]:
    """The Python code blocks of a lab's solutions file (``notebooks/solutions/NN_solutions.md``)."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def check_cpu_spec_from_detect(notebook, name: str) -> list[str]:
    """Check that lab ``name`` builds this CPU's spec with ``perfmodel.hardware.detect`` in a temporary
    directory (nothing written to the working directory), falls back to the shipped fitted spec, says which
    it used, and hard-codes no other CPU spec; returns the CPU specs its code loads by name. A lab either
    does it in its own cell or calls the labs' timing helper (``calibration.timing.cpu_spec`` or
    ``measured_cpu_spec``), which does; and that the cell says its DRAM bandwidth was measured now (the triad)."""
    own = code_cells(notebook, calling="detected_spec_yaml(facts")
    helper = [] if own else (code_cells(notebook, calling="timing.cpu_spec(")
                             or code_cells(notebook, calling="timing.measured_cpu_spec("))
    cells = own or helper
    assert cells, f"{name} does not build its CPU spec with perfmodel.hardware.detect"
    if own:
        assert "tempfile.TemporaryDirectory()" in cells[0].source
        assert 'perfmodel.load_hardware("epyc-zen4-2vcpu-fitted")' in cells[0].source  # the fallback
    text = output_text(cells[0])
    assert "perfmodel specs detect:" in text or "NOTE: perfmodel specs detect gave no loadable spec" in text
    # the OS reports no DRAM bandwidth: the spec's is measured now (a STREAM triad), or the note says why not
    assert any(said in text for said in DRAM_PROBE_NOTES) or "NOTE: perfmodel specs detect gave no loadable spec" \
        in text, f"{name} predicts with a CPU spec whose DRAM bandwidth was not measured:\n{text}"
    hard_coded = re.findall(r'load_hardware\("(epyc[^"]*)"\)', "\n".join(cell.source for cell in code_cells(notebook)))
    allowed = {"epyc-zen4-2vcpu-fitted"}
    assert set(hard_coded) <= allowed and (helper or hard_coded), \
        f"{name}: a hard-coded CPU spec besides the fallback: {hard_coded}"
    return hard_coded or ["epyc-zen4-2vcpu-fitted"]  # with the helper, its fallback (calibration.timing.FALLBACK_CPU_SPEC)


def unwarned_noisy_timings(notebook) -> list[str]:
    """Every printed timing line (``IQR N% over M blocks``) that the labs' noise rule flags (fewer than 5 blocks,
    or an IQR above 20% of the median) but that does not carry a WARNING on the same line or the next."""
    missing = []
    for cell in code_cells(notebook):
        lines = plain_text(cell).splitlines()
        for number, line in enumerate(lines):
            for iqr, blocks in TIMING_LINE.findall(line):
                if int(blocks) < 5 or int(iqr) > 20:
                    following = lines[number + 1] if number + 1 < len(lines) else ""
                    if "WARNING" not in line and "WARNING" not in following:
                        missing.append(line)
    return missing


# a measured ratio as a lab prints it ("speed-up measured 1.23x", "8x faster than the loop"), and the helper's line
# that carries both timings, each with its IQR and blocks (calibration.timing.speedup_line)
MEASURED_RATIO = re.compile(r"\bmeasured:? [\d.]+x|[\d.]+x faster than")
SPEEDUP_LINE = re.compile(r": [\d.]+x \(.*IQR \d+% over \d+ blocks.*; .*IQR \d+% over \d+ blocks")


def unbacked_speedups(notebook) -> list[str]:
    """Every printed line stating a measured speed-up in a cell that prints no ``timing.speedup_line``: a ratio
    whose two timings went unchecked for noise (``speedup_line`` prints each one's IQR and blocks, and the
    WARNING that :func:`unwarned_noisy_timings` requires when either is noisy or the two overlap)."""
    missing = []
    for cell in code_cells(notebook):
        lines = plain_text(cell).splitlines()
        if not any(SPEEDUP_LINE.search(line) for line in lines):
            missing += [line for line in lines if MEASURED_RATIO.search(line)]
    return missing


def exercise_results(notebook) -> list[tuple[object, str]]:
    """(check cell, ``"passed"`` / ``"failed: <error>"``) for each check cell of an executed notebook."""
    results = []
    for cell in code_cells(notebook, tag="check"):
        errors = [output for output in cell.get("outputs", []) if output.output_type == "error"]
        results.append((cell, f"failed: {errors[0].ename}: {errors[0].evalue}" if errors
                        else "passed" if "correct:" in plain_text(cell) else "failed: no verdict"))
    return results


def with_solutions(name: str, solutions: Path):
    """Lab ``name`` with each python block of its solutions file pasted, in order, into its exercise cells."""
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    exercises = code_cells(notebook, tag="exercise")
    for cell, block in zip(exercises, solution_blocks(solutions), strict=True):
        cell.source = block
    return notebook

def gpu_branches(notebook) -> list[tuple[object, str]]:
    """(cell, the code it runs only with CUDA) for every ``if torch.cuda.is_available():`` and every
    ``... if torch.cuda.is_available() else ...`` of the notebook."""
    found = []
    for cell in code_cells(notebook):
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith("%"))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.If, ast.IfExp)) and ast.unparse(node.test) == "torch.cuda.is_available()":
                body = node.body if isinstance(node, ast.If) else [node.body]
                found.append((cell, "\n".join(ast.unparse(item) for item in body)))
    return found


def landscape_names(text: str) -> list[str]:
    """The systems of the landscape table a cell displayed, in order."""
    assert "system" in text, text
    table = text[text.index("system"):]
    return [name.strip() for name in re.findall(r"^(\S[^\n]*?)\s+(?:fp32|bf16|fp16)\s+[\d.]+\s+\w+\s+[\d.]+", table, re.M)]


def printed_landscape_row(notebook, lab: int) -> dict:
    """The row lab ``lab`` (2-6) adds to Lab 1's landscape table, as its cell printed it (``perfmodel.landscape``'s
    ``describe_row``); checks the table's rows (this CPU, the five systems, the lab's) and that the numbers are
    finite and positive."""
    text = plain_text(one_cell(notebook, LANDSCAPE_CALL))
    assert "Traceback" not in text, text
    names = landscape_names(text)
    assert len(names) == 7 and names[1:6] == FIVE, names  # this CPU, the five systems, the row of this lab
    assert names[-1].endswith(f"(lab {lab})"), names
    match = re.search(r"the row this lab adds: (.+\(lab \d\)): peak (\S+) TFLOP/s, (\w+) (\S+) GB/s; gemm 4096 (\S+) ms "
                      r"\(bound by (\S+)\), add 64M (\S+) ms \(bound by (\S+)\)", text)
    assert match, text
    label, peak, memory, bandwidth, gemm, gemm_bound, add, add_bound = match.groups()
    assert label == names[-1]
    values = {"peak": float(peak), "bandwidth": float(bandwidth), "gemm": float(gemm), "add": float(add)}
    assert all(math.isfinite(value) and value > 0 for value in values.values()), values
    return {"label": label, "memory": memory, "gemm bound": gemm_bound, "add bound": add_bound, **values, "text": text}
