"""Score normalizers from generalized entropies: Kaniadakis kappa-softmax and Abe softmax.

Softmax is the maximiser of ``H(p) + <p, s>`` over the simplex, with ``H`` the Shannon
entropy. Replacing ``H`` by another concave entropy ``S`` gives another score normalizer,
``p = argmax_{p in simplex} S(p) + <p, s>``. For an entropy that is a sum ``-sum_i f(p_i)``
the stationarity conditions read ``f'(p_i) = s_i - gamma`` with one scalar multiplier
``gamma`` per row, so ``p_i = P(s_i - gamma)`` for an increasing map ``P = (f')^(-1)`` and
``gamma`` solves ``sum_i P(s_i - gamma) = 1`` (a monotone equation in one unknown).

The derivations below are normlab's own (the paper's text is not public) and are checked
numerically by the tests. The ``gamma`` solve and the implicit-function backward shared by
both operators live in :mod:`normlab.functional._entropic_solver`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import Any

import torch

from normlab._checks import check_float, check_min_rank
from normlab.functional._entropic_solver import (
    check_scores,
    entropic_softmax,
    softmax_masked,
    tolerances,
)
from normlab.functional._precision import upcast

__all__ = ["abe_softmax", "kappa_exp", "kappa_log", "kappa_softmax"]

#: Below this ``kappa`` (or ``|ln q|``) the operators equal softmax to within rounding, and
#: softmax is returned.
SOFTMAX_LIMIT = 1e-6


def _real(name: str, value: object, low: float, high: float, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}.")
    v = float(value)
    if not low <= v <= high:
        raise ValueError(f"{name} must lie in [{low}, {high}], got {v}; {hint}.")
    return v


def kappa_exp(x: torch.Tensor, kappa: float) -> torch.Tensor:
    """Kaniadakis kappa-exponential ``exp_k(x) = (sqrt(1 + k^2 x^2) + k x)^(1/k)``.

    Computed as ``exp(asinh(k x) / k)``, which is the same function without the
    cancellation of ``sqrt(1 + k^2 x^2) + k x`` at large negative ``x``. It tends to
    ``exp(x)`` as ``k -> 0`` (``kappa = 0`` gives ``exp``), is even in ``k``, and decays
    algebraically, ``exp_k(x) ~ (2 k |x|)^(-1/k)`` as ``x -> -inf`` (Kaniadakis, 2001).

    Examples:
        >>> import torch
        >>> x = torch.tensor([-30.0, 0.0, 2.0])
        >>> torch.allclose(kappa_exp(x, 0.0), x.exp())
        True
        >>> torch.equal(kappa_exp(x, -0.3), kappa_exp(x, 0.3))  # even in kappa
        True
        >>> bool(kappa_exp(x, 0.3)[0] > 1e3 * x.exp()[0])  # an algebraic, not exponential, tail
        True
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

    Examples:
        >>> import torch
        >>> x = torch.tensor([-3.0, 0.0, 2.0], dtype=torch.float64)
        >>> torch.allclose(kappa_log(kappa_exp(x, 0.3), 0.3), x)
        True
        >>> float(kappa_log(torch.tensor(1.0), 0.5))
        0.0
    """
    check_float(x)
    k = abs(_real("kappa", kappa, -1.0, 1.0, "the kappa-logarithm needs |kappa| < 1"))
    xf = upcast(x)
    if k == 0.0:
        return torch.log(xf).to(x.dtype)
    return (torch.sinh(k * torch.log(xf)) / k).to(x.dtype)


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

    ``gamma`` is found per row by safeguarded Newton, typically in two evaluations
    (``|log sum p| <= 1e-13`` in float64, ``1e-5`` in float32; then renormalised, so
    ``sum p = 1`` to rounding). Unlike softmax the weights decay algebraically,
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

    Examples:
        >>> import torch
        >>> x = torch.tensor([[0.0, 1.0, -50.0]])
        >>> p = kappa_softmax(x, kappa=0.3)
        >>> round(float(p.sum()), 5), bool(p[0, 2] > 1e10 * x.softmax(-1)[0, 2])
        (1.0, True)
        >>> torch.allclose(kappa_softmax(x, kappa=1e-7), x.softmax(-1))
        True
    """
    check_float(x)
    check_min_rank(x, 1, "(..., n) with the scores along dim")
    hint = "kappa-softmax needs 0 <= kappa < 1 (-kappa gives the same operator as kappa)"
    k = _real("kappa", kappa, 0.0, 1.0, hint)
    if k == 1.0:
        raise ValueError(
            "kappa must be < 1: at kappa = 1 the entropy is -sum(p^2 - 1)/2, whose maximiser "
            "is sparsemax (normlab.functional.sparsemax), not this interior formula."
        )
    t = _real("tau", tau, 0.0, math.inf, "use a positive temperature")
    if t == 0.0:
        raise ValueError("tau must be positive; use a small positive temperature instead of 0.")
    if k < SOFTMAX_LIMIT:
        check_scores(x)
        return softmax_masked(upcast(x) / t, dim).to(x.dtype)
    lam = math.sqrt(1.0 - k * k)
    log_alpha = -math.atanh(k) / k  # ln(((1-k)/(1+k))^(1/(2k)))
    c = k / lam

    def elem(t_: torch.Tensor, state: Any) -> tuple[torch.Tensor, torch.Tensor, Any, Any]:
        # exp_k(u) = exp(asinh(z) / k) with u = t / lam, z = k u = c t; asinh(z) is taken as
        # sign(z) log1p(|z| + z^2 / (1 + r)), r = sqrt(1 + z^2): several times faster than
        # torch.asinh here, no cancellation for z < 0 and no rounding floor eps / k at small
        # kappa. z is clamped so z^2 stays finite; the solver zeroes masked entries.
        # In place where possible: fresh 1 MB temporaries cost page faults on CPU.
        z = t_.mul_(c).clamp_min_(-0.1 * math.sqrt(torch.finfo(t_.dtype).max))
        zz = z.square()
        r = (zz + 1.0).sqrt_()
        p = zz.div_(r + 1.0).add_(z.abs()).log1p_().copysign_(z)
        p = p.mul_(1.0 / k).add_(log_alpha).exp_()
        lam_r = r.mul_(lam)
        g = p / lam_r

        def slope() -> torch.Tensor:
            # g' = g (1/(lam r) - c z / r^2) = (g / (lam r)) (1 - c lam^2 z / (lam r)).
            return (z / lam_r).mul_(-c * lam * lam).add_(1.0).mul_(g).div_(lam_r)

        return p, g, slope, None

    def t_of_p(p: torch.Tensor) -> torch.Tensor:
        return lam * torch.sinh(k * (torch.log(p) - log_alpha)) / k

    return entropic_softmax(x, dim, t, elem, t_of_p)


def _abe_parts(eps: float) -> tuple[float, float, float, float]:
    """(A, B, Q^2 - 1, 1 - 1/Q) for ``Q = e^|eps|``: the constants of the Abe solve."""
    e = abs(eps)
    return 2.0 * math.sinh(e / 2) ** 2, math.sinh(e), math.expm1(2 * e), -math.expm1(-e)


def _abe_log_p(
    t: torch.Tensor,
    guess: torch.Tensor,
    h_and_slope: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    q2m1: float,
    beta: float,
) -> torch.Tensor:
    """Solve ``h(L) = t`` (``t <= 1``) for ``L = log p`` per element by safeguarded Newton.

    With ``Q = max(q, 1/q)`` and ``p <= 1``: ``Q p^(Q-1) <= Q`` gives the lower bound
    ``L >= -log1p((Q^2-1)(1-t)) / (1-1/Q)``, and dropping ``Q p^(Q-1) >= 0`` gives, for
    ``t < 0``, ``L <= -log((Q^2-1)(-t)) / (1-1/Q)``; ``L <= 0`` always, as ``h(0) = 1``.
    """
    _, newton, width, max_iter = tolerances(t.dtype)
    lo = -torch.log1p(q2m1 * (1.0 - t)) / beta
    far = -torch.log(q2m1 * (-t).clamp_min(torch.finfo(t.dtype).tiny)) / beta
    hi = torch.maximum(torch.where(t < 0, far, 0.0).clamp_max(0.0), lo)
    lg = torch.minimum(torch.maximum(guess, lo), hi)
    settled = torch.zeros_like(lg, dtype=torch.bool)
    for _ in range(max_iter):
        h, dh = h_and_slope(lg)
        f = h - t
        lo = torch.where(f < 0, lg, lo)
        hi = torch.where(f > 0, lg, hi)
        new = lg - f / dh
        inside = (new >= lo) & (new <= hi)
        new = torch.where(inside, new, 0.5 * (lo + hi))
        unit = 1.0 + new.abs()
        small = inside & ((new - lg).abs() <= (width * unit).clamp_min(newton))
        lg = torch.where(settled, lg, new)  # a solved element stays put
        settled = settled | small | (hi - lo <= width * unit) | (f == 0)
        if bool(settled.all()):
            break
    return lg


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

    Examples:
        >>> import torch
        >>> x = torch.tensor([[0.0, 1.0, -50.0]])
        >>> p = abe_softmax(x, q=1.5)
        >>> round(float(p.sum()), 5), torch.allclose(p, abe_softmax(x, q=1 / 1.5))
        (1.0, True)
        >>> bool(p[0, 2] > 1e10 * x.softmax(-1)[0, 2])  # an algebraic tail
        True
    """
    check_float(x)
    check_min_rank(x, 1, "(..., n) with the scores along dim")
    qv = _real("q", q, 0.5, 2.0, "the Abe softmax takes q in [1/2, 2] (q and 1/q coincide)")
    t = _real("tau", tau, 0.0, math.inf, "use a positive temperature")
    if t == 0.0:
        raise ValueError("tau must be positive; use a small positive temperature instead of 0.")
    eps = math.log(qv)
    if abs(eps) < SOFTMAX_LIMIT:
        check_scores(x)
        return softmax_masked(upcast(x) / t, dim).to(x.dtype)
    a, b, q2m1, beta = _abe_parts(eps)
    e = abs(eps)

    def h_and_slope(lg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = e + b * lg
        scale = torch.exp(a * lg) / b
        return scale * torch.sinh(z), scale * (a * torch.sinh(z) + b * torch.cosh(z))

    def elem(t_: torch.Tensor, state: Any) -> tuple[torch.Tensor, torch.Tensor, Any, Any]:
        masked = torch.isneginf(t_)
        # p <= 1 inside the gamma bracket, so t <= h(0) = 1; masked entries solve t = 0.
        t_ = t_.masked_fill(masked, 0.0).clamp_max(1.0)
        guess = t_ - 1.0 if state is None else state[0] + (t_ - state[1]) * state[2]
        lg = _abe_log_p(t_, guess, h_and_slope, q2m1, beta)
        _, dh = h_and_slope(lg)
        p = torch.exp(lg).masked_fill_(masked, 0.0)
        g = p / dh

        def slope() -> torch.Tensor:
            # g = p / h'(L) with dL/dt = 1 / h', so g' = g (1 - h'' / h') / h'.
            z = e + b * lg
            d2 = (
                torch.exp(a * lg)
                / b
                * ((a * a + b * b) * torch.sinh(z) + 2 * a * b * torch.cosh(z))
            )
            return g * (1.0 - d2 / dh) / dh

        return p, g, slope, (lg, t_, 1.0 / dh)

    def t_of_p(p: torch.Tensor) -> torch.Tensor:
        return h_and_slope(torch.log(p))[0]

    return entropic_softmax(x, dim, t, elem, t_of_p)
