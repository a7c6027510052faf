"""RevIN's input gradients against a float64 reference of the authors' formulation.

The reference follows Kim et al.'s code and neuralforecast's RevIN: mean and standard
deviation detached, the last value (``subtract_last``) kept in the graph.
"""

from __future__ import annotations

import pytest
import torch

from normlab.series import RevIN

EPS = 1e-5


def _reference(x, gamma, beta, forecast, *, last: bool):
    mean = x.mean(1, keepdim=True).detach()
    std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + EPS).detach()
    loc = x[:, -1:, :] if last else mean
    z = (x - loc) / std * gamma + beta
    y = forecast(z)
    return (y - beta) / (gamma + EPS**2) * std + loc


def _forecast(length: int, horizon: int):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(horizon, length, generator=g, dtype=torch.float64) / length**0.5
    return lambda z: torch.einsum("hl,blc->bhc", w, z)


@pytest.mark.parametrize("last", [False, True])
def test_input_gradients_match_reference(last: bool) -> None:
    torch.manual_seed(0)
    b, length, c, horizon = 3, 24, 4, 8
    x = (torch.randn(b, length, c, dtype=torch.float64) * 5 + 2).requires_grad_()
    upstream = torch.randn(b, horizon, c, dtype=torch.float64)
    forecast = _forecast(length, horizon)
    norm = RevIN(c, eps=EPS, subtract_last=last, dtype=torch.float64)
    with torch.no_grad():
        norm.gamma.copy_(torch.linspace(0.5, 1.5, c))
        norm.beta.copy_(torch.linspace(-0.3, 0.3, c))
    z, state = norm.normalize(x)
    ours = norm.denormalize(forecast(z), state)
    (g_ours,) = torch.autograd.grad((ours * upstream).sum(), x)
    ref = _reference(x, norm.gamma.detach(), norm.beta.detach(), forecast, last=last)
    (g_ref,) = torch.autograd.grad((ref * upstream).sum(), x)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-9, atol=1e-9)
    if last:  # the test can fail: detaching the last value changes the gradient
        detached = _reference(x, norm.gamma.detach(), norm.beta.detach(), forecast, last=False)
        (g_det,) = torch.autograd.grad((detached * upstream).sum(), x)
        assert (g_det - g_ref).abs().max() > 1e-2


def test_subtract_last_gradient_reaches_last_step() -> None:
    x = torch.randn(2, 16, 3, dtype=torch.float64, requires_grad=True)
    norm = RevIN(3, affine=False, subtract_last=True, dtype=torch.float64)
    z, state = norm.normalize(x)
    y = norm.denormalize(z[:, :4] * 0, state)  # output = the last value, as a constant forecast
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.allclose(g[:, -1], torch.full_like(g[:, -1], 4.0))
    assert torch.count_nonzero(g[:, :-1]) == 0
