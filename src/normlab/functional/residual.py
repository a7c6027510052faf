"""The pre-norm residual step: add a sublayer's output to the stream, then normalize.

``h = h + f(...)`` followed by ``norm(h)`` is the commonest pair of ops in a pre-norm
transformer; the fused form (vLLM's ``fused_add_rms_norm``, Liger-Kernel's fused add +
RMSNorm) reads both inputs once and writes the sum and its normalization together.
These are the plain-torch definitions; :mod:`normlab.kernels` runs them fused.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from normlab.functional.norms import layer_norm, rms_norm

__all__ = ["add_layer_norm", "add_rms_norm"]


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    *,
    offset: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(rms_norm(s), s)`` with ``s = x + residual``: the residual add and RMSNorm.

    $$s = x + r, \qquad y = \frac{s}{\sqrt{\frac{1}{d}\sum_i s_i^2 + \epsilon}} \odot (w + o)$$

    ``s`` is rounded to the inputs' dtype before it is normalized, exactly as
    ``rms_norm(x + residual)`` computes it (Zhang & Sennrich, 2019); ``weight``, ``eps`` and
    ``offset`` as in :func:`rms_norm`. Returns the normalized sum and the new residual.

    Examples:
        >>> import torch
        >>> y, s = add_rms_norm(torch.ones(1, 4), torch.tensor([[2.0, -4.0, 2.0, -4.0]]), (4,))
        >>> s, y
        (tensor([[ 3., -3.,  3., -3.]]), tensor([[ 1., -1.,  1., -1.]]))
    """
    s = x + residual
    return rms_norm(s, normalized_shape, weight, eps, offset=offset), s


def add_layer_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    offset: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(layer_norm(s), s)`` with ``s = x + residual``: the residual add and LayerNorm.

    $$s = x + r, \qquad y = \frac{s - \mu(s)}{\sqrt{\sigma^2(s) + \epsilon}} \odot (w + o) + b$$

    ``s`` is rounded to the inputs' dtype before it is normalized, as
    ``layer_norm(x + residual)`` computes it (Ba et al., 2016); the other arguments as in
    :func:`layer_norm`. Returns the normalized sum and the new residual.

    Examples:
        >>> import torch
        >>> y, s = add_layer_norm(torch.zeros(1, 2), torch.tensor([[1.0, 3.0]]), (2,), eps=0.0)
        >>> s, y
        (tensor([[1., 3.]]), tensor([[-1.,  1.]]))
    """
    s = x + residual
    return layer_norm(s, normalized_shape, weight, bias, eps, offset=offset), s
