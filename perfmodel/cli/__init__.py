"""The ``perfmodel`` command: one subcommand per verb, ``--help`` everywhere.

Bad input (a spec error, a missing file, a bad option) prints a one-paragraph message to stderr
and returns exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Sequence

from perfmodel import __version__
from perfmodel.errors import NoEngineError, PerfmodelError


class UsageError(PerfmodelError):
    """A command-line usage mistake."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit; we report like every other error
        raise UsageError(f"{message}\n{self.format_usage().strip()}")


# The module that registers each command (``calibration.cli`` is found at run time, see below).
COMMAND_MODULES = {
    "specs": "specs_command", "models": "catalog_command", "workloads": "catalog_command",
    "predict": "predict_command", "sweep": "predict_command", "capture": "capture_command", "llm": "llm_command",
    "size": "llm_command", "serve": "serve_command", "search": "search_command", "train": "train_command",
    "validate": "validate_command", "roofline": "roofline_command", "explore": "explore_command",
    "bench": "calibration", "calibrate": "calibration",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or only ``command``'s subcommand when it is known: importing one
    command's module instead of all of them is most of a cold start (``perfmodel --help`` lists all)."""
    import importlib

    parser = _Parser(prog="perfmodel", description="Analytical three-bottleneck performance model for AI "
                                                   "workloads on GPUs, TPUs, Cerebras, Groq, Spyre and CPUs.")
    parser.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an internal error (a bug) instead of a one-paragraph report")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    wanted = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else list(dict.fromkeys(COMMAND_MODULES.values()))
    for module in wanted:
        if module == "calibration":
            _register_calibration(commands)
        else:
            importlib.import_module(f"perfmodel.cli.{module}").register(commands)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not a top-level option)."""
    for word in argv:
        if word == "--debug":
            continue
        return word if not word.startswith("-") else None
    return None


def _register_calibration(commands) -> None:
    """``bench`` and ``calibrate`` live in the calibration package, which depends on perfmodel; it is
    found at run time so that perfmodel never imports it."""
    import importlib

    try:
        module = importlib.import_module("calibration.cli")
    except ImportError:  # perfmodel installed without its calibration package
        return
    module.register(commands)


INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): an internal software error


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill PID``) in the process that runs :func:`main`: raised like Ctrl-C, so that every
    ``finally`` runs and an output being written leaves no temporary file (issue 38: a 64-million-point
    sweep killed while streaming left its 1.6 GB temporary Parquet file)."""


def _raise_terminated(signum, frame) -> None:
    if os.getpid() != _TERMINATION_OWNER[0]:  # a forked worker inherited the handler: die as by default
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise Terminated()


_TERMINATION_OWNER = [0]  # the process whose main() installed the handler


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        return _main(argv)
    _TERMINATION_OWNER[0] = os.getpid()
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_in(words))
    args = None
    try:
        args = parser.parse_args(words)
        if not getattr(args, "handler", None):
            parser.print_help()
            return 2
        return int(args.handler(args) or 0)
    except (PerfmodelError, FileNotFoundError, IsADirectoryError, PermissionError) as error:
        hint = getattr(args, "dtype_hint", None) if isinstance(error, NoEngineError) else None
        print(f"perfmodel: error: {error}" + (f" Here {hint}." if hint else ""), file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head or less that closed early: not an error
        sys.stderr.close()
        return 0
    except Terminated:
        print("perfmodel: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("perfmodel: interrupted", file=sys.stderr)
        return 130
    except OSError as error:
        if error.filename is None:  # not about a path the user gave: a bug
            return _internal_error(error, argv)
        # a path the user gave cannot be read or written (not a directory, name too long, disk full...)
        print(f"perfmodel: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a bug: say so in one paragraph; --debug shows the traceback
        return _internal_error(error, argv)


def _internal_error(error: Exception, argv: Sequence[str] | None) -> int:
    """One paragraph about a bug (called while ``error`` is handled: --debug re-raises it, traceback and all)."""
    if "--debug" in (sys.argv[1:] if argv is None else argv):
        raise  # the exception the caller is handling, with its traceback
    print(f"perfmodel: internal error: {type(error).__name__}: {error}. This is a bug in perfmodel, not in "
          "your input; rerun with --debug (before the command) to see the traceback and report it.",
          file=sys.stderr)
    return INTERNAL_ERROR
