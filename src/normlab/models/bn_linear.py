"""The delayed-spike paper's stylized setting: a batch-normalized linear model on whitened
square-loss regression, trained by full-batch gradient descent at a fixed learning rate.

After ``normlab.papers.paper("delayed-spike")``. Data ``X`` (n x d) are centred and exactly
whitened (``X^T X / n = I``), ``y = X theta + noise``. The model is
``f(x) = gamma (w.x - mean)/std + beta`` with the batch mean and (biased) std of ``w.x``
over the batch, i.e. ``f(x) = gamma (w/||w||).x + beta`` up to BN's ``eps``. The control
without BN is ``f(x) = w.x + beta``, whose loss Hessian is ``I``: stable for ``lr < 2``.

Derivation (normlab's; the paper's proofs are not public). With ``theta_hat = X^T y / n``,
``a = ||theta_hat||``, ``r = ||w||`` and ``phi`` the angle between ``w`` and
``sign(gamma) theta_hat``, the gradient in ``w`` is tangent to the sphere, of size
``|gamma| a sin(phi)/r``, so one step maps exactly ``phi -> phi - atan(kappa sin phi)`` and
``r^2 -> r^2 + (lr gamma a sin(phi)/r)^2`` with the sharpness-scaled effective learning rate
``kappa = (lr/r^2) |gamma| a``. (1) No rising edge before the threshold: for
``0 <= kappa <= 2`` and ``|phi| < pi``, ``0 <= atan(kappa sin phi) <= 2 phi``, so
``|phi|`` does not grow; the directional onset (first ``|phi| >= phi_on`` after the descent)
cannot precede ``t*``, the first step with ``kappa > 2``. (2) Waiting time: if
``kappa_s >= kappa_c`` on the rising edge and ``|phi| <= phi_on``, concavity of ``atan``
and of ``sin`` give ``|phi_{s+1}| >= rho |phi_s|`` with
``rho = atan(kappa_c phi_on) sin(phi_on)/phi_on^2 - 1``; hence, when ``rho > 1``, the onset
``T_on`` satisfies ``t* < T_on <= t* + 1 + ceil(log(phi_on/|phi_{t*+1}|)/log(rho))``.
(3) The edge self-stabilizes: ``r^2`` grows by ``(lr gamma a sin phi / r)^2`` per step while
``phi`` is large, which drives ``kappa`` back below 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["BNLinear", "WhitenedRegression", "waiting_time_bound", "whitened_regression"]


@dataclass(frozen=True)
class WhitenedRegression:
    """A whitened regression problem: ``x`` (n x d, ``x^T x / n = I``, centred) and ``y``."""

    x: torch.Tensor
    y: torch.Tensor
    theta: torch.Tensor

    @property
    def theta_hat(self) -> torch.Tensor:
        """The least-squares solution ``X^T y / n``."""
        return self.x.T @ self.y / self.x.shape[0]


def whitened_regression(
    n: int, d: int, *, signal: float = 4.0, noise: float = 0.5, generator: torch.Generator
) -> WhitenedRegression:
    """Gaussian design, exactly centred and whitened; ``||theta|| = signal``."""
    if n <= d:
        raise ValueError(f"Need n > d samples to whiten; got n={n}, d={d}.")
    x = torch.randn(n, d, generator=generator, dtype=torch.float64)
    x = x - x.mean(0)
    evals, evecs = torch.linalg.eigh(x.T @ x / n)
    x = x @ evecs @ torch.diag(evals.rsqrt()) @ evecs.T
    theta = torch.randn(d, generator=generator, dtype=torch.float64)
    theta = theta / theta.norm() * signal
    y = x @ theta + noise * torch.randn(n, generator=generator, dtype=torch.float64)
    return WhitenedRegression(x, y, theta)


class BNLinear(nn.Module):
    """``f(x) = gamma * BN(w.x) + beta`` (``bn=True``) or ``w.x + beta`` (the control).

    Args:
        d: input dimension.
        bn: batch-normalize the projection (training-mode batch statistics, always).
        gamma_init: initial BN gain.
        eps: BN's variance epsilon.
    """

    def __init__(
        self,
        d: int,
        *,
        bn: bool = True,
        gamma_init: float = 0.1,
        eps: float = 1e-8,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = torch.float64,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.d, self.bn, self.eps, self.gamma_init = d, bn, eps, gamma_init
        self.weight = nn.Parameter(torch.empty(d, **factory))
        self.gamma = nn.Parameter(torch.empty((), **factory)) if bn else None
        self.beta = nn.Parameter(torch.empty((), **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)
        with torch.no_grad():
            self.weight.div_(self.weight.norm())  # unit norm: r_0 = 1
        if self.gamma is not None:
            nn.init.constant_(self.gamma, self.gamma_init)
        nn.init.zeros_(self.beta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x @ self.weight
        if not self.bn:
            return z + self.beta
        z = (z - z.mean()) / torch.sqrt(z.var(unbiased=False) + self.eps)
        return self.gamma * z + self.beta

    def kappa(self, theta_hat: torch.Tensor, lr: float) -> float:
        """``(lr/||w||^2) |gamma| ||theta_hat||``: unstable directions when above 2."""
        if self.gamma is None:
            return float("nan")
        r2 = float(self.weight.detach().square().sum())
        return lr / r2 * abs(float(self.gamma.detach())) * float(theta_hat.norm())

    def angle(self, theta_hat: torch.Tensor) -> float:
        """Angle between ``w`` and ``sign(gamma) theta_hat`` (radians)."""
        w = self.weight.detach()
        sign = 1.0 if self.gamma is None or float(self.gamma.detach()) >= 0 else -1.0
        cos = float(sign * (w @ theta_hat) / (w.norm() * theta_hat.norm()))
        return math.acos(max(-1.0, min(1.0, cos)))

    def extra_repr(self) -> str:
        return f"{self.d}, bn={self.bn}, gamma_init={self.gamma_init}"


def waiting_time_bound(kappa_c: float, phi_start: float, phi_on: float) -> float:
    """Steps after which ``|phi|`` must exceed ``phi_on``, growing from ``phi_start`` while
    ``kappa >= kappa_c`` (see the module docstring); ``inf`` when the bound is vacuous."""
    rho = math.atan(kappa_c * phi_on) * math.sin(phi_on) / phi_on**2 - 1.0
    if rho <= 1.0 or phi_start <= 0:
        return math.inf
    return max(0.0, math.ceil(math.log(phi_on / phi_start) / math.log(rho)))
