"""Run ``perfmodel explore`` in a child process and drive it with Chromium (the browser tests and
``benchmarks/explore_redraw.py``). Playwright drives the system's Chromium (Debian's ``chromium``
package: ``apt-get install chromium``), never a browser build of its own; ``PERFMODEL_CHROMIUM`` names
another executable."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    """The Chromium executable to drive: ``$PERFMODEL_CHROMIUM``, else the first of CHROMIUM_NAMES on PATH."""
    given = os.environ.get("PERFMODEL_CHROMIUM")
    if given:
        return given if os.path.exists(given) else None
    return next((found for found in map(shutil.which, CHROMIUM_NAMES) if found), None)


@contextmanager
def explore_server(*options: str) -> Iterator[str]:
    """``python -m perfmodel explore --port 0 --no-browser [OPTIONS]`` in a child process; yields its URL."""
    process = subprocess.Popen([sys.executable, "-m", "perfmodel", "explore", "--port", "0", "--no-browser", *options],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        started = time.monotonic()
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"serving on (http://\S+/)", line)
        if match is None:
            rest = process.stderr.read() if process.poll() is not None else ""
            raise RuntimeError(f"perfmodel explore did not start within {time.monotonic() - started:.0f} s: "
                               f"{line}{rest}")
        yield match.group(1)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
