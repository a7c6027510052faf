"""At a 1e6 offset, float32 normalizers match float64 on the same windows to ~1e-4."""

from __future__ import annotations

import copy

import pytest
import torch

import normlab

NAMES = [m.name for m in normlab.methods(kind="series")]
L, H, C = 48, 24, 2


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("offset", [1e6, -3e6])
def test_z_at_a_large_offset_matches_float64(name, offset):
    # before: z off by up to 3.4% (san), 3.0% (fan), 2.7% (norin), 1.4% (revin)
    torch.manual_seed(0)
    norm = normlab.create(name, C, lookback=L, horizon=H, periods=(24,))
    double = copy.deepcopy(norm).double()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, L, C, generator=g) * 2 + offset
    index = torch.tensor([0, 5, 9])
    with torch.no_grad():
        z, state = norm.normalize(x, index=index)
        z64, state64 = double.normalize(x.double(), index=index)
        err = (z.double() - z64).abs().max() / z64.abs().max()
        assert err < 2e-4, f"{name}: z differs from float64 by {err:.2e} (relative)"
        back = norm.invert(z, state)
        # the round trip is as good as float32 can hold the window (ulp(1e6) = 0.0625)
        assert (back.double() - x.double()).abs().max() <= 4 * 1.2e-7 * abs(offset) * 1.1
        y = torch.randn(3, H, C, generator=g)
        out, out64 = norm.denormalize(y, state), double.denormalize(y.double(), state64)
        assert ((out.double() - out64).abs().max() / abs(offset)) < 1e-6


@pytest.mark.parametrize("name", ["revin", "norin"])
def test_subtract_last_keeps_the_last_value_in_the_graph(name):
    norm = normlab.create(name, C, subtract_last=True)
    x = (torch.randn(2, L, C) + 1e6).requires_grad_()
    z, _ = norm.normalize(x)
    z.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert x.grad[:, -1].abs().sum() > 0
