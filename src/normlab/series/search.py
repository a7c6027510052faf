"""Shape selection for NoRIN, decoupled from training: Bayesian optimization with Optuna."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from normlab._records import Record

__all__ = ["ShapeSearch", "select_shape"]


@dataclass(frozen=True)
class ShapeSearch(Record):
    """The outcome of :func:`select_shape`.

    Attributes:
        delta: the selected tail parameter ``delta*``.
        epsilon: the selected skewness parameter ``epsilon*``.
        value: the objective (validation loss) at the selection.
        trials: every trial as ``(delta, epsilon, value)``, in the order run.
        best_trial: the position of the selected trial in ``trials``.
    """

    delta: float
    epsilon: float
    value: float
    trials: list[tuple[float, float, float]] = field(default_factory=list)
    best_trial: int = 0


def select_shape(
    objective: Callable[[float, float], float],
    *,
    n_trials: int = 20,
    init: tuple[float, float] | None = None,
    delta_range: tuple[float, float] = (0.3, 30.0),
    epsilon_range: tuple[float, float] = (-3.0, 3.0),
    seed: int = 0,
    startup_trials: int | None = None,
) -> ShapeSearch:
    """Choose NoRIN's ``(delta, epsilon)`` by Bayesian optimization of ``objective``.

    The outer loop of NoRIN's decoupled shape selection: Optuna's TPE sampler searches
    ``log delta`` uniformly in ``log delta_range`` and ``epsilon`` in ``epsilon_range``;
    each trial calls ``objective(delta, epsilon)``, which should train a model with that
    fixed shape (the inner loop, ordinary training) and return its validation loss. The
    first trial is ``init`` (the Slifker-Shapiro values, clipped into the ranges), so the
    search never does worse on validation than the closed-form initialisation.

    Args:
        objective: ``(delta, epsilon) -> validation loss``; NaN/inf values count as failed.
        n_trials: number of objective evaluations (20-30 in the paper's setting).
        init: the first trial, or None for none.
        delta_range: search range of ``delta`` (searched on a log scale).
        epsilon_range: search range of ``epsilon``.
        seed: seed of the TPE sampler.
        startup_trials: random trials before TPE models the objective; default
            ``max(2, n_trials // 3)``.

    Raises:
        ValueError: on bad ranges or ``n_trials < 1``; RuntimeError when every trial failed.
    """
    import optuna

    if n_trials < 1:
        raise ValueError(f"n_trials must be >= 1, got {n_trials}.")
    (d_lo, d_hi), (e_lo, e_hi) = delta_range, epsilon_range
    if not (0 < d_lo < d_hi and e_lo < e_hi):
        raise ValueError(f"Bad ranges: delta {delta_range}, epsilon {epsilon_range}.")
    startup = max(2, n_trials // 3) if startup_trials is None else startup_trials
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(direction="minimize", sampler=sampler)
        if init is not None:
            d0 = min(max(float(init[0]), d_lo), d_hi)
            e0 = min(max(float(init[1]), e_lo), e_hi)
            study.enqueue_trial({"log_delta": math.log(d0), "epsilon": e0})

        def run(trial: optuna.Trial) -> float:
            log_delta = trial.suggest_float("log_delta", math.log(d_lo), math.log(d_hi))
            epsilon = trial.suggest_float("epsilon", e_lo, e_hi)
            value = float(objective(math.exp(log_delta), epsilon))
            return value if math.isfinite(value) else math.inf

        study.optimize(run, n_trials=n_trials)
    finally:
        optuna.logging.set_verbosity(verbosity)
    trials = [
        (math.exp(t.params["log_delta"]), float(t.params["epsilon"]), float(t.value))
        for t in study.trials
        if t.value is not None
    ]
    finite = [i for i, t in enumerate(trials) if math.isfinite(t[2])]
    if not finite:
        raise RuntimeError("Every shape-selection trial gave a non-finite validation loss.")
    best = min(finite, key=lambda i: trials[i][2])
    delta, epsilon, value = trials[best]
    return ShapeSearch(delta, epsilon, value, trials, best)
