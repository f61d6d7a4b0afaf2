"""Turn frozen records (dataclasses holding mappings, tuples and floats) into JSON-ready data."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping


def to_jsonable(value):
    """Dataclasses become dicts of their fields, mappings dicts, tuples lists; NaN/inf become None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_jsonable(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return to_jsonable(value.item())
    return value


def json_text(value, *, indent: int | None = 1) -> str:
    """What a command prints for ``--json``: strict JSON (``to_jsonable``: no NaN or Infinity; a
    quantity that is not a finite number, such as an unidentified parameter's standard error, is null)."""
    return json.dumps(to_jsonable(value), indent=indent, allow_nan=False)
