"""The shipped LLM configs in ``workloads/llm/`` (edge: reads JSON files)."""

from __future__ import annotations

import json
from pathlib import Path

from perfmodel.errors import PerfmodelError
from perfmodel.llm.architecture import (
    Architecture,
    architecture_from_record,
    check_config_fields,
    from_hf_config,
    is_native_block,
)
from perfmodel.paths import data_directory

# The records derived from the shipped configs' transformers classes (perfmodel.llm.model_class --write),
# so that a shipped model needs neither torch nor transformers at run time.
DERIVED_FILE = "architectures.json"


def model_names() -> list[str]:
    return sorted(path.stem for path in (data_directory("workloads") / "llm").glob("*.json") if path.name != DERIVED_FILE)


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


def derived_records() -> dict:
    path = data_directory("workloads") / "llm" / DERIVED_FILE
    return json.loads(path.read_text(encoding="utf-8"))


def load_architecture(name_or_path: str | Path) -> Architecture:
    """The architecture of a shipped model (by name) or a config.json; a bad field is a PerfmodelError
    naming the file. A Hugging Face config is read from its transformers class (a shipped one from the
    record derived that way and stored); a perfmodel-native block (MaxText, PaLM) by hand."""
    config = load_config(name_or_path)
    path = Path(str(name_or_path))
    shipped = not path.is_file()
    name = path.name.removesuffix(".json").lower() if shipped else path.name.removesuffix(".json")
    try:
        if is_native_block(config):
            return from_hf_config(config, name=name)
        if shipped:
            records = derived_records()["models"]
            if name not in records:
                raise PerfmodelError(f"shipped model {name!r} has no derived record in workloads/llm/{DERIVED_FILE}; "
                                     "regenerate it: python -m perfmodel.llm.model_class --write")
            return architecture_from_record(records[name])
        from perfmodel.llm.model_class import architecture_from_class

        check_config_fields(config)
        return architecture_from_class(config, name)
    except PerfmodelError as error:
        if shipped:
            raise
        raise PerfmodelError(f"{path}: {error}") from None
