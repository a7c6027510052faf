"""Guaranteed-normalization approximations: sum p = 1, sigma = 1, measured error bounds.

Bounds stated here were measured and derived: the base-2 exponential ``2^q (1 + f)``
over-estimates ``2^z`` by a factor in [1, G], G = 1.0615, so after normalization
``|p - softmax| <= (sqrt(G) - 1) / (sqrt(G) + 1) = 0.0149`` (two logits come within 3%
of it, 0.0145; the reciprocal's residual adds < 1e-3). The approximate LayerNorm matches
torch's to ~5e-7 with the defaults (table of 32, one Newton step, renormalization).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import normlab
from normlab import functional as NF
from normlab.attention import MultiheadAttention
from normlab.layers import ApproxLayerNorm

G = 2.0 / (math.e * math.log(2.0))  # max (1 + f) / 2^f, at 1 + f = 1 / ln 2
SOFTMAX_BOUND = (math.sqrt(G) - 1) / (math.sqrt(G) + 1)


def _logits(shape=(500, 64), scale=3.0, seed=0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def test_the_derived_bound():
    assert abs(G - 1.0615) < 1e-4
    assert abs(SOFTMAX_BOUND - 0.0149) < 1e-4


@pytest.mark.parametrize("newton_steps", [None, 0, 1, 2])
@pytest.mark.parametrize("frac_bits", [None, 8, 12])
def test_softmax_sums_to_one(newton_steps, frac_bits):
    p = NF.approx_softmax(_logits(), frac_bits=frac_bits, newton_steps=newton_steps)
    assert (p >= 0).all()
    assert float((p.sum(-1) - 1).abs().max()) <= 1e-6
    if frac_bits is not None:  # exactly 1 in fixed point: every p a multiple of 2^-b
        scaled = p.double() * 2**frac_bits
        assert torch.equal(scaled, scaled.round())
        assert torch.equal(p.double().sum(-1), torch.ones(p.shape[0], dtype=torch.float64))


def test_softmax_error_is_within_the_derived_bound_and_the_bound_is_tight():
    errors = [
        NF.softmax_approximation_error(_logits(seed=s, scale=sc))
        for s in range(3)
        for sc in (1, 3, 10)
    ]
    assert max(errors) <= SOFTMAX_BOUND + 1e-3
    d = torch.linspace(-4, 4, 8001)[:, None]
    two = NF.softmax_approximation_error(torch.cat([d, torch.zeros_like(d)], 1), newton_steps=None)
    assert 0.9 * SOFTMAX_BOUND < two <= SOFTMAX_BOUND  # two logits nearly attain it: 0.0145


def test_more_fraction_bits_approach_the_floating_point_approximation():
    x = _logits((200, 16))
    errors = [NF.softmax_approximation_error(x, frac_bits=b) for b in (6, 10, 16)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] <= SOFTMAX_BOUND + 1e-3


def test_softmax_is_exact_at_integer_log2_gaps_and_keeps_order():
    x = torch.tensor([[0.0, -1.0, -2.0, -5.0]]) * math.log(2.0)  # z = 0, -1, -2, -5: f = 0
    torch.testing.assert_close(NF.approx_softmax(x, newton_steps=None), torch.softmax(x, -1))
    y = _logits((50, 20))
    p = NF.approx_softmax(y)
    order = y.argsort(-1)
    assert (p.gather(-1, order).diff(dim=-1) >= -1e-7).all()


def test_masked_entries_get_exactly_zero_and_gradients_stay_finite():
    x = _logits((4, 6)).requires_grad_()
    mask = torch.ones(4, 6, dtype=torch.bool).tril()
    p = NF.approx_softmax(x.masked_fill(~mask, float("-inf")), frac_bits=10)
    assert torch.equal(p[~mask], torch.zeros_like(p[~mask]))
    (p * torch.randn(4, 6)).sum().backward()
    assert torch.isfinite(x.grad).all()
    y = torch.randn(3, 5).requires_grad_()
    q = NF.approx_softmax(y.masked_fill(torch.tensor([True, False, True])[:, None], -math.inf))
    assert torch.equal(q[0], torch.zeros(5)) and float(q[1].detach().sum()) == pytest.approx(1.0)
    q.sum().backward()
    assert torch.isfinite(y.grad).all()


def test_straight_through_gradient_is_the_smooth_approximation_gradient():
    x = _logits((3, 7), seed=2).double().requires_grad_()
    w = torch.randn(3, 7, dtype=torch.float64)
    (g_fixed,) = torch.autograd.grad((NF.approx_softmax(x, frac_bits=8) * w).sum(), x)
    (g_smooth,) = torch.autograd.grad((NF.approx_softmax(x) * w).sum(), x)
    torch.testing.assert_close(g_fixed, g_smooth)
    torch.testing.assert_close(g_smooth.sum(-1), torch.zeros(3, dtype=torch.float64))


def test_reciprocal_and_rsqrt_error_shrink_quadratically_with_newton_steps():
    v = torch.logspace(-6, 6, 5001, dtype=torch.float64)
    rec = [(NF.approx_reciprocal(v, newton_steps=k) * v - 1).abs().max().item() for k in range(3)]
    rsq = [(NF.approx_rsqrt(v, newton_steps=k) * v**0.5 - 1).abs().max().item() for k in range(3)]
    assert rec[0] <= 2**-5 and rsq[0] <= 2**-6  # table of 32: half a cell
    for errs, factor in ((rec, 1.0), (rsq, 1.5)):
        for e0, e1 in itertools.pairwise(errs):
            assert e1 <= factor * e0**2 * 1.01


def test_layer_norm_output_std_is_one():
    x = torch.randn(400, 64, generator=torch.Generator().manual_seed(1)) * 2 + 0.5
    y = NF.approx_layer_norm(x, (64,))
    assert float((y.std(-1, unbiased=False) - 1).abs().max()) <= 1e-5
    assert float(y.mean(-1).abs().max()) <= 1e-6
    # Without the renormalization step the same datapath misses sigma = 1 by far more.
    raw = NF.approx_layer_norm(x, (64,), renormalize=False)
    assert float((raw.std(-1, unbiased=False) - 1).abs().max()) > 1e-5


def test_layer_norm_error_bounds():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(400, 64, generator=g) * 5 - 1
    weight, bias = torch.randn(64, generator=g), torch.randn(64, generator=g)
    err = NF.layer_norm_approximation_error(x, (64,), weight, bias)
    assert err <= 5e-6
    assert NF.layer_norm_approximation_error(x, (64,), newton_steps=0, renormalize=False) > 1e-3
    constant = torch.full((3, 8), 2.5)
    assert torch.equal(NF.approx_layer_norm(constant, (8,)), torch.zeros(3, 8))


def test_module_matches_functional_and_reports_error():
    layer = ApproxLayerNorm(16, newton_steps=2)
    x = torch.randn(5, 16)
    torch.testing.assert_close(layer(x), NF.approx_layer_norm(x, (16,), newton_steps=2))
    assert layer.approximation_error(x) < 1e-5
    assert "newton_steps=2" in repr(layer)


def test_registered_and_swappable_into_attention():
    assert normlab.get("approx-softmax").kind == "score"
    assert normlab.get("approx-layernorm").kind == "norm"
    attn = MultiheadAttention(16, 2, score="approx-softmax", causal=True)
    x = torch.randn(2, 5, 16)
    _, probs = attn(x, return_probs=True)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 5))
    assert torch.equal(probs.triu(1), torch.zeros_like(probs))
    model = torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    normlab.surgery.replace_norms(model, "approx-layernorm")
    assert isinstance(model[0], ApproxLayerNorm)
    torch.testing.assert_close(model[0](x), F.layer_norm(x, (16,)), atol=1e-5, rtol=0)


def test_clear_errors():
    with pytest.raises(ValueError, match="frac_bits"):
        NF.approx_softmax(torch.randn(3), frac_bits=0)
    with pytest.raises(ValueError, match="newton_steps"):
        NF.approx_softmax(torch.randn(3), newton_steps=-1)
    with pytest.raises(ValueError, match="table_bits"):
        ApproxLayerNorm(4, table_bits=40)
    with pytest.raises(ValueError, match="normalized shape"):
        ApproxLayerNorm(4)(torch.randn(2, 5))
    with pytest.raises(TypeError, match="floating-point"):
        NF.approx_softmax(torch.ones(3, dtype=torch.long))
