"""Series normalizers on awkward input: other dtypes, empty batches, huge values; and the
shared window arguments every normalizer accepts."""

from __future__ import annotations

import pytest
import torch

import normlab
from normlab.series import SAN, moments, window_scale

L, H, C = 48, 24, 2
NAMES = [m.name for m in normlab.methods(kind="series")]
INDEX = torch.tensor([0, 7])


def build(name: str) -> normlab.series.ReversibleNorm:
    torch.manual_seed(0)
    return normlab.create(name, C, lookback=L, horizon=H, periods=(24,))


@pytest.mark.parametrize("name", NAMES)
def test_every_normalizer_takes_the_window_arguments(name):
    norm = build(name)
    x = torch.randn(2, L, C)
    z, state = norm.normalize(x, index=INDEX)
    torch.testing.assert_close(norm.invert(z, state), x, rtol=1e-4, atol=1e-4)


def test_san_derives_its_slice_length_from_periods():
    assert SAN(C, lookback=L, horizon=H, periods=(24,)).period == 24
    assert SAN(C, lookback=L, horizon=H, periods=(7,)).period == 24  # gcd(48, 24)
    assert SAN(C, lookback=L, horizon=H, period=12).period == 12
    with pytest.raises(ValueError, match="multiple"):
        SAN(C, lookback=L, horizon=H, period=7)  # an explicit period is not overridden


@pytest.mark.parametrize("name", NAMES)
def test_float64_windows_through_a_float32_normalizer(name):
    norm = build(name)  # float32 parameters
    x = torch.randn(2, L, C, dtype=torch.float64) * 3 + 1
    z, state = norm.normalize(x, index=INDEX)
    assert z.dtype == torch.float64
    torch.testing.assert_close(norm.invert(z, state), x, rtol=1e-9, atol=1e-9)
    y = norm.denormalize(torch.zeros(2, H, C, dtype=torch.float64), state)
    assert y.dtype == torch.float64 and torch.isfinite(y).all()


@pytest.mark.parametrize("name", NAMES)
def test_empty_batch(name):
    norm = build(name)
    z, state = norm.normalize(torch.randn(0, L, C), index=INDEX[:0])
    assert z.shape == (0, L, C)
    assert norm.denormalize(torch.zeros(0, H, C), state).shape == (0, H, C)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("magnitude", [1e20, 1e25, 1e30])
def test_round_trip_of_huge_values_in_float32(name, magnitude):
    norm = build(name)
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(2, L, C, generator=g) * 0.3 + 1.0) * magnitude
    z, state = norm.normalize(x, index=INDEX)
    assert torch.isfinite(z).all() and z.abs().amax() > 0
    back = norm.invert(z, state)
    assert torch.isfinite(back).all()
    torch.testing.assert_close(back / magnitude, x / magnitude, rtol=1e-5, atol=1e-5)
    y = norm.denormalize(torch.randn(2, H, C, generator=g), state)
    assert torch.isfinite(y).all()


def test_constant_huge_window_round_trips():
    norm = build("revin")
    x = torch.full((1, L, C), 1e25)
    z, state = norm.normalize(x)
    assert torch.equal(z, torch.zeros_like(z))
    assert torch.equal(norm.invert(z, state), x)


def test_moments_equal_the_direct_formula_bit_for_bit_in_range():
    g = torch.Generator().manual_seed(3)
    for scale in (1e-3, 1.0, 37.0, 1e6):
        x = torch.randn(4, 33, 3, generator=g) * scale + scale
        mu, sigma = moments(x, 1e-5, dim=1)
        mu_ref = x.mean(dim=1, keepdim=True)
        var_ref = (x - mu_ref).pow(2).mean(dim=1, keepdim=True)
        assert torch.equal(mu, mu_ref)
        assert torch.equal(sigma, torch.sqrt(var_ref + 1e-5))
    s = window_scale(torch.tensor([[[3e38], [-1.0]]]))
    assert torch.isfinite(s).all() and s.item() <= 3e38
