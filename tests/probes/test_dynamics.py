"""Effective learning rate tracker and the norm-layer curvature probe."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.layers import RMSNorm
from normlab.probes.dynamics import EffectiveLR, effective_lr, norm_curvature, norm_jacobian


def test_effective_lr_is_lr_over_squared_norm_per_group():
    a, b = nn.Parameter(torch.full((3,), 2.0)), nn.Parameter(torch.ones(2, 2))
    opt = torch.optim.SGD([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.5}])
    assert effective_lr(opt) == pytest.approx([0.1 / 12, 0.5 / 4])
    tracker = EffectiveLR(opt)
    rec = tracker.record()
    assert rec.norm_sq == pytest.approx((12.0, 4.0)) and rec.step == 0
    with torch.no_grad():
        b.mul_(2)
    tracker.record()
    assert tracker.series(1) == pytest.approx([0.125, 0.5 / 16])
    assert tracker.history[1].to_dict()["effective_lr"][0] == pytest.approx(0.1 / 12)


@pytest.mark.parametrize("centre", [True, False])
def test_closed_form_jacobian_matches_autograd(centre):
    torch.manual_seed(0)
    d, eps = 7, 1e-5
    x = torch.randn(d, dtype=torch.float64) * 0.3 + 0.2
    w = torch.randn(d, dtype=torch.float64)
    ln = nn.LayerNorm(d, eps=eps).double() if centre else RMSNorm(d, eps=eps).double()
    with torch.no_grad():
        ln.weight.copy_(w)
    dense = torch.autograd.functional.jacobian(ln, x)
    closed = norm_jacobian(x, w, eps, centre=centre)
    assert torch.allclose(closed, dense, atol=1e-10)
    # unit gains: the spectral norm is exactly 1/s
    s = torch.sqrt(((x - x.mean()) if centre else x).square().mean() + eps)
    ones = norm_jacobian(x, None, eps, centre=centre)
    assert float(torch.linalg.matrix_norm(ones, ord=2)) == pytest.approx(float(1 / s), rel=1e-10)


def test_norm_curvature_probe_matches_dense_jacobians_and_removes_hooks():
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Linear(5, 6), nn.LayerNorm(6), nn.ReLU(), nn.Linear(6, 6), RMSNorm(6)
    ).double()
    x = torch.randn(4, 5, dtype=torch.float64)
    rec = norm_curvature(model, lambda m: m(x))
    assert rec.sites == ("1", "4")
    h = model[0](x)
    dense = [
        torch.linalg.matrix_norm(torch.autograd.functional.jacobian(model[1], h[i]), ord=2)
        for i in range(4)
    ]
    assert rec.max[0] == pytest.approx(float(max(dense)), rel=1e-9)
    assert rec.mean[0] == pytest.approx(float(sum(dense) / 4), rel=1e-9)
    assert all(len(m._forward_hooks) == 0 for m in model.modules())
    # shrinking the input spread raises curvature as 1/s
    small = norm_curvature(model[1:2], lambda m: m(h * 0.1))
    big = norm_curvature(model[1:2], lambda m: m(h))
    assert small.max[0] > 5 * big.max[0]
