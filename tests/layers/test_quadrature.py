"""QuadNorm / BlendQuadNorm: quadrature weights, reference checks, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import normlab
from normlab import functional as NF
from normlab.layers import QuadNorm


def _grid(n: int) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, n, dtype=torch.float64)


@pytest.mark.parametrize("grid", [(11,), (7, 9), (4, 5, 6)])
def test_uniform_rule_is_instance_norm(grid):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, *grid, generator=g, dtype=torch.float64) * 3 + 2
    layer = QuadNorm(5, rule="uniform", dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(5, generator=g))
        layer.bias.copy_(torch.randn(5, generator=g))
    expected = F.instance_norm(x, weight=layer.weight, bias=layer.bias, eps=layer.eps)
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [2, 3, 8, 33])
def test_trapezoid_is_exact_for_linear_functions_only(n):
    w, t = NF.quadrature_weights_1d(n, "trapezoid"), _grid(n)
    assert float((w * (3 * t - 1)).sum()) == pytest.approx(0.5, abs=1e-14)
    quadratic_error = float((w * t**2).sum()) - 1 / 3
    assert quadratic_error == pytest.approx(1 / (6 * (n - 1) ** 2), rel=1e-9)  # h^2 / 6


@pytest.mark.parametrize("n", [3, 5, 9, 17])
def test_simpson_odd_n_is_exact_for_cubics_not_quartics(n):
    w, t = NF.quadrature_weights_1d(n, "simpson"), _grid(n)
    for k in range(4):
        assert float((w * t**k).sum()) == pytest.approx(1 / (k + 1), abs=1e-14)
    h = 1 / (n - 1)
    assert float((w * t**4).sum()) - 1 / 5 == pytest.approx(2 * h**4 / 15, rel=1e-6)


@pytest.mark.parametrize("n", [4, 6, 8, 10, 16])
def test_simpson_even_n_uses_three_eighths_on_the_last_intervals(n):
    w, t = NF.quadrature_weights_1d(n, "simpson"), _grid(n)
    for k in range(4):
        assert float((w * t**k).sum()) == pytest.approx(1 / (k + 1), abs=1e-14)
    h = 1 / (n - 1)
    tail = [h / 3 + 3 * h / 8 if n > 4 else 3 * h / 8, 9 * h / 8, 9 * h / 8, 3 * h / 8]
    torch.testing.assert_close(w[-4:], torch.tensor(tail, dtype=torch.float64))


def test_simpson_converges_at_fourth_order_for_even_and_odd_n():
    def error(n: int) -> float:  # int_0^1 e^t (1 + t) dt = e
        t = _grid(n)
        w = NF.quadrature_weights_1d(n, "simpson")
        return abs(float((w * t.exp() * (1 + t)).sum()) - math.e)

    assert 12 < error(32) / error(64) < 24  # (63 / 31)^4 = 17
    assert 12 < error(33) / error(65) < 20  # 2^4 = 16
    assert error(32) < 4 * error(33)  # the 3/8 tail costs at most a constant factor


def test_two_points_fall_back_to_trapezoid_and_one_point_gets_all_weight():
    torch.testing.assert_close(
        NF.quadrature_weights_1d(2, "simpson"), torch.tensor([0.5, 0.5], dtype=torch.float64)
    )
    assert NF.quadrature_weights_1d(1, "trapezoid").tolist() == [1.0]


def test_periodic_weights_are_uniform_and_spectrally_exact():
    n = 12
    for rule in ("trapezoid", "simpson"):
        w = NF.quadrature_weights_1d(n, rule, periodic=True)
        torch.testing.assert_close(w, torch.full((n,), 1 / n, dtype=torch.float64))
    t = torch.arange(n, dtype=torch.float64) / n  # endpoint-exclusive
    w = NF.quadrature_weights_1d(n, "trapezoid", periodic=True)
    for k in range(1, n):
        assert abs(float((w * torch.cos(2 * math.pi * k * t)).sum())) < 1e-14


def test_tensor_product_weights_match_numpy_trapezoid_in_2d():
    nx, ny = 9, 14
    x, y = _grid(nx), _grid(ny)
    f = torch.exp(x[:, None]) * torch.cos(2 * y[None, :]) + x[:, None] * y[None, :] ** 2
    w = NF.quadrature_weights((nx, ny), "trapezoid", dtype=torch.float64)
    inner = np.trapezoid(f.numpy(), y.numpy(), axis=1)
    expected = np.trapezoid(inner, x.numpy())
    assert float((w * f).sum()) == pytest.approx(expected, abs=1e-14)
    assert float(w.sum()) == pytest.approx(1.0, abs=1e-14)


def test_mixed_periodic_flags_and_cache():
    w = NF.quadrature_weights((5, 4), "trapezoid", periodic=(False, True), dtype=torch.float64)
    torch.testing.assert_close(w[:, 0], w[:, 1])
    assert float(w[0, 0]) == pytest.approx(0.5 / 4 / 4)
    assert NF.quadrature_weights((5, 4), periodic=(False, True)) is NF.quadrature_weights(
        (5, 4), periodic=[False, True]
    )
    assert NF.quadrature_weights((5, 4)).dtype == torch.float32


def test_quad_moments_are_weighted_moments():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 7, 6, generator=g, dtype=torch.float64)
    w = NF.quadrature_weights((7, 6), "simpson", dtype=torch.float64)
    mu, var = NF.quad_moments(x, "simpson")
    manual_mu = (x * w).sum((2, 3)) / w.sum()
    manual_var = ((x - manual_mu[..., None, None]) ** 2 * w).sum((2, 3)) / w.sum()
    torch.testing.assert_close(mu[..., 0, 0], manual_mu, rtol=0, atol=1e-14)
    torch.testing.assert_close(var[..., 0, 0], manual_var, rtol=0, atol=1e-14)
    y = NF.quad_norm(x, rule="simpson", eps=0.0)
    y_mu, y_var = NF.quad_moments(y, "simpson")
    torch.testing.assert_close(y_mu, torch.zeros_like(y_mu), rtol=0, atol=1e-12)
    torch.testing.assert_close(y_var, torch.ones_like(y_var), rtol=0, atol=1e-12)


def test_trapezoid_moments_agree_across_resolutions_much_better_than_uniform():
    def field(n: int) -> torch.Tensor:
        t = _grid(n)
        return (torch.exp(t)[:, None] * torch.sin(2 * t + 0.3)[None, :] + t[None, :])[None, None]

    gaps = {}
    for rule in ("uniform", "trapezoid", "simpson"):
        (m33, v33), (m65, v65) = (NF.quad_moments(field(n), rule) for n in (33, 65))
        gaps[rule] = float((m33 - m65).abs() + (v33 - v65).abs())
    assert gaps["trapezoid"] < gaps["uniform"] / 10
    assert gaps["simpson"] < gaps["trapezoid"] / 100


def test_normalized_output_is_invariant_to_per_channel_affine_input_changes():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 8, 8, generator=g, dtype=torch.float64)
    scale = torch.tensor([0.5, 3.0, 10.0], dtype=torch.float64).view(1, 3, 1, 1)
    shift = torch.tensor([-2.0, 0.0, 7.0], dtype=torch.float64).view(1, 3, 1, 1)
    layer = QuadNorm(3, eps=0.0, dtype=torch.float64)
    torch.testing.assert_close(layer(x * scale + shift), layer(x), rtol=0, atol=1e-12)


def test_blend_endpoints_and_linearity():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 6, 5, generator=g, dtype=torch.float64) * 2 + 1
    quad = QuadNorm(4, dtype=torch.float64)
    torch.testing.assert_close(QuadNorm(4, alpha=1.0, dtype=torch.float64)(x), quad(x))
    layer_uniform = QuadNorm(4, rule="uniform", alpha=0.0, dtype=torch.float64)
    torch.testing.assert_close(layer_uniform(x), F.group_norm(x, 1), rtol=0, atol=1e-12)
    blend = normlab.create("blendquadnorm", 4, dtype=torch.float64)
    assert blend.alpha == 0.3
    layer = NF.blend_quad_norm(x, alpha=0.0)
    torch.testing.assert_close(blend(x), 0.3 * quad(x) + 0.7 * layer, rtol=0, atol=1e-12)
    assert normlab.create("blendquadnorm", 4).alpha == 0.3


def test_half_precision_is_computed_in_float32():
    x = torch.randn(2, 3, 9, 9)
    layer = QuadNorm(3)
    y = layer(x.to(torch.bfloat16))
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), layer(x.to(torch.bfloat16).float()), atol=2e-2, rtol=0)


def test_works_under_inference_mode_then_with_gradients():
    layer = QuadNorm(2)
    with torch.inference_mode():
        layer(torch.randn(1, 2, 13, 7))
    x = torch.randn(1, 2, 13, 7, requires_grad=True)
    layer(x).pow(2).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_clear_errors():
    layer = QuadNorm(8)
    with pytest.raises(ValueError, match="8 channels"):
        layer(torch.randn(2, 7, 5, 5))
    with pytest.raises(ValueError, match="1 to 3 grid dimensions"):
        layer(torch.randn(2, 8))
    with pytest.raises(ValueError, match="1 to 3 grid dimensions"):
        layer(torch.randn(1, 8, 2, 2, 2, 2))
    with pytest.raises(ValueError, match="rule"):
        QuadNorm(8, rule="gauss")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha"):
        QuadNorm(8, alpha=1.5)
    with pytest.raises(ValueError, match="one per grid dimension"):
        QuadNorm(8, periodic=(True,))(torch.randn(1, 8, 4, 4))
    with pytest.raises(TypeError, match="floating-point"):
        layer(torch.ones(1, 8, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="at least one sample"):
        NF.quadrature_weights_1d(0)
