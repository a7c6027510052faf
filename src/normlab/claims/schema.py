"""The format of ``results.json``: its version, number encoding and JSON Schema.

``results.json`` is strict JSON (no ``NaN``/``Infinity`` tokens) with structured numbers,
never pre-formatted strings. A number that may be non-finite is written as a JSON number
when finite, and otherwise as ``{"value": null, "nonfinite": "inf" | "-inf" | "nan"}``
(:func:`encode`); :func:`decode` turns these back into floats. The document's shape is
fixed by the JSON Schema packaged beside this module (``results.schema.json``, loaded by
:func:`schema`), and its ``schema_version`` is :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["SCHEMA_VERSION", "decode", "encode", "schema", "validate"]

#: Bumped whenever the layout of ``results.json`` changes.
SCHEMA_VERSION = 4


def _flag(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def encode(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``{"value": None, "nonfinite": flag}``
    and tuples as lists, recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"value": None, "nonfinite": _flag(obj)}
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [encode(v) for v in obj]
    return obj


_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def decode(obj: Any) -> Any:
    """The inverse of :func:`encode`: flagged non-finite values back to floats."""
    if isinstance(obj, dict):
        if set(obj) == {"value", "nonfinite"} and obj["value"] is None:
            return _FLOATS[obj["nonfinite"]]
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema of ``results.json`` (draft 2020-12)."""
    text = resources.files("normlab.claims").joinpath("results.schema.json").read_text()
    return json.loads(text)


def validate(data: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``data`` follows :func:`schema`.

    Needs the ``jsonschema`` package (a test dependency).
    """
    import jsonschema

    jsonschema.validate(data, schema(), cls=jsonschema.Draft202012Validator)
