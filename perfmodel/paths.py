"""Where the bundled data lives, in a source checkout and in an installed wheel (edge module).

The wheel carries ``hardware_specs/`` and ``workloads/`` inside the package as
``perfmodel/data/...``; a source checkout keeps them at the repository's top level. Extra spec
directories can be added with the ``PERFMODEL_SPEC_PATH`` environment variable (os.pathsep-separated).
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_directory(name: str) -> Path:
    """``hardware_specs`` or ``workloads``: inside the installed package, else beside it."""
    for candidate in (_PACKAGE / "data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"perfmodel's bundled {name!r} directory is missing (looked in "
                            f"{_PACKAGE / 'data'} and {_PACKAGE.parent}); reinstall perfmodel")


def spec_directories() -> list[Path]:
    extra = [Path(item) for item in os.environ.get("PERFMODEL_SPEC_PATH", "").split(os.pathsep) if item]
    return [data_directory("hardware_specs"), *[path for path in extra if path.is_dir()]]
