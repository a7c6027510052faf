"""Small density-estimation data sets: a 2D toy density and the 8x8 digits, standardized.

``two_moons`` draws the classic two interleaved half circles with Gaussian noise.
``digits`` dequantizes scikit-learn's 1,797 8x8 digit images (integers 0..16, shipped with
the wheel) by adding uniform noise, then standardizes with the training split's statistics;
the split is fixed (every 6th image is test).
"""

from __future__ import annotations

import math

import torch

from normlab._io import cache_dir
from normlab._tensor_cache import cached_tensor

__all__ = ["digits", "standardize", "two_moons"]


def two_moons(n: int, generator: torch.Generator, *, noise: float = 0.08) -> torch.Tensor:
    """``n`` points of the two-moons density, shape ``(n, 2)``."""
    t = torch.rand(n, generator=generator) * math.pi
    upper = torch.rand(n, generator=generator) < 0.5
    x = torch.where(upper, torch.cos(t), 1 - torch.cos(t))
    y = torch.where(upper, torch.sin(t), 0.5 - torch.sin(t))
    pts = torch.stack([x, y], dim=-1)
    return pts + noise * torch.randn(n, 2, generator=generator)


def standardize(train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Standardize ``train`` and ``others`` with ``train``'s per-feature mean and std."""
    mean, std = train.mean(0), train.std(0).clamp_min(1e-3)
    return tuple((x - mean) / std for x in (train, *others))


DIGITS_SHAPE = (1797, 64)


def _load_digits() -> torch.Tensor:
    from sklearn.datasets import load_digits

    return torch.as_tensor(load_digits().data).to(torch.uint8)


def _pixel_range(raw: torch.Tensor) -> str | None:
    top = int(raw.max())
    return None if top <= 16 else f"pixel values up to {top}, expected 0..16"


def _raw_digits() -> torch.Tensor:
    """scikit-learn's digits as uint8 ``(1797, 64)``, kept in normlab's cache folder.

    Importing scikit-learn takes seconds; the 115 kB array is read from disk after once,
    verified (shape, dtype, pixel range and the SHA-256 recorded when it was written) and
    rebuilt with a warning when anything is off (:func:`normlab._tensor_cache.cached_tensor`).
    """
    path = cache_dir() / "data" / "digits-8x8-v2.safetensors"
    return cached_tensor(
        path, _load_digits, shape=DIGITS_SHAPE, dtype=torch.uint8, check=_pixel_range
    )


def digits(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantized, standardized 8x8 digits: ``(train (1497, 64), test (300, 64))``."""
    raw = _raw_digits().float()
    x = raw + torch.rand(raw.shape, generator=generator)
    test = torch.arange(len(x)) % 6 == 0
    return standardize(x[~test], x[test])
