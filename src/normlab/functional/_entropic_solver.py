"""The shared solver behind the entropic score normalizers, with its implicit backward.

For an entropy that is a sum ``-sum_i f(p_i)``, ``p = argmax_{p in simplex} S(p) + <p, s>``
satisfies ``f'(p_i) = s_i - gamma`` with one scalar ``gamma`` per row, so
``p_i = P(s_i - gamma)`` for an increasing map ``P = (f')^(-1)``, and ``gamma`` solves the
monotone equation ``sum_i P(s_i - gamma) = 1``.

Implicit differentiation: with ``g_i = P'(s_i - gamma)``, differentiating ``sum p = 1``
gives ``d gamma = <g, ds> / sum g``, hence the Jacobian ``J = diag(g) - g g^T / sum(g)``.
It is symmetric with ``1^T J = 0`` and ``J 1 = 0``, and the backward pass is the O(n)
vector-Jacobian product ``v^T J = g * (v - <g, v> / sum g)``; no dense ``J`` is formed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from normlab.functional._precision import upcast

__all__ = [
    "BAD_SCORES",
    "ElementMap",
    "check_scores",
    "entropic_softmax",
    "softmax_masked",
    "tolerances",
]


#: ``elem(t, state) -> (p, g, slope, state)``: the per-element map ``p = P(t)``, its
#: derivative ``g = P'(t)``, a callable giving ``P''(t)`` on demand, and a warm-start state.
ElementMap = Callable[
    [torch.Tensor, Any], tuple[torch.Tensor, torch.Tensor, Callable[[], torch.Tensor], Any]
]


BAD_SCORES = "scores hold NaN or +inf; mask excluded keys with -inf and keep the rest finite."


def check_scores(s: torch.Tensor) -> None:
    if s.numel() and not bool(s.amax() < math.inf):  # amax is NaN if any entry is
        raise ValueError(BAD_SCORES)


def softmax_masked(s: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax with rows masked entirely by ``-inf`` set to zeros instead of NaN."""
    dead = torch.isneginf(s).all(dim=dim, keepdim=True)
    return torch.softmax(s.masked_fill(dead, 0.0), dim=dim).masked_fill(dead, 0.0)


def tolerances(dtype: torch.dtype) -> tuple[float, float, float, int]:
    """Stopping rules for ``dtype``: (|log sum p|, Newton step, bracket width, iterations).

    A Newton step below the second number (or below the rounding floor) is the last one:
    Newton's error after it is about its square. The bracket width and the
    rounding floor are relative, in units of ``1 + |value|``. In float32 the rounding of
    ``exp`` and of the sum alone puts ``log sum p`` off by a few 1e-6, hence 1e-5.
    """
    eps = torch.finfo(dtype).eps
    if dtype == torch.float64:
        return 1e-13, 1e-7, 16 * eps, 60
    return 1e-5, 1e-3, 16 * eps, 40


def _solve(
    s: torch.Tensor,
    elem: ElementMap,
    t_of_p: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``p_i = P(s_i - gamma)`` with ``sum_i p_i = 1`` along the last axis, and ``g = P'``.

    ``gamma`` comes from a safeguarded Newton iteration on ``phi(gamma) = log sum_i p_i``,
    which is decreasing in ``gamma``. The bracket is exact: at ``gamma_lo = max s - t(1)``
    the largest term alone is 1 (``phi >= 0``), and at ``gamma_hi = max s - t(1/n)`` it is
    ``1/n`` so no term exceeds it (``phi <= 0``), with ``t = P^(-1)`` in closed form. The
    start is softmax's answer ``logsumexp(s) - t(1)`` (exact for softmax, where
    ``t(p) = 1 + log p``), clamped to the bracket. A Newton step that leaves the current
    bracket is replaced by bisection. The last Newton step, once it is small, is applied by
    a second-order Taylor update of ``p`` and ``g`` instead of another evaluation (its error
    is third order in a step below 1e-3 in float32, 1e-7 in float64).

    ``-inf`` scores get ``p = g = 0`` (set here, whatever ``elem`` returns for them, as long
    as it is finite); a row without a finite score gives zeros. ``elem`` may overwrite its
    ``t``, and its ``p`` and ``g`` are updated in place.
    """
    tol, newton, width, max_iter = tolerances(s.dtype)
    neg = torch.isneginf(s)
    count = s.shape[-1] - neg.sum(-1, keepdim=True)
    dead = count == 0
    m = s.amax(-1, keepdim=True)  # NaN when the row holds a NaN
    if not bool((m < math.inf).all()):
        raise ValueError(BAD_SCORES)
    m = m.masked_fill(dead, 0.0)
    lo = m - t_of_p(torch.ones((), dtype=s.dtype))
    hi = m - t_of_p(1.0 / count.clamp_min(1).to(s.dtype))
    start = torch.logsumexp(s, -1, keepdim=True).masked_fill(dead, 0.0)
    gamma = torch.minimum(torch.maximum(start + lo - m, lo), hi)
    masked = neg if bool((count < s.shape[-1]).any()) else None
    state: Any = None
    for _ in range(max_iter):
        p, g, slope, state = elem(s - gamma, state)
        if masked is not None:
            p.masked_fill_(masked, 0.0)
            g.masked_fill_(masked, 0.0)
        total = p.sum(-1, keepdim=True)
        phi = torch.log(total)
        done = (phi.abs() <= tol) | dead
        if bool(done.all()):
            break
        lo = torch.where(phi > 0, gamma, lo)
        hi = torch.where(phi < 0, gamma, hi)
        new = gamma + phi * total / g.sum(-1, keepdim=True)
        inside = (new >= lo) & (new <= hi)  # False for NaN as well
        new = torch.where(inside, new, 0.5 * (lo + hi))
        new = torch.where(done, gamma, new)  # a solved row stays put
        unit = 1.0 + gamma.abs()
        step = new - gamma
        small = inside & (step.abs() <= (width * unit).clamp_min(newton))
        if bool((done | small | (hi - lo <= width * unit)).all()):
            # p(gamma + d) = p - d g + d^2 P''/2 and g(gamma + d) = g - d P'', as t = s - gamma.
            d2 = slope()
            p.addcmul_(g, step, value=-1.0).addcmul_(d2, step.square().mul_(0.5))
            g.addcmul_(d2, step, value=-1.0)
            total = p.sum(-1, keepdim=True)
            break
        gamma = new
    total = total.masked_fill(dead, 1.0)
    # Renormalise so that sum p = 1 to rounding; the factor is 1 + O(tol).
    return p.div_(total), g.div_(total)


class _EntropicSoftmax(torch.autograd.Function):
    """``p = argmax S(p) + <p, s>`` on the last axis, with the implicit-function backward."""

    @staticmethod
    def forward(
        ctx: Any, s: torch.Tensor, elem: ElementMap, t_of_p: Callable[..., torch.Tensor]
    ) -> torch.Tensor:
        p, g = _solve(s, elem, t_of_p)
        ctx.save_for_backward(g)
        return p

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, v: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        (g,) = ctx.saved_tensors
        gsum = g.sum(-1, keepdim=True)
        gsum = torch.where(gsum > 0, gsum, torch.ones_like(gsum))
        return (v - (g * v).sum(-1, keepdim=True) / gsum).mul_(g), None, None


def entropic_softmax(
    x: torch.Tensor, dim: int, tau: float, elem: ElementMap, t_of_p: Any
) -> torch.Tensor:
    s = upcast(x)
    if tau != 1.0:
        s = s / tau
    if s.numel() == 0:
        return s.clone().to(x.dtype)
    p = _EntropicSoftmax.apply(s.movedim(dim, -1), elem, t_of_p)
    return p.movedim(-1, dim).to(x.dtype)
