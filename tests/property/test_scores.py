"""Properties of the score normalizers over random inputs (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from normlab.functional import abe_softmax, kappa_softmax, softmax1, sparsemax

SETTINGS = settings(max_examples=40, deadline=None)


def rows(low: float, high: float, max_keys: int = 12) -> st.SearchStrategy[np.ndarray]:
    shapes = st.tuples(st.integers(1, 4), st.integers(1, max_keys))
    floats = st.floats(low, high, allow_nan=False, allow_infinity=False)
    return shapes.flatmap(lambda shape: arrays(np.float64, shape, elements=floats))


def masked_rows() -> st.SearchStrategy[np.ndarray]:
    """Finite scores with some entries set to -inf (at least one finite per row)."""

    def with_mask(x: np.ndarray) -> st.SearchStrategy[np.ndarray]:
        def apply(drop: np.ndarray) -> np.ndarray:
            drop[:, 0] = False
            return np.where(drop, -np.inf, x)

        return arrays(np.bool_, x.shape).map(apply)

    return rows(-20, 20).flatmap(with_mask)


@SETTINGS
@given(rows(-20, 20))
def test_kappa_to_zero_recovers_softmax(x):
    s = torch.from_numpy(x)
    reference = torch.softmax(s, -1)
    assert torch.equal(kappa_softmax(s, kappa=5e-7), reference)  # the exact fallback
    # Above the fallback the solver itself converges to softmax as kappa^2 (scores span at
    # most 40 here, so the correction -kappa^2 u^3 / 6 to log p stays below ~1e-2 kappa^0).
    errors = [float((kappa_softmax(s, kappa=k) - reference).abs().max()) for k in (1e-3, 1e-4)]
    assert errors[0] < 5e-4
    assert errors[1] <= max(errors[0] / 50, 1e-12)


@SETTINGS
@given(masked_rows(), st.sampled_from([0.05, 0.3, 0.8]), st.sampled_from([1.1, 1.6, 0.7]))
def test_entropic_outputs_lie_on_the_simplex_and_ignore_shifts(x, k, q):
    s = torch.from_numpy(x)
    for fn in (lambda t: kappa_softmax(t, kappa=k), lambda t: abe_softmax(t, q=q)):
        p = fn(s)
        assert (p >= 0).all() and (p[torch.isinf(s)] == 0).all()
        assert (p[~torch.isinf(s)] > 0).all()  # no exact zeros: the tails are algebraic
        assert float((p.sum(-1) - 1).abs().max()) < 1e-12
        torch.testing.assert_close(fn(s + 3.25), p, atol=1e-12, rtol=0)


@SETTINGS
@given(rows(-30, 30))
def test_softmax1_sums_lie_strictly_between_zero_and_one(x):
    total = softmax1(torch.from_numpy(x)).sum(-1)
    assert ((total > 0) & (total < 1)).all()
    # the mass left over is exactly 1 / (1 + sum exp(x)) = sigmoid(-logsumexp(x))
    expected = 1 - torch.sigmoid(-torch.logsumexp(torch.from_numpy(x), -1))
    torch.testing.assert_close(total, expected, atol=1e-12, rtol=0)


def projection_by_bisection(x: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the simplex from its optimality condition alone.

    The projection is ``max(x - tau, 0)`` with ``sum = 1``; ``sum max(x - tau, 0)`` is
    decreasing in ``tau``, so bisection on ``[min x - 1, max x]`` finds ``tau``.
    """
    lo, hi = x.min() - 1.0, x.max()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.maximum(x - mid, 0).sum() > 1:
            lo = mid
        else:
            hi = mid
    return np.maximum(x - 0.5 * (lo + hi), 0)


@SETTINGS
@given(rows(-5, 5))
def test_sparsemax_is_the_euclidean_projection(x):
    p = sparsemax(torch.from_numpy(x)).numpy()
    for row, out in zip(x, p, strict=True):
        np.testing.assert_allclose(out, projection_by_bisection(row), atol=1e-12)
    # no simplex vertex is closer to x than p (the projection is the nearest point)
    dist = ((x - p) ** 2).sum(-1)
    for j in range(x.shape[1]):
        vertex = np.eye(x.shape[1])[j]
        assert (dist <= ((x - vertex) ** 2).sum(-1) + 1e-12).all()


@SETTINGS
@given(rows(-5, 5), st.floats(-50, 50))
def test_sparsemax_ignores_shifts_and_keeps_the_order(x, c):
    s = torch.from_numpy(x)
    p = sparsemax(s)
    torch.testing.assert_close(sparsemax(s + c), p, atol=1e-12, rtol=0)
    order = torch.argsort(s, dim=-1)
    assert (p.gather(-1, order).diff(dim=-1) >= -1e-15).all()
    assert not math.isnan(float(p.sum()))
