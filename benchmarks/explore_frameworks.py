"""Install weight and start-up time of the web frameworks considered for ``perfmodel explore`` (issue 33).

For each candidate a fresh virtual environment (with ``--system-site-packages`` off) gets the framework
from the package registry; we then measure

* install weight: the bytes the install added to the environment's site-packages (pip, setuptools and
  the bare venv subtracted), and the number of distributions it pulled in;
* import time: wall time of ``python -c "import X"`` (best of 3, byte code compiled by the first run);
* start-up: wall time from launching a one-page "hello" app until its page answers HTTP 200 on
  localhost (best of 2).

The candidates are Panel, Streamlit, Gradio, NiceGUI, and a JSON API over the standard library's
``http.server`` with plotly.js taken from the ``plotly`` wheel (what ``perfmodel explore`` uses).
Needs the package registry (install only); run: ``python benchmarks/explore_frameworks.py`` (several
minutes; writes ``benchmarks/results/explore_frameworks.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent

HELLO = {
    "panel": ("panel", "import panel as pn\npn.panel('hello').servable()\n",
              ["-m", "panel", "serve", "{app}", "--port", "{port}", "--address", "127.0.0.1"]),
    "streamlit": ("streamlit", "import streamlit as st\nst.write('hello')\n",
                  ["-m", "streamlit", "run", "{app}", "--server.port", "{port}", "--server.headless", "true",
                   "--browser.gatherUsageStats", "false"]),
    "gradio": ("gradio", "import gradio as gr\ngr.Interface(lambda s: s, 'text', 'text').launch("
                         "server_name='127.0.0.1', server_port={port})\n", ["{app}"]),
    "nicegui": ("nicegui", "from nicegui import ui\nui.label('hello')\nui.run(port={port}, show=False, reload=False)\n",
                ["{app}"]),
    "json api + plotly.js (stdlib http.server)": (
        "plotly",
        "import http.server, importlib.resources as r\n"
        "js = (r.files('plotly') / 'package_data' / 'plotly.min.js').read_bytes()\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        body = js if self.path.endswith('.js') else b'<script src=/p.js></script>hello'\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
        "http.server.ThreadingHTTPServer(('127.0.0.1', {port}), H).serve_forever()\n",
        ["{app}"]),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _site_bytes(venv: Path) -> int:
    site = next(venv.glob("lib/python*/site-packages"))
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file())


def _dists(venv: Path) -> int:
    site = next(venv.glob("lib/python*/site-packages"))
    return len(list(site.glob("*.dist-info")))


def _startup(py: Path, argv: list[str], app: Path, code: str, timeout: float = 120.0) -> float:
    port = _free_port()
    app.write_text(code.replace("{port}", str(port)))
    args = [str(py)] + [a.replace("{app}", str(app)).replace("{port}", str(port)) for a in argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=app.parent,
                            env={**os.environ, "HOME": str(app.parent)})
    try:
        while time.perf_counter() - t0 < timeout:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except OSError:
                time.sleep(0.05)
        return float("nan")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def measure(name: str, work: Path) -> dict[str, object]:
    package, code, argv = HELLO[name]
    venv = work / package
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    base = _site_bytes(venv)
    base_dists = _dists(venv)
    t0 = time.perf_counter()
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", package],
                   check=True, stdout=subprocess.DEVNULL)
    install_s = time.perf_counter() - t0
    weight = _site_bytes(venv) - base
    imports = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([str(py), "-c", f"import {package}"], check=True)
        imports.append(time.perf_counter() - t0)
    starts = [_startup(py, argv, work / f"app_{package}.py", code) for _ in range(2)]
    return {"framework": name, "package": package, "install_mb": weight / 1e6, "distributions": _dists(venv) - base_dists,
            "install_s": install_s, "import_s": min(imports), "startup_s": min(starts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=list(HELLO), help="frameworks to measure (default: all)")
    ap.add_argument("--json", default=str(HERE / "results" / "explore_frameworks.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            rows.append(measure(name, Path(tmp)))
            r = rows[-1]
            print(f"{name:45s} {r['install_mb']:8.1f} MB {r['distributions']:4d} dists  import {r['import_s']:.2f} s  "
                  f"start-up {r['startup_s']:.2f} s", flush=True)
    print()
    print("| framework | install weight | distributions | import | start-up to first page |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['framework']} | {r['install_mb']:.0f} MB | {r['distributions']} | {r['import_s']:.2f} s | "
              f"{r['startup_s']:.2f} s |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=2) + "\n")
    tmp_out.replace(out)


if __name__ == "__main__":
    main()
