"""Kaniadakis kappa-softmax and Abe softmax against their definitions, in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlab.functional import abe_softmax, kappa_exp, kappa_log, kappa_softmax

F64 = torch.float64
KAPPAS = (0.05, 0.3, 0.7, 0.95)
QS = (1.05, 1.5, 2.0, 1 / 1.5, 0.5)


def scores(*shape: int, scale: float = 3.0, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale


def kappa_stationarity(p: torch.Tensor, s: torch.Tensor, k: float) -> torch.Tensor:
    """``-dS_k/dp_i - s_i``; constant over i (= -gamma) at the maximiser."""
    return ((1 + k) * p**k - (1 - k) * p ** (-k)) / (2 * k) - s


def abe_stationarity(p: torch.Tensor, s: torch.Tensor, q: float) -> torch.Tensor:
    """``-dS_q/dp_i - s_i`` from Abe's entropy as written, without normlab's rewrite."""
    return (q * p ** (q - 1) - p ** (1 / q - 1) / q) / (q - 1 / q) - s


def spread(r: torch.Tensor) -> float:
    return float((r.amax(-1) - r.amin(-1)).max())


def test_kappa_exp_is_the_closed_form_and_log_inverts_it():
    x = torch.linspace(-20, 5, 101, dtype=F64)
    for k in (0.1, 0.5, 0.9):
        closed = (torch.sqrt(1 + k**2 * x**2) + k * x) ** (1 / k)
        torch.testing.assert_close(kappa_exp(x, k), closed, rtol=1e-10, atol=0)
        torch.testing.assert_close(kappa_log(kappa_exp(x, k), k), x, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(kappa_exp(x, -k), kappa_exp(x, k))  # even in kappa
    torch.testing.assert_close(kappa_exp(x, 0.0), torch.exp(x))


@pytest.mark.parametrize("k", KAPPAS)
def test_kappa_softmax_is_the_stationary_point_on_the_simplex(k):
    s = scores(6, 9)
    p = kappa_softmax(s, kappa=k)
    assert (p > 0).all()
    assert float((p.sum(-1) - 1).abs().max()) < 1e-12
    assert spread(kappa_stationarity(p, s, k)) < 1e-9


@pytest.mark.parametrize("q", QS)
def test_abe_softmax_is_the_stationary_point_on_the_simplex(q):
    s = scores(6, 9)
    p = abe_softmax(s, q=q)
    assert (p > 0).all()
    assert float((p.sum(-1) - 1).abs().max()) < 1e-12
    assert spread(abe_stationarity(p, s, q)) < 1e-9


def test_both_maximise_their_objective_against_a_generic_optimizer():
    pytest.importorskip("scipy")
    from scipy.optimize import minimize

    s = scores(7, seed=3).numpy()
    k, q = 0.3, 1.5
    entropies = {
        "kappa": lambda p: -np.sum((p ** (1 + k) - p ** (1 - k)) / (2 * k)),
        "abe": lambda p: -np.sum((p**q - p ** (1 / q)) / (q - 1 / q)),
    }
    ours = {
        "kappa": kappa_softmax(torch.from_numpy(s), kappa=k).numpy(),
        "abe": abe_softmax(torch.from_numpy(s), q=q).numpy(),
    }
    for name, entropy in entropies.items():

        def negative(z, entropy=entropy):
            p = np.exp(z - z.max())
            p /= p.sum()
            return -(entropy(p) + p @ s)

        found = minimize(negative, s.copy(), method="BFGS", options={"gtol": 1e-12})
        best = np.exp(found.x - found.x.max())
        best /= best.sum()
        np.testing.assert_allclose(ours[name], best, atol=1e-6)
        assert -negative(np.log(ours[name])) >= -found.fun - 1e-12


def test_float32_sums_to_one_and_agrees_with_float64():
    s = scores(32, 64, scale=5.0)
    for k in (0.01, 0.2, 0.6, 0.95):
        p32 = kappa_softmax(s.float(), kappa=k)
        assert float((p32.sum(-1) - 1).abs().max()) < 1e-6
        torch.testing.assert_close(p32.double(), kappa_softmax(s, kappa=k), atol=1e-5, rtol=0)
    p32 = abe_softmax(s.float(), q=1.5)
    assert float((p32.sum(-1) - 1).abs().max()) < 1e-6
    torch.testing.assert_close(p32.double(), abe_softmax(s, q=1.5), atol=1e-5, rtol=0)


def test_tiny_kappa_is_exactly_softmax_and_small_kappa_is_close():
    s = scores(5, 11)
    assert torch.equal(kappa_softmax(s, kappa=1e-7), torch.softmax(s, -1))
    assert torch.equal(abe_softmax(s, q=1 + 1e-7), torch.softmax(s, -1))
    # Just above the fallback the solver runs and must land on softmax to O(kappa^2).
    err = float((kappa_softmax(s, kappa=2e-6) - torch.softmax(s, -1)).abs().max())
    assert err < 1e-9


@pytest.mark.parametrize(("fn", "order"), [("kappa", 2.0), ("abe", 2.0)])
def test_deviation_from_softmax_is_second_order(fn, order):
    """Both operators are even in their parameter (kappa, ln q), so no first-order term."""
    s = scores(16, 12)
    ref = torch.softmax(s, -1)
    small = (0.01, 0.02, 0.04)
    if fn == "kappa":
        dev = [float(torch.linalg.norm(kappa_softmax(s, kappa=k) - ref)) for k in small]
    else:
        dev = [float(torch.linalg.norm(abe_softmax(s, q=math.exp(e)) - ref)) for e in small]
    slope = np.polyfit(np.log(small), np.log(dev), 1)[0]
    assert abs(slope - order) < 0.05, slope


def test_no_rounding_floor_near_the_softmax_limit():
    """D(kappa) / kappa^2 and D(eps) / eps^2 stay put down to just above the fallback."""
    s = scores(16, 12)
    ref = torch.softmax(s, -1)
    for fn in (lambda k: kappa_softmax(s, kappa=k), lambda e: abe_softmax(s, q=math.exp(e))):
        ratio = [float(torch.linalg.norm(fn(v) - ref)) / v**2 for v in (1e-3, 2e-6)]
        assert abs(ratio[1] / ratio[0] - 1) < 1e-2, ratio


def test_huge_finite_scores_stay_finite():
    for dtype, big in ((F64, 1e200), (torch.float32, 1e30)):
        s = torch.tensor([[0.0, -big, 1.0, -big / 7]], dtype=dtype)
        for p in (kappa_softmax(s, kappa=0.5), abe_softmax(s, q=1.5)):
            assert torch.isfinite(p).all() and abs(float(p.sum()) - 1) < 1e-6
            assert float(p[0, 1]) < 1e-12 and float(p[0, 2]) > float(p[0, 0]) > 0


def test_abe_is_invariant_under_q_to_one_over_q():
    s = scores(8, 10)
    for q in (1.1, 1.5, 2.0):
        p, p_inv = abe_softmax(s, q=q), abe_softmax(s, q=1 / q)
        torch.testing.assert_close(p, p_inv, atol=1e-13, rtol=0)
        # ... and the q < 1 result solves Abe's equation written with 1/q, independently.
        assert spread(abe_stationarity(p_inv, s, 1 / q)) < 1e-9
    # The first-order term vanishes: D(eps) / eps^2 settles to a nonzero constant.
    ref = torch.softmax(s, -1)
    ratio = [
        float(torch.linalg.norm(abe_softmax(s, q=math.exp(e)) - ref)) / e**2
        for e in (1e-3, 1e-2, 1e-1)
    ]
    assert ratio[0] > 1e-3 and abs(ratio[0] / ratio[1] - 1) < 0.01, ratio


@pytest.mark.parametrize("k", (0.1, 0.2, 0.4))
def test_kappa_tail_decays_algebraically(k):
    head = scores(3, 6)
    distance = torch.logspace(2, 4, 20, dtype=F64)
    s = torch.cat([head, head.amax(-1, keepdim=True) - distance], -1)
    p = kappa_softmax(s, kappa=k)[:, 6:]
    assert (p > 0).all()
    for row in p:
        slope = np.polyfit(np.log(distance.numpy()), np.log(row.numpy()), 1)[0]
        assert abs(slope * k + 1) < 0.1, (slope, -1 / k)
    assert (torch.softmax(s, -1)[:, 6:] < 1e-40).all()  # softmax: exp(-100) and below


@pytest.mark.parametrize("q", (1.2, 2.0))
def test_abe_tail_decays_algebraically(q):
    head = scores(2, 6)
    distance = torch.logspace(2, 4, 20, dtype=F64)
    s = torch.cat([head, head.amax(-1, keepdim=True) - distance], -1)
    p = abe_softmax(s, q=q)[:, 6:]
    for row in p:
        slope = np.polyfit(np.log(distance.numpy()), np.log(row.numpy()), 1)[0]
        assert abs(slope / (-q / (q - 1)) - 1) < 0.1, slope


def jacobian(fn, s: torch.Tensor) -> torch.Tensor:
    return torch.autograd.functional.jacobian(fn, s)


@pytest.mark.parametrize(
    "fn",
    [
        lambda s: kappa_softmax(s, kappa=0.3),
        lambda s: kappa_softmax(s, kappa=0.9, tau=0.5),
        lambda s: abe_softmax(s, q=1.4),
        lambda s: abe_softmax(s, q=0.6),
    ],
    ids=["kappa0.3", "kappa0.9-tau", "abe1.4", "abe0.6"],
)
def test_jacobian_annihilates_ones_and_is_symmetric(fn):
    s = scores(7)
    j = jacobian(fn, s)
    ones = torch.ones(7, dtype=F64)
    assert float((ones @ j).abs().max()) < 1e-12  # 1^T J = 0: the sum stays 1
    assert float((j @ ones).abs().max()) < 1e-12  # J 1 = 0: shift invariance
    torch.testing.assert_close(j, j.T, atol=1e-12, rtol=0)
    # The Jacobian agrees with the finite-difference one of the forward pass.
    h = 1e-6
    fd = torch.stack([(fn(s + h * e) - fn(s - h * e)) / (2 * h) for e in torch.eye(7, dtype=F64)])
    torch.testing.assert_close(j, fd.T, atol=1e-7, rtol=0)


@pytest.mark.parametrize("k", (1e-3, 0.1, 0.5, 0.9))
def test_kappa_gradcheck(k):
    s = scores(3, 6).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: kappa_softmax(t, kappa=k), (s,))


@pytest.mark.parametrize("q", (1.001, 1.2, 2.0, 0.7))
def test_abe_gradcheck(q):
    s = scores(3, 6).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: abe_softmax(t, q=q), (s,))


@pytest.mark.parametrize(
    "fn", [lambda t: kappa_softmax(t, kappa=0.3), lambda t: abe_softmax(t, q=1.5)]
)
def test_masked_scores_get_exactly_zero_and_leave_the_rest_unchanged(fn):
    s = scores(3, 8)
    masked = s.clone()
    masked[0, :3] = -math.inf
    masked[1] = -math.inf  # a row with nothing to attend to
    x = masked.clone().requires_grad_()
    p = fn(x)
    assert (p[0, :3] == 0).all() and (p[1] == 0).all()
    torch.testing.assert_close(p[0, 3:], fn(s[0, 3:]), atol=1e-14, rtol=0)
    torch.testing.assert_close(p[2], fn(s[2]), atol=1e-14, rtol=0)
    (p * torch.randn_like(p)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert (x.grad[0, :3] == 0).all() and (x.grad[1] == 0).all()
    assert torch.autograd.gradcheck(fn, (masked[0].clone().requires_grad_(),))


def test_dim_tau_and_shift():
    s = scores(4, 5, 6)
    for fn in (lambda t, **kw: kappa_softmax(t, kappa=0.4, **kw), abe_softmax):
        torch.testing.assert_close(fn(s, dim=1), fn(s.movedim(1, -1)).movedim(-1, 1))
        torch.testing.assert_close(fn(s, tau=2.0), fn(s / 2.0))
        torch.testing.assert_close(fn(s + 7.5), fn(s), atol=1e-12, rtol=0)


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_are_computed_in_float32(low):
    s = scores(4, 9).float().to(low)
    for fn in (lambda t: kappa_softmax(t, kappa=0.2), lambda t: abe_softmax(t, q=1.3)):
        p = fn(s)
        assert p.dtype == low
        torch.testing.assert_close(p.float(), fn(s.float()).to(low).float(), atol=0, rtol=0)


def test_bad_input_is_a_clear_error():
    s = scores(2, 4)
    nan, pinf = s.clone(), s.clone()
    nan[0, 1], pinf[1, 2] = math.nan, math.inf
    for fn in (kappa_softmax, abe_softmax):
        for bad in (nan, pinf):
            with pytest.raises(ValueError, match="NaN or \\+inf"):
                fn(bad)
        with pytest.raises(TypeError, match="floating-point"):
            fn(torch.ones(3, dtype=torch.long))
        with pytest.raises(ValueError, match="tau"):
            fn(s, tau=0.0)
    with pytest.raises(ValueError, match="kappa"):
        kappa_softmax(s, kappa=1.0)
    with pytest.raises(ValueError, match="kappa"):
        kappa_softmax(s, kappa=-0.1)
    with pytest.raises(TypeError, match="kappa"):
        kappa_softmax(s, kappa="0.1")
    with pytest.raises(ValueError, match="q"):
        abe_softmax(s, q=3.0)
    with pytest.raises(ValueError, match="NaN"):
        kappa_softmax(nan, kappa=1e-9)  # the softmax fallback checks too


def test_causal_attention_with_registered_entropic_scores():
    from normlab.attention import MultiheadAttention

    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(4), requires_grad=True)
    for name, kw in (("kappa", {"kappa": 0.3}), ("abe-softmax", {"q": 1.3})):
        mha = MultiheadAttention(16, 2, score=name, score_kwargs=kw, causal=True)
        y, probs = mha(x, return_probs=True)
        future = torch.ones(6, 6, dtype=torch.bool).triu(1)
        assert (probs[..., future] == 0).all()
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 6), atol=1e-6, rtol=0)
        y.square().sum().backward()
        assert torch.isfinite(x.grad).all()
