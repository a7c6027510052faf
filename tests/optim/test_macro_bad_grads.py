"""MACRO on bad gradients and awkward parameters (issue 23, MACRO).

Each case failed before: one NaN entry turned the whole matrix NaN, gradients >= 1e19
overflowed ``||X||_F`` in msign and left the weight unchanged without a word, an empty
parameter raised a raw reshape error and a non-contiguous 4-D one a raw view error.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from normlab.optim import MACRO, msign


def _pair(seed: int = 0, shape=(6, 8)):
    gen = torch.Generator().manual_seed(seed)
    return nn.Parameter(torch.randn(shape, generator=gen)), torch.randn(shape, generator=gen)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_bad_gradient_entry_skips_that_parameter_with_a_warning(bad):
    w, g = _pair()
    other, g2 = _pair(1, (4, 5))
    opt = MACRO([w, other], lr=0.1)
    w0, o0 = w.detach().clone(), other.detach().clone()
    w.grad, other.grad = g.clone(), g2.clone()
    w.grad[2, 3] = bad
    with pytest.warns(RuntimeWarning, match=r"params'\]\[0\] \(shape \(6, 8\)\).*1 NaN/inf"):
        opt.step()
    assert torch.equal(w.detach(), w0) and "momentum_buffer" not in opt.state[w]
    assert torch.isfinite(other).all() and not torch.equal(other.detach(), o0)
    w.grad = g.clone()  # a clean gradient afterwards steps normally
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step()
    assert torch.isfinite(w).all() and not torch.equal(w.detach(), w0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1e19, 1e30, 1e-30])
def test_huge_and_tiny_gradients_give_the_unit_scale_step(dtype, scale):
    w, g = _pair()
    w = nn.Parameter(w.detach().to(dtype))
    ref = nn.Parameter(w.detach().clone())
    opt, ref_opt = MACRO([w], lr=0.1), MACRO([ref], lr=0.1)
    for k in range(3):
        gk = g.to(dtype) * (1 + k)
        w.grad, ref.grad = gk * scale, gk
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            opt.step()
        ref_opt.step()
    torch.testing.assert_close(w.detach(), ref.detach(), atol=1e-5, rtol=1e-5)
    assert (w.detach() - _pair()[0].detach().to(dtype)).abs().max() > 1e-2  # it moved


def test_msign_is_scale_free():
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(2))
    for s in (1e19, 1e37, 1e-30, 1e-37):
        torch.testing.assert_close(msign(x * s), msign(x), atol=1e-5, rtol=1e-5)
    assert torch.equal(msign(torch.zeros(3, 4)), torch.zeros(3, 4))


def test_an_overflowing_momentum_direction_is_skipped_not_nan():
    w, g = _pair()
    opt = MACRO([w], lr=0.1)
    w0 = w.detach().clone()
    w.grad = torch.full_like(g, 3e38)
    with pytest.warns(RuntimeWarning, match="momentum direction overflows"):
        opt.step()
    assert torch.equal(w.detach(), w0)


def test_empty_parameters_are_left_alone():
    empty, tall = nn.Parameter(torch.zeros(0, 8)), nn.Parameter(torch.zeros(8, 0))
    w, g = _pair()
    opt = MACRO([empty, tall, w], lr=0.1, manifold="oblique")
    empty.grad, tall.grad, w.grad = torch.zeros(0, 8), torch.zeros(8, 0), g
    opt.step()
    assert empty.shape == (0, 8) and tall.shape == (8, 0)
    torch.testing.assert_close(w.detach().norm(dim=1), torch.ones(6))


@pytest.mark.parametrize("manifold", ["sphere", "oblique"])
def test_non_contiguous_parameters_step_like_contiguous_ones(manifold):
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(4, 3, 3, 2, generator=gen)
    grad = torch.randn(4, 3, 3, 2, generator=gen)
    strided = nn.Parameter(base.permute(0, 3, 1, 2).contiguous().permute(0, 2, 3, 1))
    plain = nn.Parameter(base.clone())
    assert not strided.is_contiguous() and torch.equal(strided.detach(), plain.detach())
    opts = [MACRO([p], lr=0.1, manifold=manifold) for p in (strided, plain)]
    for _ in range(3):
        strided.grad, plain.grad = grad.clone(), grad.clone()
        for opt in opts:
            opt.step()
    torch.testing.assert_close(strided.detach(), plain.detach(), atol=1e-6, rtol=1e-6)
    assert not torch.equal(plain.detach(), base)
