"""The base of normlab's result records: frozen dataclasses that turn into plain JSON data.

Probes, surgery and the claims engine return frozen dataclasses; :class:`Record` gives them
one ``to_dict`` (nested records, tuples, arrays and tensors become dicts and lists), so no
record lists its fields by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["Record", "plain"]


def plain(value: Any) -> Any:
    """``value`` as JSON-ready plain data: records and dataclasses to dicts, tuples, lists,
    NumPy arrays and tensors to lists, mappings to dicts; scalars unchanged."""
    if isinstance(value, Record):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy arrays, tensors
        return value.tolist()
    return value


class Record:
    """Mixin for frozen dataclass records: :meth:`to_dict` gives their fields as plain data.

    A record that reports derived values too extends it:
    ``return {**super().to_dict(), "order": self.order()}``.
    """

    def to_dict(self) -> dict[str, Any]:
        """The record's fields as JSON-ready plain data (see :func:`plain`)."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
