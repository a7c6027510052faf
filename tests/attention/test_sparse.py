"""Sparsemax against its definition and the entmax package; 1.5-entmax through the wrapper."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from normlab.functional import entmax15, sparsemax
from normlab.functional.sparse import entmax_available

F64 = torch.float64
needs_entmax = pytest.mark.skipif(not entmax_available(), reason="optional 'entmax' missing")


def scores(*shape: int, scale: float = 1.5, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale


def test_known_values():
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.3, 0.1]], dtype=F64)
    expected = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.6, 0.4]], dtype=F64)
    torch.testing.assert_close(sparsemax(x), expected)
    torch.testing.assert_close(
        sparsemax(torch.tensor([2.0, 1.5, -1.0], dtype=F64)),
        torch.tensor([0.75, 0.25, 0.0], dtype=F64),
    )


def test_sparsemax_is_the_threshold_projection():
    """p = max(x - tau, 0) with sum 1, and <x - p, y - p> <= 0 for every simplex point y."""
    x = scores(20, 9)
    p = sparsemax(x)
    assert (p >= 0).all() and float((p.sum(-1) - 1).abs().max()) < 1e-12
    support = p > 0
    tau = (x - p)[support]  # x_i - p_i = tau on the support
    rows = support.nonzero()[:, 0]
    for r in range(20):
        t = tau[rows == r]
        assert float(t.max() - t.min()) < 1e-12
        assert (x[r][~support[r]] <= t[0] + 1e-12).all()  # off support: x_i <= tau
    vertices = torch.eye(9, dtype=F64)  # the variational inequality at the extreme points
    assert float((((x - p)[:, None, :]) * (vertices[None] - p[:, None, :])).sum(-1).max()) < 1e-12


@needs_entmax
def test_sparsemax_matches_the_entmax_package():
    from entmax import sparsemax as reference

    x = scores(6, 4, 11)
    for dim in (-1, 1, 0):
        torch.testing.assert_close(sparsemax(x, dim=dim), reference(x, dim=dim))


def test_sparsemax_jacobian_and_gradcheck():
    x = scores(8).requires_grad_()
    assert torch.autograd.gradcheck(sparsemax, (x,))
    p = sparsemax(x.detach())
    s = (p > 0).to(F64)
    expected = torch.diag(s) - torch.outer(s, s) / s.sum()
    jac = torch.autograd.functional.jacobian(sparsemax, x.detach())
    torch.testing.assert_close(jac, expected, atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(sparsemax, (scores(3, 4, 5).requires_grad_(),))


@pytest.mark.parametrize("fn", [sparsemax, pytest.param(entmax15, marks=needs_entmax)])
def test_masks_and_fully_masked_rows(fn):
    x = scores(3, 6)
    x[0, :2] = -math.inf
    x[1] = -math.inf
    x.requires_grad_()
    p = fn(x)
    assert (p[0, :2] == 0).all() and (p[1] == 0).all()
    torch.testing.assert_close(p[0, 2:], fn(x.detach()[0, 2:]))
    assert float((p.detach()[[0, 2]].sum(-1) - 1).abs().max()) < 1e-12
    (p * torch.randn_like(p)).sum().backward()
    assert torch.isfinite(x.grad).all() and (x.grad[1] == 0).all()


@needs_entmax
def test_entmax15_solves_its_threshold_equation_and_has_gradients():
    x = scores(10, 7)
    p = entmax15(x)
    assert (p >= 0).all() and float((p.sum(-1) - 1).abs().max()) < 1e-12
    # p_i = (x_i / 2 - tau)^2 on the support: sqrt(p_i) - x_i / 2 is constant there.
    for r in range(10):
        on = p[r] > 0
        c = p[r][on].sqrt() - x[r][on] / 2
        assert float(c.max() - c.min()) < 1e-10
        assert (x[r][~on] / 2 <= -c[0] + 1e-10).all()
    assert torch.autograd.gradcheck(entmax15, (scores(3, 5).requires_grad_(),))


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fn", [sparsemax, pytest.param(entmax15, marks=needs_entmax)])
def test_half_precision(fn, low):
    x = scores(4, 7).float().to(low)
    p = fn(x)
    assert p.dtype == low
    torch.testing.assert_close(p.float(), fn(x.float()).to(low).float(), atol=0, rtol=0)


def test_bad_input_and_missing_package(monkeypatch):
    bad = scores(2, 3)
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        sparsemax(bad)
    with pytest.raises(TypeError, match="floating-point"):
        sparsemax(torch.arange(3))
    monkeypatch.setitem(sys.modules, "entmax", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install entmax"):
        entmax15(scores(2, 3))
