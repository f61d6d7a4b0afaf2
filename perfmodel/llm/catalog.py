"""The shipped LLM configs in ``workloads/llm/`` (edge: reads JSON files)."""

from __future__ import annotations

import json
from pathlib import Path

from perfmodel.errors import PerfmodelError
from perfmodel.llm.architecture import Architecture, from_hf_config
from perfmodel.paths import data_directory


def model_names() -> list[str]:
    return sorted(path.stem for path in (data_directory("workloads") / "llm").glob("*.json"))


def load_config(name_or_path: str | Path) -> dict:
    path = Path(name_or_path)
    if not path.is_file():  # a shipped model, by name in any case (Llama-2-7B = llama-2-7b)
        path = data_directory("workloads") / "llm" / f"{str(name_or_path).lower()}.json"
    if not path.is_file():
        raise PerfmodelError(f"no model {str(name_or_path)!r}: not a config.json file and not a shipped model "
                             f"({', '.join(model_names())})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise PerfmodelError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from None


def load_architecture(name_or_path: str | Path) -> Architecture:
    config = load_config(name_or_path)
    name = Path(str(name_or_path)).name.removesuffix(".json")
    return from_hf_config(config, name=name if Path(str(name_or_path)).is_file() else name.lower())
