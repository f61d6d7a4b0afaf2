"""``perfmodel explore``: the local web app (``perfmodel.explore``) on localhost."""

from __future__ import annotations

import sys

from perfmodel.cli.overrides import whole_number


def register(commands) -> None:
    explore = commands.add_parser(
        "explore", help="start the local web explorer (roofline, LLM, serving and sizing, specs and accuracy)",
        description="Serve the explorer on http://HOST:PORT/ and open it in the default browser. Every number on "
                    "the page is computed by the engine (the same functions as the other commands); the page loads "
                    "nothing from the network. Needs the 'explore' extra: python -m pip install 'perfmodel[explore]'.")
    explore.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    explore.add_argument("--port", type=whole_number(0, "the port must be"), default=8765,
                         help="port (default 8765; 0: any free port)")
    explore.add_argument("--no-browser", action="store_true", help="do not open a browser window")
    explore.add_argument("--no-warm-up", action="store_true",
                         help="do not compute the shipped validation table in the background at start (it is then "
                              "computed when the page first asks for it)")
    explore.add_argument("--verbose", action="store_true", help="log every request to stderr")
    explore.set_defaults(handler=_explore)


def _explore(args) -> int:
    from perfmodel.explore.server import make_server, warm_up

    try:
        server = make_server(args.host, args.port, verbose=args.verbose)
    except OSError as error:
        from perfmodel.errors import PerfmodelError

        raise PerfmodelError(f"cannot listen on {args.host}:{args.port}: {error.strerror}; choose another --port "
                             "(0: any free port)") from None
    host, port = server.server_address[:2]
    url = f"http://{'localhost' if host in ('127.0.0.1', '0.0.0.0') else host}:{port}/"
    print(f"perfmodel explore: serving on {url} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    if not args.no_warm_up:
        warm_up()
    if not args.no_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
