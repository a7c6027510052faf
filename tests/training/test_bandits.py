"""The toy bandits of normlab.training.bandits: exact metrics in range, the untrained policy,
task and stream seeds, unknown methods refused."""

from __future__ import annotations

import pytest

from normlab.training.bandits import PREFERENCE_METHODS, preference_bandit, proxy_bandit

_PREF = {"outputs": 6, "group": 4, "prompts": 4, "noise": 0.1}
_PREF |= {"p_minority": 0.2, "minority_scale": 0.3, "task_seed": 0}
_PROXY = {"outputs": 6, "group": 4, "prompts": 4, "bias": 0.1, "noise": 0.02}
_PROXY |= {"min_spread": 0.03, "gamma": 0.5, "task_seed": 0}


@pytest.mark.parametrize("method", PREFERENCE_METHODS)
def test_preference_metrics_are_expected_utilities_in_the_unit_range(method):
    row = preference_bandit(method, lr=3.0, steps=20, seed=1, **_PREF)
    assert set(row) == {"minority_true", "majority_true", "population_auc"}
    assert all(0.0 <= v <= 1.0 for v in row.values())


def test_the_untrained_policy_scores_the_mean_utility_and_no_gap_gain():
    row = proxy_bandit("grpo", lr=1.0, steps=0, seed=1, **_PROXY)
    assert row["gap_gain"] == 0.0
    assert 0.0 < row["gap"] < _PROXY["bias"] and 0.0 < row["true"] < 1.0
    same = preference_bandit("grpo", lr=1.0, steps=0, seed=2, **_PREF)
    assert same == preference_bandit("grpo", lr=1.0, steps=0, seed=3, **_PREF)


def test_training_moves_the_policy_and_the_stream_seed_changes_the_run():
    a = proxy_bandit("slas", lr=3.0, steps=30, seed=1, **_PROXY)
    b = proxy_bandit("slas", lr=3.0, steps=30, seed=2, **_PROXY)
    assert a != b and a["gap_gain"] != 0.0
    assert a == proxy_bandit("slas", lr=3.0, steps=30, seed=1, **_PROXY)


def test_an_unknown_preference_method_is_refused():
    with pytest.raises(ValueError, match="Unknown method"):
        preference_bandit("ppo", lr=1.0, steps=1, seed=0, **_PREF)
