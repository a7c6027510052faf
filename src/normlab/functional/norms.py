"""Per-feature normalizers: LayerNorm, RMSNorm, DyT and the nGPT unit-sphere projection."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from normlab._checks import check_float, check_trailing_shape
from normlab.functional._precision import upcast

__all__ = ["dyt", "dyt_saturation", "l2_normalize", "layer_norm", "rms_norm", "row_scale"]

#: Rows whose largest magnitude reaches 2^48 (2.8e14) are rescaled: below it, sums of
#: squares over up to 2^32 features stay finite in float32 (max 2^128).
_BIG = 2.0**48


def row_scale(x: torch.Tensor, dims: int | Sequence[int]) -> torch.Tensor | None:
    """A power of two ``s >= 1`` per row with ``max |x| / 2 < s <= max |x|``, or None.

    None (the fast path: one reduction, nothing rescaled) unless some row's largest
    magnitude reaches 2^48. Statistics of ``x / s`` cannot overflow (squares do in float32
    from about 1.8e19), and scaling by a power of two is exact, so a normalizer computed on
    ``x / s`` with ``eps / s^2`` is the same function without the overflow, as the series
    normalizers' window scaling (:func:`normlab.series.window_scale`). Detached: ``s`` is a
    constant of the row. Rows holding NaN or inf keep ``s = 1`` (their result is NaN).

    Examples:
        >>> import torch
        >>> row_scale(torch.ones(2, 3), -1) is None
        True
        >>> s = row_scale(torch.tensor([[3e14, 1.0], [1.0, 3.0]]), -1)  # 3e14 > 2^48
        >>> s.log2().flatten().tolist()
        [48.0, 1.0]
    """
    if x.numel() == 0:
        return None
    x = x.detach()
    # one fused reduction over everything first (NaN compares False: NaN takes the fast path)
    low, high = torch.aminmax(x)
    if not bool(torch.maximum(-low, high) >= _BIG):
        return None
    amax = x.abs().amax(dims, keepdim=True)
    amax = torch.where(torch.isfinite(amax), amax, torch.ones_like(amax))
    _, exponent = torch.frexp(amax)
    return torch.ldexp(torch.ones_like(amax), exponent - 1).clamp_min(1.0)


def _scaled_eps(eps: float, s: torch.Tensor) -> torch.Tensor:
    """``eps / s^2``, floored at the dtype's smallest normal so ``rsqrt`` stays finite."""
    return (eps / s / s).clamp_min(torch.finfo(s.dtype).tiny)


def _gain(weight: torch.Tensor | None, offset: float, like: torch.Tensor) -> torch.Tensor | None:
    """``weight + offset`` in ``like``'s (compute) dtype: ``1 + w`` is formed in float32 for
    half inputs, where bfloat16 would round ``1 + 0.0039`` to 1 (Liger-Kernel #74)."""
    if weight is None:
        return None
    w = weight.to(like.dtype)
    return w + offset if offset else w


def layer_norm(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    offset: float = 0.0,
) -> torch.Tensor:
    r"""Layer normalization over the trailing ``normalized_shape`` dimensions.

    $$y = \frac{x - \mu(x)}{\sqrt{\sigma^2(x) + \epsilon}} \odot (w + o) + b$$

    ``y = (x - mean(x)) / sqrt(var(x) + eps) * (weight + offset) + bias`` with the biased
    variance (Ba et al., 2016). ``offset=1.0`` is the zero-centred gain ``1 + w``
    (TransformerEngine's ``zero_centered_gamma``); without a weight the gain is 1 and
    ``offset`` is unused. The gain is formed in the compute dtype, so a float32 weight with
    a bfloat16 input stays float32. Half-precision inputs are computed in float32 and cast
    back. Rows
    whose magnitude reaches 2^48 are normalized as ``x / s`` with ``eps / s^2`` for a power
    of two ``s`` (:func:`row_scale`), so values up to float's range give the right answer
    instead of zeros (torch's ``layer_norm`` overflows from about 1e19 in float32).

    Examples:
        >>> import torch
        >>> y = layer_norm(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), (4,))
        >>> round(float(y.var(correction=0)), 4), bool(y.mean().abs() < 1e-6)
        (1.0, True)
        >>> layer_norm(torch.tensor([[1e20, -1e20]]), (2,))  # torch gives zeros here
        tensor([[ 1., -1.]])
    """
    check_float(x)
    check_trailing_shape(x, normalized_shape)
    xf = upcast(x)
    w, b = _gain(weight, offset, xf), None if bias is None else bias.to(xf.dtype)
    dims = tuple(range(-len(normalized_shape), 0))
    s = row_scale(xf, dims)
    if s is None:
        return F.layer_norm(xf, tuple(normalized_shape), w, b, eps).to(x.dtype)
    u = xf / s
    var, mu = torch.var_mean(u, dims, correction=0, keepdim=True)
    y = (u - mu) * torch.rsqrt(var + _scaled_eps(eps, s))
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y.to(x.dtype)


def rms_norm(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    *,
    offset: float = 0.0,
) -> torch.Tensor:
    r"""Root-mean-square normalization over the trailing ``normalized_shape`` dimensions.

    $$y = \frac{x}{\sqrt{\frac{1}{d}\sum_{i=1}^{d} x_i^2 + \epsilon}} \odot (w + o)$$

    ``y = x / sqrt(mean(x^2) + eps) * (weight + offset)`` (Zhang & Sennrich, 2019).
    ``offset=1.0`` is Gemma's gain ``1 + w`` (and TransformerEngine's zero-centred gamma),
    formed in float32 for half inputs; without a weight the gain is 1. ``eps=None`` means
    ``torch.finfo(x.dtype).eps`` of the *input* dtype, as in ``torch.nn.RMSNorm``; the
    statistics of half-precision inputs are computed in float32. When the mean square
    overflows, the rows are computed again as ``x / s`` with ``eps / s^2``
    (:func:`row_scale`), so huge values give the right answer (instead of zeros from about
    1e19 in float32) at the cost of one check on the fast path.

    Examples:
        >>> import torch
        >>> y = rms_norm(torch.tensor([[3.0, -3.0, 3.0, -3.0]]), (4,))
        >>> y
        tensor([[ 1., -1.,  1., -1.]])
        >>> torch.allclose(rms_norm(1e30 * y, (4,)), y)
        True
        >>> rms_norm(y, (4,), torch.zeros(4), offset=1.0)  # Gemma: gain 1 + w
        tensor([[ 1., -1.,  1., -1.]])
    """
    check_float(x)
    check_trailing_shape(x, normalized_shape)
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    xf = upcast(x)
    dims = tuple(range(-len(normalized_shape), 0))
    ms = xf.pow(2).mean(dims, keepdim=True)
    s = row_scale(xf, dims) if bool(torch.isinf(ms).any()) else None  # overflowed rows only
    if s is None:
        y = xf * torch.rsqrt(ms + eps)
    else:
        u = xf / s
        y = u * torch.rsqrt(u.pow(2).mean(dims, keepdim=True) + _scaled_eps(eps, s))
    if weight is not None:
        y = y * _gain(weight, offset, y)
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

    Examples:
        >>> import torch
        >>> dyt(torch.tensor([0.0, 100.0, -100.0]), alpha=0.5).tolist()
        [0.0, 1.0, -1.0]
        >>> dyt(torch.zeros(2, 3), 0.5, weight=torch.ones(3), bias=torch.full((3,), 2.0)).tolist()
        [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
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

    Examples:
        >>> import torch
        >>> float(dyt_saturation(torch.tensor([0.5, 1.0, 5.0, -6.0]), alpha=1.0))
        0.5
    """
    check_float(x)
    a = alpha.detach() if isinstance(alpha, torch.Tensor) else alpha
    return ((upcast(x.detach()) * a).abs() > threshold).float().mean()


def l2_normalize(x: torch.Tensor, dim: int = -1, eps: float = 1e-12) -> torch.Tensor:
    r"""Project onto the unit sphere along ``dim``: ``x / max(||x||_2, eps)`` (nGPT).

    $$y = \frac{x}{\max(\lVert x \rVert_2, \epsilon)}$$

    ``eps`` keeps an all-zero vector at zero instead of NaN. When the norm overflows, the
    vectors are projected as ``x / s`` with ``eps / s`` (:func:`row_scale`) instead, so
    huge values give the right answer (instead of zeros from about 1e19 in float32).

    Examples:
        >>> import torch
        >>> l2_normalize(torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
        tensor([[0.6000, 0.8000],
                [0.0000, 0.0000]])
        >>> l2_normalize(torch.tensor([3e30, 4e30]))
        tensor([0.6000, 0.8000])
    """
    check_float(x)
    xf = upcast(x)
    norm = xf.norm(p=2.0, dim=dim, keepdim=True)
    s = row_scale(xf, dim) if bool(torch.isinf(norm).any()) else None  # overflowed rows only
    if s is None:  # F.normalize's formula
        return (xf / norm.clamp_min(eps)).to(x.dtype)
    u = xf / s
    floor = (eps / s).clamp_min(torch.finfo(s.dtype).tiny)
    return (u / torch.maximum(u.norm(p=2.0, dim=dim, keepdim=True), floor)).to(x.dtype)
