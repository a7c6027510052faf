"""AdaptiveScaling: the learned curve and the fixed scalings against closed forms."""

from __future__ import annotations

import pytest
import torch

import normlab
from normlab.layers import AdaptiveScaling


def test_learned_formula_float64():
    s = AdaptiveScaling(3, lo=-1.0, hi=2.0, curve=5.0, dtype=torch.float64)
    x = torch.tensor([[-3.0, 0.5, 4.0], [0.0, 2.0, -1.0]], dtype=torch.float64)
    t = (x.clamp(-1.0, 2.0) + 1.0) / 3.0
    expected = torch.asinh(5.0 * t) / torch.asinh(torch.tensor(5.0, dtype=torch.float64))
    torch.testing.assert_close(s(x), expected, rtol=1e-12, atol=1e-12)
    assert float(s(x).min()) == 0.0 and float(s(x).max()) == pytest.approx(1.0)


def test_small_curve_is_minmax_inside_the_range():
    s = AdaptiveScaling(1, lo=0.0, hi=10.0, curve=1e-4, dtype=torch.float64)
    x = torch.linspace(0, 10, 11, dtype=torch.float64)[:, None]
    torch.testing.assert_close(s(x), x / 10, rtol=1e-6, atol=1e-8)


def test_fixed_modes_from_fit():
    x = torch.randn(1000, 2, dtype=torch.float64) * torch.tensor([3.0, 0.1]) + 5
    z = AdaptiveScaling(2, mode="zscore", dtype=torch.float64).fit(x)(x)
    torch.testing.assert_close(z.mean(0), torch.zeros(2, dtype=x.dtype), atol=1e-10, rtol=0)
    torch.testing.assert_close(z.std(0), torch.ones(2, dtype=x.dtype), atol=1e-10, rtol=0)
    mm = AdaptiveScaling(2, mode="minmax", dtype=torch.float64).fit(x)(x)
    assert float(mm.min()) == pytest.approx(0.0) and float(mm.max()) == pytest.approx(1.0)
    a = AdaptiveScaling(2, mode="asinh", dtype=torch.float64).fit(x)
    med, sd = x.median(0).values, x.std(0)
    torch.testing.assert_close(a(x), torch.asinh((x - med) / sd))
    assert not list(a.parameters())


def test_learned_bounds_train_toward_the_signal():
    torch.manual_seed(0)
    s = AdaptiveScaling(1, mode="learned").fit(torch.tensor([[0.0], [100.0]]))
    # target: the faint range [0, 1] should spread over the output
    x = torch.rand(512, 1)
    opt = torch.optim.Adam(s.parameters(), lr=0.5)
    first = ((s(x) - x) ** 2).mean().item()
    for _ in range(200):
        loss = ((s(x) - x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first / 3


def test_registered_and_errors():
    assert normlab.get("adaptive-scaling").kind == "norm"
    with pytest.raises(ValueError, match="mode"):
        AdaptiveScaling(2, mode="log")
    with pytest.raises(ValueError, match="lo < hi"):
        AdaptiveScaling(2, lo=1.0, hi=0.0)
