"""NoRIN's outer loop: Optuna TPE over (log delta, epsilon), starting at the given init."""

from __future__ import annotations

import math

import pytest

from normlab.series import select_shape


def _bowl(delta: float, epsilon: float) -> float:
    return (math.log(delta) - math.log(2.0)) ** 2 + 0.5 * (epsilon + 1.0) ** 2


def test_first_trial_is_the_init_and_the_search_improves_on_it():
    calls = []

    def objective(delta, epsilon):
        calls.append((delta, epsilon))
        return _bowl(delta, epsilon)

    result = select_shape(objective, n_trials=25, init=(20.0, 2.5), seed=0)
    assert calls[0] == pytest.approx((20.0, 2.5))
    assert len(result.trials) == 25 == len(calls)
    assert result.value == min(t[2] for t in result.trials)
    assert result.trials[result.best_trial] == (result.delta, result.epsilon, result.value)
    assert result.value < _bowl(20.0, 2.5) / 5
    assert all(0.3 <= t[0] <= 30.0 and -3 <= t[1] <= 3 for t in result.trials)


def test_init_outside_the_range_is_clipped_and_failures_are_skipped():
    def objective(delta, epsilon):
        return math.nan if delta < 1.0 else _bowl(delta, epsilon)

    result = select_shape(objective, n_trials=6, init=(1e3, -9.0), seed=1)
    assert result.trials[0][:2] == pytest.approx((30.0, -3.0))
    assert math.isfinite(result.value) and result.delta >= 1.0


def test_search_is_deterministic_given_the_seed():
    a = select_shape(_bowl, n_trials=8, seed=3)
    b = select_shape(_bowl, n_trials=8, seed=3)
    assert a.trials == b.trials


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_trials"):
        select_shape(_bowl, n_trials=0)
    with pytest.raises(ValueError, match="ranges"):
        select_shape(_bowl, n_trials=2, delta_range=(0.0, 1.0))
    with pytest.raises(RuntimeError, match="non-finite"):
        select_shape(lambda d, e: math.inf, n_trials=2)
