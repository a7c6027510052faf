"""The bandits' training curves (``curve=``): lower is better, one point per logged policy
(every 10 steps, the untrained one first, the last one after the last step)."""

from __future__ import annotations

import pytest

from normlab.training.bandits import preference_bandit, proxy_bandit

_PREF = {"outputs": 6, "group": 4, "prompts": 4, "noise": 0.1}
_PREF |= {"p_minority": 0.2, "minority_scale": 0.3, "task_seed": 0}
_PROXY = {"outputs": 6, "group": 4, "prompts": 4, "bias": 0.1, "noise": 0.02}
_PROXY |= {"min_spread": 0.03, "gamma": 0.5, "task_seed": 0}


def test_the_preference_curve_is_minus_the_population_preference():
    curve: list[float] = []
    row = preference_bandit("grpo", lr=3.0, steps=40, seed=1, curve=curve, **_PREF)
    assert len(curve) == 5  # steps 0, 10, 20, 30 and after the last
    assert -sum(curve) / len(curve) == pytest.approx(row["population_auc"])
    assert curve[-1] < curve[0]  # training raised the population's preference
    assert row == preference_bandit("grpo", lr=3.0, steps=40, seed=1, **_PREF)


def test_the_proxy_curve_is_minus_the_proxy_reward():
    curve: list[float] = []
    row = proxy_bandit("grpo", lr=3.0, steps=40, seed=1, curve=curve, **_PROXY)
    assert len(curve) == 5
    assert -curve[-1] == pytest.approx(row["proxy"])  # the last tenth: the last point
