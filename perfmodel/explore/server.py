"""``perfmodel explore``'s web server: the standard library's threading HTTP server on localhost.

``GET /`` is the page (``static/index.html``), ``GET /static/NAME`` its script and style, and
``GET /static/plotly.min.js`` the charting library from the installed ``plotly`` wheel (no asset from a
CDN: the page works with no network). ``POST /api/VIEW`` with a JSON object of inputs answers
``api.VIEWS[VIEW](inputs)`` as JSON; a :class:`PerfmodelError` (bad input) answers 400 with its
message, anything else 500 with one line.
"""

from __future__ import annotations

import http.server
import json
import mimetypes
import threading
from importlib import resources
from pathlib import Path

from perfmodel.errors import PerfmodelError
from perfmodel.explore import api

STATIC = Path(__file__).with_name("static")
MAX_BODY = 1 << 20
PLOTLY = "plotly.min.js"


def plotly_js() -> bytes:
    """plotly.js as the ``plotly`` wheel ships it (the ``explore`` extra)."""
    try:
        return (resources.files("plotly") / "package_data" / PLOTLY).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        raise PerfmodelError("perfmodel explore draws its charts with plotly.js from the 'plotly' package: "
                             "python -m pip install 'perfmodel[explore]'") from None


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "perfmodel-explore"
    assets: dict[str, bytes] = {}

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store" if content_type.startswith("application/json") else "max-age=3600")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data, allow_nan=False).encode(), "application/json; charset=utf-8")

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path = self.path.split("?", 1)[0]
        name = "index.html" if path in ("/", "/index.html") else path.removeprefix("/static/")
        if path == "/favicon.ico":
            self._send(204, b"", "image/x-icon")
            return
        if name == PLOTLY:
            body = self.assets.setdefault(PLOTLY, plotly_js())
        elif "/" not in name and (STATIC / name).is_file():
            body = (STATIC / name).read_bytes()
        else:
            self._send(404, b"not found", "text/plain")
            return
        self._send(200, body, (mimetypes.guess_type(name)[0] or "application/octet-stream") + "; charset=utf-8")

    def do_POST(self) -> None:  # noqa: N802
        view = api.VIEWS.get(self.path.removeprefix("/api/"))
        if view is None or not self.path.startswith("/api/"):
            self._json(404, {"error": f"no view {self.path!r}; views: {', '.join(sorted(api.VIEWS))}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._json(413, {"error": "request too large"})
            return
        try:
            inputs = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(inputs, dict):
                raise PerfmodelError("the request body must be a JSON object of inputs")
            self._json(200, view(inputs))
        except (PerfmodelError, json.JSONDecodeError) as error:
            self._json(400, {"error": str(error)})
        except Exception as error:  # a bug: one line to the page, not a dead server
            self._json(500, {"error": f"internal error ({type(error).__name__}): {error}"})


def make_server(host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False) -> http.server.ThreadingHTTPServer:
    """A server bound to ``host:port`` (port 0: a free one; ``server.server_address`` says which)."""
    plotly_js()  # fail now, with the install hint, rather than on the page
    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.verbose = verbose  # type: ignore[attr-defined]
    return server


def warm_up() -> None:
    """Compute the slow views' shared data in the background (the validation table takes ~30 s)."""
    threading.Thread(target=api.validation, name="perfmodel-validation", daemon=True).start()
