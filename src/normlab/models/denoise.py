"""A small residual denoising CNN and the images it is trained on (the WNE claim's testbed).

:class:`DenoiseCNN` is DnCNN-shaped: ``depth`` 3x3 convolutions with ReLU between them and
biases, predicting the noise, so ``denoise(y) = y - net(y)``. Images are 16x16 in [0, 1]:
sklearn's digits upsampled, and synthetic piecewise-constant scenes (rectangles and discs
of random intensity on a smooth ramp).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DenoiseCNN", "psnr", "synthetic_scenes", "upsample"]


class DenoiseCNN(nn.Module):
    """``y - net(y)``, ``net`` = ``depth`` conv3x3 layers of ``width`` channels (ReLU, biases)."""

    def __init__(self, depth: int = 5, width: int = 16, *, channels: int = 1) -> None:
        super().__init__()
        if depth < 2:
            raise ValueError(f"depth must be >= 2, got {depth}.")
        dims = [channels] + [width] * (depth - 1) + [channels]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(itertools.pairwise(dims)):
            layers.append(nn.Conv2d(a, b, 3, padding=1))
            if i < depth - 1:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y - self.net(y)


def upsample(images: torch.Tensor, size: int = 16) -> torch.Tensor:
    """Bilinear resize of ``(n, c, h, w)`` images to ``size x size``, clamped to [0, 1]."""
    return F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False).clamp(
        0, 1
    )


def synthetic_scenes(n: int, *, size: int = 16, seed: int = 0) -> torch.Tensor:
    """``n`` images ``(n, 1, size, size)``: a random ramp plus 3 rectangles or discs."""
    g = torch.Generator().manual_seed(seed)
    coords = torch.linspace(0, 1, size)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    out = torch.empty(n, 1, size, size)
    for i in range(n):
        a, b, c = (torch.rand(3, generator=g) * torch.tensor([0.4, 0.4, 0.3])).tolist()
        img = c + a * xx + b * yy
        for _ in range(3):
            cx, cy, r, v = torch.rand(4, generator=g).tolist()
            if torch.rand(1, generator=g).item() < 0.5:
                mask = (xx - cx).square() + (yy - cy).square() < (0.1 + 0.25 * r) ** 2
            else:
                mask = ((xx - cx).abs() < 0.1 + 0.2 * r) & ((yy - cy).abs() < 0.1 + 0.2 * v)
            img = torch.where(mask, torch.full_like(img, v), img)
        out[i, 0] = img.clamp(0, 1)
    return out


def psnr(estimate: torch.Tensor, clean: torch.Tensor) -> float:
    """Mean over images of ``10 log10(1 / mse)`` (peak 1)."""
    mse = (estimate - clean).square().flatten(1).mean(1).clamp_min(1e-12)
    return float((10 * torch.log10(1.0 / mse)).mean())
