"""The fast Walsh-Hadamard transform, orthonormal and self-inverse, and its random variant.

Rotating activations and weights by a Hadamard matrix spreads an outlier channel over all
channels before quantization (QuaRot; the random Hadamard transform of NVFP4 training):
``(x H)(W H)^T = x W^T`` because ``H`` is orthogonal, while ``x H`` has a much smaller
``max|.|`` when one channel dominates.
"""

from __future__ import annotations

import math

import torch

from normlab._checks import check_float

__all__ = ["hadamard", "hadamard_matrix", "random_hadamard"]


def hadamard(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``x H / sqrt(n)`` along ``dim`` by the butterfly ``(a, b) -> (a + b, a - b)``.

    ``H`` is the Sylvester-ordered Hadamard matrix of size ``n = x.shape[dim]``, which must
    be a power of two. The transform is orthonormal and its own inverse:
    ``hadamard(hadamard(x)) == x``. Cost ``O(n log n)`` per vector.
    """
    check_float(x)
    n = x.shape[dim]
    if n < 1 or n & (n - 1):
        raise ValueError(
            f"hadamard needs a power-of-two size along dim {dim}, got {n}; pad the input."
        )
    y = x.movedim(dim, -1)
    shape = y.shape
    y = y.reshape(-1, n)
    h = 1
    while h < n:
        # pairs (i, i + h) inside blocks of 2h: view as (rows, blocks, 2, h)
        y = y.view(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0], y[:, :, 1]
        y = torch.stack((a + b, a - b), dim=2)
        h *= 2
    y = y.reshape(shape) / math.sqrt(n)
    return y.movedim(-1, dim)


def hadamard_matrix(n: int, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The orthonormal ``n x n`` Sylvester Hadamard matrix ``H / sqrt(n)``."""
    return hadamard(torch.eye(n, dtype=dtype))


def random_hadamard(
    x: torch.Tensor, signs: torch.Tensor, dim: int = -1, *, inverse: bool = False
) -> torch.Tensor:
    """The randomized transform ``H D x`` with ``D = diag(signs)``, or its inverse ``D H x``.

    Args:
        x: the tensor.
        signs: +-1 values of length ``x.shape[dim]`` (e.g. from a seeded generator).
        dim: the transformed axis.
        inverse: apply ``(H D)^{-1} = D H`` instead.
    """
    shape = [1] * x.dim()
    shape[dim] = -1
    s = signs.to(x.dtype).view(shape)
    return hadamard(x, dim) * s if inverse else hadamard(x * s, dim)
