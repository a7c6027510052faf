"""Sparse score normalizers: sparsemax (written here) and 1.5-entmax (``entmax`` package).

Both return exact zeros for low scores. Scores masked with ``-inf`` get zero weight, and a
row masked entirely gives zeros rather than NaN, as :func:`normlab.functional.softmax1`.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from normlab._checks import check_float, check_min_rank
from normlab.functional._precision import upcast

__all__ = ["entmax15", "entmax_available", "sparsemax"]


def _check_scores(s: torch.Tensor) -> None:
    if s.numel() and not bool(s.amax() < math.inf):  # amax is NaN if any entry is
        raise ValueError(
            "scores hold NaN or +inf; mask excluded keys with -inf and keep the rest finite."
        )


class _Sparsemax(torch.autograd.Function):
    """Sparsemax on the last axis, with the support-mean backward."""

    @staticmethod
    def forward(ctx: Any, s: torch.Tensor) -> torch.Tensor:
        n = s.shape[-1]
        m = s.amax(-1, keepdim=True)
        dead = torch.isneginf(m)
        z = s - m.masked_fill(dead, 0.0)  # max 0: the cumulative sums stay small
        zs = z.sort(-1, descending=True).values
        cs = zs.cumsum(-1)
        k = torch.arange(1, n + 1, dtype=s.dtype, device=s.device)
        # The support is the prefix of sorted entries with 1 + k z_(k) > sum_{j <= k} z_(j);
        # -inf entries never satisfy it (-inf > -inf is False).
        size = (1.0 + k * zs > cs).sum(-1, keepdim=True)
        tau = (cs.gather(-1, (size - 1).clamp_min(0)) - 1.0) / size.clamp_min(1).to(s.dtype)
        p = (z - tau).clamp_min(0.0).masked_fill(dead, 0.0)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, v: torch.Tensor) -> torch.Tensor:
        (p,) = ctx.saved_tensors
        support = (p > 0).to(v.dtype)
        size = support.sum(-1, keepdim=True).clamp_min(1.0)
        return support * (v - (v * support).sum(-1, keepdim=True) / size)


def sparsemax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sparsemax: the Euclidean projection of the scores onto the simplex.

    ``p = argmin_{p in simplex} ||p - x||^2 = max(x - tau, 0)`` with the threshold ``tau``
    such that ``sum p = 1`` (Martins & Astudillo, 2016). With the scores sorted in
    decreasing order, the support is the largest ``k`` with ``1 + k x_(k) > sum_{j<=k} x_(j)``
    and ``tau = (sum_{j<=k} x_(j) - 1) / k``. Its Jacobian is
    ``diag(s) - s s^T / |S|`` for the support indicator ``s``, so the backward pass is
    ``s * (v - mean_S(v))``. Half-precision inputs are computed in float32.

    Examples:
        >>> import torch
        >>> sparsemax(torch.tensor([[1.0, 0.8, -1.0], [0.0, 0.0, 0.0]]))
        tensor([[0.6000, 0.4000, 0.0000],
                [0.3333, 0.3333, 0.3333]])
    """
    check_float(x)
    check_min_rank(x, 1, "(..., n) with the scores along dim")
    _check_scores(x)
    s = upcast(x)
    if s.numel() == 0:
        return s.clone().to(x.dtype)
    p = _Sparsemax.apply(s.movedim(dim, -1))
    return p.movedim(-1, dim).to(x.dtype)


def entmax_available() -> bool:
    """Whether the optional ``entmax`` package (extra ``normlab[sparse]``) is installed.

    Examples:
        >>> import importlib.util
        >>> entmax_available() == (importlib.util.find_spec("entmax") is not None)
        True
    """
    try:
        return importlib.util.find_spec("entmax") is not None
    except ValueError:  # in sys.modules without a spec, e.g. blocked with None
        return sys.modules.get("entmax") is not None


def entmax15(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """1.5-entmax, the maximiser of ``<p, x> + H_1.5(p)`` on the simplex, from ``entmax``.

    ``p_i = [(x_i / 2 - tau)_+]^2`` with ``tau`` such that ``sum p = 1`` (Peters, Niculae &
    Martins, 2019): sparse like sparsemax, smoother like softmax. This wraps the ``entmax``
    package's exact sort-based implementation and its backward. Half-precision inputs are
    computed in float32.

    Raises:
        ImportError: when ``entmax`` is not installed; ``pip install entmax``.

    Examples:
        >>> import torch
        >>> p = entmax15(torch.tensor([[2.0, 1.0, -2.0]]))  # needs normlab[sparse]
        >>> p, round(float(p.sum()), 5)
        (tensor([[0.8307, 0.1693, 0.0000]]), 1.0)
    """
    check_float(x)
    check_min_rank(x, 1, "(..., n) with the scores along dim")
    try:
        from entmax import entmax15 as _entmax15
    except ImportError as err:
        raise ImportError(
            "entmax15 needs the optional 'entmax' package: pip install entmax "
            "(or pip install 'normlab[sparse]')."
        ) from err
    _check_scores(x)
    s = upcast(x)
    if s.numel() == 0:
        return s.clone().to(x.dtype)
    # The package fails on a row masked entirely; give such rows zeros instead.
    dead = torch.isneginf(s).all(dim=dim, keepdim=True)
    p = _entmax15(s.masked_fill(dead, 0.0), dim=dim)
    return p.masked_fill(dead, 0.0).to(x.dtype)
