"""The documentation site (perfmodel/docs) builds with ``mkdocs build --strict`` (a broken link, a
stale API reference or a missing figure is an error), and holds what issue 33 asks of it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "perfmodel" / "docs" / "mkdocs.yml"

pytest.importorskip("mkdocstrings", reason="the docs extra (mkdocs, mkdocs-material, mkdocstrings) is not installed")


def test_the_site_builds_strictly_with_api_cli_labs_and_explorer(tmp_path: Path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "-d", str(site)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    api = (site / "api" / "index.html").read_text()
    for name in ("llm_predict", "load_hardware", "size_deployment", "Server"):
        assert name in api, name
    cli = (site / "cli" / "index.html").read_text()
    for command in ("perfmodel explore", "perfmodel llm", "perfmodel size", "--set"):
        assert command in cli, command
    figures = sorted((ROOT / "notebooks" / "figures").glob("*.png"))
    assert figures and all((site / "figures" / figure.name).is_file() for figure in figures)
    labs = (site / "labs" / "index.html").read_text()
    shown = set(re.findall(r'<img[^>]*src="\.\./figures/([^"]+\.png)"', labs))
    assert shown == {figure.name for figure in figures}, "the labs page shows each committed lab figure, no other"
    explore = (site / "explore" / "index.html").read_text()
    for view in ("roofline", "llm", "serving", "specs"):
        assert (site / "img" / f"explore-{view}.png").is_file()
        assert f"img/explore-{view}.png" in explore
    for page in site.rglob("*.html"):
        assert "TODO" not in page.read_text(), page
    _check_schema_page((site / "schema" / "index.html").read_text())
    _check_accuracy_page((site / "accuracy" / "index.html").read_text())


def _schema_models():
    """Every pydantic model a spec is validated with, from HardwareSpec down."""
    import typing

    from pydantic import BaseModel

    from perfmodel.hardware.schema import HardwareSpec

    found, todo = [], [HardwareSpec]
    while todo:
        model = todo.pop()
        if model in found:
            continue
        found.append(model)
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                annotation = stack.pop()
                if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                    todo.append(annotation)
                stack.extend(typing.get_args(annotation))
    return found


def _check_schema_page(html: str) -> None:
    """Every field of every model of the spec schema is on the page, in its model's table."""
    import re

    sections = re.split(r"<h2 ", html)
    models = _schema_models()
    assert len(models) >= 10
    for model in models:
        section = next((part for part in sections[1:] if f"({model.__name__})" in part.split("</h2>", 1)[0]), None)
        assert section is not None, model.__name__
        for name in model.model_fields:
            assert f"<td><code>{name}</code></td>" in section, (model.__name__, name)
    assert "a bandwidth with a unit, e.g. <code>3.35 TB/s</code>" in html  # quantities say their unit


def _check_accuracy_page(html: str) -> None:
    """The page's bands are perfmodel.intervals' for the stored residuals."""
    import math

    from perfmodel.intervals import band_of, load_table

    residuals = load_table()["achievable"]
    band = band_of(residuals, "gpu", "scenario", 0.8, "achievable")
    assert band.low is not None and band.high is not None
    assert f"x {math.exp(-band.high):.2f} .. x {math.exp(-band.low):.2f}" in html
    for family in {item.family for item in residuals}:
        assert f"<td>{family}</td>" in html, family
