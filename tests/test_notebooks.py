"""Every lab notebook runs top to bottom on the CPU, is committed without outputs, and ends with questions."""

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


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
