"""Shared inputs for the series tests: ordinary and degenerate windows."""

from __future__ import annotations

import torch


def windows(kind: str, length: int = 48, channels: int = 3, batch: int = 4) -> torch.Tensor:
    """A (batch, length, channels) float32 batch of one kind of window."""
    g = torch.Generator().manual_seed(KINDS.index(kind))
    noise = torch.randn(batch, length, channels, generator=g)
    if kind == "random":
        return noise * 2 + 0.5
    if kind == "constant":
        return torch.full((batch, length, channels), 3.25)
    if kind == "zeros":
        return torch.zeros(batch, length, channels)
    if kind == "near-constant":
        return 7.0 + 1e-6 * noise
    if kind == "huge-offset":
        return 1e6 + noise
    if kind == "huge-offset-near-constant":
        return -1e6 + 1e-3 * noise
    if kind == "huge-scale":
        return 1e5 * noise
    if kind == "spike":
        x = 0.01 * noise
        x[:, length // 2] = 50.0
        return x
    raise ValueError(kind)


KINDS = (
    "random",
    "constant",
    "zeros",
    "near-constant",
    "huge-offset",
    "huge-offset-near-constant",
    "huge-scale",
    "spike",
)


def assert_round_trip(x: torch.Tensor, back: torch.Tensor, rtol: float = 1e-5) -> None:
    """``back == x`` to ``rtol`` relative to each window's largest magnitude (fp32)."""
    assert back.shape == x.shape and back.dtype == x.dtype
    assert torch.isfinite(back).all()
    scale = x.abs().amax(dim=1, keepdim=True)
    err = (back.detach().double() - x.double()).abs()
    bound = rtol * scale.double() + 1e-8
    worst = float((err / bound).max())
    assert worst <= 1.0, f"round-trip error {float(err.max()):.3g} exceeds bound ({worst:.3g}x)"
