"""Numerical and affine rank of token representations, with an explicit tolerance.

The numerical rank of ``X`` (``n`` tokens x ``d`` features) is the number of singular values
above ``tol = max(atol, rtol * s_max)``; the default ``rtol = max(n, d) * eps`` of the
input's dtype is NumPy's ``matrix_rank`` rule. The affine rank is the rank of the centred
set ``X - 1 mean(X)^T``: the dimension of the smallest affine subspace holding the tokens
(LayerNorm leaves it unchanged, seed paper "affine-rank"). Singular values are computed in
float64; the tolerance used is returned with every result so numbers are comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from normlab._checks import check_float, check_min_rank
from normlab._records import Record

__all__ = ["RankRecord", "affine_rank", "layer_ranks", "numerical_rank", "rank_record"]


@dataclass(frozen=True)
class RankRecord(Record):
    """Ranks of one token set ``(n, d)`` (or the mean over a batch of them).

    Attributes:
        rank: numerical rank of ``X``.
        affine_rank: numerical rank of ``X - 1 mean(X)^T``.
        tol: the absolute tolerance on singular values used for ``rank`` (for a batch,
            the largest over its sets); ``affine_tol`` the one for ``affine_rank``.
        rtol: the relative tolerance.
        atol: the absolute floor.
        tokens: ``n``.
        features: ``d``.
        singular_values: of ``X`` (the first set of a batch), largest first.
    """

    rank: float
    affine_rank: float
    tol: float
    affine_tol: float
    rtol: float
    atol: float
    tokens: int
    features: int
    singular_values: tuple[float, ...] = ()


def _default_rtol(x: torch.Tensor) -> float:
    n, d = x.shape[-2:]
    return max(n, d) * torch.finfo(x.dtype).eps


def _rank(x: torch.Tensor, rtol: float, atol: float) -> tuple[torch.Tensor, torch.Tensor]:
    s = torch.linalg.svdvals(x.double())
    top = s[..., :1] if s.shape[-1] else torch.zeros(*s.shape[:-1], 1, dtype=s.dtype)
    tol = torch.clamp(rtol * top, min=atol)
    return (s > tol).sum(-1), tol.squeeze(-1)


def numerical_rank(
    x: torch.Tensor, *, rtol: float | None = None, atol: float = 0.0
) -> torch.Tensor:
    """Number of singular values of ``x`` (``(..., n, d)``) above ``max(atol, rtol * s_max)``.

    Args:
        x: one or a batch of matrices.
        rtol: relative tolerance; ``None`` for ``max(n, d) * eps(x.dtype)``.
        atol: absolute tolerance.

    Returns:
        Integer ranks of shape ``x.shape[:-2]``.
    """
    check_float(x)
    check_min_rank(x, 2, "(..., tokens, features)")
    return _rank(x, _default_rtol(x) if rtol is None else rtol, atol)[0]


def affine_rank(x: torch.Tensor, *, rtol: float | None = None, atol: float = 0.0) -> torch.Tensor:
    """Rank of the centred token set ``x - mean(x, tokens)``: ``rank(X - 1 mean(X)^T)``.

    Args:
        x: ``(..., n, d)`` token sets.
        rtol: relative tolerance on the centred matrix's singular values; ``None`` for
            ``max(n, d) * eps(x.dtype)``.
        atol: absolute tolerance.
    """
    check_float(x)
    check_min_rank(x, 2, "(..., tokens, features)")
    centred = x.double() - x.double().mean(-2, keepdim=True)
    return _rank(centred, _default_rtol(x) if rtol is None else rtol, atol)[0]


def rank_record(x: torch.Tensor, *, rtol: float | None = None, atol: float = 0.0) -> RankRecord:
    """Rank and affine rank of ``x`` ``(n, d)``, or their means over a batch ``(B, n, d)``."""
    check_float(x)
    check_min_rank(x, 2, "(..., tokens, features)")
    r = _default_rtol(x) if rtol is None else rtol
    sets = x.reshape(-1, *x.shape[-2:])
    ranks, tol = _rank(sets, r, atol)
    centred = sets.double() - sets.double().mean(-2, keepdim=True)
    aranks, atols = _rank(centred, r, atol)
    s = torch.linalg.svdvals(sets[0].double())
    return RankRecord(
        float(ranks.double().mean()),
        float(aranks.double().mean()),
        float(tol.max()),
        float(atols.max()),
        r,
        atol,
        int(x.shape[-2]),
        int(x.shape[-1]),
        tuple(float(v) for v in s),
    )


def layer_ranks(
    states: Sequence[torch.Tensor], *, rtol: float | None = None, atol: float = 0.0
) -> list[RankRecord]:
    """:func:`rank_record` of every layer's states ``(B, T, d)`` (e.g. ``Trace.residual``)."""
    return [rank_record(h, rtol=rtol, atol=atol) for h in states]
