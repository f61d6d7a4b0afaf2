"""The documentation site (perfmodel/docs) builds with ``mkdocs build --strict`` (a broken link, a
stale API reference or a missing figure is an error), and holds what issue 33 asks of it."""

from __future__ import annotations

import os
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
    explore = (site / "explore" / "index.html").read_text()
    for view in ("roofline", "llm", "serving", "specs"):
        assert (site / "img" / f"explore-{view}.png").is_file()
        assert f"img/explore-{view}.png" in explore
    for page in site.rglob("*.html"):
        assert "TODO" not in page.read_text(), page
