"""The Johnson S_U transform, its inverse, its moment-matched form and the Slifker-Shapiro fit.

Johnson's S_U family: ``Z = gamma + delta * asinh((X - xi) / lambda)`` is standard normal.
``scipy.stats.johnsonsu(a=gamma, b=delta, loc=xi, scale=lambda)`` uses the same
parameterisation. NoRIN (:mod:`normlab.series.norin`) applies it to standardized windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from normlab._records import Record

__all__ = [
    "JohnsonFit",
    "johnson_su",
    "johnson_su_inverse",
    "moment_matched",
    "slifker_shapiro",
    "slifker_shapiro_quantiles",
]

Scalar = float | torch.Tensor


def johnson_su(
    x: torch.Tensor, gamma: Scalar, delta: Scalar, xi: Scalar, lam: Scalar
) -> torch.Tensor:
    """``z = gamma + delta * asinh((x - xi) / lam)``: S_U-distributed ``x`` to a normal ``z``."""
    return gamma + delta * torch.asinh((x - xi) / lam)


def johnson_su_inverse(
    z: torch.Tensor, gamma: Scalar, delta: Scalar, xi: Scalar, lam: Scalar
) -> torch.Tensor:
    """``x = xi + lam * sinh((z - gamma) / delta)``, the inverse of :func:`johnson_su`."""
    return xi + lam * torch.sinh((z - gamma) / delta)


def moment_matched(
    delta: torch.Tensor, epsilon: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(xi, lambda)`` such that S_U(gamma=epsilon, delta, xi, lambda) has mean 0, variance 1.

    With ``w = exp(1 / delta^2)`` the S_U mean is ``xi - lambda sqrt(w) sinh(epsilon/delta)``
    and its variance ``lambda^2 (w - 1)(w cosh(2 epsilon / delta) + 1) / 2``, so

    ``lambda = sqrt(2 / ((w - 1)(w cosh(2 epsilon / delta) + 1)))`` and
    ``xi = lambda sqrt(w) sinh(epsilon / delta)``.

    Computed in log space (``expm1``, log-cosh), so it stays finite from delta ~ 0.04 (where
    ``w`` overflows float64) to delta ~ 1e8 (where ``w - 1`` underflows); as
    ``delta -> infinity``, ``lambda ~ delta`` and ``xi -> epsilon``.
    """
    w = delta.pow(-2)
    c = (2 * epsilon / delta).abs()
    log_cosh = c + torch.log1p(torch.exp(-2 * c)) - math.log(2.0)
    log_lam = 0.5 * (
        math.log(2.0) - torch.log(torch.expm1(w)) - torch.nn.functional.softplus(w + log_cosh)
    )
    lam = torch.exp(log_lam)
    return lam * torch.exp(w / 2) * torch.sinh(epsilon / delta), lam


@dataclass(frozen=True)
class JohnsonFit(Record):
    """A Johnson S_U fit by Slifker-Shapiro, or the documented fallback.

    Attributes:
        gamma, delta, xi, lam: the S_U parameters (scipy's a, b, loc, scale).
        ratio: ``m n / p^2`` from the quantiles; > 1 means S_U, < 1 S_B, = 1 lognormal or
            normal; NaN when the quantiles are degenerate (``p = 0``).
        family: "SU", "SB", "boundary" (lognormal/normal) or "degenerate".
        fallback: True when the window was not S_U and the near-normal fallback was used.
    """

    gamma: float
    delta: float
    xi: float
    lam: float
    ratio: float
    family: str
    fallback: bool


def _phi(t: float) -> float:
    return 0.5 * (1.0 + math.erf(t / math.sqrt(2.0)))


def slifker_shapiro_quantiles(
    q: tuple[float, float, float, float],
    *,
    z: float = 0.524,
    fallback_delta: float = 30.0,
    tol: float = 1e-9,
) -> JohnsonFit:
    """Fit S_U from the quantiles ``q = (x_-3z, x_-z, x_z, x_3z)`` (Slifker & Shapiro, 1980).

    With ``m = x_3z - x_z``, ``n = x_-z - x_-3z``, ``p = x_z - x_-z``, ``M = m/p``,
    ``N = n/p``: when ``m n / p^2 > 1`` (S_U),

    ``delta = 2z / arccosh((M + N) / 2)``,
    ``gamma = delta asinh((N - M) / (2 sqrt(MN - 1)))``,
    ``lambda = 2p sqrt(MN - 1) / ((M + N - 2) sqrt(M + N + 2))``,
    ``xi = (x_z + x_-z) / 2 + p (N - M) / (2 (M + N - 2))``.

    Fallback (normlab's choice, documented): when ``m n / p^2 <= 1 + tol`` (S_B, lognormal or
    normal windows: bounded or light tails that no S_U matches) or the quantiles are
    degenerate (``p <= 0``, ``m <= 0`` or ``n <= 0``), return a near-normal S_U in its linear
    regime that matches the central quantiles: ``gamma = 0``, ``delta = fallback_delta``,
    ``xi = (x_z + x_-z) / 2``, ``lambda = delta * p / (2z)`` (for ``p = 0``, ``lambda = delta``).
    For NoRIN this is the RevIN end of the shape range.
    """
    x_m3, x_m1, x_1, x_3 = (float(v) for v in q)
    m, n, p = x_3 - x_1, x_m1 - x_m3, x_1 - x_m1
    if not all(math.isfinite(v) for v in q):
        raise ValueError(f"Slifker-Shapiro needs finite quantiles, got {q}.")
    centre = 0.5 * (x_1 + x_m1)
    if p <= 0 or m <= 0 or n <= 0:
        ratio = m * n / p**2 if p > 0 else math.nan
        lam = fallback_delta * p / (2 * z) if p > 0 else fallback_delta
        return JohnsonFit(0.0, fallback_delta, centre, lam, ratio, "degenerate", True)
    ratio = m * n / p**2
    if ratio <= 1.0 + tol:
        family = "SB" if ratio < 1.0 - tol else "boundary"
        lam = fallback_delta * p / (2 * z)
        return JohnsonFit(0.0, fallback_delta, centre, lam, ratio, family, True)
    big_m, big_n = m / p, n / p
    root = math.sqrt(big_m * big_n - 1.0)
    delta = 2 * z / math.acosh((big_m + big_n) / 2)
    gamma = delta * math.asinh((big_n - big_m) / (2 * root))
    lam = 2 * p * root / ((big_m + big_n - 2) * math.sqrt(big_m + big_n + 2))
    xi = centre + p * (big_n - big_m) / (2 * (big_m + big_n - 2))
    return JohnsonFit(gamma, delta, xi, lam, ratio, "SU", False)


def slifker_shapiro(
    sample: np.ndarray | torch.Tensor,
    *,
    z: float = 0.524,
    fallback_delta: float = 30.0,
) -> JohnsonFit:
    """Fit S_U to a sample by its quantiles at ``Phi(k z)``, ``k = -3, -1, 1, 3``.

    See :func:`slifker_shapiro_quantiles` for the formulas and the fallback for samples
    that are not S_U. ``z = 0.524`` is the common choice (quantiles near 6.0, 30.0, 70.0 and
    94.0 percent).

    Raises:
        ValueError: for an empty sample or one holding NaN/inf.
    """
    values = np.asarray(
        sample.detach().cpu().double() if isinstance(sample, torch.Tensor) else sample,
        dtype=np.float64,
    ).ravel()
    if values.size == 0:
        raise ValueError("Slifker-Shapiro needs a non-empty sample.")
    if not np.isfinite(values).all():
        raise ValueError("Slifker-Shapiro sample holds NaN/inf; drop missing values first.")
    levels = [_phi(k * z) for k in (-3, -1, 1, 3)]
    q = tuple(float(v) for v in np.quantile(values, levels))
    return slifker_shapiro_quantiles(q, z=z, fallback_delta=fallback_delta)  # type: ignore[arg-type]
