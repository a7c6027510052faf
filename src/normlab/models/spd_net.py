"""A small Riemannian network on HPD matrices (SPDNet-style) and radar-like clutter data.

For the complex-BN claim (``normlab.papers.paper("complex-bn")``): BiMap
``X -> W^H X W`` (``W`` with orthonormal columns, from a QR of a free parameter), an
optional :class:`~normlab.layers.HPDBatchNorm`, ReEig (eigenvalues clamped at a floor), LogEig
(the matrix log), then a linear classifier on the real and imaginary parts of the upper
triangle.

Data: sample covariance matrices of ``N`` snapshots of a complex Gaussian clutter vector with
Toeplitz covariance ``R_k[i, j] = rho_k^|i-j| exp(2 pi i f_k (i - j))`` (correlation
``rho_k`` and Doppler frequency ``f_k`` per class) plus white noise, each scaled by a random
texture ``tau ~ Gamma(nu, 1/nu)`` (compound-Gaussian clutter) times a dataset-wide power.

Siegel-disk data (:func:`siegel_clutter`): each sample covariance ``S = A + iK`` (``A`` real
symmetric positive definite, ``K`` real antisymmetric) gives the point ``W = K K^T / tr(A)
+ i A / tr(A) * n`` of the Siegel upper half-space (real part symmetric, imaginary part
positive definite), which the Cayley transform ``Z = (W - iI)(W + iI)^{-1}`` takes into the
Siegel disk: complex symmetric matrices with ``Z^H Z < I``. :class:`SiegelNet` classifies
them by ``[SiegelBatchNorm] -> Log_0 -> MLP``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from normlab.functional import manifolds as MF
from normlab.layers.riemannian import HPDBatchNorm, SiegelBatchNorm

__all__ = ["ClutterData", "SPDNet", "SiegelNet", "clutter_covariances", "siegel_clutter"]


@dataclass(frozen=True)
class ClutterData:
    """HPD matrices ``x`` (B, n, n) complex128 and class labels ``y``."""

    x: torch.Tensor
    y: torch.Tensor


def clutter_covariances(
    per_class: int,
    n: int,
    *,
    rhos: tuple[float, ...],
    freqs: tuple[float, ...],
    snapshots: int,
    noise: float = 0.1,
    texture_shape: float = 2.0,
    power: float = 1.0,
    generator: torch.Generator,
) -> ClutterData:
    """Sample covariance matrices of Toeplitz clutter classes (see the module docstring)."""
    if len(rhos) != len(freqs):
        raise ValueError("rhos and freqs give one class each; pass equal lengths.")
    idx = torch.arange(n, dtype=torch.float64)
    lag = idx[:, None] - idx[None, :]
    xs, ys = [], []
    for k, (rho, f) in enumerate(zip(rhos, freqs, strict=True)):
        r = (rho ** lag.abs()) * torch.exp(2j * torch.pi * f * lag)
        r = r + noise * torch.eye(n, dtype=torch.complex128)
        chol = torch.linalg.cholesky(r)
        re = torch.randn(per_class, n, snapshots, generator=generator, dtype=torch.float64)
        im = torch.randn(per_class, n, snapshots, generator=generator, dtype=torch.float64)
        z = chol @ ((re + 1j * im) / 2**0.5)
        s = z @ z.mH / snapshots
        gamma = torch.distributions.Gamma(texture_shape, texture_shape)
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
        tau = gamma.sample((per_class,)).to(torch.float64)
        xs.append(power * tau[:, None, None] * s + 1e-6 * torch.eye(n, dtype=torch.complex128))
        ys.append(torch.full((per_class,), k))
    x, y = torch.cat(xs), torch.cat(ys)
    perm = torch.randperm(len(y), generator=generator)
    return ClutterData(MF.hermitian(x[perm]), y[perm])


def siegel_clutter(data: ClutterData) -> ClutterData:
    """The clutter covariances mapped into the Siegel disk (see the module docstring)."""
    s = data.x
    n = s.shape[-1]
    a, k = s.real, s.imag
    scale = torch.diagonal(a, dim1=-2, dim2=-1).sum(-1)[:, None, None] / n
    eye = torch.eye(n, dtype=torch.complex128)
    w = (k @ k.mT / scale).to(torch.complex128) + 1j * (a / scale)
    z = (w - 1j * eye) @ torch.linalg.inv(w + 1j * eye)
    return ClutterData(0.5 * (z + z.mT), data.y)


class SiegelNet(nn.Module):
    """[SiegelBatchNorm] -> ``Log_0`` -> 2-layer MLP on the upper triangle's real and
    imaginary parts.

    Args:
        n: matrix size.
        classes: number of classes.
        bn: insert the Siegel BN layer first.
        dispersion: the BN layer also normalises the dispersion.
        hidden: the MLP's hidden width.
        karcher_iters: Karcher iterations of the BN layer's batch mean.
    """

    def __init__(
        self,
        n: int,
        classes: int,
        *,
        bn: bool = True,
        dispersion: bool = False,
        hidden: int = 32,
        karcher_iters: int = 20,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        self.bn = (
            SiegelBatchNorm(
                n, dispersion=dispersion, karcher_iters=karcher_iters, tol=1e-6, dtype=dtype
            )
            if bn
            else None
        )
        self.register_buffer("iu", torch.triu_indices(n, n), persistent=False)
        feats = 2 * self.iu.shape[1]
        self.head = nn.Sequential(
            nn.Linear(feats, hidden, dtype=dtype),
            nn.Tanh(),
            nn.Linear(hidden, classes, dtype=dtype),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.bn is not None:
            z = self.bn(z)
        v = MF.siegel_log0(z)[:, self.iu[0], self.iu[1]]
        return self.head(torch.cat([v.real, v.imag], -1))


class SPDNet(nn.Module):
    """BiMap -> [HPDBatchNorm] -> ReEig -> LogEig -> Linear on HPD matrices.

    Args:
        n: input matrix size.
        m: BiMap output size.
        classes: number of classes.
        bn: insert the Riemannian BN layer after BiMap.
        dispersion: the BN layer also normalises the dispersion (the paper's second step).
        complex_input: inputs are HPD (complex) rather than SPD (real).
        floor: ReEig eigenvalue floor.
        karcher_iters: Karcher iterations of the BN layer's batch mean.
    """

    def __init__(
        self,
        n: int,
        m: int,
        classes: int,
        *,
        bn: bool = True,
        dispersion: bool = False,
        complex_input: bool = True,
        floor: float = 1e-4,
        karcher_iters: int = 20,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        self.n, self.m, self.floor, self.complex_input = n, m, floor, complex_input
        self.bimap_real = nn.Parameter(torch.randn(n, m, dtype=dtype))
        self.bimap_imag = nn.Parameter(torch.randn(n, m, dtype=dtype)) if complex_input else None
        self.bn = (
            HPDBatchNorm(
                m,
                complex_input=complex_input,
                dispersion=dispersion,
                karcher_iters=karcher_iters,
                tol=1e-6,  # a training-time mean: 1e-6 centres well below the data's noise
                dtype=dtype,
            )
            if bn
            else None
        )
        iu = torch.triu_indices(m, m)
        self.register_buffer("iu", iu, persistent=False)
        feats = iu.shape[1] * (2 if complex_input else 1)
        self.head = nn.Linear(feats, classes, dtype=dtype)

    def bimap_weight(self) -> torch.Tensor:
        """``W`` with orthonormal columns (the Q factor of the free parameter)."""
        a = (
            self.bimap_real
            if self.bimap_imag is None
            else torch.complex(self.bimap_real, self.bimap_imag)
        )
        return torch.linalg.qr(a).Q

    def features(self, x: torch.Tensor) -> torch.Tensor:
        w = self.bimap_weight()
        h = MF.hermitian(w.mH @ x @ w)
        if self.bn is not None:
            h = self.bn(h)
        h = MF.hpd_log(MF.hpd_clamp(h, self.floor))
        up = h[:, self.iu[0], self.iu[1]]
        return torch.cat([up.real, up.imag], -1) if self.complex_input else up

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
