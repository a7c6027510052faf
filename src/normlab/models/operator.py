"""A small 2D neural operator whose normalization layers are a configuration choice.

Built so that the norm is the one resolution-dependent part: every layer is either
pointwise (1x1 convolutions, activations) or a spectral convolution in the cosine basis
whose coefficients are trapezoid-rule integrals, so the network is the same operator on
any endpoint-inclusive grid up to ``O(h^2)`` quadrature error, and cross-resolution error
growth can be attributed to how the norms average over the grid.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab._registry import get
from normlab.functional.quadrature import quadrature_weights_1d

__all__ = ["CosineSpectralConv2d", "NeuralOperator2d", "cosine_basis", "operator_net"]


@functools.lru_cache(maxsize=32)
def cosine_basis(
    n: int, modes: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Analysis and synthesis matrices ``(modes, n)`` of the cosine basis on ``[0, 1]``.

    Analysis: ``A[k, i] = w_i cos(pi k x_i)`` with trapezoid weights ``w`` on the
    endpoint-inclusive grid, so ``A v`` approximates ``int_0^1 v(x) cos(pi k x) dx``.
    Synthesis: ``S[k, i] = s_k cos(pi k x_i)`` with ``s_0 = 1``, ``s_k = 2``, so
    ``S^T A`` projects onto the first ``modes`` cosines. Cached; treat as read-only.
    """
    with torch.inference_mode(False):
        x = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
        k = torch.arange(modes, dtype=torch.float64)
        cos = torch.cos(math.pi * k[:, None] * x[None, :])
        analysis = cos * quadrature_weights_1d(n, "trapezoid")
        synthesis = cos * torch.where(k == 0, 1.0, 2.0)[:, None]
        return analysis.to(dtype=dtype, device=device), synthesis.to(dtype=dtype, device=device)


class CosineSpectralConv2d(nn.Module):
    """Spectral convolution in the cosine basis: ``v -> sum_k W_k c_k(v) phi_k``.

    ``c_k(v)`` are the cosine coefficients of each input channel for the first ``modes``
    wavenumbers per axis (trapezoid integrals), ``W_k`` a learned ``in x out`` matrix per
    wavenumber pair, and ``phi_k`` the cosines evaluated on the output grid. Like FNO's
    Fourier layer, but the even (cosine) extension suits non-periodic boxes.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        modes: wavenumbers kept per axis.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.modes = in_channels, out_channels, modes
        self.weight = nn.Parameter(torch.empty(in_channels, out_channels, modes, modes))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform weights in ``[0, 1/(in * out))``, as FNO initialises its spectral layers."""
        with torch.no_grad():
            self.weight.uniform_(0.0, 1.0 / (self.in_channels * self.out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ny, nx = x.shape[-2:]
        m = min(self.modes, ny, nx)
        ay, sy = cosine_basis(ny, m, x.dtype, x.device)
        ax, sx = cosine_basis(nx, m, x.dtype, x.device)
        coef = ay @ x @ ax.T  # (b, in, m, m): trapezoid cosine coefficients
        # An (in x out) matrix per wavenumber pair; broadcasting beats a batched matmul of
        # m * m tiny matrices on CPU.
        mixed = (coef[:, :, None] * self.weight[None, :, :, :m, :m]).sum(1)
        return sy.T @ mixed @ sx

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, modes={self.modes}"


NormSpec = str | Callable[[int], nn.Module]


def _norm(spec: NormSpec, width: int, kwargs: dict[str, Any]) -> nn.Module:
    if callable(spec):
        return spec(width)
    method = get(spec)
    if method.kind != "norm" or method.layout != "channels_first":
        raise ValueError(
            f"{spec!r} is not a channels-first norm (kind {method.kind!r}, layout "
            f"{method.layout!r}); use e.g. 'quadnorm' or pass a factory."
        )
    return method.create(width, **kwargs)


class NeuralOperator2d(nn.Module):
    """Lift, ``layers`` x [cosine spectral conv + 1x1 conv -> norm -> GELU], project.

    The input is ``(batch, in_channels, N, N)`` on an endpoint-inclusive grid of
    ``[0, 1]^2``; the grid coordinates are appended as two extra channels. No activation
    follows the last layer's norm. The output has one channel.

    Args:
        norm: a registered channels-first norm (``"quadnorm"``, ``"blendquadnorm"``, ...)
            or a ``channels -> module`` factory.
        width: channels of the hidden layers.
        modes: cosine wavenumbers per axis in each spectral layer.
        layers: number of spectral layers.
        in_channels: input channels before the coordinates.
        norm_kwargs: arguments for each norm, e.g. ``{"rule": "uniform"}``.
    """

    def __init__(
        self,
        norm: NormSpec,
        *,
        width: int = 16,
        modes: int = 12,
        layers: int = 4,
        in_channels: int = 1,
        norm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        kw = dict(norm_kwargs or {})
        self.lift = nn.Conv2d(in_channels + 2, width, 1)
        self.spectral = nn.ModuleList(
            CosineSpectralConv2d(width, width, modes) for _ in range(layers)
        )
        self.pointwise = nn.ModuleList(nn.Conv2d(width, width, 1) for _ in range(layers))
        self.norms = nn.ModuleList(_norm(norm, width, kw) for _ in range(layers))
        self.project = nn.Sequential(
            nn.Conv2d(width, 4 * width, 1), nn.GELU(), nn.Conv2d(4 * width, 1, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"expected (batch, channels, N, N), got shape {tuple(x.shape)}.")
        b, _, ny, nx = x.shape
        gy = torch.linspace(0.0, 1.0, ny, dtype=x.dtype, device=x.device)
        gx = torch.linspace(0.0, 1.0, nx, dtype=x.dtype, device=x.device)
        grid = torch.stack(torch.meshgrid(gy, gx, indexing="ij")).expand(b, 2, ny, nx)
        v = self.lift(torch.cat([x, grid], 1))
        last = len(self.spectral) - 1
        for i, (spec, point, norm) in enumerate(
            zip(self.spectral, self.pointwise, self.norms, strict=True)
        ):
            v = norm(spec(v) + point(v))
            if i < last:
                v = F.gelu(v)
        return self.project(v)


def operator_net(norm: NormSpec, **kwargs: Any) -> NeuralOperator2d:
    """A :class:`NeuralOperator2d` with ``norm`` after every spectral layer."""
    return NeuralOperator2d(norm, **kwargs)
