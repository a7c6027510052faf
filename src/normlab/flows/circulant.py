"""Circulant-diagonal invertible linear layers (CDFlow), as a module and as a zuko transform.

``W = D_1 C_1 D_2 C_2 ... C_{m-1} D_m`` with ``m`` diagonal matrices ``D_i = diag(d_i)`` and
``m - 1`` circulant matrices ``C_j``. A circulant matrix is fixed by its first column ``c``
and diagonalised by the DFT, ``C x = ifft(fft(c) * fft(x))``, so

- ``W x`` and ``W^{-1} y`` cost ``O(m n log n)`` (FFTs; the inverse divides by ``fft(c)``),
- ``log|det W| = sum_i sum log|d_i| + sum_j sum log|fft(c_j)|``, ``O(m n)`` once the
  eigenvalues are known,

against ``O(n^3)`` for a dense matrix. The first column ``c`` is the real parameter: the
spectrum ``fft(c)`` of a real vector is conjugate-symmetric, so ``C`` is real and the
log-det above is exact. (Parameterising free complex eigenvalues and keeping ``.real`` of
their inverse FFT builds a different matrix than the one whose log-det is summed.)

:class:`CirculantDiagonalTransform` is a :class:`torch.distributions.Transform` on
``real_vector`` (event dim 1) with ``call_and_ladj``, so it composes inside a zuko
``Flow``; :class:`LazyCirculantDiagonal` is its lazy module form (zuko's convention: a module
that returns the transform when called with an optional context).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Transform, constraints

from normlab._checks import check_float, check_trailing_shape
from normlab._registry import Method, register
from normlab.functional._precision import upcast
from normlab.papers import paper

__all__ = [
    "CirculantDiagonalLinear",
    "CirculantDiagonalTransform",
    "LazyCirculantDiagonal",
    "cd_forward",
    "cd_inverse",
    "cd_logabsdet",
    "cd_matrix",
]


def _circulant(x: torch.Tensor, c: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """``C x`` (or ``C^{-1} x``) along the last axis, for a real first column ``c``.

    Half-precision ``x`` is transformed in float32 (torch's FFTs take no bfloat16, and
    float16 only for powers of two on CUDA) and cast back; an empty batch comes back empty.
    """
    n = x.shape[-1]
    if x.numel() == 0:
        return x.clone()
    xf = upcast(x)
    spectrum = torch.fft.rfft(c.to(xf.dtype), n=n)
    fx = torch.fft.rfft(xf, n=n)
    return torch.fft.irfft(fx / spectrum if inverse else fx * spectrum, n=n).to(x.dtype)


def cd_forward(x: torch.Tensor, diagonals: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """``W x`` for ``W = D_1 C_1 ... C_{m-1} D_m``, along the last axis of ``x``.

    Args:
        x: input ``(..., n)``.
        diagonals: ``(m, n)``, row ``i`` the diagonal of ``D_{i+1}``.
        columns: ``(m - 1, n)``, row ``j`` the real first column of ``C_{j+1}``.
    """
    m = diagonals.shape[0]
    y = x * diagonals[m - 1]
    for j in range(m - 2, -1, -1):  # D_m first, then C_{m-1}, D_{m-1}, ..., C_1, D_1
        y = _circulant(y, columns[j]) * diagonals[j]
    return y


def cd_inverse(y: torch.Tensor, diagonals: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """``W^{-1} y``: the factors in reverse order, reciprocal diagonals, spectra divided."""
    m = diagonals.shape[0]
    x = y / diagonals[0]
    for j in range(m - 1):
        x = _circulant(x, columns[j], inverse=True) / diagonals[j + 1]
    return x


def cd_logabsdet(diagonals: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """``log|det W| = sum log|d| + sum log|fft(c)|`` (a scalar)."""
    total = diagonals.abs().log().sum()
    if columns.shape[0]:
        total = total + torch.fft.fft(columns, dim=-1).abs().log().sum()
    return total


def cd_matrix(diagonals: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """The dense ``n x n`` matrix ``W`` (for tests and baselines; ``O(n^2 log n)``)."""
    n = diagonals.shape[-1]
    eye = torch.eye(n, dtype=diagonals.dtype, device=diagonals.device)
    return cd_forward(eye, diagonals, columns).mT  # row i of the output is W e_i


class CirculantDiagonalTransform(Transform):
    """The bijection ``y = W x`` on ``R^n`` with ``W = D_1 C_1 ... C_{m-1} D_m``.

    A :class:`torch.distributions.Transform` over vectors (``event_dim`` 1), following
    zuko's conventions: ``call_and_ladj(x)`` returns ``(y, log|det W|)`` with the log-det
    broadcast to ``x.shape[:-1]``; ``inv`` is the inverse transform. See
    :mod:`normlab.flows.circulant` and ``paper("cdflow")``.

    Args:
        diagonals: ``(m, n)`` diagonal entries (non-zero).
        columns: ``(m - 1, n)`` real first columns of the circulant factors.
    """

    domain = constraints.real_vector
    codomain = constraints.real_vector
    bijective = True

    def __init__(self, diagonals: torch.Tensor, columns: torch.Tensor, **kwargs) -> None:
        super().__init__(**kwargs)
        if (
            diagonals.dim() != 2
            or columns.dim() != 2
            or columns.shape[0] != diagonals.shape[0] - 1
        ):
            raise ValueError(
                "diagonals must be (m, n) and columns (m - 1, n); got "
                f"{tuple(diagonals.shape)} and {tuple(columns.shape)}."
            )
        self.diagonals, self.columns = diagonals, columns

    def __repr__(self) -> str:
        m, n = self.diagonals.shape
        return f"{type(self).__name__}(features={n}, m={m})"

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        return cd_forward(x, self.diagonals, self.columns)

    def _inverse(self, y: torch.Tensor) -> torch.Tensor:
        return cd_inverse(y, self.diagonals, self.columns)

    def log_abs_det_jacobian(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return cd_logabsdet(self.diagonals, self.columns).expand(x.shape[:-1])

    def call_and_ladj(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self._call(x)
        return y, self.log_abs_det_jacobian(x, y)


class CirculantDiagonalLinear(nn.Module):
    """Invertible linear layer ``y = W x``, ``W = D_1 C_1 D_2 ... C_{m-1} D_m`` (CDFlow).

    ``(2m - 1) n`` parameters instead of ``n^2``; forward and inverse by FFT in
    ``O(m n log n)``, ``log|det W|`` in ``O(m n)`` (formulas in
    :mod:`normlab.flows.circulant`). Initialised near the identity: diagonals ``1 + noise``,
    circulant columns ``e_0 + noise``, so the layer starts well conditioned.

    Args:
        features: the vector size ``n``.
        m: number of diagonal factors (``m - 1`` circulant ones); the paper uses 2.
        init_std: standard deviation of the initial perturbation from the identity.
    """

    def __init__(
        self,
        features: int,
        *,
        m: int = 2,
        init_std: float = 0.01,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if features < 1 or m < 1:
            raise ValueError(f"features and m must be >= 1, got features={features}, m={m}.")
        factory = {"device": device, "dtype": dtype}
        self.features, self.m, self.init_std = features, m, float(init_std)
        self.diagonals = nn.Parameter(torch.empty(m, features, **factory))
        self.columns = nn.Parameter(torch.empty(m - 1, features, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.diagonals.normal_(0.0, self.init_std).add_(1.0)
            self.columns.normal_(0.0, self.init_std)
            self.columns[:, 0] += 1.0

    def _check(self, x: torch.Tensor) -> None:
        check_float(x)
        check_trailing_shape(x, (self.features,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``W x`` along the last axis (half-precision input computed in float32)."""
        self._check(x)
        xf = upcast(x)
        return cd_forward(xf, self.diagonals.to(xf.dtype), self.columns.to(xf.dtype)).to(x.dtype)

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """``W^{-1} y`` along the last axis (half-precision input computed in float32)."""
        self._check(y)
        yf = upcast(y)
        return cd_inverse(yf, self.diagonals.to(yf.dtype), self.columns.to(yf.dtype)).to(y.dtype)

    def log_abs_det(self) -> torch.Tensor:
        """``log|det W|`` (a scalar, differentiable)."""
        return cd_logabsdet(self.diagonals, self.columns)

    def matrix(self) -> torch.Tensor:
        """The dense ``W``."""
        return cd_matrix(self.diagonals, self.columns)

    def transform(self) -> CirculantDiagonalTransform:
        """The layer as a :class:`torch.distributions.Transform` (shares the parameters)."""
        return CirculantDiagonalTransform(self.diagonals, self.columns)

    def extra_repr(self) -> str:
        return f"{self.features}, m={self.m}"


class LazyCirculantDiagonal(nn.Module):
    """Lazy module form of :class:`CirculantDiagonalTransform`, for zuko flows.

    Like zuko's lazy transforms, calling it with an optional context ``c`` (ignored: the
    layer is unconditional) returns the transform, so it can sit in the transform list of
    ``zuko.flows.Flow`` next to zuko's couplings and splines.

    Args:
        features: the vector size.
        m: number of diagonal factors.
        init_std: see :class:`CirculantDiagonalLinear`.
    """

    def __init__(self, features: int, *, m: int = 2, init_std: float = 0.01, **factory) -> None:
        super().__init__()
        self.layer = CirculantDiagonalLinear(features, m=m, init_std=init_std, **factory)

    def forward(self, c: torch.Tensor | None = None) -> CirculantDiagonalTransform:
        return self.layer.transform()


register(
    Method(
        "circulant-diagonal",
        "flow",
        CirculantDiagonalLinear,
        paper("cdflow"),
        "invertible W = D1 C1 D2 ... Dm by FFT: inverse O(mn log n), log|det| O(mn)",
        aliases=("cdflow-linear", "cd-linear"),
        layout="other",
    )
)
