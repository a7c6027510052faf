"""Arms tuned in several independent configurations, pooled into the table's arms.

A claim whose table reads one arm averaged over configurations (series x horizon x
backbone) runs :func:`~normlab.claims.arms.run_arms` once per configuration, its arms named
as the table and the effects name them (``"demand/pamod"``), and pools the measurements
with :func:`pool`: each row is the mean of the arm's rows, each arm's tuning record is
:func:`pooled_record` of its configurations' records (so the engine's learned premise reads
the mean validation score against the mean reference, the scale of the table's mean, and
gates the effects that compare that arm), and the divergences are kept (the last one of an
arm that diverged in several configurations). :func:`forecast_arms` is that engine run for
forecasters (:mod:`normlab.training.forecast`) at one configuration.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from normlab.claims.arms import Trained, run_arms
from normlab.claims.core import Measurement
from normlab.data.series import Splits
from normlab.training.forecast import TrainResult, evaluate

__all__ = ["forecast_arms", "pool", "pooled_record"]

#: ``(method, lr, seed) -> (model, result, extra)``: one forecaster trained (see
#: :func:`forecast_arms`).
TrainForecaster = Callable[[str, float, int], tuple[Any, TrainResult, Any]]


def forecast_arms(
    config: Mapping[str, Any],
    seed: int,
    splits: Splits,
    arms: Sequence[str],
    train: TrainForecaster,
    kept: dict[str, Any] | None = None,
) -> Measurement:
    """:func:`~normlab.claims.arms.run_arms` over forecasting arms at one configuration.

    Arms are named ``"<row>/<method>"``; ``train(method, lr, seed)`` builds and trains one
    forecaster with early stopping on validation MSE (its ``"lr"`` is the config search's
    only axis) and returns ``(model, TrainResult, extra)``. The engine reads the best
    validation MSE, the divergence and, for the convergence premise, the best validation MSE
    so far at each epoch as the run's curve (the score of the model early stopping would
    return there: a run stopped by its patience ends flat, one still improving does not;
    the raw per-epoch score of an early-stopped run rises after its best epoch, which makes
    its late share noise); each arm's trivial reference is forecasting the training mean
    (0 on the standardized scale) on the ``config["val_windows"]`` validation windows. Each
    chosen arm's row is its test MSE and MAE on ``config["test_windows"]`` windows,
    ``best_is_last`` (1 when the best validation epoch was the last: early stopping found
    no minimum) and ``epochs`` run; ``kept`` (when given) receives each chosen arm's
    ``(model, result, extra)``.
    """

    def fit(arm: str, params: dict[str, Any], s: int) -> Trained:
        out = train(arm.split("/", 1)[1], float(params["lr"]), s)
        curve = list(itertools.accumulate((h["val"] for h in out[1].history), min))
        return Trained(out[1].val_mse, out, out[1].diverged, curve)

    def test(arm: str, t: Trained) -> dict[str, float]:
        model, result, _ = t.model
        if kept is not None:
            kept[arm] = t.model
        epochs = len(result.history)
        best_is_last = float(result.best_epoch == epochs)
        row = evaluate(model, splits.test, n=config["test_windows"])
        return {**row, "best_is_last": best_is_last, "epochs": float(epochs)}

    y_val = splits.val.get(splits.val.spread(config["val_windows"]))[1]
    cfg = {**config, "search": {**config["search"], "arms": list(arms)}}
    return run_arms(cfg, seed, fit, test, reference=float(y_val.square().mean()))


def pooled_record(records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One arm's tuning over its configurations (configuration -> the engine's record).

    ``val`` and ``reference`` are the means over configurations (None when any is None: a
    configuration whose every trial diverged, or one without a reference); ``chosen`` maps
    each configuration to its chosen parameters; ``trials``, ``grid_trials`` and
    ``extended`` are sums; ``on_edge`` holds when any choice is on its edge; ``late_share``
    (the convergence premise's reading) is the mean over the configurations whose chosen run
    gave one, absent when none did; ``placebo_of`` is kept when every configuration ran the
    placebo; ``configs`` holds the records.
    """
    if not records:
        raise ValueError("pooled_record needs at least one configuration's record.")
    rs = list(records.values())

    def mean(key: str) -> float | None:
        values = [r.get(key) for r in rs]
        return None if any(v is None for v in values) else float(np.mean(values))

    out: dict[str, Any] = {
        "chosen": {key: dict(r["chosen"]) for key, r in records.items()},
        "val": mean("val"),
        "reference": mean("reference"),
        "trials": sum(int(r["trials"]) for r in rs),
        "grid_trials": sum(int(r["grid_trials"]) for r in rs),
        "extended": sum(int(r["extended"]) for r in rs),
        "on_edge": any(bool(r["on_edge"]) for r in rs),
        "configs": {key: dict(r) for key, r in records.items()},
    }
    shares = [float(r["late_share"]) for r in rs if r.get("late_share") is not None]
    if shares:
        out["late_share"] = float(np.mean(shares))
    placebo = {r.get("placebo_of") for r in rs}
    if len(placebo) == 1 and None not in placebo:
        out["placebo_of"] = placebo.pop()
    return out


def pool(
    measurements: Mapping[str, Measurement], metrics: Sequence[str] | None = None
) -> Measurement:
    """Pool per-configuration measurements (configuration -> what ``run_arms`` returned).

    Args:
        measurements: in the order the configurations ran.
        metrics: the row metrics to average where an arm's every row holds them as numbers
            (default: every such metric of the arm's first row).

    Returns:
        ``{"table", "tuning", "diverged"}`` keyed by arm.
    """
    rows: dict[str, list[Mapping[str, Any]]] = {}
    records: dict[str, dict[str, Mapping[str, Any]]] = {}
    diverged: dict[str, Any] = {}
    for key, m in measurements.items():
        for arm, row in m["table"].items():
            rows.setdefault(arm, []).append(row)
        for arm, record in (m.get("tuning") or {}).items():
            records.setdefault(arm, {})[key] = record
        diverged.update(m.get("diverged") or {})

    def numeric(rs: list[Mapping[str, Any]], k: str) -> bool:
        return all(
            isinstance(r.get(k), int | float) and not isinstance(r.get(k), bool) for r in rs
        )

    table = {
        arm: {
            k: float(np.mean([r[k] for r in rs]))
            for k in (rs[0] if metrics is None else metrics)
            if numeric(rs, k)
        }
        for arm, rs in rows.items()
    }
    tuning = {arm: pooled_record(rs) for arm, rs in records.items()}
    return {"table": table, "tuning": tuning, "diverged": diverged}
