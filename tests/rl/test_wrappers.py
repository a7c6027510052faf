"""gymnasium wrappers: equal to gymnasium's NormalizeReward; work on vector envs."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from normlab.rl import (  # noqa: E402
    KalmanNormalizeReward,
    KalmanRewardNormalizer,
    RunningNormalizeReward,
)


def _rollout(env, steps: int, seed: int = 0):
    env.reset(seed=seed)
    env.action_space.seed(seed)
    rewards = []
    for _ in range(steps):
        _, r, term, trunc, _ = env.step(env.action_space.sample())
        rewards.append(r)
        if term or trunc:
            env.reset()
    return np.array(rewards, dtype=np.float64)


def test_running_wrapper_equals_gymnasium_normalize_reward():
    # MountainCarContinuous has non-constant rewards; CartPole's are all 1
    for name in ("MountainCarContinuous-v0", "CartPole-v1"):
        ours = _rollout(RunningNormalizeReward(gym.make(name), gamma=0.9), 400)
        ref = _rollout(gym.wrappers.NormalizeReward(gym.make(name), gamma=0.9), 400)
        np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=0)
        assert np.ptp(ours) > 0


def _vec_rollout(env, steps: int):
    env.reset(seed=3)
    env.action_space.seed(3)
    out = []
    for _ in range(steps):
        _, r, _, _, _ = env.step(env.action_space.sample())
        out.append(np.asarray(r, dtype=np.float64))
    return np.stack(out)


@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_running_wrapper_equals_gymnasium_vector_normalize_reward(mode):
    def make():
        return gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode=mode)

    ours_env = RunningNormalizeReward(make(), gamma=0.95)
    assert isinstance(ours_env, gym.vector.VectorWrapper)
    ours = _vec_rollout(ours_env, 300)
    ref = _vec_rollout(gym.wrappers.vector.NormalizeReward(make(), gamma=0.95), 300)
    # gymnasium accumulates the vector return in float32; normlab in float64
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=0)


def test_kalman_wrapper_single_and_vector():
    env = KalmanNormalizeReward(gym.make("MountainCarContinuous-v0"), q=1e-2, r=1e-1)
    assert isinstance(env, gym.Wrapper)
    raw = _rollout(gym.make("MountainCarContinuous-v0"), 50)
    out = _rollout(env, 50)
    np.testing.assert_allclose(out, KalmanRewardNormalizer(q=1e-2, r=1e-1)(raw), rtol=1e-12)
    vec = KalmanNormalizeReward(gym.make_vec("CartPole-v1", num_envs=2), q=1e-2, r=1e-1)
    assert isinstance(vec, gym.vector.VectorWrapper)
    rewards = _vec_rollout(vec, 200)
    assert rewards.shape == (200, 2) and np.isfinite(rewards).all()
    assert vec.normalizer.count > 0
    state = vec.state_dict()
    fresh = KalmanNormalizeReward(gym.make_vec("CartPole-v1", num_envs=2))
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    with pytest.raises(ValueError, match="mode='step'"):
        KalmanNormalizeReward(gym.make("CartPole-v1"), mode="episode")


def test_gymnasium_reward_gap_is_zero():
    from normlab.rl.wrappers import gymnasium_reward_gap

    assert gymnasium_reward_gap(steps=50) < 1e-12
