"""ZC-Swish: the Gaussian mean m(beta), zero-centering, gradients in beta, errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import normlab
from normlab import functional as NF
from normlab.layers import ZCSwish


def _reference_mean(beta: float) -> float:
    quad = pytest.importorskip("scipy.integrate").quad

    def integrand(z: float) -> float:
        return z / (1 + math.exp(-beta * z)) * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)

    return quad(integrand, -12, 12, points=[0.0], limit=200, epsabs=1e-13)[0]


def test_m_of_one_is_0_2066():
    assert float(NF.swish_gaussian_mean(1.0)) == pytest.approx(0.2066, abs=1e-4)


@pytest.mark.parametrize("beta", [-3.0, 0.0, 0.1, 1.0, 2.5, 10.0, 15.0, 30.0])
def test_m_matches_adaptive_quadrature(beta):
    tolerance = 1e-10 if abs(beta) <= 15 else 1e-5
    assert float(NF.swish_gaussian_mean(beta)) == pytest.approx(
        _reference_mean(beta), abs=tolerance
    )


def test_m_limits_and_symmetry():
    betas = torch.tensor([1e-4, 1.0, 200.0], dtype=torch.float64)
    m = NF.swish_gaussian_mean(betas)
    assert float(m[0]) == pytest.approx(1e-4 / 4, rel=1e-3)  # sigmoid(bz) ~ 1/2 + bz/4
    assert float(m[2]) == pytest.approx(1 / math.sqrt(2 * math.pi), abs=2e-3)  # ReLU mean
    torch.testing.assert_close(NF.swish_gaussian_mean(-betas), -m)


def test_m_is_differentiable_in_beta():
    beta = torch.tensor([0.7, 1.0, 3.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(NF.swish_gaussian_mean, (beta,))
    # Stein's lemma: m(beta) = beta E[s'(beta z)], so dm/dbeta at 0 is E[z^2] / 4 = 1/4.
    b0 = torch.zeros((), dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(NF.swish_gaussian_mean(b0), b0)
    assert float(grad) == pytest.approx(0.25, abs=1e-10)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0, 5.0])
def test_output_mean_is_zero_for_standard_normal_input(beta):
    g = torch.Generator().manual_seed(int(beta * 10))
    x = torch.randn(2_000_000, generator=g, dtype=torch.float64)
    y = NF.zc_swish(x, beta)
    se = float(y.std()) / math.sqrt(x.numel())
    assert abs(float(y.mean())) < 4 * se
    assert abs(float(F.silu(beta * x).mean() / beta)) > 100 * se  # Swish itself is not


def test_output_mean_is_not_zero_for_other_input_distributions():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1_000_000, generator=g, dtype=torch.float64) * 2 + 0.5
    assert float(NF.zc_swish(x, 1.0).mean()) > 0.3


def test_layer_is_swish_minus_constant_per_channel():
    layer = ZCSwish(3, dtype=torch.float64)
    with torch.no_grad():
        layer.beta.copy_(torch.tensor([0.5, 1.0, 4.0]))
    x = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    y = layer(x)
    for c, b in enumerate((0.5, 1.0, 4.0)):
        expected = x[:, c] * torch.sigmoid(b * x[:, c]) - _reference_mean(b)
        torch.testing.assert_close(y[:, c], expected, rtol=0, atol=1e-10)


def test_gradients_reach_beta_and_gradcheck():
    layer = ZCSwish(4, channel_dim=-1, dtype=torch.float64)
    x = torch.randn(3, 5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    layer(x).sum().backward()
    assert layer.beta.grad is not None and layer.beta.grad.abs().sum() > 0


def test_fixed_beta_is_a_buffer_and_state_dict_round_trips():
    fixed = ZCSwish(2, beta_init=2.0, learnable=False)
    assert not list(fixed.parameters()) and float(fixed.beta[0]) == 2.0
    learned = ZCSwish(2)
    with torch.no_grad():
        learned.beta.add_(0.3)
    clone = ZCSwish(2)
    clone.load_state_dict(learned.state_dict())
    x = torch.randn(1, 2, 3)
    torch.testing.assert_close(clone(x), learned(x), rtol=0, atol=0)


def test_half_precision_and_not_registered_as_norm():
    y = ZCSwish(3)(torch.randn(2, 3, 4).to(torch.bfloat16))
    assert y.dtype == torch.bfloat16
    assert "zc-swish" not in {m.name for m in normlab.methods(kind="norm")}


def test_clear_errors():
    with pytest.raises(ValueError, match="5 channels"):
        ZCSwish(5)(torch.randn(2, 4, 3))
    with pytest.raises(ValueError, match="channel_dim"):
        ZCSwish(5, channel_dim=3)(torch.randn(2, 5))
    with pytest.raises(ValueError, match="positive int"):
        ZCSwish(0)
    with pytest.raises(ValueError, match="per-channel beta"):
        NF.zc_swish(torch.randn(2, 3), torch.ones(4))
    with pytest.raises(TypeError, match="floating-point"):
        ZCSwish(2)(torch.ones(1, 2, dtype=torch.int64))


def test_zc_swish_is_a_registered_activation():
    method = normlab.get("zc-swish")
    assert method.kind == "activation" and method.layout == "channels_first"
    assert [m.name for m in normlab.methods(kind="activation")] == ["zc-swish"]
    layer = normlab.create("zc_swish", 3, beta_init=2.0)
    assert isinstance(layer, ZCSwish) and layer.beta.tolist() == [2.0, 2.0, 2.0]
