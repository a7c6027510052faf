"""Normalization in reinforcement learning: GRPO-family advantages and reward normalizers.

Advantages (kind ``"advantage"``): :func:`advantages` with ``method`` one of GRPO, batch-std,
Dr. GRPO, RLOO, GDPO, SLAS, P-GRPO (:class:`PreferenceGroupAdvantage`). Reward normalizers:
:class:`KalmanRewardNormalizer`, :class:`RunningRewardNormalizer`; their gymnasium wrappers
(:class:`KalmanNormalizeReward`, :class:`RunningNormalizeReward` and their vector-env forms
:class:`VectorKalmanNormalizeReward`, :class:`VectorRunningNormalizeReward`) load on first
access, since gymnasium is optional.
"""

from __future__ import annotations

from typing import Any

from normlab.rl.advantages import METHODS, PreferenceGroupAdvantage, advantages, group_index
from normlab.rl.kalman import KalmanRewardNormalizer, RunningRewardNormalizer, kalman_steady_state

__all__ = [
    "METHODS",
    "KalmanNormalizeReward",
    "KalmanRewardNormalizer",
    "PreferenceGroupAdvantage",
    "RunningNormalizeReward",
    "RunningRewardNormalizer",
    "VectorKalmanNormalizeReward",
    "VectorRunningNormalizeReward",
    "advantages",
    "group_index",
    "kalman_steady_state",
]

_WRAPPERS = (
    "KalmanNormalizeReward",
    "RunningNormalizeReward",
    "VectorKalmanNormalizeReward",
    "VectorRunningNormalizeReward",
)


def __getattr__(name: str) -> Any:
    if name in _WRAPPERS:
        try:
            from normlab.rl import wrappers
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"normlab.rl.{name} needs gymnasium: pip install 'normlab[rl]'."
            ) from err
        return getattr(wrappers, name)
    raise AttributeError(f"module 'normlab.rl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
