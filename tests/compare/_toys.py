"""A user's own model and data for ``module:function`` (tests/compare)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["byte_lm", "classifier", "two_moons"]


class ByteLM(nn.Module):
    """Embedding -> LayerNorm -> MLP -> LayerNorm -> head over 256 bytes (no attention)."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, width)
        self.norm1 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )
        self.norm2 = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = h + self.mlp(self.norm1(h))
        return self.head(self.norm2(h))


def byte_lm() -> nn.Module:
    """The user's model: ids (B, T) -> logits (B, T, 256)."""
    return ByteLM()


def classifier() -> nn.Module:
    """A small MLP classifier with a LayerNorm, for ``--task classify``."""
    return nn.Sequential(nn.Linear(2, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 2))


def two_moons():
    """Train/validation/test ``(x, y)`` of a noisy two-class problem (fixed seed)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for n in (512, 256, 256):
        y = torch.randint(0, 2, (n,), generator=g)
        angle = torch.rand(n, generator=g) * 3.1416
        x = torch.stack([torch.cos(angle) + y, torch.sin(angle) * (1 - 2 * y) + 0.5 * y], 1)
        out.append((x + 0.2 * torch.randn(n, 2, generator=g), y))
    return tuple(out)
