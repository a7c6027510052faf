"""NoRIN's decoupled shape selection end to end: Slifker-Shapiro, then Optuna, then test.

The outer loop chooses ``(delta, epsilon)`` by validation MSE
(:func:`normlab.series.select_shape`), starting at the Slifker-Shapiro fit of the training
windows (:func:`normlab.series.fit_shape`); the inner loop is ordinary training with the
shape fixed (:func:`normlab.training.forecast.train_forecaster`). :func:`trained_spread`
says whether the shape moved the validation MSE among the trials that trained, and
:func:`drift_fraction` how far joint gradient training moved ``delta`` (the degeneration
problem of the NoRIN paper, seed "Reversible instance normalization (RevIN) and its
successors").
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from normlab.data.series import Splits
from normlab.models.forecaster import Forecaster
from normlab.series import JohnsonFit, ShapeSearch, fit_shape, select_shape
from normlab.training.forecast import (
    ForecastTrainConfig,
    TrainResult,
    build_forecaster,
    evaluate,
    train_forecaster,
)

__all__ = [
    "NoRINTuning",
    "arm_trainer",
    "drift_fraction",
    "search_shape",
    "selection_rows",
    "study_train_config",
    "train_arm",
    "trained_spread",
    "tune_norin",
]


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
    sampler_seed: int | None = None,
    **norin_kwargs: Any,
) -> NoRINTuning:
    """Select NoRIN's shape for ``backbone`` on ``splits`` and test the selection.

    Args:
        backbone: a name from :data:`normlab.models.forecast.BACKBONES`.
        splits: train/validation/test windows.
        config: the inner loop's training settings (every trial uses the same seed).
        n_trials: Optuna trials, the first at the Slifker-Shapiro values.
        seed: seeds the models, the batch order and (unless ``sampler_seed``) the TPE
            sampler.
        fit_windows: evenly spaced training windows for the Slifker-Shapiro fit (None: all).
        test_windows: evenly spaced test windows for the final score (None: all).
        delta_range: search range of ``delta`` (log scale).
        epsilon_range: search range of ``epsilon``.
        fallback_delta: the Slifker-Shapiro fallback's ``delta`` for windows that are not S_U.
        fallback_init: where the search starts when the windows are not S_U (the fit fell
            back), e.g. a neutral point of the search space; None starts at the fallback
            ``(fallback_delta, 0)``.
        sampler_seed: the TPE sampler's seed (None: ``seed``); give each search of a study
            its own (e.g. per backbone), so their candidates are independent draws.
        norin_kwargs: passed to :class:`~normlab.series.NoRIN` (e.g. ``affine=False``).
    """
    windows = splits.train.get(splits.train.spread(fit_windows))[0]
    fit = fit_shape(windows, fallback_delta=fallback_delta)
    best: dict[str, Any] = {}

    def objective(delta: float, epsilon: float) -> float:
        model = build_forecaster(
            "norin", backbone, splits, seed=seed, delta=delta, epsilon=epsilon, **norin_kwargs
        )
        result = train_forecaster(model, splits, config, seed=seed)
        val = result.val_mse if result.diverged is None else math.inf
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
        seed=seed if sampler_seed is None else sampler_seed,
        delta_range=delta_range,
        epsilon_range=epsilon_range,
    )
    model = best["model"]
    return NoRINTuning(fit, search, model, evaluate(model, splits.test, n=test_windows))


def search_shape(
    name: str,
    backbone: str,
    splits: Splits,
    config: ForecastTrainConfig,
    *,
    seed: int,
    val_windows: int | None,
    **tuning: Any,
) -> tuple[NoRINTuning, float]:
    """:func:`tune_norin` at one configuration (series ``name`` x ``backbone``), its Optuna
    sampler seeded by ``crc32("<name>/<backbone>/<seed>")``, with ``tuning`` passed on
    (``n_trials``, ``fit_windows``, ``test_windows``, ``delta_range``); and the
    :func:`trained_spread` of its trials' validation MSE against the trivial forecast's
    (the mean square of ``val_windows`` standardized validation targets).
    """
    sampler_seed = zlib.crc32(f"{name}/{backbone}/{seed}".encode())
    search = tune_norin(backbone, splits, config, seed=seed, sampler_seed=sampler_seed, **tuning)
    y_val = float(splits.val.get(splits.val.spread(val_windows))[1].square().mean())
    return search, trained_spread([t[2] for t in search.search.trials], y_val)


def trained_spread(values: Sequence[float], reference: float) -> float:
    """``log10(max / min)`` of the validation losses of the shape trials that trained: finite
    and below ``reference`` (the trivial forecast's validation MSE, e.g. the training mean).

    A trial whose inverse map blew up (validation MSE 1e12) or diverged did not train; it
    says nothing about how much the shape matters among usable shapes. 0 when fewer than two
    trials trained.

    >>> round(trained_spread([0.50, 0.55, 2.5e12, float("inf")], 1.0), 4)
    0.0414
    """
    kept = [float(v) for v in values if math.isfinite(v) and 0 < v < reference]
    return math.log10(max(kept) / min(kept)) if len(kept) > 1 else 0.0


def drift_fraction(trajectory: Sequence[float], lr: float, steps: int) -> float:
    """How far joint training moved ``delta``: ``log(delta_T / delta_0) / (lr * steps)``,
    the move of ``log delta`` as a fraction of the most Adam can move one parameter
    (about ``lr`` a step). Positive: toward the linear limit (``delta -> infinity``).

    >>> round(drift_fraction([1.0, math.e], 0.01, 200), 3)
    0.5
    """
    return math.log(trajectory[-1] / trajectory[0]) / (lr * steps)


def train_arm(
    method: str,
    backbone: str,
    splits: Splits,
    config: ForecastTrainConfig,
    *,
    seed: int,
    periods: Sequence[int] = (24,),
    shape: tuple[float, float] = (30.0, 0.0),
    delta_init: float = 1.0,
) -> tuple[Forecaster, TrainResult, list[float]]:
    """Build and train one arm of the NoRIN study on ``splits``.

    ``method`` is a normalizer of :mod:`normlab.series` (``"revin"``, ``"san"``, ...),
    ``"norin"`` (decoupled NoRIN, its shape fixed at ``shape = (delta, epsilon)``) or
    ``"norin-joint"`` (``(delta, epsilon)`` trained by gradient with the backbone from
    ``(delta_init, 0)``, the paper's degeneration setting).

    Returns:
        The trained model (best validation epoch), its :class:`TrainResult` and, for the
        joint arm, ``delta`` (channel mean) before training and after each epoch (else []).
    """
    trajectory: list[float] = []
    kwargs: dict[str, Any] = {}
    if method == "norin":
        kwargs = {"delta": shape[0], "epsilon": shape[1]}
    elif method == "norin-joint":
        kwargs = {"delta": float(delta_init), "epsilon": 0.0, "learn_shape": True}

    def record(epoch: int, model: Forecaster) -> None:
        trajectory.append(float(model.norm.delta.detach().mean()))  # type: ignore[union-attr]

    norm = "norin" if method.startswith("norin") else method
    model = build_forecaster(norm, backbone, splits, seed=seed, periods=periods, **kwargs)
    on_epoch = record if method == "norin-joint" else None
    result = train_forecaster(model, splits, config, seed=seed, on_epoch=on_epoch)
    return model, result, trajectory


def study_train_config(
    config: Mapping[str, Any], lr: float, joint: bool = False
) -> ForecastTrainConfig:
    """The study's training settings at ``lr`` from ``config``'s ``epochs``, ``batch``,
    ``batches_per_epoch``, ``val_windows``, ``pretrain_epochs`` (SAN's first stage) and
    ``patience`` (early stopping); the joint run (``joint``) trains every epoch (patience =
    epochs), so that its delta trajectory is complete."""
    keys = ("epochs", "batch", "batches_per_epoch", "val_windows", "pretrain_epochs")
    patience = int(config["epochs" if joint else "patience"])
    return ForecastTrainConfig(lr=lr, patience=patience, **{k: config[k] for k in keys})


def arm_trainer(
    backbone: str, splits: Splits, config: Mapping[str, Any], periods: Sequence[int]
) -> Callable[[str, float, int], tuple[Forecaster, TrainResult, list[float]]]:
    """``train(method, lr, seed)``: :func:`train_arm` at :func:`study_train_config` (the
    joint arm ``"norin-joint"`` with every epoch), decoupled NoRIN's shape fixed at the
    Slifker-Shapiro fit (:func:`~normlab.series.fit_shape`) of ``config["fit_windows"]``
    training windows, the joint arm starting from ``config["delta_init"]``."""
    fit = fit_shape(splits.train.get(splits.train.spread(config["fit_windows"]))[0])
    kw = {"periods": periods, "shape": (fit.delta, fit.gamma), "delta_init": config["delta_init"]}

    def train(method: str, lr: float, seed: int) -> Any:
        fc = study_train_config(config, lr, joint=method == "norin-joint")
        return train_arm(method, backbone, splits, fc, seed=seed, **kw)

    return train


def selection_rows(
    deltas: Sequence[float],
    spreads: Sequence[float],
    *,
    cut: float = 10.0,
    delta_range: tuple[float, float] = (0.3, 30.0),
    matters: float = math.log10(1.02),
) -> dict[str, dict[str, float]]:
    """Table rows summarising the shapes selected in several configurations (backbones).

    ``"selected"``: the share of ``delta*`` below ``cut`` (far from the linear limit
    ``delta -> infinity``), the mean ``log10 delta*`` and ``|log10 delta*_first -
    log10 delta*_last|`` (the backbone gap); ``"placebo"``: the same for a random pick from
    the search's prior, log-uniform on ``delta_range`` (share ``log(cut / lo) / log(hi /
    lo)``, expected gap a third of the range's decades); ``"shape"``: the mean
    :func:`trained_spread` and the share of configurations where it exceeds ``matters``.

    >>> rows = selection_rows([2.0, 20.0], [0.05, 0.0])
    >>> rows["selected"]["below_linear"], round(rows["placebo"]["below_linear"], 3)
    (0.5, 0.761)
    """
    (lo, hi), logs = delta_range, [math.log10(d) for d in deltas]
    below = sum(d < cut for d in deltas) / len(deltas)
    return {
        "selected": {
            "below_linear": below,
            "log10_delta": sum(logs) / len(logs),
            "backbone_gap": abs(logs[0] - logs[-1]),
        },
        "placebo": {
            "below_linear": math.log(cut / lo) / math.log(hi / lo),
            "log10_delta": 0.5 * math.log10(lo * hi),
            "backbone_gap": math.log10(hi / lo) / 3.0,
        },
        "shape": {
            "val_spread": sum(spreads) / len(spreads),
            "shape_matters": sum(v > matters for v in spreads) / len(spreads),
        },
    }
