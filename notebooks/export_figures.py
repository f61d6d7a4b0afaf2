"""Regenerate the labs' figures: execute each lab (its exercise cells filled with the reference solutions of
``notebooks/solutions/``, so that the exercises' figures appear too) in a temporary directory and write every
figure it displays as ``labNN_K.png`` (K: the figure's order in the lab) into the folder given.

    python notebooks/export_figures.py notebooks/figures [01 03 ... five_systems]

The figures are what this machine measured when the command ran: the measured points differ from machine to
machine and run to run (the README's gallery shows the committed ones). Each file is written atomically.

``five_systems`` writes ``five_systems.png``: the six systems' rooflines with each lab's workload on them
(``perfmodel.lab_workloads``, the chart Lab 1 draws for its detected CPU), here with the project's fitted CPU
spec. It is predicted, not measured, so the same command gives the same figure everywhere; it runs no notebook.
"""

from __future__ import annotations

import base64
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel.yaml_source import atomic_output  # noqa: E402
from tests.notebook_runs import NOTEBOOKS, kernel_environment, solution_blocks  # noqa: E402


def lab_with_solutions(path: Path):
    notebook = nbformat.read(path, as_version=4)
    solutions = NOTEBOOKS / "solutions" / f"{path.name[:2]}_solutions.md"
    exercises = [cell for cell in notebook.cells if "exercise" in cell.metadata.get("tags", [])]
    if solutions.is_file() and exercises:
        for cell, block in zip(exercises, solution_blocks(solutions), strict=True):
            cell.source = block
    return notebook


def export(path: Path, folder: Path) -> list[Path]:
    notebook = lab_with_solutions(path)
    with tempfile.TemporaryDirectory() as workdir:
        NotebookClient(notebook, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": workdir}}).execute(env=kernel_environment())
    written = []
    figures = [output.data["image/png"] for cell in notebook.cells if cell.cell_type == "code"
               for output in cell.get("outputs", []) if output.output_type == "display_data" and "image/png" in output.data]
    for number, data in enumerate(figures, 1):
        target = folder / f"lab{path.name[:2]}_{number}.png"
        with atomic_output(target) as temporary:
            temporary.write_bytes(base64.b64decode(data))
        written.append(target)
    return written


def export_five_systems(folder: Path) -> Path:
    """``five_systems.png``: each lab's workload on the six systems' rooflines, predicted (no notebook runs)."""
    from perfmodel import plotting
    from perfmodel.lab_workloads import six_systems_rooflines

    target = folder / "five_systems.png"
    plotting.save_figure(plotting.plot_labs_rooflines(six_systems_rooflines()), target)
    return target


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    folder, labs = Path(argv[0]), set(argv[1:])
    folder.mkdir(parents=True, exist_ok=True)
    if not labs or "five_systems" in labs:
        print(f"five_systems: -> {export_five_systems(folder).name}")
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        if not labs or path.name[:2] in labs:
            written = export(path, folder)
            print(f"{path.stem}: {len(written)} figures -> {', '.join(target.name for target in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
