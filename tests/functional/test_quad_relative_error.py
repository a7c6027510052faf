"""quad_relative_error: the relative L2 error as a quadrature integral, resolution-free."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.functional import quad_relative_error, quadrature_weights


def _field(n: int, shift: float = 0.0) -> torch.Tensor:
    t = torch.linspace(0, 1, n, dtype=torch.float64)
    return (torch.sin(math.pi * (t[:, None] + shift)) * torch.cos(t[None, :]))[None, None]


def test_matches_the_weighted_formula_per_sample():
    g = torch.Generator().manual_seed(0)
    pred, target = (torch.randn(3, 2, 6, 7, generator=g, dtype=torch.float64) for _ in range(2))
    w = quadrature_weights((6, 7), "simpson", dtype=torch.float64)
    for i in range(3):
        num = float(((pred[i] - target[i]) ** 2 * w).sum())
        den = float((target[i] ** 2 * w).sum())
        got = quad_relative_error(pred, target, "simpson")[i]
        assert float(got) == pytest.approx(math.sqrt(num / den), rel=1e-12)


def test_means_the_same_at_every_resolution_where_a_pixel_mean_does_not():
    sizes = (9, 33, 257)
    errors = [float(quad_relative_error(_field(n, 0.05), _field(n))) for n in sizes]
    assert max(errors) - min(errors) < 1e-12  # the trapezoid rule integrates this exactly
    plain = [
        float((_field(n, 0.05) - _field(n)).square().mean() / _field(n).square().mean()) ** 0.5
        for n in sizes
    ]
    assert plain[0] - plain[-1] > 0.01  # the boundary counts as much as the interior
    assert quad_relative_error(_field(9), _field(9)).item() == 0.0
