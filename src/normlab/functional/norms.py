"""Per-feature normalizers: LayerNorm, RMSNorm, DyT and the nGPT unit-sphere projection."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from normlab._checks import check_float, check_trailing_shape
from normlab.functional._precision import upcast

__all__ = ["dyt", "dyt_saturation", "l2_normalize", "layer_norm", "rms_norm"]


def _cast_params(*params: torch.Tensor | None, like: torch.Tensor) -> list[torch.Tensor | None]:
    return [None if p is None else p.to(like.dtype) for p in params]


def layer_norm(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    r"""Layer normalization over the trailing ``normalized_shape`` dimensions.

    $$y = \frac{x - \mu(x)}{\sqrt{\sigma^2(x) + \epsilon}} \odot w + b$$

    ``y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias`` with the biased variance
    (Ba et al., 2016). Half-precision inputs are computed in float32 and cast back.
    """
    check_float(x)
    check_trailing_shape(x, normalized_shape)
    xf = upcast(x)
    w, b = _cast_params(weight, bias, like=xf)
    return F.layer_norm(xf, tuple(normalized_shape), w, b, eps).to(x.dtype)


def rms_norm(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> torch.Tensor:
    r"""Root-mean-square normalization over the trailing ``normalized_shape`` dimensions.

    $$y = \frac{x}{\sqrt{\frac{1}{d}\sum_{i=1}^{d} x_i^2 + \epsilon}} \odot w$$

    ``y = x / sqrt(mean(x^2) + eps) * weight`` (Zhang & Sennrich, 2019). ``eps=None`` means
    ``torch.finfo(x.dtype).eps`` of the *input* dtype, as in ``torch.nn.RMSNorm``; the
    statistics of half-precision inputs are computed in float32.
    """
    check_float(x)
    check_trailing_shape(x, normalized_shape)
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    xf = upcast(x)
    dims = tuple(range(-len(normalized_shape), 0))
    y = xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(y.dtype)
    return y.to(x.dtype)


def dyt(
    x: torch.Tensor,
    alpha: torch.Tensor | float,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Dynamic Tanh: ``y = weight * tanh(alpha * x) + bias`` (Zhu et al., 2025).

    $$y = w \odot \tanh(\alpha x) + b$$

    A normalization-free replacement for LayerNorm that bounds activations with a learned
    scalar ``alpha`` instead of dividing by a statistic.
    """
    check_float(x)
    xf = upcast(x)
    a = alpha.to(xf.dtype) if isinstance(alpha, torch.Tensor) else alpha
    y = torch.tanh(a * xf)
    if weight is not None:
        y = y * weight.to(xf.dtype)
    if bias is not None:
        y = y + bias.to(xf.dtype)
    return y.to(x.dtype)


def dyt_saturation(
    x: torch.Tensor, alpha: torch.Tensor | float, threshold: float = 2.0
) -> torch.Tensor:
    """Fraction of entries with ``|alpha * x| > threshold``, the DyT regime statistic.

    The DyT regime study counts an activation as saturated past ``|alpha x| = 2``
    (``tanh(2) = 0.964``) and finds DyT helps when more than 43% saturate.
    """
    check_float(x)
    a = alpha.detach() if isinstance(alpha, torch.Tensor) else alpha
    return ((upcast(x.detach()) * a).abs() > threshold).float().mean()


def l2_normalize(x: torch.Tensor, dim: int = -1, eps: float = 1e-12) -> torch.Tensor:
    r"""Project onto the unit sphere along ``dim``: ``x / max(||x||_2, eps)`` (nGPT).

    $$y = \frac{x}{\max(\lVert x \rVert_2, \epsilon)}$$

    ``eps`` keeps an all-zero vector at zero instead of NaN.
    """
    check_float(x)
    return F.normalize(upcast(x), p=2.0, dim=dim, eps=eps).to(x.dtype)
