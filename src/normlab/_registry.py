"""The one registry of normalization methods.

Every method normlab implements is a :class:`Method` record in a single dict, keyed by a
canonical name. Families register their methods when they are imported; ``import normlab``
imports every family, so the registry is complete after it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["KINDS", "LAYOUTS", "Method", "create", "get", "methods", "register"]

Kind = Literal["norm", "activation", "score", "series", "advantage", "optim", "flow", "quant"]
KINDS: tuple[str, ...] = (
    "norm",
    "activation",
    "score",
    "series",
    "advantage",
    "optim",
    "flow",
    "quant",
)

Layout = Literal["features_last", "channels_first", "scores", "series", "other"]
#: How a method's input is laid out, so generic tests and tools can build inputs for it:
#: ``features_last`` (..., d) like LayerNorm; ``channels_first`` (B, C, *grid) like
#: InstanceNorm; ``scores`` (..., n) normalised along the last axis; ``series``
#: (batch, length, channels); ``other`` for everything that is not a module over a tensor.
LAYOUTS: tuple[str, ...] = ("features_last", "channels_first", "scores", "series", "other")


@dataclass(frozen=True)
class Method:
    """One registered normalization method.

    Attributes:
        name: canonical lowercase name, e.g. ``"rmsnorm"``.
        kind: one of :data:`KINDS`.
        builder: callable that builds the method (a module class, a ``functools.partial``
            preset of one, or a function for non-module methods).
        paper: the seed paper the method comes from, as a short title.
        summary: one line saying what the method does.
        aliases: other accepted names.
        layout: the input layout, one of :data:`LAYOUTS`.
    """

    name: str
    kind: Kind
    builder: Callable[..., Any]
    paper: str
    summary: str
    aliases: tuple[str, ...] = ()
    layout: Layout = "features_last"
    _keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Method {self.name!r}: kind {self.kind!r} is not one of {KINDS}.")
        if self.layout not in LAYOUTS:
            raise ValueError(
                f"Method {self.name!r}: layout {self.layout!r} is not one of {LAYOUTS}."
            )
        if self.name != self.name.lower():
            raise ValueError(f"Method names are lowercase; got {self.name!r}.")
        keys = tuple(dict.fromkeys(_key(n) for n in (self.name, *self.aliases)))
        object.__setattr__(self, "_keys", keys)

    def create(self, *args: Any, **kwargs: Any) -> Any:
        """Build the method: ``builder(*args, **kwargs)``."""
        return self.builder(*args, **kwargs)


_METHODS: dict[str, Method] = {}
_LOOKUP: dict[str, str] = {}


def _key(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def register(method: Method) -> Method:
    """Add ``method`` to the registry and return it.

    Raises:
        ValueError: when its name or one of its aliases is already taken.
    """
    for key in method._keys:
        if key in _LOOKUP:
            raise ValueError(
                f"Cannot register {method.name!r}: the name {key!r} is already taken by "
                f"{_LOOKUP[key]!r}. Pick another name or alias."
            )
    _METHODS[method.name] = method
    for key in method._keys:
        _LOOKUP[key] = method.name
    return method


def get(name: str) -> Method:
    """The method registered under ``name`` or one of its aliases.

    Lookup ignores case, ``-`` and ``_``.

    Raises:
        KeyError: for an unknown name; the message lists the closest registered names.
    """
    key = _key(name)
    if key in _LOOKUP:
        return _METHODS[_LOOKUP[key]]
    close = difflib.get_close_matches(key, list(_LOOKUP), n=3, cutoff=0.5)
    hint = ", ".join(dict.fromkeys(_LOOKUP[k] for k in close)) or "none"  # closest first
    raise KeyError(
        f"No normalization method named {name!r}. Closest: {hint}. "
        "normlab.methods() lists every registered method."
    )


def create(name: str, *args: Any, **kwargs: Any) -> Any:
    """Build the method registered under ``name``: ``get(name).builder(*args, **kwargs)``.

    Example:
        >>> norm = normlab.create("rmsnorm", 512, eps=1e-6)
    """
    return get(name).create(*args, **kwargs)


def methods(kind: str | None = None) -> list[Method]:
    """Registered methods sorted by kind then name, optionally only those of ``kind``."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"Unknown kind {kind!r}; expected one of {KINDS}.")
    chosen = [m for m in _METHODS.values() if kind is None or m.kind == kind]
    return sorted(chosen, key=lambda m: (KINDS.index(m.kind), m.name))
