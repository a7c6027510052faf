"""Score normalizers from generalized entropies: Kaniadakis kappa-softmax and Abe softmax.

Softmax is the maximiser of ``H(p) + <p, s>`` over the simplex, with ``H`` the Shannon
entropy. Replacing ``H`` by another concave entropy ``S`` gives another score normalizer,
``p = argmax_{p in simplex} S(p) + <p, s>``. For an entropy that is a sum ``-sum_i f(p_i)``
the stationarity conditions read ``f'(p_i) = s_i - gamma`` with one scalar multiplier
``gamma`` per row, so ``p_i = P(s_i - gamma)`` for an increasing map ``P = (f')^(-1)`` and
``gamma`` solves ``sum_i P(s_i - gamma) = 1`` (a monotone equation in one unknown).

The derivations below are normlab's own (the paper's text is not public) and are checked
numerically by the tests.

Implicit differentiation: with ``g_i = P'(s_i - gamma)``, differentiating ``sum p = 1``
gives ``d gamma = <g, ds> / sum g``, hence the Jacobian ``J = diag(g) - g g^T / sum(g)``.
It is symmetric with ``1^T J = 0`` and ``J 1 = 0``, and the backward pass is the O(n)
vector-Jacobian product ``v^T J = g * (v - <g, v> / sum g)``; no dense ``J`` is formed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from normlab._checks import check_float
from normlab.functional._precision import upcast

__all__ = ["abe_softmax", "kappa_exp", "kappa_log", "kappa_softmax"]

#: Below this ``kappa`` (or ``|ln q|``) the operators equal softmax to within rounding, and
#: softmax is returned.
SOFTMAX_LIMIT = 1e-6

# t -> (p, g, state): the per-element map P and its derivative, warm-startable.
ElementMap = Callable[[torch.Tensor, Any], tuple[torch.Tensor, torch.Tensor, Any]]


def _real(name: str, value: object, low: float, high: float, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}.")
    v = float(value)
    if not low <= v <= high:
        raise ValueError(f"{name} must lie in [{low}, {high}], got {v}; {hint}.")
    return v


def _check_scores(s: torch.Tensor) -> None:
    if bool((torch.isnan(s) | torch.isposinf(s)).any()):
        raise ValueError(
            "scores hold NaN or +inf; mask excluded keys with -inf and keep the rest finite."
        )


def kappa_exp(x: torch.Tensor, kappa: float) -> torch.Tensor:
    """Kaniadakis kappa-exponential ``exp_k(x) = (sqrt(1 + k^2 x^2) + k x)^(1/k)``.

    Computed as ``exp(asinh(k x) / k)``, which is the same function without the
    cancellation of ``sqrt(1 + k^2 x^2) + k x`` at large negative ``x``. It tends to
    ``exp(x)`` as ``k -> 0`` (``kappa = 0`` gives ``exp``), is even in ``k``, and decays
    algebraically, ``exp_k(x) ~ (2 k |x|)^(-1/k)`` as ``x -> -inf`` (Kaniadakis, 2001).
    """
    check_float(x)
    k = abs(_real("kappa", kappa, -1.0, 1.0, "the kappa-exponential needs |kappa| < 1"))
    xf = upcast(x)
    if k == 0.0:
        return torch.exp(xf).to(x.dtype)
    return torch.exp(torch.asinh(k * xf) / k).to(x.dtype)


def kappa_log(x: torch.Tensor, kappa: float) -> torch.Tensor:
    """Kaniadakis kappa-logarithm ``ln_k(x) = (x^k - x^(-k)) / (2k) = sinh(k ln x) / k``.

    The inverse of :func:`kappa_exp`; ``kappa = 0`` gives ``log``.
    """
    check_float(x)
    k = abs(_real("kappa", kappa, -1.0, 1.0, "the kappa-logarithm needs |kappa| < 1"))
    xf = upcast(x)
    if k == 0.0:
        return torch.log(xf).to(x.dtype)
    return (torch.sinh(k * torch.log(xf)) / k).to(x.dtype)


def _softmax_masked(s: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax with rows masked entirely by ``-inf`` set to zeros instead of NaN."""
    dead = torch.isneginf(s).all(dim=dim, keepdim=True)
    return torch.softmax(s.masked_fill(dead, 0.0), dim=dim).masked_fill(dead, 0.0)


def _tolerances(dtype: torch.dtype) -> tuple[float, float, int]:
    """(tolerance on log sum p, relative step floor, max iterations) for ``dtype``."""
    eps = torch.finfo(dtype).eps
    if dtype == torch.float64:
        return 1e-13, 8 * eps, 60
    return 1e-6, 8 * eps, 40


def _solve(
    s: torch.Tensor,
    elem: ElementMap,
    t_of_p: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``p_i = P(s_i - gamma)`` with ``sum_i p_i = 1`` along the last axis, and ``g = P'``.

    ``gamma`` comes from a safeguarded Newton iteration on ``phi(gamma) = log sum_i p_i``,
    which is decreasing in ``gamma``. The bracket is exact: at ``gamma_lo = max s - t(1)``
    the largest term alone is 1 (``phi >= 0``), and at ``gamma_hi = max s - t(1/n)`` it is
    ``1/n`` so no term exceeds it (``phi <= 0``), with ``t = P^(-1)`` in closed form. A
    Newton step that leaves the current bracket is replaced by bisection. ``-inf`` scores
    get ``p = g = 0``; rows without a finite score give zeros.
    """
    tol, rel, max_iter = _tolerances(s.dtype)
    live = ~torch.isneginf(s)
    count = live.sum(-1, keepdim=True)
    dead = count == 0
    m = s.masked_fill(~live, -math.inf).amax(-1, keepdim=True).masked_fill(dead, 0.0)
    s = torch.where(live, s, m)  # masked entries get a finite placeholder, zeroed below
    lo = m - t_of_p(torch.ones((), dtype=s.dtype))
    hi = m - t_of_p(1.0 / count.clamp_min(1).to(s.dtype))
    start = torch.logsumexp(s.masked_fill(~live, -math.inf), -1, keepdim=True)
    gamma = torch.minimum(torch.maximum(start.masked_fill(dead, 0.0) + lo - m, lo), hi)
    state: Any = None
    for _ in range(max_iter):
        p, g, state = elem(s - gamma, state)
        p, g = p * live, g * live
        total = p.sum(-1, keepdim=True)
        phi = torch.log(total)
        lo = torch.where(phi > 0, gamma, lo)
        hi = torch.where(phi < 0, gamma, hi)
        new = gamma + phi * total / g.sum(-1, keepdim=True)
        inside = (new > lo) & (new < hi)  # False for NaN as well
        new = torch.where(inside, new, 0.5 * (lo + hi))
        small = (new - gamma).abs() <= rel * (1.0 + gamma.abs())
        if bool(((phi.abs() <= tol) | small | dead).all()):
            break
        gamma = new
    total = total.masked_fill(dead, 1.0)
    # Renormalise so that sum p = 1 to rounding; the factor is 1 + O(tol).
    return p / total, g / total


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
        return g * (v - (g * v).sum(-1, keepdim=True) / gsum), None, None


def _apply(x: torch.Tensor, dim: int, tau: float, elem: ElementMap, t_of_p: Any) -> torch.Tensor:
    s = upcast(x)
    if tau != 1.0:
        s = s / tau
    p = _EntropicSoftmax.apply(s.movedim(dim, -1), elem, t_of_p)
    return p.movedim(-1, dim).to(x.dtype)


def kappa_softmax(
    x: torch.Tensor, dim: int = -1, kappa: float = 0.1, tau: float = 1.0
) -> torch.Tensor:
    """Kaniadakis kappa-softmax: the maximiser of ``S_k(p) + <p, x / tau>`` on the simplex.

    With the Kaniadakis entropy ``S_k(p) = -sum_i (p_i^(1+k) - p_i^(1-k)) / (2k)``
    (Kaniadakis, 2001; the "kappa" seed paper), stationarity gives
    ``(1+k) p^k - (1-k) p^(-k) = 2k (s_i - gamma)``. Writing ``p = alpha e`` with
    ``alpha = ((1-k)/(1+k))^(1/(2k))`` makes both coefficients ``lam = sqrt(1 - k^2)``, so
    ``ln_k(e) = (s_i - gamma) / lam`` and::

        p_i = alpha * exp_k((s_i - gamma) / lam),   sum_i p_i = 1.

    ``gamma`` is found per row by safeguarded Newton (sum p = 1 to ~1e-13 in float64, ~1e-6
    in float32, then renormalised). Unlike softmax the weights decay algebraically,
    ``p ~ |s|^(-1/k)`` for very negative scores. The backward pass is implicit
    differentiation, ``J = diag(g) - g g^T / sum g`` with
    ``g_i = p_i / (lam sqrt(1 + k^2 u_i^2))``, ``u_i = (s_i - gamma) / lam``; it is
    once-differentiable. ``-inf`` scores get exactly zero weight; a fully masked row gives
    zeros. Half-precision inputs are computed in float32.

    Args:
        x: scores.
        dim: axis to normalize over.
        kappa: in ``[0, 1)``; below ``1e-6`` the result is softmax (the operator is even in
            ``kappa`` and differs from softmax by ``O(kappa^2)``).
        tau: temperature: the scores are divided by ``tau > 0``.
    """
    check_float(x)
    k = _real("kappa", kappa, 0.0, 1.0, "kappa-softmax needs 0 <= kappa < 1")
    if k == 1.0:
        raise ValueError("kappa must be < 1: at kappa = 1 the entropy is no longer concave.")
    t = _real("tau", tau, 0.0, math.inf, "use a positive temperature")
    if t == 0.0:
        raise ValueError("tau must be positive; use a small positive temperature instead of 0.")
    _check_scores(x)
    if k < SOFTMAX_LIMIT:
        return _softmax_masked(upcast(x) / t, dim).to(x.dtype)
    lam = math.sqrt(1.0 - k * k)
    log_alpha = -math.atanh(k) / k  # ln(((1-k)/(1+k))^(1/(2k)))

    def elem(u_times_lam: torch.Tensor, state: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        a = torch.asinh((k / lam) * u_times_lam)
        p = torch.exp(log_alpha + a / k)
        return p, p / (lam * torch.cosh(a)), None  # cosh(asinh(z)) = sqrt(1 + z^2)

    def t_of_p(p: torch.Tensor) -> torch.Tensor:
        return lam * torch.sinh(k * (torch.log(p) - log_alpha)) / k

    return _apply(x, dim, t, elem, t_of_p)


def _abe_parts(eps: float) -> tuple[float, float, float, float]:
    """(A, B, Q^2 - 1, 1 - 1/Q) for ``Q = e^|eps|``: the constants of the Abe solve."""
    e = abs(eps)
    return 2.0 * math.sinh(e / 2) ** 2, math.sinh(e), math.expm1(2 * e), -math.expm1(-e)


def abe_softmax(x: torch.Tensor, dim: int = -1, q: float = 1.2, tau: float = 1.0) -> torch.Tensor:
    """Abe-entropy softmax: the maximiser of ``S_q(p) + <p, x / tau>`` on the simplex.

    Abe's entropy ``S_q(p) = -sum_i (p_i^q - p_i^(1/q)) / (q - 1/q)`` (Abe, 1997; the "kappa"
    seed paper) is symmetric under ``q <-> 1/q`` by construction. Stationarity gives, per
    element, ``q p^(q-1) - p^(1/q-1) / q = (q - 1/q)(s_i - gamma)``. With ``eps = ln q`` and
    ``L = ln p`` normlab rewrites this without the cancellation of both sides at ``q -> 1``::

        h(L) = exp((cosh eps - 1) L) sinh(eps + L sinh eps) / sinh eps = s_i - gamma,

    which is even in ``eps`` (so ``q`` and ``1/q`` give the same operator) and tends to
    ``1 + L`` as ``eps -> 0``, i.e. ``p = exp(s - gamma - 1)``: softmax. ``h`` is increasing,
    and for ``p <= 1`` and ``Q = max(q, 1/q)`` the roots are bracketed in closed form by
    ``L >= -log1p((Q^2-1)(1-t)) / (1-1/Q)`` and, for ``t < 0``,
    ``L <= -log((Q^2-1)(-t)) / (1-1/Q)``. Each element is solved by safeguarded Newton
    (warm-started from the previous ``gamma`` step) inside the safeguarded Newton solve for
    ``gamma``. The tail is algebraic, ``p ~ |s|^(-Q/(Q-1))``. Backward: implicit
    differentiation with ``g_i = p_i / h'(L_i)``. ``-inf`` scores get zero weight; a fully
    masked row gives zeros. Half-precision inputs are computed in float32.

    Args:
        x: scores.
        dim: axis to normalize over.
        q: in ``[1/2, 2]``; ``q`` and ``1/q`` are the same operator, and within ``1e-6``
            of 1 the result is softmax.
        tau: temperature: the scores are divided by ``tau > 0``.
    """
    check_float(x)
    qv = _real("q", q, 0.5, 2.0, "the Abe softmax takes q in [1/2, 2] (q and 1/q coincide)")
    t = _real("tau", tau, 0.0, math.inf, "use a positive temperature")
    if t == 0.0:
        raise ValueError("tau must be positive; use a small positive temperature instead of 0.")
    _check_scores(x)
    eps = math.log(qv)
    if abs(eps) < SOFTMAX_LIMIT:
        return _softmax_masked(upcast(x) / t, dim).to(x.dtype)
    a, b, q2m1, beta = _abe_parts(eps)
    e = abs(eps)

    def h_and_slope(lg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = e + b * lg
        scale = torch.exp(a * lg) / b
        return scale * torch.sinh(z), scale * (a * torch.sinh(z) + b * torch.cosh(z))

    def elem(t_: torch.Tensor, state: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        tol, rel, max_iter = _tolerances(t_.dtype)
        t_ = t_.clamp_max(1.0)  # p <= 1 inside the gamma bracket, so t <= h(0) = 1
        lo = -torch.log1p(q2m1 * (1.0 - t_)) / beta
        neg = t_ < 0
        hi = torch.where(neg, -torch.log(q2m1 * (-t_).clamp_min(1e-300)) / beta, 0.0)
        hi = torch.maximum(hi.clamp_max(0.0), lo)
        guess = t_ - 1.0 if state is None else state[0] + (t_ - state[1]) * state[2]
        lg = torch.minimum(torch.maximum(guess, lo), hi)
        for _ in range(max_iter):
            h, dh = h_and_slope(lg)
            f = h - t_
            lo = torch.where(f < 0, lg, lo)
            hi = torch.where(f > 0, lg, hi)
            new = lg - f / dh
            new = torch.where((new > lo) & (new < hi), new, 0.5 * (lo + hi))
            step = (new - lg).abs()
            lg = new
            if bool((step <= max(tol * 1e-2, rel) * (1.0 + lg.abs())).all()):
                break
        _, dh = h_and_slope(lg)
        p = torch.exp(lg)
        return p, p / dh, (lg, t_, 1.0 / dh)

    def t_of_p(p: torch.Tensor) -> torch.Tensor:
        return h_and_slope(torch.log(p))[0]

    return _apply(x, dim, t, elem, t_of_p)
