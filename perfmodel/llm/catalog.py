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
        config = json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise PerfmodelError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from None
    except UnicodeDecodeError as error:
        raise PerfmodelError(f"{path}: not a UTF-8 text file ({error.reason} at byte {error.start}); a model config "
                             "is a config.json as Hugging Face writes it") from None
    except OSError as error:
        raise PerfmodelError(f"cannot read {path}: {error.strerror or error}") from None
    except RecursionError:
        raise PerfmodelError(f"{path}: JSON nested too deeply to be a model config") from None
    except _NonFinite as error:
        raise PerfmodelError(f"{path}: {error} is not a JSON number (JSON has no NaN or Infinity); give a finite "
                             "value") from None
    if not isinstance(config, dict):
        raise PerfmodelError(f"{path}: a model config is a JSON object of fields (hidden_size, num_attention_heads...), "
                             f"got a JSON {type(config).__name__}; see workloads/llm/*.json")
    return config


class _NonFinite(ValueError):
    pass


def _refuse_constant(constant: str):
    raise _NonFinite(constant)


def load_architecture(name_or_path: str | Path) -> Architecture:
    """The architecture of a shipped model (by name) or a config.json; a bad field is a PerfmodelError
    naming the file."""
    config = load_config(name_or_path)
    path = Path(str(name_or_path))
    name = path.name.removesuffix(".json")
    try:
        return from_hf_config(config, name=name if path.is_file() else name.lower())
    except PerfmodelError as error:
        if not path.is_file():
            raise
        raise PerfmodelError(f"{path}: {error}") from None
