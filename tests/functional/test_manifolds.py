"""The HPD/SPD Frechet mean against float64 references computed here (issue 23, HPD mean).

References use only ``torch.linalg.eigh``: the closed form of the weighted mean of two
matrices, ``A #_t B = A^½ (A^-½ B A^-½)^t A^½``, and, for batches of 8, a long Riemannian
gradient descent with the small step ``1 / mean_i(r_i coth r_i)`` (``r_i`` the distance to
each matrix; below the inverse of the Hessian bound, so it descends at any spread). The
undamped Karcher iteration normlab used before ended 1.9 (condition 1e4), 5.4 (1e6) and
8.7 (1e8) from the true mean of 8 SPD 8x8 matrices, with no warning.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from normlab.functional import manifolds as MF

D = torch.float64


def _fn(x: torch.Tensor, f) -> torch.Tensor:
    evals, evecs = torch.linalg.eigh(0.5 * (x + x.mH))
    return (evecs * f(evals).to(evecs.dtype).unsqueeze(-2)) @ evecs.mH


def _whiten(m: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    inv = _fn(m, lambda e: e.rsqrt())
    y = inv @ x @ inv
    return 0.5 * (y + y.mH)


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Affine-invariant distance ``||log(A^-½ B A^-½)||_F``."""
    return float(torch.linalg.eigvalsh(_whiten(a, b)).log().norm())


def gradient_norm(m: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None = None) -> float:
    """``||sum_i w_i log(M^-½ X_i M^-½)||_F``: bounds the distance from ``M`` to the mean."""
    w = torch.full((x.shape[0],), 1 / x.shape[0], dtype=D) if w is None else w
    logs = _fn(_whiten(m, x), torch.log)
    return float(torch.linalg.matrix_norm((w.to(logs.dtype)[:, None, None] * logs).sum(0)))


def reference_mean(x: torch.Tensor, iters: int = 4000) -> tuple[torch.Tensor, float]:
    """Small-step Riemannian gradient descent from the log-Euclidean mean; its final
    gradient norm bounds its distance to the true mean."""
    m = _fn(_fn(x, torch.log).mean(0), torch.exp)
    for _ in range(iters):
        logs = _fn(_whiten(m, x), torch.log)
        g = logs.mean(0)
        if float(torch.linalg.matrix_norm(g)) < 1e-12:
            break
        r = torch.linalg.matrix_norm(logs).clamp_min(1e-12)
        s = _fn(m, torch.sqrt)
        m = s @ _fn(g / float((r / torch.tanh(r)).mean()), torch.exp) @ s
        m = 0.5 * (m + m.mH)
    return m, gradient_norm(m, x)


def spread_batch(b: int, n: int, cond: float, *, seed: int = 0, complex_: bool = False):
    """``b`` random HPD ``n x n`` matrices, log-uniform eigenvalues over ``[1, cond]``."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(b, n, n, generator=g, dtype=D)
    if complex_:
        a = a + 1j * torch.randn(b, n, n, generator=g, dtype=D)
    q, _ = torch.linalg.qr(a)
    evals = (torch.rand(b, n, generator=g, dtype=D) * math.log(cond)).exp()
    return q @ torch.diag_embed(evals).to(q.dtype) @ q.mH


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("cond", [1e2, 1e4, 1e6, 1e8])
def test_mean_of_two_is_the_closed_form_geometric_mean(cond, complex_):
    x = spread_batch(2, 4, cond, seed=1, complex_=complex_)
    a_half, a_inv = _fn(x[0], torch.sqrt), _fn(x[0], torch.rsqrt)
    for t in (0.5, 0.2):
        expect = a_half @ _fn(a_inv @ x[1] @ a_inv, lambda e, t=t: e**t) @ a_half  # A #_t B
        w = torch.tensor([1 - t, t], dtype=D)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = MF.hpd_frechet_mean(x, weights=w)
        got_grad, expect_grad = gradient_norm(got, x, w), gradient_norm(expect, x, w)
        assert got_grad < 1e-8
        # at 1e8 the float64 closed form is the less accurate one (its gradient is ~6e-7):
        # each is within its gradient norm of the true mean (the cost is 1-strongly convex),
        # up to the rounding of these float64 measurements (~1e-8 at condition 1e8)
        assert distance(got, expect) <= got_grad + expect_grad + 1e-8
        if cond <= 1e6:
            assert distance(got, expect) < 1e-8


@pytest.mark.parametrize("cond", [1e4, 1e6, pytest.param(1e8, marks=pytest.mark.slow)])
def test_mean_of_eight_widely_spread_matches_a_damped_reference(cond):
    x = spread_batch(8, 8, cond)
    ref, ref_grad = reference_mean(x)
    assert ref_grad < 1e-9  # the reference has converged
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = MF.hpd_frechet_mean(x)
    got_grad = gradient_norm(got, x)
    assert got_grad < 1e-8
    # both are within their gradient norm of the true mean (the cost is 1-strongly convex)
    assert distance(got, ref) <= ref_grad + got_grad + 1e-10


def test_complex_batch_at_condition_1e6():
    x = spread_batch(8, 4, 1e6, seed=2, complex_=True)
    ref, ref_grad = reference_mean(x)
    got = MF.hpd_frechet_mean(x)
    assert ref_grad < 1e-9 and distance(got, ref) < 1e-8


def test_too_few_iterations_warn_with_the_residual():
    x = spread_batch(8, 4, 1e6, seed=3)
    with pytest.warns(RuntimeWarning, match=r"did not converge in 3 steps.*gradient norm is"):
        MF.hpd_frechet_mean(x, iters=3)
    with warnings.catch_warnings():  # a float32 batch converges to its own precision
        warnings.simplefilter("error")
        MF.hpd_frechet_mean(spread_batch(8, 4, 10.0, seed=3).float())


def test_commuting_batches_converge_in_one_step():
    d = torch.rand(6, 3, generator=torch.Generator().manual_seed(4), dtype=D) + 0.2
    got = MF.hpd_frechet_mean(torch.diag_embed(d), iters=1)
    torch.testing.assert_close(got, torch.diag(d.log().mean(0).exp()), atol=1e-13, rtol=0)
