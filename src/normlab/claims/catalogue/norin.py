"""Claim ``norin``: NoRIN's shape must be chosen outside gradient training, and then it helps.

Per seed and per configuration (series x horizon x backbone), with the Time-Series-Library
protocol (L = 96, 70/10/20 split, standardized scale):

* joint: NoRIN with ``(delta, epsilon)`` trained by gradient with the backbone from
  ``delta = 1, epsilon = 0``; the per-epoch ``delta`` is recorded (the degeneration problem:
  it drifts toward the linear limit ``delta -> infinity``).
* decoupled: Slifker-Shapiro initialisation on the training windows (falling back to the
  linear end, ``delta = 30``, when they are not S_U), then Optuna TPE over
  ``log delta in [log 0.3, log 30]``, ``epsilon in [-3, 3]``; each trial trains the
  backbone with the shape fixed and is scored by validation MSE; the selected trial's test
  MSE is NoRIN's.
* baselines RevIN, Dish-TS, SAN and FAN, trained by the same trainer.

Effects (positive supports): (a) ``log(delta_final / delta_init)`` of the joint run,
averaged over configurations; (b) ``log(10 / delta*)`` averaged over configurations, i.e.
BO-selected ``delta*`` below 10, where the moment-matched map still bends a 3-sigma value
by more than 1% (at ``delta = 10, epsilon = 0`` it maps 3 to 2.96; the linear limit maps it
to 3); (c) the mean relative test-MSE gain of NoRIN over RevIN,
``(MSE_revin - MSE_norin) / MSE_revin``, over configurations (paired by configuration; the
sign fraction and, with >= 6 configurations, a Wilcoxon signed-rank p-value are reported).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from normlab.claims.common import seed_everything
from normlab.claims.core import Claim, Effect, register_claim
from normlab.data.series import Splits, named_series, split_windows
from normlab.models.forecast_train import Forecaster, TrainConfig, fit_and_test
from normlab.models.norin_tuning import tune_norin
from normlab.papers import paper

__all__ = ["CLAIM", "DELTA_LINEAR", "run"]

#: delta* below this counts as far from the linear limit (see the module docstring).
DELTA_LINEAR = 10.0
BASELINES = ("revin", "dish-ts", "san", "fan")

_COMMON = {"lookback": 96, "delta_init": 1.0, "batch": 32, "lr": 1e-3, "patience": 2}
CONFIGS: dict[str, dict[str, Any]] = {
    "smoke": {
        **_COMMON,
        "seeds": 1,
        "series": ["heavy_tailed"],
        "length": 1500,
        "horizons": [96],
        "backbones": ["linear"],
        "trials": 2,
        "epochs": 2,
        "batches_per_epoch": 6,
        "pretrain_epochs": 1,
        "val_windows": 64,
        "test_windows": 128,
        "fit_windows": 256,
    },
    "quick": {
        **_COMMON,
        "seeds": 3,
        "series": ["epf_prices", "heavy_tailed", "vic_elec_hourly"],
        "length": 8000,
        "horizons": [96],
        "backbones": ["linear", "mlp"],
        "trials": 6,
        "epochs": 6,
        "batches_per_epoch": 30,
        "pretrain_epochs": 2,
        "val_windows": 256,
        "test_windows": 1024,
        "fit_windows": 2000,
    },
    "full": {
        **_COMMON,
        "seeds": 3,
        "series": ["vic_elec", "epf_fr_be", "heavy_tailed"],
        "length": None,
        "horizons": [96, 192, 336, 720],
        "backbones": ["linear", "dlinear", "mlp", "patch"],
        "trials": 25,
        "epochs": 10,
        "patience": 3,
        "batches_per_epoch": None,
        "pretrain_epochs": 3,
        "val_windows": None,
        "test_windows": None,
        "fit_windows": 5000,
    },
}


def _train_config(config: Mapping[str, Any], *, joint: bool = False) -> TrainConfig:
    return TrainConfig(
        epochs=int(config["epochs"]),
        batch=int(config["batch"]),
        lr=float(config["lr"]),
        # The joint run trains every epoch so its delta trajectory is complete.
        patience=int(config["epochs"]) if joint else int(config["patience"]),
        batches_per_epoch=config["batches_per_epoch"],
        val_windows=config["val_windows"],
        pretrain_epochs=int(config["pretrain_epochs"]),
    )


def _one_config(
    splits: Splits,
    backbone: str,
    config: Mapping[str, Any],
    seed: int,
    periods: Sequence[int],
) -> dict[str, Any]:
    plain, joint = _train_config(config), _train_config(config, joint=True)
    n_test = config["test_windows"]
    rows: dict[str, dict[str, float]] = {}
    for name in BASELINES:
        _, _, rows[name] = fit_and_test(
            name, backbone, splits, plain, seed=seed, periods=periods, test_windows=n_test
        )
    trajectory: list[float] = []

    def record(epoch: int, model: Forecaster) -> None:
        trajectory.append(float(model.norm.delta.detach().mean()))  # type: ignore[union-attr]

    _, _, rows["norin-joint"] = fit_and_test(
        "norin",
        backbone,
        splits,
        joint,
        seed=seed,
        test_windows=n_test,
        on_epoch=record,
        delta=float(config["delta_init"]),
        epsilon=0.0,
        learn_shape=True,
    )
    tuned = tune_norin(
        backbone,
        splits,
        plain,
        n_trials=int(config["trials"]),
        seed=seed,
        fit_windows=config["fit_windows"],
        test_windows=n_test,
    )
    rows["norin"] = tuned.test
    return {
        "rows": rows,
        "trajectory": trajectory,
        "search": tuned.search.to_dict(),
        "fit": tuned.fit.to_dict(),
    }


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Measure the three NoRIN effects on every configuration, for one seed."""
    start = time.perf_counter()
    seed_everything(seed)
    per_config: dict[str, dict[str, dict[str, float]]] = {}
    trajectories: dict[str, list[float]] = {}
    searches: dict[str, dict[str, Any]] = {}
    fits: dict[str, dict[str, Any]] = {}
    for name in config["series"]:
        series = named_series(name, length=config["length"], seed=seed)
        for horizon in config["horizons"]:
            splits = split_windows(series, lookback=int(config["lookback"]), horizon=horizon)
            for backbone in config["backbones"]:
                key = f"{name}/H{horizon}/{backbone}"
                out = _one_config(splits, backbone, config, seed, series.periods)
                per_config[key] = out["rows"]
                trajectories[key] = out["trajectory"]
                searches[key] = out["search"]
                fits[f"{name}/H{horizon}"] = out["fit"]
    methods = (*BASELINES, "norin", "norin-joint")
    table = {
        m: {
            metric: float(np.mean([rows[m][metric] for rows in per_config.values()]))
            for metric in ("mse", "mae")
        }
        for m in methods
    }
    return {
        "table": table,
        "per_config": per_config,
        "delta_trajectory": trajectories,
        "bo": searches,
        "slifker_shapiro": fits,
        "delta_init": float(config["delta_init"]),
        "paired": _paired(per_config),
        "seconds": time.perf_counter() - start,
    }


def _paired(per_config: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict[str, float]:
    """NoRIN vs RevIN paired by configuration: wins, sign fraction, Wilcoxon p-value."""
    revin = np.array([rows["revin"]["mse"] for rows in per_config.values()])
    norin = np.array([rows["norin"]["mse"] for rows in per_config.values()])
    out = {"n": float(len(revin)), "wins": float((norin < revin).sum())}
    out["sign_fraction"] = out["wins"] / max(len(revin), 1)
    out["wilcoxon_p"] = math.nan
    if len(revin) >= 6 and np.any(revin != norin):
        from scipy.stats import wilcoxon

        out["wilcoxon_p"] = float(wilcoxon(norin, revin, alternative="less").pvalue)
    return out


def _drift(m: Mapping[str, Any]) -> float:
    return float(np.mean([math.log(t[-1] / t[0]) for t in m["delta_trajectory"].values()]))


def _far(m: Mapping[str, Any]) -> float:
    return float(np.mean([math.log(DELTA_LINEAR / s["delta"]) for s in m["bo"].values()]))


def _gain(m: Mapping[str, Any]) -> float:
    rows = m["per_config"].values()
    return float(
        np.mean([(r["revin"]["mse"] - r["norin"]["mse"]) / r["revin"]["mse"] for r in rows])
    )


def figure(measurements: Sequence[Mapping[str, Any]]) -> Any:
    """Joint-training delta trajectories (left) and BO trials with the selection (right)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for m in measurements:
        for key, traj in m["delta_trajectory"].items():
            left.plot(
                range(len(traj)), traj, alpha=0.6, label=key if m is measurements[0] else None
            )
        for search in m["bo"].values():
            trials = np.array(search["trials"])
            finite = np.isfinite(trials[:, 2]) & (trials[:, 2] < 10 * trials[:, 2].min())
            right.scatter(trials[finite, 0], trials[finite, 2], s=10, alpha=0.5)
            right.scatter([search["delta"]], [search["value"]], marker="*", s=80, color="k")
    left.set(xlabel="epoch", ylabel="delta (joint gradient training)")
    left.legend(fontsize=6)
    right.axvline(DELTA_LINEAR, ls="--", color="grey")
    right.set(xscale="log", xlabel="delta (BO trials; * selected)", ylabel="validation MSE")
    fig.tight_layout()
    return fig


CLAIM = register_claim(
    Claim(
        id="norin",
        paper=paper("norin"),
        hypothesis=(
            "Gradient training of NoRIN's shape drifts to the linear (RevIN) limit, while "
            "shape chosen by Slifker-Shapiro + Bayesian optimisation stays far from it and "
            "gives test MSE no worse than RevIN."
        ),
        metrics=("mse", "mae"),
        effects=(
            Effect(
                "delta_drift", "joint training increases delta: mean log(delta_T/delta_0)", _drift
            ),
            Effect(
                "far_from_linear",
                f"BO-selected delta* < {DELTA_LINEAR:g}: mean log(10/delta*)",
                _far,
            ),
            Effect("mse_vs_revin", "NoRIN (BO) test MSE below RevIN: mean relative gain", _gain),
        ),
        headline=(
            "90 configurations (6 backbones x 5 datasets x 3 horizons): (delta*, epsilon*) far "
            "from the linear limit and backbone-dependent; NoRIN beats RevIN, SAN, Dish-TS in "
            "a paired Wilcoxon test (the abstract gives no single number)"
        ),
        configs=CONFIGS,
        run=run,
        setup=(
            "L=96, H=96 (quick); Linear and MLP backbones; EPF FR/BE prices, a heavy-tailed "
            "synthetic series and hourly vic_elec (first 8,000 steps); 6 Optuna trials."
        ),
        key=("mse", "norin", "revin"),
        figure=figure,
    )
)
