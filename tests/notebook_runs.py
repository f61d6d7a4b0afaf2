"""Run each lab notebook once per test session and read its outputs (shared by the notebook tests).

Every notebook executes top to bottom with nbclient in its own empty working directory, so that a
test can also check that nothing was written there."""

import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CELL_TIMEOUT_S = 600


def kernel_environment() -> dict[str, str]:
    """The notebooks' kernel environment: this process's, plus where the source checkout is
    (``PERFMODEL_SOURCE``), so that a lab finds the sample files it ships (lab 7's Spyre trace under
    ``tests/fixtures``) when perfmodel is installed as a wheel rather than from the checkout, as CI does."""
    return {**os.environ, "PERFMODEL_SOURCE": str(NOTEBOOKS.parent)}


class NotebookRuns:
    """name -> (executed notebook, files left in its working directory, seconds), each run once."""

    def __init__(self, tmp_path_factory):
        self._factory = tmp_path_factory
        self._runs: dict = {}

    def __call__(self, name: str):
        if name not in self._runs:
            workdir = self._factory.mktemp(name)
            notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
            start = time.perf_counter()
            NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                           resources={"metadata": {"path": str(workdir)}}).execute(env=kernel_environment())
            self._runs[name] = (notebook, sorted(path.name for path in workdir.iterdir()),
                                time.perf_counter() - start)
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
