"""WNE: exact normalization equivariance for any backbone, safe on constant inputs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from normlab.wrappers import WNE, instance_moments


def _conv() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.GELU(),
        nn.Conv2d(4, 1, 3, padding=1),
    ).double()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 5)).double()


NETS = {"conv": (_conv(), (3, 1, 6, 6)), "mlp": (_mlp(), (3, 12))}


@pytest.mark.parametrize("name", list(NETS))
@settings(max_examples=40, deadline=None)
@given(
    a=st.floats(1e-2, 1e2),
    b=st.floats(-1e2, 1e2),
    seed=st.integers(0, 2**16),
    spread=st.floats(1e-3, 1e3),
)
def test_wne_is_normalization_equivariant(name, a, b, seed, spread):
    net, shape = NETS[name]
    f = WNE(net)
    y = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    y = y * spread
    with torch.no_grad():
        lhs, rhs = f(a * y + b), a * f(y) + b
    tol = 1e-9 * max(1.0, abs(b), float(rhs.abs().max()))
    assert float((lhs - rhs).abs().max()) <= tol


def test_plain_backbone_is_not_equivariant():
    net, shape = NETS["conv"]
    y = torch.randn(shape, dtype=torch.float64)
    with torch.no_grad():
        assert float((net(3 * y + 2) - (3 * net(y) + 2)).abs().max()) > 1e-3


def test_constant_input_returns_the_constant():
    net, _ = NETS["conv"]
    f = WNE(net)
    y = torch.full((2, 1, 5, 5), 7.0, dtype=torch.float64)
    y[1] = -2.5
    out = f(y)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0], torch.full((1, 5, 5), 7.0, dtype=torch.float64))
    assert torch.equal(out[1], torch.full((1, 5, 5), -2.5, dtype=torch.float64))


def test_any_output_shape_and_gradients():
    backbone = nn.Sequential(nn.Flatten(), nn.Linear(20, 6), nn.Unflatten(1, (3, 2)))
    f = WNE(backbone)
    x = torch.randn(4, 10, 2, requires_grad=True)  # a series (batch, length, channels)
    out = f(x)
    assert out.shape == (4, 3, 2)
    out.sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in backbone.parameters())
    mu, sigma = instance_moments(x.detach())
    torch.testing.assert_close(mu, x.detach().mean((1, 2)))
    torch.testing.assert_close(sigma, x.detach().std((1, 2), correction=0))


def test_errors():
    with pytest.raises(TypeError, match=r"nn\.Module"):
        WNE(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch"):
        WNE(nn.Identity())(torch.randn(5))
