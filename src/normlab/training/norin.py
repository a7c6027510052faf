"""NoRIN's decoupled shape selection end to end: Slifker-Shapiro, then Optuna, then test.

The outer loop chooses ``(delta, epsilon)`` by validation MSE
(:func:`normlab.series.select_shape`), starting at the Slifker-Shapiro fit of the training
windows (:func:`normlab.series.fit_shape`); the inner loop is ordinary training with the
shape fixed (:func:`normlab.training.forecast.train_forecaster`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from normlab.data.series import Splits
from normlab.models.forecaster import Forecaster
from normlab.series import JohnsonFit, ShapeSearch, fit_shape, select_shape
from normlab.training.forecast import (
    ForecastTrainConfig,
    build_forecaster,
    evaluate,
    train_forecaster,
)

__all__ = ["NoRINTuning", "tune_norin"]


@dataclass
class NoRINTuning:
    """The outcome of :func:`tune_norin`.

    Attributes:
        fit: the Slifker-Shapiro fit that gave the first trial.
        search: every trial and the selected ``(delta*, epsilon*)``.
        model: the selected trial's trained forecaster.
        test: its test MSE and MAE.
    """

    fit: JohnsonFit
    search: ShapeSearch
    model: Forecaster
    test: dict[str, float]


def tune_norin(
    backbone: str,
    splits: Splits,
    config: ForecastTrainConfig,
    *,
    n_trials: int = 20,
    seed: int = 0,
    fit_windows: int | None = 5000,
    test_windows: int | None = None,
    delta_range: tuple[float, float] = (0.3, 30.0),
    epsilon_range: tuple[float, float] = (-3.0, 3.0),
    fallback_delta: float = 30.0,
    fallback_init: tuple[float, float] | None = None,
    **norin_kwargs: Any,
) -> NoRINTuning:
    """Select NoRIN's shape for ``backbone`` on ``splits`` and test the selection.

    Args:
        backbone: a name from :data:`normlab.models.forecast.BACKBONES`.
        splits: train/validation/test windows.
        config: the inner loop's training settings (every trial uses the same seed).
        n_trials: Optuna trials, the first at the Slifker-Shapiro values.
        seed: seeds the models, the batch order and the TPE sampler.
        fit_windows: evenly spaced training windows for the Slifker-Shapiro fit (None: all).
        test_windows: evenly spaced test windows for the final score (None: all).
        delta_range: search range of ``delta`` (log scale).
        epsilon_range: search range of ``epsilon``.
        fallback_delta: the Slifker-Shapiro fallback's ``delta`` for windows that are not S_U.
        fallback_init: where the search starts when the windows are not S_U (the fit fell
            back), e.g. a neutral point of the search space; None starts at the fallback
            ``(fallback_delta, 0)``.
        norin_kwargs: passed to :class:`~normlab.series.NoRIN` (e.g. ``affine=False``).
    """
    windows = splits.train.get(splits.train.spread(fit_windows))[0]
    fit = fit_shape(windows, fallback_delta=fallback_delta)
    best: dict[str, Any] = {}

    def objective(delta: float, epsilon: float) -> float:
        model = build_forecaster(
            "norin", backbone, splits, seed=seed, delta=delta, epsilon=epsilon, **norin_kwargs
        )
        val = train_forecaster(model, splits, config, seed=seed).val_mse
        val = val if math.isfinite(val) else math.inf
        if not best or val < best["val"]:  # the first of equal trials, as select_shape picks
            best.update(val=val, model=model)
        return val

    init = (fit.delta, fit.gamma)
    if fit.fallback and fallback_init is not None:
        init = fallback_init
    search = select_shape(
        objective,
        n_trials=n_trials,
        init=init,
        seed=seed,
        delta_range=delta_range,
        epsilon_range=epsilon_range,
    )
    model = best["model"]
    return NoRINTuning(fit, search, model, evaluate(model, splits.test, n=test_windows))
