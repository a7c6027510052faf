"""The one registry of normalization methods.

Every method normlab implements is a :class:`Method` record in a single dict, keyed by a
canonical name. Families register their methods when they are imported; ``import normlab``
imports every family, so the registry is complete after it. Methods of other packages
register themselves when their module is imported, or lazily through the
``normlab.methods`` entry point group: an unknown name loads those entry points once
before it is refused.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["KINDS", "LAYOUTS", "Method", "create", "get", "matches", "methods", "register"]

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
        """Build the method: ``builder(*args, **kwargs)``.

        Raises:
            TypeError: when the arguments do not fit the builder; the message gives its
                signature and, for a kind that is not a layer, what to call instead.
        """
        try:
            signature = inspect.signature(self.builder)
        except (TypeError, ValueError):  # a builder without a signature: just call it
            return self.builder(*args, **kwargs)
        try:
            signature.bind(*args, **kwargs)
        except TypeError as err:
            hint = _CALL.get(self.kind, _CALL["norm"]).format(name=self.name)
            raise TypeError(
                f"normlab.create({self.name!r}, ...): {err}. {self.name!r} is {hint}; "
                f"its builder takes {signature}."
            ) from None
        return self.builder(*args, **kwargs)


#: What each kind's builder is and how to call it (for errors of :meth:`Method.create`).
_CALL = {
    "norm": "a layer: pass the feature size first, e.g. normlab.create({name!r}, 512)",
    "activation": "an activation layer: normlab.create({name!r}) or with its options",
    "score": "an attention score normalizer: normlab.create({name!r}) with its options",
    "series": "a series normalizer: pass the number of channels, e.g. "
    "normlab.create({name!r}, 7) (see its signature for the window lengths)",
    "advantage": "an advantage function, not a layer: call it on rewards and their groups, "
    "normlab.create({name!r}, rewards, groups) or "
    "normlab.rl.advantages(rewards, groups, method={name!r})",
    "optim": "an optimizer, not a layer: pass the parameters, "
    "normlab.create({name!r}, model.parameters(), lr=1e-3)",
    "flow": "a flow layer: pass the feature size, e.g. normlab.create({name!r}, 8)",
    "quant": "a fake quantizer: normlab.create({name!r}) with its options, then call it on "
    "a tensor",
}


_METHODS: dict[str, Method] = {}
_LOOKUP: dict[str, str] = {}
#: Entry point group of packages that register methods.
ENTRY_POINTS = "normlab.methods"
_LOADED_PLUGINS: set[str] = set()


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


def _load_plugins() -> int:
    """Import the modules of the ``normlab.methods`` entry points not loaded yet; return
    how many were loaded (a failing one is skipped with a warning)."""
    from importlib.metadata import entry_points

    loaded = 0
    for point in entry_points(group=ENTRY_POINTS):
        if point.value in _LOADED_PLUGINS:
            continue
        _LOADED_PLUGINS.add(point.value)
        try:
            point.load()
            loaded += 1
        except Exception as err:  # a broken plugin must not break normlab's own methods
            warnings.warn(
                f"normlab: the {ENTRY_POINTS} entry point {point.name!r} ({point.value}) "
                f"failed to load: {type(err).__name__}: {err}",
                RuntimeWarning,
                stacklevel=3,
            )
    return loaded


def get(name: str) -> Method:
    """The method registered under ``name`` or one of its aliases.

    Lookup ignores case, ``-`` and ``_``. An unknown name first loads the packages
    registered under the ``normlab.methods`` entry point group.

    Raises:
        KeyError: for an unknown name; the message lists the closest registered names
            and says how a method of your own gets registered.
    """
    key = _key(name)
    if key not in _LOOKUP:
        _load_plugins()  # a plugin may register it
    if key in _LOOKUP:
        return _METHODS[_LOOKUP[key]]
    close = difflib.get_close_matches(key, list(_LOOKUP), n=3, cutoff=0.5)
    hint = ", ".join(dict.fromkeys(_LOOKUP[k] for k in close)) or "none"  # closest first
    raise KeyError(
        f"No normalization method named {name!r}. Closest: {hint}. "
        "normlab.methods() lists every registered method. A method of your own is "
        "registered when the module that calls normlab.register(...) runs: import that "
        "module first (in a fresh process or a worker too), or declare it as a "
        f"{ENTRY_POINTS!r} entry point of your package so normlab loads it by itself."
    )


def create(name: str, *args: Any, **kwargs: Any) -> Any:
    """Build the method registered under ``name``: ``get(name).builder(*args, **kwargs)``.

    Example:
        >>> norm = normlab.create("rmsnorm", 512, eps=1e-6)
    """
    return get(name).create(*args, **kwargs)


def matches(method: Method, pattern: str) -> bool:
    """Whether ``method``'s name or an alias matches ``pattern``: a glob (``*``, ``?``,
    ``[...]``, like timm's ``list_models``) or else a substring, ignoring case."""
    pattern = pattern.lower()
    glob = any(ch in pattern for ch in "*?[")
    names = (method.name, *method.aliases)
    return any(fnmatch.fnmatchcase(n, pattern) if glob else pattern in n for n in names)


def methods(
    pattern: str | Sequence[str] | None = None, *, kind: str | None = None
) -> list[Method]:
    """Registered methods sorted by kind then name.

    Args:
        pattern: keep the methods whose name or an alias matches: a glob such as
            ``"rms*"`` or ``"*softmax*"``, a substring such as ``"quad"``, or a list of
            them (any may match). A kind's own name (``methods("norm")``) is taken as
            ``kind``.
        kind: only methods of this kind, one of :data:`KINDS`.

    Example:
        >>> [m.name for m in normlab.methods("rms*")]
        ['rmsnorm']

    Raises:
        ValueError: for an unknown kind.
    """
    if isinstance(pattern, str) and pattern in KINDS and kind is None:
        pattern, kind = None, pattern
    if kind is not None and kind not in KINDS:
        raise ValueError(f"Unknown kind {kind!r}; expected one of {KINDS}.")
    patterns = [pattern] if isinstance(pattern, str) else list(pattern or [])
    chosen = [
        m
        for m in _METHODS.values()
        if (kind is None or m.kind == kind)
        and (not patterns or any(matches(m, p) for p in patterns))
    ]
    return sorted(chosen, key=lambda m: (KINDS.index(m.kind), m.name))
