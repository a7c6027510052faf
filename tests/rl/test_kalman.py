"""Kalman and running reward normalizers: closed forms, gymnasium equivalence, errors, state."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlab.rl import KalmanRewardNormalizer, RunningRewardNormalizer, kalman_steady_state


@pytest.mark.parametrize(("q", "r"), [(1e-2, 1e-1), (1.0, 1.0), (1e-3, 5.0)])
def test_gain_and_variance_converge_to_closed_form(q, r):
    f = KalmanRewardNormalizer(q=q, r=r, p0=3.0)
    f.update(np.random.default_rng(0).normal(size=2000))
    k, p = kalman_steady_state(q, r)
    assert abs(f.gain - k) < 1e-12 and abs(f.p - p) < 1e-12
    # the fixed point of the Riccati recursion, checked directly
    prior = p + q
    assert abs(prior / (prior + r) - k) < 1e-15 and abs((1 - k) * prior - p) < 1e-15


def test_one_step_by_hand_and_step_mode_output():
    f = KalmanRewardNormalizer(q=0.5, r=2.0, x0=1.0, p0=1.0, eps=0.0)
    out = f(torch.tensor([4.0], dtype=torch.float64))
    prior = 1.5
    k = prior / (prior + 2.0)
    x, p = 1.0 + k * 3.0, (1 - k) * prior
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    assert abs(f.x - x) < 1e-15 and abs(f.p - p) < 1e-15
    assert abs(out.item() - (4.0 - x) / math.sqrt(p)) < 1e-12


def test_episode_mode_restarts_and_uses_the_final_state():
    g = np.array([3.0, 2.0, 1.0])
    f = KalmanRewardNormalizer(mode="episode", eps=0.0)
    out = f(g)
    ref = KalmanRewardNormalizer(eps=0.0)
    ref.update(g)
    np.testing.assert_allclose(out, (g - ref.x) / math.sqrt(ref.p))
    np.testing.assert_allclose(f(g), out)  # a second episode starts afresh


@pytest.mark.parametrize("bad", [{"q": 0.0}, {"r": -1.0}, {"q": float("nan")}, {"p0": 0.0}])
def test_bad_variances_raise(bad):
    with pytest.raises(ValueError, match="must be finite and > 0"):
        KalmanRewardNormalizer(**bad)


@pytest.mark.parametrize(("q", "r"), [(0.0, 1.0), (1.0, 0.0), (-1.0, 1.0), (1.0, float("inf"))])
def test_steady_state_rejects_bad_q_r(q, r):
    with pytest.raises(ValueError, match="must be finite and > 0"):
        kalman_steady_state(q, r)


def test_non_finite_reward_raises_and_state_round_trips():
    f = KalmanRewardNormalizer()
    with pytest.raises(ValueError, match="non-finite"):
        f([1.0, float("nan")])
    f([1.0, 2.0, 3.0])
    g = KalmanRewardNormalizer()
    g.load_state_dict(f.state_dict())
    assert f([5.0]) == g([5.0]) and f.state_dict() == g.state_dict()


def test_running_normalizer_matches_gymnasium_running_mean_std():
    from gymnasium.wrappers.utils import RunningMeanStd

    rng = np.random.default_rng(1)
    ours, theirs = RunningRewardNormalizer(center=True), RunningMeanStd(shape=())
    for _ in range(20):
        batch = rng.normal(3.0, 2.0, size=int(rng.integers(1, 9)))
        ours.update(batch)
        theirs.update(batch)
    assert abs(ours.mean - theirs.mean) < 1e-12 and abs(ours.var - theirs.var) < 1e-12
    assert abs(ours.count - theirs.count) < 1e-9
    expect = (1.0 - theirs.mean) / np.sqrt(theirs.var + 1e-8)
    np.testing.assert_allclose(ours.normalize([1.0]), expect)
    clone = RunningRewardNormalizer(center=True)
    clone.load_state_dict(ours.state_dict())
    assert clone.normalize(2.0) == ours.normalize(2.0)


def test_steady_state_error_is_zero_once_settled_and_large_after_one_step():
    from normlab.rl.kalman import steady_state_error

    assert steady_state_error(1e-2, 1e-1) < 1e-12
    assert steady_state_error(1e-2, 1e-1, n=1) > 1e-3  # one step from P0 = 1: not yet


def test_per_episode_form_restarts_each_call_and_per_step_carries_state():
    g = np.linspace(60.0, 1.0, 50)
    episode = KalmanRewardNormalizer(mode="episode")
    first, second = episode(g), episode(g)
    np.testing.assert_array_equal(first, second)  # a fresh filter per episode
    step = KalmanRewardNormalizer(mode="step")
    assert not np.array_equal(step(g), step(g))  # one filter across episodes
