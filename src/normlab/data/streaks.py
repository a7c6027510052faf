"""Synthetic high-dynamic-range sky frames with faint moving streaks (a TESS-like task).

Each sample is a short stack of ``frames`` images ``(frames, size, size)``: a sky
background with Gaussian read/shot noise, stars whose fluxes follow a power law over four
decades (so a few pixels are ~1e4 times the noise), and at most one faint object moving in
a straight line, drawn as a short streak that advances between frames. The target marks
the object's pixels in each frame. A fixed linear scaling keeps the stars' range and
crushes the faint streak; that is what a learned scaling should fix.
"""

from __future__ import annotations

import math

import torch

__all__ = ["streak_frames"]


def _gauss_spots(size: int, xy: torch.Tensor, flux: torch.Tensor, sigma: float) -> torch.Tensor:
    grid = torch.arange(size, dtype=torch.float32)
    dx = grid[None, :] - xy[:, 0:1]  # (k, size)
    dy = grid[None, :] - xy[:, 1:2]
    g = torch.exp(-(dy[:, :, None] ** 2 + dx[:, None, :] ** 2) / (2 * sigma**2))
    return (flux[:, None, None] * g).sum(0)


def streak_frames(
    n: int,
    generator: torch.Generator,
    *,
    size: int = 32,
    frames: int = 4,
    stars: int = 12,
    amplitude: tuple[float, float] = (2.0, 5.0),
    noise: float = 1.0,
    p_object: float = 0.8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` samples: frames ``(n, frames, size, size)`` and masks of the same shape (0/1).

    Args:
        n: samples.
        generator: the random source.
        size: frame side in pixels.
        frames: frames per sample (the object moves between them).
        stars: stars per sample (static, power-law fluxes 10..1e4 times the noise).
        amplitude: range of the object's peak brightness in units of the noise.
        noise: background noise standard deviation.
        p_object: probability that a sample contains a moving object.
    """
    g = generator
    x = torch.empty(n, frames, size, size)
    mask = torch.zeros(n, frames, size, size)
    grid = torch.arange(size, dtype=torch.float32)
    for i in range(n):
        sky = 100.0 + 20.0 * torch.rand((), generator=g)
        xy = torch.rand(stars, 2, generator=g) * size
        flux = 10 * noise * 10 ** (3 * torch.rand(stars, generator=g))
        static = sky + _gauss_spots(size, xy, flux, 0.8)
        x[i] = static + noise * torch.randn(frames, size, size, generator=g)
        if torch.rand((), generator=g) >= p_object:
            continue
        start = torch.rand(2, generator=g) * size * 0.6 + size * 0.2
        angle = torch.rand((), generator=g) * 2 * math.pi
        speed = 1.5 + 1.5 * torch.rand((), generator=g)
        direction = torch.stack([torch.cos(angle), torch.sin(angle)])
        amp = amplitude[0] + (amplitude[1] - amplitude[0]) * torch.rand((), generator=g)
        for f in range(frames):  # a streak of length `speed` per frame, 0.8 px wide
            a = start + direction * speed * f
            b = a + direction * speed
            px, py = grid[None, :], grid[:, None]
            ab = b - a
            t = ((px - a[0]) * ab[0] + (py - a[1]) * ab[1]) / float(ab @ ab)
            t = t.clamp(0, 1)
            d2 = (px - a[0] - t * ab[0]) ** 2 + (py - a[1] - t * ab[1]) ** 2
            profile = torch.exp(-d2 / (2 * 0.8**2))
            x[i, f] += amp * noise * profile
            mask[i, f] = (profile > 0.5).float()
    return x, mask
