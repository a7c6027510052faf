"""gymnasium wrappers for normlab's reward normalizers (needs ``gymnasium``, extra ``rl``).

``env = KalmanNormalizeReward(env)`` wraps a ``gymnasium.Env`` as a ``gymnasium.Wrapper`` and
a ``gymnasium.vector.VectorEnv`` as a ``gymnasium.vector.VectorWrapper`` (the constructor
picks the right class, like gymnasium's ``wrappers.NormalizeReward`` and
``wrappers.vector.NormalizeReward`` pair). A vector wrapper keeps one normalizer shared by all
sub-environments, as gymnasium's does, and leaves autoreset steps out of its statistics.
Import this module only when gymnasium is installed; ``normlab.rl`` loads it lazily.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper
from gymnasium.vector.vector_env import AutoresetMode

from normlab.rl.kalman import KalmanRewardNormalizer, RunningRewardNormalizer

__all__ = [
    "KalmanNormalizeReward",
    "RunningNormalizeReward",
    "VectorKalmanNormalizeReward",
    "VectorRunningNormalizeReward",
    "gymnasium_reward_gap",
]


class _Dispatch:
    """Send a vector env to the vector twin of the wrapper (``__init__`` then runs on it)."""

    _vector: type

    def __new__(cls, env: Any, *args: Any, **kwargs: Any):
        if isinstance(env, VectorEnv):
            return cls._vector(env, *args, **kwargs)
        return super().__new__(cls)


class _VectorBase(VectorWrapper):
    def __init__(self, env: VectorEnv) -> None:
        VectorWrapper.__init__(self, env)
        self._prev_done = np.zeros(self.num_envs, dtype=bool)
        self._mode = self.env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)

    def _active(self) -> np.ndarray:
        if self._mode == AutoresetMode.SAME_STEP:
            return np.ones(self.num_envs, dtype=bool)
        return ~self._prev_done

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        self._prev_done[:] = False
        return super().reset(seed=seed, options=options)

    def state_dict(self) -> dict[str, Any]:
        """The normalizer's state, for checkpointing."""
        return self.normalizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the normalizer's state."""
        self.normalizer.load_state_dict(state)


class VectorRunningNormalizeReward(_VectorBase):
    """:class:`RunningNormalizeReward` for a vector env (gymnasium's vector NormalizeReward)."""

    def __init__(self, env: VectorEnv, *, gamma: float = 0.99, epsilon: float = 1e-8) -> None:
        super().__init__(env)
        self.normalizer = RunningRewardNormalizer(gamma=gamma, eps=epsilon)
        self.normalizer.ret = np.zeros(self.num_envs)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        self.normalizer.ret = np.zeros(self.num_envs)
        return super().reset(seed=seed, options=options)

    def step(self, actions: Any):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        out = self.normalizer.step(reward, terminated, active=self._active())
        self._prev_done = np.logical_or(terminated, truncated)
        if self._mode == AutoresetMode.SAME_STEP:
            self.normalizer.ret[self._prev_done] = 0.0
        return obs, out, terminated, truncated, info


class VectorKalmanNormalizeReward(_VectorBase):
    """:class:`KalmanNormalizeReward` for a vector env: one filter over all sub-envs' rewards."""

    def __init__(self, env: VectorEnv, **kwargs: Any) -> None:
        super().__init__(env)
        self.normalizer = KalmanRewardNormalizer(**kwargs)
        if self.normalizer.mode != "step":
            raise ValueError("A reward wrapper sees one step at a time: use mode='step'.")

    def step(self, actions: Any):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        reward = np.asarray(reward, dtype=np.float64)
        out = np.zeros_like(reward)
        active = self._active()
        if active.any():
            out[active] = self.normalizer(reward[active])
        self._prev_done = np.logical_or(terminated, truncated)
        return obs, out, terminated, truncated, info


class RunningNormalizeReward(_Dispatch, gym.Wrapper):
    """gymnasium's ``NormalizeReward`` on :class:`~normlab.rl.RunningRewardNormalizer`.

    ``reward / sqrt(var + epsilon)`` with ``var`` the running variance of the discounted
    return; equal to ``gymnasium.wrappers.NormalizeReward`` on the same stream. Given a
    vector env it builds a :class:`VectorRunningNormalizeReward`.

    Args:
        env: the environment.
        gamma: discount of the tracked return.
        epsilon: added to the variance.
    """

    def __init__(self, env: gym.Env, *, gamma: float = 0.99, epsilon: float = 1e-8) -> None:
        gym.Wrapper.__init__(self, env)
        self.normalizer = RunningRewardNormalizer(gamma=gamma, eps=epsilon)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        out = self.normalizer.step(float(reward), float(terminated))
        return obs, float(out), terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        """The normalizer's state, for checkpointing."""
        return self.normalizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the normalizer's state."""
        self.normalizer.load_state_dict(state)


class KalmanNormalizeReward(_Dispatch, gym.Wrapper):
    """Normalise each reward by a 1-D Kalman filter (:class:`~normlab.rl.KalmanRewardNormalizer`).

    The wrapper returns ``(r_t - x_t) / (sqrt(P_t) + eps)`` with the filter updated by
    ``r_t`` (the paper's per-step form, on immediate rewards); the filter persists across
    episodes. For the per-episode form over returns-to-go use the normalizer directly in the
    learner. Given a vector env it builds a :class:`VectorKalmanNormalizeReward`.

    Args:
        env: the environment.
        **kwargs: ``q``, ``r``, ``x0``, ``p0``, ``eps`` of the filter.
    """

    _vector = VectorKalmanNormalizeReward

    def __init__(self, env: gym.Env, **kwargs: Any) -> None:
        gym.Wrapper.__init__(self, env)
        self.normalizer = KalmanRewardNormalizer(**kwargs)
        if self.normalizer.mode != "step":
            raise ValueError("A reward wrapper sees one step at a time: use mode='step'.")

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(self.normalizer(float(reward))), terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        """The filter's state, for checkpointing."""
        return self.normalizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the filter's state."""
        self.normalizer.load_state_dict(state)


RunningNormalizeReward._vector = VectorRunningNormalizeReward


def gymnasium_reward_gap(env_id: str = "MountainCarContinuous-v0", steps: int = 300) -> float:
    """The largest difference between the rewards :class:`RunningNormalizeReward` and
    gymnasium's own ``wrappers.NormalizeReward`` give over ``steps`` random actions on
    ``env_id`` (same seeds): 0 up to rounding when normlab's estimator is gymnasium's."""
    out = []
    for env in (
        RunningNormalizeReward(gym.make(env_id)),
        gym.wrappers.NormalizeReward(gym.make(env_id)),
    ):
        env.reset(seed=0)
        env.action_space.seed(0)
        out.append([env.step(env.action_space.sample())[1] for _ in range(steps)])
    return float(np.max(np.abs(np.subtract(*out))))
