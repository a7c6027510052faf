"""Riemannian batch normalization on HPD/SPD matrices and on the Siegel disk.

After the complex-domain BN paper (``normlab.papers.paper("complex-bn")``): a batch of
manifold points is centred by transporting its Frechet mean to the manifold's base point
(the identity for HPD, the origin for the Siegel disk), optionally rescaled so that its
dispersion (mean squared geodesic distance to the mean) is a learned ``s^2``, and then moved
to a learned bias point on the manifold. In eval mode a running mean (updated along the
geodesic by ``momentum``) replaces the batch mean, as in Euclidean BatchNorm.

HPD: ``Y = G^½ (M^-½ X M^-½)^(s/sqrt(v + eps)) G^½`` with ``G = exp(herm(P))``.
Siegel: ``Y = phi_{-B}(Exp_0((s/sqrt(v + eps)) Log_0(phi_M(Z))))`` with ``B = Exp_0(sym(P))``.
The exponent/scale step runs only with ``dispersion=True``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from normlab.functional import manifolds as MF

__all__ = ["HPDBatchNorm", "SiegelBatchNorm"]


class _ManifoldBN(nn.Module):
    """Shared parameters and bookkeeping of the two Riemannian BN layers."""

    def __init__(
        self,
        n: int,
        *,
        complex_input: bool = False,
        momentum: float = 0.1,
        dispersion: bool = False,
        eps: float = 1e-5,
        karcher_iters: int = 100,
        tol: float = 1e-12,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if n < 1:
            raise ValueError(f"n (the matrix size) must be >= 1, got {n}.")
        if not 0.0 < momentum <= 1.0:
            raise ValueError(f"momentum must be in (0, 1], got {momentum}.")
        dtype = dtype or torch.get_default_dtype()
        if dtype.is_complex:
            raise TypeError("Pass the real dtype (e.g. torch.float64) and complex_input=True.")
        self.n, self.complex_input, self.momentum = n, complex_input, momentum
        self.dispersion, self.eps = dispersion, eps
        self.karcher_iters, self.tol = karcher_iters, tol
        factory = {"device": device, "dtype": dtype}
        self.bias_real = nn.Parameter(torch.zeros(n, n, **factory))
        self.bias_imag = nn.Parameter(torch.zeros(n, n, **factory)) if complex_input else None
        self.scale = nn.Parameter(torch.ones((), **factory)) if dispersion else None
        self.register_buffer("running_var", torch.ones((), **factory))
        self.register_buffer("running_mean", self._base_point().to(device))

    @property
    def point_dtype(self) -> torch.dtype:
        real = self.bias_real.dtype
        return (
            {torch.float32: torch.complex64, torch.float64: torch.complex128}.get(
                real, torch.complex64
            )
            if self.complex_input
            else real
        )

    def _bias_matrix(self) -> torch.Tensor:
        p = self.bias_real.to(self.point_dtype)
        if self.bias_imag is not None:
            p = p + 1j * self.bias_imag.to(self.point_dtype)
        return p

    def _check(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-2:] != (self.n, self.n):
            raise ValueError(
                f"{type(self).__name__}({self.n}) expects (batch, {self.n}, {self.n}) matrices, "
                f"got {tuple(x.shape)}."
            )
        if x.is_complex() != self.complex_input:
            want = "complex" if self.complex_input else "real"
            raise TypeError(f"Expected {want} matrices (complex_input={self.complex_input}).")
        return x.to(self.point_dtype)

    def _base_point(self) -> torch.Tensor:
        """The manifold's base point (the running mean's start), on the CPU."""
        raise NotImplementedError

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.bias_real)
        if self.bias_imag is not None:
            nn.init.zeros_(self.bias_imag)
        if self.scale is not None:
            nn.init.ones_(self.scale)
        self.running_var.fill_(1.0)
        self.running_mean.copy_(self._base_point())

    def _dispersion_factor(self, tangent: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``s / sqrt(v + eps)``, ``v`` the dispersion: the mean squared norm of the batch's
        tangent vectors at the base point (``tangent()``, updating the running value) in
        training, the running value in eval."""
        if self.training:
            var = torch.linalg.matrix_norm(tangent()).square().mean()
            with torch.no_grad():
                self.running_var.lerp_(var.detach(), self.momentum)
        else:
            var = self.running_var
        assert self.scale is not None
        return self.scale / torch.sqrt(var + self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.n}, complex_input={self.complex_input}, momentum={self.momentum}, "
            f"dispersion={self.dispersion}"
        )


class HPDBatchNorm(_ManifoldBN):
    """Batch normalization of SPD (real) or HPD (complex) matrices, affine-invariant metric.

    Args:
        n: matrix size.
        complex_input: inputs are complex Hermitian (HPD) instead of real symmetric (SPD).
        momentum: weight of the batch mean in the running mean's geodesic update.
        dispersion: also normalize the dispersion to a learned scale.
        eps: added to the dispersion.
        karcher_iters: maximum Karcher iterations for the batch Frechet mean.
        tol: Karcher stopping tolerance.

    Examples:
        >>> import torch
        >>> from normlab.functional import hpd_frechet_mean, hpd_log, is_hpd
        >>> _ = torch.manual_seed(0)
        >>> a = torch.randn(4, 3, 3, dtype=torch.float64)
        >>> x = a @ a.mT + 0.1 * torch.eye(3, dtype=torch.float64)  # a batch of SPD matrices
        >>> y = HPDBatchNorm(3, dtype=torch.float64)(x)
        >>> is_hpd(y), torch.allclose(hpd_frechet_mean(y), torch.eye(3, dtype=torch.float64))
        (True, True)
        >>> y = HPDBatchNorm(3, dispersion=True, dtype=torch.float64)(x).detach()
        >>> round(float(torch.linalg.matrix_norm(hpd_log(y)).square().mean()), 3)  # s^2 = 1
        1.0
    """

    def _base_point(self) -> torch.Tensor:
        return torch.eye(self.n, dtype=self.point_dtype)

    def bias_point(self) -> torch.Tensor:
        """The learned bias ``G = exp(herm(P))`` (the identity at initialisation)."""
        return MF.hpd_exp(MF.hermitian(self._bias_matrix()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._check(x)
        if self.training:
            mean = MF.hpd_frechet_mean(x, iters=self.karcher_iters, tol=self.tol)
            with torch.no_grad():
                self.running_mean.copy_(
                    MF.hpd_geodesic(self.running_mean, mean.detach(), self.momentum)
                )
        else:
            mean = self.running_mean
        y = MF.hpd_transport(x, mean)
        if self.dispersion:
            y = MF.hpd_power(y, self._dispersion_factor(lambda: MF.hpd_log(y)))
        g = MF.hpd_sqrt(self.bias_point())
        return MF.hermitian(g @ y @ g)


class SiegelBatchNorm(_ManifoldBN):
    """Batch normalization of points of the Siegel disk (complex symmetric, ``Z^H Z < I``).

    Args:
        n: matrix size.
        momentum: weight of the batch mean in the running mean's geodesic update.
        dispersion: also normalize the dispersion to a learned scale.
        eps: added to the dispersion.
        karcher_iters: maximum Karcher iterations for the batch Frechet mean.
        tol: Karcher stopping tolerance.

    Examples:
        >>> import torch
        >>> from normlab.functional import in_siegel_disk, siegel_exp0, siegel_frechet_mean
        >>> _ = torch.manual_seed(0)
        >>> v = torch.randn(4, 2, 2, dtype=torch.complex128)
        >>> z = siegel_exp0(0.5 * (v + v.mT))  # a batch of points of the disk
        >>> bn = SiegelBatchNorm(2, dtype=torch.float64)
        >>> y = bn(z).detach()
        >>> in_siegel_disk(y), bool(siegel_frechet_mean(y).abs().max() < 1e-8)  # the origin
        (True, True)
        >>> bn.eval()(z).shape  # the running mean replaces the batch mean
        torch.Size([4, 2, 2])
    """

    def __init__(
        self,
        n: int,
        *,
        momentum: float = 0.1,
        dispersion: bool = False,
        eps: float = 1e-5,
        karcher_iters: int = 100,
        tol: float = 1e-12,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            n,
            complex_input=True,
            momentum=momentum,
            dispersion=dispersion,
            eps=eps,
            karcher_iters=karcher_iters,
            tol=tol,
            device=device,
            dtype=dtype,
        )

    def _base_point(self) -> torch.Tensor:
        return torch.zeros(self.n, self.n, dtype=self.point_dtype)

    def bias_point(self) -> torch.Tensor:
        """The learned bias ``B = Exp_0(sym(P))`` (the origin at initialisation)."""
        p = self._bias_matrix()
        return MF.siegel_exp0(0.5 * (p + p.mT))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = self._check(z)
        if self.training:
            mean = MF.siegel_frechet_mean(z, iters=self.karcher_iters, tol=self.tol)
            with torch.no_grad():
                r = self.running_mean
                step = self.momentum * MF.siegel_log0(MF.siegel_to_origin(mean.detach(), r))
                self.running_mean.copy_(MF.siegel_from_origin(MF.siegel_exp0(step), r))
        else:
            mean = self.running_mean
        y = MF.siegel_to_origin(z, mean)
        if self.dispersion:
            v = MF.siegel_log0(y)
            y = MF.siegel_exp0(v * self._dispersion_factor(lambda: v))
        return MF.siegel_from_origin(y, self.bias_point())
