"""AdaptiveScaling: the learned curve and the fixed scalings against closed forms."""

from __future__ import annotations

import math

import pytest
import torch

import normlab
from normlab.layers import AdaptiveScaling

F64 = torch.float64


def _robust(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    med = x.median(0).values
    return med, 1.4826 * (x - med).abs().median(0).values


def test_learned_formula_float64():
    s = AdaptiveScaling(3, lo=-1.0, hi=2.0, softening=0.5, dtype=F64)
    x = torch.tensor([[-3.0, 0.5, 4.0], [0.0, 2.0, -1.0], [-0.7, 1.9, 0.1]], dtype=F64)
    expected = torch.asinh(x.clamp(-1.0, 2.0) / 0.5)
    torch.testing.assert_close(s(x), expected, rtol=1e-13, atol=1e-13)


def test_learned_formula_in_robust_units_after_fit():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2001, 2, generator=g, dtype=F64) * torch.tensor([3.0, 0.2], dtype=F64) + 7
    s = AdaptiveScaling(2, softening=2.0, dtype=F64).fit(x, low_q=0.1, high_q=0.8)
    med, sigma = _robust(x)
    lo = (torch.quantile(x, 0.1, dim=0) - med) / sigma
    hi = (torch.quantile(x, 0.8, dim=0) - med) / sigma
    u = (x - med) / sigma
    expected = torch.asinh(torch.minimum(torch.maximum(u, lo), hi) / 2.0)
    torch.testing.assert_close(s(x), expected, rtol=1e-12, atol=1e-12)
    curve = s.curve()
    torch.testing.assert_close(curve["lo"], torch.quantile(x, 0.1, dim=0))
    torch.testing.assert_close(curve["hi"], torch.quantile(x, 0.8, dim=0))
    torch.testing.assert_close(curve["softening"], 2.0 * sigma)


def test_init_equals_the_fixed_asinh_stretch_with_one_robust_sigma():
    g = torch.Generator().manual_seed(1)
    x = 100 + torch.randn(4000, 1, generator=g, dtype=F64)
    x[::97] += 10 ** (4 * torch.rand(len(x[::97]), 1, generator=g, dtype=F64))  # bright tail
    learned = AdaptiveScaling(1, dtype=F64).fit(x)
    fixed = AdaptiveScaling(1, mode="asinh", dtype=F64).fit(x)
    med, sigma = _robust(x)
    torch.testing.assert_close(fixed(x), torch.asinh((x - med) / sigma), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(learned(x), fixed(x), rtol=1e-12, atol=1e-12)
    # unit scale at init: the noise stays ~1, the four-decade tail is compressed to ~10
    y = learned(x).detach()
    assert 0.6 < float((y - y.median()).abs().median() * 1.4826) < 1.2
    assert float(y.max()) < 12


def test_gradients_reach_every_parameter_and_match_closed_forms():
    s = AdaptiveScaling(1, lo=-1.0, hi=2.0, softening=0.5, dtype=F64)
    x = torch.tensor([[-3.0], [0.3], [4.0]], dtype=F64)  # below, inside, above the range
    s(x).sum().backward()
    # d asinh(c / s) / d log(bound) = (dc / d log b) / sqrt(s^2 + c^2), c the clipped value
    torch.testing.assert_close(s.log_lo.grad, torch.tensor([-1.0 / math.sqrt(1.25)], dtype=F64))
    torch.testing.assert_close(s.log_hi.grad, torch.tensor([2.0 / math.sqrt(4.25)], dtype=F64))
    c = torch.tensor([-1.0, 0.3, 2.0], dtype=F64) / 0.5
    torch.testing.assert_close(s.log_soft.grad, -(c / torch.sqrt(1 + c**2)).sum()[None])

    def f(log_lo, log_hi, log_soft):
        with torch.no_grad():
            s.log_lo.copy_(log_lo), s.log_hi.copy_(log_hi), s.log_soft.copy_(log_soft)
        u = torch.minimum(torch.maximum(x, -log_lo.exp()), log_hi.exp())
        return torch.asinh(u / log_soft.exp())

    params = tuple(p.detach().clone().requires_grad_() for p in (s.log_lo, s.log_hi, s.log_soft))
    assert torch.autograd.gradcheck(f, params)


def test_an_adam_step_changes_the_curve_by_a_relative_amount():
    s = AdaptiveScaling(1).fit(torch.tensor([[0.0], [1.0], [2.0], [1000.0]]))
    before = s.curve()
    opt = torch.optim.Adam(s.parameters(), lr=0.05)
    s(torch.tensor([[2000.0], [0.5]])).sum().backward()  # 2000 is clipped
    opt.step()
    after = s.curve()
    for key in ("hi", "softening"):  # hi ~ 1000 units, softening 1 unit: both move ~5%
        ratio = float(after[key] / before[key])
        assert abs(abs(math.log(ratio)) - 0.05) < 1e-3, (key, ratio)


def test_learns_a_target_curve_from_the_full_range_init():
    torch.manual_seed(0)
    x = torch.cat([torch.randn(2000, 1), 10 ** (3 * torch.rand(200, 1))])
    target = AdaptiveScaling(1, lo=-1.0, hi=30.0, softening=3.0).fit(x, low_q=0.01, high_q=0.99)
    with torch.no_grad():
        target.log_lo.fill_(math.log(1.0)), target.log_hi.fill_(math.log(30.0))
        want = target(x)
    s = AdaptiveScaling(1).fit(x)  # starts at min/max with softening 1
    opt = torch.optim.Adam(s.parameters(), lr=0.05)
    for _ in range(400):
        loss = ((s(x) - want) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(s.log_soft.detach().exp()) == pytest.approx(3.0, rel=0.05)
    assert float(s.log_hi.detach().exp()) == pytest.approx(30.0, rel=0.05)
    assert float(s.log_lo.detach().exp()) == pytest.approx(1.0, rel=0.05)


def test_fixed_modes_from_fit():
    x = torch.randn(1000, 2, dtype=F64) * torch.tensor([3.0, 0.1], dtype=F64) + 5
    z = AdaptiveScaling(2, mode="zscore", dtype=F64).fit(x)(x)
    torch.testing.assert_close(z.mean(0), torch.zeros(2, dtype=x.dtype), atol=1e-10, rtol=0)
    torch.testing.assert_close(z.std(0), torch.ones(2, dtype=x.dtype), atol=1e-10, rtol=0)
    mm = AdaptiveScaling(2, mode="minmax", dtype=F64).fit(x)(x)
    assert float(mm.min()) == pytest.approx(0.0) and float(mm.max()) == pytest.approx(1.0)
    a = AdaptiveScaling(2, mode="asinh", dtype=F64).fit(x)
    assert not list(a.parameters())


def test_registered_and_errors():
    assert normlab.get("adaptive-scaling").kind == "norm"
    with pytest.raises(ValueError, match="mode"):
        AdaptiveScaling(2, mode="log")
    with pytest.raises(ValueError, match="lo < 0 < hi"):
        AdaptiveScaling(2, lo=1.0, hi=3.0)
    with pytest.raises(ValueError, match="softening"):
        AdaptiveScaling(2, softening=0.0)
    with pytest.raises(ValueError, match="low_q"):
        AdaptiveScaling(1).fit(torch.zeros(4, 1), low_q=0.6)
    with pytest.raises(ValueError, match="curve"):
        AdaptiveScaling(1, mode="zscore").curve()
