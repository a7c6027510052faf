"""``results.json`` of a comparison: its JSON Schema (``results.schema.json``, packaged)
and the validation a test and :meth:`~normlab.compare.api.Comparison.write` run."""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any

__all__ = ["SCHEMA_VERSION", "clean", "schema", "validate"]

#: Version of the comparison's results.json layout.
SCHEMA_VERSION = 1


def clean(obj: Any) -> Any:
    """``obj`` with non-finite floats as None and tuples as lists (strict JSON).

    Examples:
        >>> clean({"a": (1.0, float("inf"))})
        {'a': [1.0, None]}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def schema() -> dict[str, Any]:
    """The JSON Schema of a comparison's ``results.json`` (draft 2020-12)."""
    text = resources.files("normlab.compare").joinpath("results.schema.json").read_text()
    return json.loads(text)


def validate(data: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``data`` follows :func:`schema` (a no-op
    without the ``jsonschema`` package)."""
    try:
        import jsonschema
    except ImportError:  # a test dependency; the tests always validate
        return
    jsonschema.validate(data, schema(), cls=jsonschema.Draft202012Validator)
