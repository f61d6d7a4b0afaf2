"""mkdocs hooks: the command-line reference generated from perfmodel's argparse parser, and the labs'
figures (notebooks/figures/*.png) added to the site, so that neither is copied by hand."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "notebooks" / "figures"


def cli_reference() -> str:
    from perfmodel.cli import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command")
    parts = ["# Command line\n", "Generated from `perfmodel`'s argparse parser at build time: every command's "
             "`--help`.\n", "```text", parser.format_help().strip(), "```\n"]
    for name, sub in sorted(commands.choices.items()):
        parts += [f"## perfmodel {name}\n", "```text", sub.format_help().strip(), "```\n"]
    return "\n".join(parts)


def labs_page() -> str:
    """The labs (notebooks/*.ipynb, each with its title cell) and every figure they saved."""
    import json

    parts = ["# Labs\n", "Jupyter notebooks in `notebooks/`, executed by the test suite "
             "(`tests/test_notebooks*.py`); run them with `jupyter lab notebooks/`.\n"]
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text()).get("cells", [])
        title = next(("".join(c["source"]).strip().splitlines()[0].lstrip("# ") for c in cells
                      if c.get("cell_type") == "markdown" and "".join(c["source"]).strip()), notebook.stem)
        parts.append(f"- `{notebook.name}`: {title}")
    parts.append("\n## Figures the labs draw\n")
    for figure in sorted(FIGURES.glob("*.png")):
        parts.append(f"![{figure.stem}](figures/{figure.name})\n\n`notebooks/figures/{figure.name}`\n")
    return "\n".join(parts)


def on_files(files, config):
    files.append(File.generated(config, "cli.md", content=cli_reference()))
    files.append(File.generated(config, "labs.md", content=labs_page()))
    for figure in sorted(FIGURES.glob("*.png")):
        files.append(File.generated(config, f"figures/{figure.name}", abs_src_path=str(figure)))
    return files
