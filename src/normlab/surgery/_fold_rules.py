"""Transfer rules of the fold analysis: how each operation changes a tensor's :class:`Status`.

Operations that keep "zero mean along the feature axis once the writers are centred":
sums of centrable terms; scaling by a number or by a tensor of size 1 along the feature
axis; token mixing (``A @ v``, attention); reshapes, transposes, slices and reductions that
keep the feature axis; dropout and dtype casts. A rule returns the output's status, or None
when the operation is not one of these (the tracker then treats it as consuming its inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch

__all__ = ["ADD", "METADATA", "ZERO", "ZERO_MAKERS", "Status", "Tracks", "merge", "rule_for"]


@dataclass(frozen=True)
class Status:
    """What the analysis knows about one tensor.

    Attributes:
        kind: "centred" (sum of centrable writers), "lnout" (a LayerNorm output times
            ``scale``), "zero", or "broken".
        writers: centrable writers whose outputs enter this tensor additively (their
            centring shifts it by a per-token constant along ``axis``).
        axis: the feature axis, counted from the end (negative).
        ln: the LayerNorm, for "lnout".
        scale: the product of scalars applied to the LayerNorm output.
        reason: why it is broken.
    """

    kind: str
    writers: frozenset[str] = field(default_factory=frozenset)
    axis: int = -1
    ln: str = ""
    scale: float = 1.0
    reason: str = ""


ZERO = Status("zero")


def _names(*chunks: str) -> frozenset[str]:
    return frozenset(word for chunk in chunks for word in chunk.split())


ADD = _names("add add_ __add__ __radd__ __iadd__ sub sub_ __sub__ __rsub__ __isub__ subtract")
_MUL = _names(
    "mul mul_ __mul__ __rmul__ __imul__ multiply div div_ __truediv__ __itruediv__",
    "true_divide divide",
)
_SAME = _names(
    "contiguous clone detach to type float double half bfloat16 cpu dropout dropout_",
    "alpha_dropout feature_alpha_dropout requires_grad_ neg __neg__ negative",
)
_RESHAPE = _names(
    "view reshape flatten unflatten squeeze unsqueeze expand expand_as view_as",
    "reshape_as squeeze_ unsqueeze_",
)
_PERMUTE = _names("transpose permute swapaxes swapdims movedim moveaxis t")
ZERO_MAKERS = _names("zeros_like new_zeros")
METADATA = _names(
    "ones_like empty_like full_like rand_like randn_like new_ones new_empty new_full",
    "new_tensor randint_like",
)


class Tracks(Protocol):
    """What a rule needs from the tracker."""

    def get(self, t: Any) -> Status | None: ...

    def consume(self, status: Status | None, why: str) -> None: ...

    def operand(self, x: Any) -> Status: ...

    def ctx(self) -> str: ...


def _match_axis(shape_in: torch.Size, axis: int, shape_out: torch.Size) -> int | None:
    """The feature axis after a reshape: same size, same number of elements after it."""
    pos = len(shape_in) + axis
    tail = math.prod(shape_in[pos + 1 :])
    for j in range(len(shape_out) - 1, -1, -1):
        if shape_out[j] == shape_in[pos] and math.prod(shape_out[j + 1 :]) == tail:
            return j - len(shape_out)
    return None


def _getitem_axis(key: Any, ndim: int) -> int | None:
    """The feature axis (last dim) after ``x[key]``, or None when the key touches it."""
    key = key if isinstance(key, tuple) else (key,)
    full = slice(None)
    if any(k is Ellipsis for k in key):
        after = key[[k is Ellipsis for k in key].index(True) + 1 :]
    else:
        used = [k for k in key if k is not None]
        if len(used) < ndim:
            return -1
        after = key[len(key) - 1 - [k is not None for k in reversed(key)].index(True) :]
    trailing = 0
    for k in reversed(after):
        if k is None:
            trailing += 1
            continue
        ok = isinstance(k, slice) and k == full
        return -1 - trailing if ok else None
    return -1 - trailing


def merge(parts: list[Status], where: str) -> Status:
    writers = frozenset().union(*(p.writers for p in parts))
    for p in parts:
        if p.kind == "lnout":
            reason = f"sums the output of LayerNorm '{p.ln}' into the stream in {where} (post-LN)"
            return Status("broken", writers, reason=reason)
        if p.kind == "broken":
            return Status("broken", writers, p.axis, reason=p.reason)
    axes = {p.axis for p in parts if p.kind != "zero"}
    if len(axes) > 1:
        return Status("broken", writers, reason=f"terms with different feature axes in {where}")
    return Status("centred", writers, axes.pop() if axes else -1) if writers else ZERO


def _add(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status:
    parts = [tr.operand(a) for a in args[:2]]
    for p in parts:
        if p.kind == "lnout":
            tr.consume(p, f"added to another tensor in {tr.ctx()} (post-LN residual)")
    return merge(parts, tr.ctx())


_DIV = _names("div div_ __truediv__ __itruediv__ true_divide divide")


def _carries(st: Status | None) -> bool:
    return st is not None and (st.kind in ("centred", "lnout") or bool(st.writers))


def _mul(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status | None:
    a, b = args[0], args[1] if len(args) > 1 else kwargs.get("other")
    sa, sb = tr.get(a), tr.get(b)
    if name not in _DIV and not _carries(sa) and _carries(sb):
        a, b, sa, sb = b, a, sb, sa  # the stream is the other factor
    if sa is None or _carries(sb):
        return None  # a product of two streams is not linear in either
    if isinstance(b, torch.Tensor) and b.numel() == 1:
        b = float(b.item())
    if isinstance(b, int | float):
        factor = 1.0 / b if name in _DIV else float(b)
        return replace(sa, scale=sa.scale * factor)
    if not isinstance(b, torch.Tensor):
        return None
    if b.dim() < -sa.axis or b.shape[sa.axis] == 1:
        if sa.kind == "lnout":  # a per-token factor would scale the folded bias per token
            return None
        tr.consume(sb, f"{name} in {tr.ctx()}")
        return sa
    return None


def _same(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status | None:
    st = tr.get(args[0])
    if st is None:
        return None
    return replace(st, scale=-st.scale) if "neg" in name else st


def _reshape(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status | None:
    st = tr.get(args[0])
    axis = None if st is None else _match_axis(args[0].shape, st.axis, outs[0].shape)
    return None if axis is None else replace(st, axis=axis)


def _permute(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status | None:
    x, st = args[0], tr.get(args[0])
    if st is None:
        return None
    n, pos = x.dim(), x.dim() + st.axis
    dims = list(range(n))
    if name in ("transpose", "swapaxes", "swapdims"):
        i, j = (int(d) % n for d in args[1:3])
        dims[i], dims[j] = dims[j], dims[i]
    elif name == "t":
        dims = dims[::-1]
    elif name == "permute":
        order = args[1] if len(args) == 2 and not isinstance(args[1], int) else args[1:]
        dims = [int(d) % n for d in order]
    else:
        return None
    return replace(st, axis=dims.index(pos) - n)


def _getitem(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status | None:
    st = tr.get(args[0])
    if st is None or st.axis != -1:
        return None
    axis = _getitem_axis(args[1], args[0].dim())
    return None if axis is None else replace(st, axis=axis)


def _reduce(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status | None:
    x, st = args[0], tr.get(args[0])
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if st is None or st.kind == "lnout" or dim is None:
        return None
    n, pos = x.dim(), x.dim() + st.axis
    dims = {int(d) % n for d in (dim if isinstance(dim, list | tuple) else [dim])}
    if pos in dims:
        return None
    keep = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    return replace(st, axis=st.axis + (0 if keep else sum(d > pos for d in dims)))


def _join(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status | None:
    parts = [tr.operand(t) for t in args[0]]
    if any(p.kind in ("lnout", "broken") and not p.writers for p in parts):
        return None
    n = args[0][0].dim()
    dim = int(kwargs.get("dim", args[1] if len(args) > 1 else 0))
    merged = merge(parts, tr.ctx())
    pos = n + merged.axis
    if name != "stack":
        return None if dim % n == pos else merged
    dim = dim % (n + 1)
    return replace(merged, axis=(pos + (dim <= pos)) - (n + 1))


def _mix(tr: Tracks, name: str, args: tuple, kwargs: dict, outs: list) -> Status | None:
    """Token mixing ``A @ v`` (and attention): rows of ``v`` are combined, features kept."""
    if name == "scaled_dot_product_attention":
        left, v = list(args[:2]), args[2] if len(args) > 2 else kwargs.get("value")
    else:
        left, v = [args[0]], args[1]
    sv = tr.get(v)
    if sv is None or sv.kind == "lnout" or sv.axis != -1:
        return None
    for t in left:
        tr.consume(tr.get(t), f"{name} in {tr.ctx()}")
    return sv


_RULES: dict[str, Callable[..., Status | None]] = {
    "__getitem__": _getitem,
    "sum": _reduce,
    "mean": _reduce,
    "cat": _join,
    "concat": _join,
    "concatenate": _join,
    "stack": _join,
    "matmul": _mix,
    "__matmul__": _mix,
    "bmm": _mix,
    "scaled_dot_product_attention": _mix,
}
_GROUPS: tuple[tuple[set[str], Callable[..., Status | None]], ...] = (
    (ADD, _add),
    (_MUL, _mul),
    (_SAME, _same),
    (_RESHAPE, _reshape),
    (_PERMUTE, _permute),
)


def rule_for(name: str) -> Callable[..., Status | None] | None:
    """The transfer rule of the torch function or tensor method called ``name``, if any."""
    return _RULES.get(name) or next((r for names, r in _GROUPS if name in names), None)
