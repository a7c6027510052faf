"""Johnson S_U transform, moment matching, Slifker-Shapiro fit and NoRIN's linear limit."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from normlab.series import (
    NoRIN,
    RevIN,
    fit_shape,
    johnson_su,
    johnson_su_inverse,
    moment_matched,
    slifker_shapiro,
    slifker_shapiro_quantiles,
)

stats = pytest.importorskip("scipy.stats")  # the reference distributions (extra "series")

Z = 0.524
PARAMS = [
    (0.0, 1.0, 0.0, 1.0),
    (-0.8, 0.6, 0.3, 2.0),
    (1.5, 2.5, -4.0, 0.5),
    (0.3, 4.0, 10.0, 7.0),
    (-2.0, 1.2, 1e3, 30.0),
]


def _exact_quantiles(gamma, delta, xi, lam, z=Z):
    dist = stats.johnsonsu(a=gamma, b=delta, loc=xi, scale=lam)
    return tuple(float(dist.ppf(stats.norm.cdf(k * z))) for k in (-3, -1, 1, 3))


@pytest.mark.parametrize("params", PARAMS)
def test_slifker_shapiro_recovers_exact_parameters(params):
    fit = slifker_shapiro_quantiles(_exact_quantiles(*params), z=Z)
    assert fit.family == "SU" and not fit.fallback and fit.ratio > 1
    for got, want in zip((fit.gamma, fit.delta, fit.xi, fit.lam), params, strict=True):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("z", [0.3, 0.524, 0.8])
def test_slifker_shapiro_recovers_at_other_z(z):
    params = (-0.8, 0.6, 0.3, 2.0)
    fit = slifker_shapiro_quantiles(_exact_quantiles(*params, z=z), z=z)
    np.testing.assert_allclose((fit.gamma, fit.delta, fit.xi, fit.lam), params, rtol=1e-6)


def test_slifker_shapiro_on_a_large_sample():
    sample = stats.johnsonsu(a=-0.8, b=0.7, loc=1.0, scale=2.0).rvs(400_000, random_state=1)
    fit = slifker_shapiro(sample)
    assert fit.family == "SU"
    np.testing.assert_allclose((fit.gamma, fit.delta), (-0.8, 0.7), atol=0.05)


@pytest.mark.parametrize("shape", [(0.5, 1.0), (-1.0, 2.0), (0.0, 0.7)])
def test_sb_windows_fall_back_to_the_linear_end(shape):
    a, b = shape
    q = tuple(float(stats.johnsonsb(a=a, b=b).ppf(stats.norm.cdf(k * Z))) for k in (-3, -1, 1, 3))
    fit = slifker_shapiro_quantiles(q, fallback_delta=30.0)
    assert fit.family == "SB" and fit.fallback and fit.ratio < 1
    assert fit.delta == 30.0 and fit.gamma == 0.0
    assert fit.xi == pytest.approx(0.5 * (q[1] + q[2]))
    assert fit.lam == pytest.approx(30.0 * (q[2] - q[1]) / (2 * Z))
    assert all(math.isfinite(v) for v in (fit.gamma, fit.delta, fit.xi, fit.lam))


def test_fallback_for_uniform_normal_boundary_and_constant_samples():
    uniform = slifker_shapiro(np.linspace(-1, 1, 10_001))
    assert uniform.family == "SB" and uniform.fallback
    normal_q = tuple(k * Z for k in (-3, -1, 1, 3))
    assert slifker_shapiro_quantiles(normal_q).family == "boundary"
    constant = slifker_shapiro(np.full(100, 4.0))
    assert constant.family == "degenerate" and constant.fallback
    assert math.isnan(constant.ratio) and constant.xi == 4.0 and constant.lam > 0
    with pytest.raises(ValueError, match="NaN"):
        slifker_shapiro(np.array([1.0, np.nan, 2.0]))
    with pytest.raises(ValueError, match="non-empty"):
        slifker_shapiro(np.array([]))


@pytest.mark.parametrize("params", PARAMS)
def test_transform_gaussianizes_and_inverts(params):
    q = np.array([0.001, 0.1, 0.5, 0.77, 0.999])
    x = torch.tensor(stats.johnsonsu(*params[:2], loc=params[2], scale=params[3]).ppf(q))
    z = johnson_su(x, *params)
    torch.testing.assert_close(z, torch.tensor(stats.norm.ppf(q)), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(johnson_su_inverse(z, *params), x, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("delta", [0.3, 0.7, 1.0, 3.0, 30.0])
@pytest.mark.parametrize("epsilon", [-3.0, -0.5, 0.0, 2.0])
def test_moment_matched_has_mean_zero_variance_one(delta, epsilon):
    xi, lam = moment_matched(
        torch.tensor(delta, dtype=torch.float64), torch.tensor(epsilon, dtype=torch.float64)
    )
    dist = stats.johnsonsu(a=epsilon, b=delta, loc=float(xi), scale=float(lam))
    mean, var = dist.stats(moments="mv")
    assert float(mean) == pytest.approx(0.0, abs=1e-8)
    assert float(var) == pytest.approx(1.0, rel=1e-8)


def test_moment_matched_is_finite_across_the_delta_range():
    delta = torch.logspace(math.log10(0.05), 8, 50, dtype=torch.float64)
    for epsilon in (-3.0, 0.0, 3.0):
        xi, lam = moment_matched(delta, torch.full_like(delta, epsilon))
        assert torch.isfinite(xi).all() and torch.isfinite(lam).all() and (lam > 0).all()
    # linear limit: lambda ~ delta, xi -> epsilon
    xi, lam = moment_matched(
        torch.tensor([1e6], dtype=torch.float64), torch.tensor([1.5], dtype=torch.float64)
    )
    assert float(lam) / 1e6 == pytest.approx(1.0, rel=1e-6)
    assert float(xi) == pytest.approx(1.5, rel=1e-6)


def test_norin_map_tends_to_the_identity_as_delta_grows():
    u = torch.linspace(-4, 4, 81, dtype=torch.float64).reshape(1, -1, 1)
    deviations = []
    for delta in (1.0, 3.0, 10.0, 100.0, 1e4):
        norm = NoRIN(1, delta=delta, epsilon=1.0, affine=False).double()
        deviations.append(float((norm._map(u, {}, 0) - u).abs().max()))
    assert all(a > b for a, b in itertools.pairwise(deviations))
    assert deviations[-1] < 1e-6
    assert deviations[0] > 0.1


def test_norin_at_large_delta_equals_revin():
    torch.manual_seed(0)
    x = torch.randn(4, 96, 3).exp() * 5 + 2  # skewed windows
    y = torch.randn(4, 24, 3) * 2
    revin, norin = RevIN(3), NoRIN(3, delta=1e6, epsilon=-2.0)
    with torch.no_grad():
        for p in (revin.gamma, norin.gamma):
            p.fill_(1.3)
    z_r, s_r = revin.normalize(x)
    z_n, s_n = norin.normalize(x)
    torch.testing.assert_close(z_n, z_r, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        norin.denormalize(y, s_n), revin.denormalize(y, s_r), rtol=1e-5, atol=1e-4
    )


def test_norin_maps_moment_matched_su_windows_to_normal():
    # u drawn from S_U(epsilon, delta) with mean 0, variance 1 -> v = epsilon + delta asinh(...)
    # is exactly the normal draw it came from.
    delta, epsilon = 0.8, -1.0
    normal = torch.randn(1, 500, 1, dtype=torch.float64)
    xi, lam = moment_matched(
        torch.tensor(delta, dtype=torch.float64), torch.tensor(epsilon, dtype=torch.float64)
    )
    u = xi + lam * torch.sinh((normal - epsilon) / delta)
    norm = NoRIN(1, delta=delta, epsilon=epsilon, affine=False).double()
    torch.testing.assert_close(norm._map(u, {}, 0), normal)


def test_fit_shape_finds_su_windows_and_falls_back_on_cycles():
    g = torch.Generator().manual_seed(0)
    heavy = torch.sinh((torch.randn(64, 256, 2, generator=g) + 0.5) / 0.7)
    fit = fit_shape(heavy)
    # x = sinh((N + 0.5) / 0.7) is S_U(gamma=-0.5, delta=0.7); windows are standardized first
    assert fit.family == "SU" and 0.5 < fit.delta < 1.0
    assert fit.gamma == pytest.approx(-0.5, abs=0.2)
    t = torch.arange(96, dtype=torch.float32)
    cycles = torch.sin(2 * math.pi * (t[None, :, None] + torch.arange(64)[:, None, None]) / 24)
    fit = fit_shape(cycles, fallback_delta=25.0)
    assert fit.family == "SB" and fit.fallback and fit.delta == 25.0
    norm = NoRIN(2)
    fit = norm.initialize_shape(heavy)
    torch.testing.assert_close(norm.delta, torch.full((2,), fit.delta, dtype=torch.float32))
    torch.testing.assert_close(norm.epsilon, torch.full((2,), fit.gamma, dtype=torch.float32))
