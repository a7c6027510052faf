"""Claim ``norin``: NoRIN's shape, chosen outside gradient training, lies far from the linear
limit and depends on the backbone. Per seed and configuration (series x backbone) the engine
tunes every arm's lr (:func:`normlab.claims.pool.forecast_arms`, pooled over backbones), then
NoRIN's shape is searched at its lr (:func:`normlab.training.norin.tune_norin`)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from normlab.claims.common import seed_everything
from normlab.claims.core import (
    Claim,
    Effect,
    FreeSetting,
    Margin,
    Premise,
    cell,
    difference,
    register_claim,
)
from normlab.claims.pool import forecast_arms, pool
from normlab.data.series import named_series, split_windows
from normlab.papers import paper
from normlab.training import norin as study

__all__ = ["CLAIM", "run"]

#: delta* below the cut is far from the linear limit (declared before any judged run): the
#: S_U law NoRIN maps to a normal has excess kurtosis 0.04 at delta = 10 (0.53 at 3), a
#: tenth of the sampling error of one 96-step window's kurtosis (sqrt(24/96) = 0.5). A shape
#: matters where its trials' validation MSE differs by 2% (log10 1.02).
_CUTS = {"cut": 10.0, "delta_range": (0.3, 30.0), "matters": math.log10(1.02)}
#: Share of the search's prior (log-uniform on [0.3, 30]) below the cut: a random pick's.
_PRIOR_BELOW = math.log(10.0 / 0.3) / math.log(30.0 / 0.3)
_BASELINES = ("revin", "dish-ts", "san")
_ARMS = (*_BASELINES, "norin", "norin-joint")
#: A diverged arm forecasts the training mean (test MSE 1, standardized); no drift of shape.
_IF_DIVERGED = {"mse": 1.0, "drift_fraction": 0.0}


def _at(arm: str, metric: str) -> Any:
    return lambda m: cell(m, arm, metric)


def _config(seeds: int, lrs: list[float], extend: int, **kw: Any) -> dict[str, Any]:
    common = {"lookback": 96, "horizon": 96, "delta_init": 1.0, "batch": 32, "patience": 3}
    search = {"arms": list(_ARMS), "space": {"lr": lrs}, "extend": extend}
    series = {"epf_prices": ["linear", "mlp"], "heavy_tailed": ["linear"]}
    return {**common, "seeds": seeds, "series": series, **kw, "search": search}


_SMOKE = {"length": 1500, "trials": 1, "epochs": 2, "batches_per_epoch": 4, "pretrain_epochs": 1}
_SMOKE |= {"val_windows": 64, "test_windows": 128, "fit_windows": 256}
_QUICK = {"length": 4000, "trials": 16, "epochs": 8, "batches_per_epoch": 20}
_QUICK |= {"pretrain_epochs": 2, "val_windows": 256, "test_windows": 1024, "fit_windows": 2000}
_FULL = {"length": None, "trials": 25, "epochs": 30, "batches_per_epoch": None}
_FULL |= {"pretrain_epochs": 3, "val_windows": None, "test_windows": None, "fit_windows": 5000}
_FULL["series"] = {s: ["linear", "mlp"] for s in ("epf_prices", "vic_elec_hourly", "heavy_tailed")}
_CONFIGS: dict[str, dict[str, Any]] = {
    "smoke": _config(1, [3e-3], 0, **_SMOKE),
    "quick": _config(5, [1e-3, 3e-3], 1, **_QUICK),  # two values + one edge step (budget)
    "full": _config(5, [1e-3, 3e-3, 1e-2], 1, **_FULL),
}


def _one_config(name, splits, backbone, config, seed, periods) -> dict[str, Any]:
    """The engine over every arm (``<series>/<arm>``) at one configuration, then NoRIN's
    shape search at the lr chosen for it (its row becomes the search's test)."""
    kept, train = {}, study.arm_trainer(backbone, splits, config, periods)
    m = forecast_arms(config, seed, splits, [f"{name}/{a}" for a in _ARMS], train, kept)
    rows = {arm.split("/", 1)[1]: row for arm, row in m["table"].items()}
    joint, trajectory = rows["norin-joint"], kept[f"{name}/norin-joint"][2]
    steps = joint["epochs"] * (config["batches_per_epoch"] or len(splits.train) // config["batch"])
    joint["drift_fraction"] = study.drift_fraction(trajectory, joint["lr"], steps)
    lr = rows["norin"]["lr"]
    sizes = {k: config[k] for k in ("fit_windows", "test_windows", "val_windows")}
    sizes |= {"n_trials": int(config["trials"]), "delta_range": _CUTS["delta_range"]}
    fc = study.study_train_config(config, lr)
    search, spread = study.search_shape(name, backbone, splits, fc, seed=seed, **sizes)
    rows["norin"] = {**search.test, "lr": lr, "best_is_last": rows["norin"]["best_is_last"]}
    m["table"] = {f"{name}/{arm}": row for arm, row in rows.items()}
    found = {"search": search.search.to_dict(), "fit": search.fit.to_dict(), "val_spread": spread}
    return {**m, "rows": rows, "trajectory": trajectory, **found}


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Every arm and NoRIN's shape search on every configuration, for one seed; rows, tuning
    records and divergences pooled per series and arm (mean over backbones)."""
    start = time.perf_counter()
    seed_everything(seed)
    out: dict[str, dict[str, Any]] = {}
    for name, backbones in config["series"].items():
        series = named_series(name, length=config["length"], seed=seed)
        splits = split_windows(series, lookback=config["lookback"], horizon=config["horizon"])
        for b in backbones:
            out[f"{name}/{b}"] = _one_config(name, splits, b, config, seed, series.periods)
    pooled = pool(out, ("mse", "mae", "best_is_last", "drift_fraction"))
    for name, backbones in config["series"].items():
        keys = [f"{name}/{b}" for b in backbones]
        deltas = [out[k]["search"]["delta"] for k in keys]
        rows = study.selection_rows(deltas, [out[k]["val_spread"] for k in keys], **_CUTS)
        pooled["table"] |= {f"{name}/{row}": values for row, values in rows.items()}
    extra = {"per_config": "rows", "delta_trajectory": "trajectory", "bo": "search"}
    extra |= {"slifker_shapiro": "fit"}
    curves = {key: {k: v[what] for k, v in out.items()} for key, what in extra.items()}
    return {**pooled, **curves, "seconds": time.perf_counter() - start}


def _figure(measurements: Sequence[Mapping[str, Any]]) -> Any:
    """Joint-training delta trajectories (left) and BO trials with the selection (right)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for m in measurements:
        for traj in m["delta_trajectory"].values():
            left.plot(traj, alpha=0.6)
        for search in m["bo"].values():
            trials = np.array(search["trials"])
            finite = np.isfinite(trials[:, 2]) & (trials[:, 2] < 10 * trials[:, 2].min())
            right.scatter(trials[finite, 0], trials[finite, 2], s=10, alpha=0.5)
            right.scatter([search["delta"]], [search["value"]], marker="*", s=80, color="k")
    left.set(xlabel="epoch", ylabel="delta (joint gradient training)")
    right.axvline(_CUTS["cut"], ls="--", color="grey")
    right.set(xscale="log", xlabel="delta (BO trials; * selected)", ylabel="validation MSE")
    fig.tight_layout()
    return fig


_MSE = Margin(math.log10(1.02), "normlab's choice: 2% lower test MSE, as forecasting papers give")
_DECADES = Margin(0.1, "normlab's choice: a sixth of the prior's sd of log10 delta (0.58)")
_SHARE = Margin(0.1, "normlab's choice: one configuration in ten beyond a random pick's share")
_EPF = "epf_prices"
_GAP = "|log10 delta*_linear - log10 delta*_mlp| on EPF prices minus the placebo's expected "
_GAP += "gap between two random picks (2/3 decade)"
_LOG = {"direction": "less", "margin": _MSE, "unit": "log10 MSE", "if_diverged": _IF_DIVERGED}
#: Free settings halved and doubled (key: why), then those with a range (key: low, high, why).
_SCALED = {"epochs": "the budget", "lookback": "TSLib's L = 96"}
_SCALED |= {
    "trials": "the shape search's trials (the paper: 20-30)",
    "horizon": "TSLib's shortest, 96",
}
_SCALED |= {"delta_init": "joint start", "batch": "windows a step", "patience": "early stopping's"}
_SCALED |= {"pretrain_epochs": "SAN's first stage", "fit_windows": "fit's"}
_RANGED = {"length": (2000, 8000, "series steps (budget)")}
_RANGED["batches_per_epoch"] = (10, 40, "an epoch")
_RANGED["val_windows"] = (128, 512, "validation windows")
_RANGED["test_windows"] = (512, 2048, "test windows")
_FREE = [FreeSetting.scaled(k, f"normlab's choice: {why}") for k, why in _SCALED.items()]
_FREE += [FreeSetting(k, lo, hi, f"normlab's choice: {w}") for k, (lo, hi, w) in _RANGED.items()]
_MATTERS = "share of EPF configurations (backbones) in which the validation MSE of the shape "
_MATTERS += "trials that trained (finite, below the training mean's) differs by more than 2%"
_NOISE = "normlab's choice: else in most configurations no usable shape moves the validation "
_NOISE += "MSE by 2%: delta* is noise"
_GATED = (f"{_EPF}_far_from_linear", f"{_EPF}_backbone_dependence")
_MATTERS_KW = {"direction": "greater", "margin": Margin(0.5, _NOISE), "gates": _GATED}
_SHAPE = f"{_EPF}/shape"
_SHAPE_MATTERS = Premise("shape_matters", _MATTERS, _at(_SHAPE, "shape_matters"), **_MATTERS_KW)
_GAP_KW = {"margin": _DECADES, "unit": "decades"}
_JOINT = f"{_EPF}/norin-joint"
_DRIFT = "joint gradient training of the shape on EPF prices: log(delta_T / delta_0) as a "
_DRIFT += "fraction of lr x steps, the most Adam can move log delta in the run"
_QUARTER = Margin(0.25, "normlab's choice: a quarter of the largest possible move")
_DRIFT_KW = dict(direction="greater", margin=_QUARTER, method=_JOINT, if_diverged=_IF_DIVERGED)


def _placebo(series: str, name: str, what: str, metric: str, **kw: Any) -> Effect:
    """``series``'s selected shapes against the placebo's (random picks from the prior)."""
    arms = (f"{series}/selected", f"{series}/placebo", metric)
    return difference(f"{series}_{name}", what, *arms, direction="greater", **kw)


def _share(series: str, parts: str) -> Effect:
    what = f"share of {series} configurations ({parts}) whose delta* < {_CUTS['cut']:g}"
    what += f" minus a random pick's (log-uniform prior on [0.3, 30]: {_PRIOR_BELOW:.3f})"
    return _placebo(series, "far_from_linear", what, "below_linear", margin=_SHARE)


def _versus(series: str, baseline: str) -> Effect:
    what = f"log10(NoRIN / {baseline} test MSE) on {series}, mean over backbones, lr tuned"
    arms = (f"{series}/norin", f"{series}/{baseline}")
    return difference(f"{series}_vs_{baseline}", what, *arms, "mse", log10=True, **_LOG)


def _every(series: str) -> Effect:
    what = "log10(NoRIN / each of RevIN, Dish-TS, SAN test MSE) on EPF (intersection-union)"
    baseline = ", ".join(f"{series}/{b}" for b in _BASELINES)
    parts = tuple(_versus(series, b) for b in _BASELINES)
    arms = {"baseline": baseline, "method": f"{series}/norin", "parts": parts}
    return Effect(f"{series}_beats_every_baseline", what, None, **arms, **_LOG)


CLAIM = register_claim(
    Claim(
        id="norin",
        paper=paper("norin"),
        hypothesis=(
            "NoRIN's shape chosen outside gradient training (Bayesian optimisation of the "
            "validation MSE) lies far from the linear limit (delta* < 10) more often than a "
            "random "
            "pick from the search space, and differs by backbone, on real electricity prices."
        ),
        quote=(
            "decoupled shape optimization recovers $(δ^\\star,\\varepsilon^\\star)$ that sit "
            "systematically far from the linear limit, with values that vary in a "
            "backbone-dependent way"
        ),
        primary=_share(_EPF, "linear and MLP backbones"),
        secondary=(
            _placebo(_EPF, "backbone_dependence", _GAP, "backbone_gap", **_GAP_KW),
            _share("heavy_tailed", "positive control generated with delta = 0.6; linear"),
            Effect(f"{_EPF}_delta_drift", _DRIFT, _at(_JOINT, "drift_fraction"), **_DRIFT_KW),
            _every(_EPF),
            _versus("heavy_tailed", "revin"),
        ),
        premises=(_SHAPE_MATTERS,),
        free_settings=tuple(_FREE),
        decisive="trials",  # the search's budget decides how far from its start it gets
        headline=(
            "90 configurations (6 backbones x 5 datasets x 3 horizons): (delta*, epsilon*) far "
            "from the linear limit and backbone-dependent; NoRIN beats RevIN, SAN, Dish-TS in a "
            "paired Wilcoxon test (the abstract gives no single number)"
        ),
        configs=_CONFIGS,
        run=run,
        setup=(
            "L=96, H=96; EPF FR/BE prices (linear and MLP backbones) and a heavy-tailed synthetic "
            "control (linear), first 4,000 steps; RevIN, Dish-TS, SAN, NoRIN and joint NoRIN "
            "(from delta = 1), Adam lr tuned over {1e-3, 3e-3} +1 edge step on validation MSE, up "
            "to 8 epochs of 20 batches, early stopping (quick, 5 seeds); NoRIN's shape by Optuna "
            "TPE (16 trials, a sampler seed per backbone) at its lr, from the Slifker-Shapiro fit "
            "(EPF windows are S_B: its fallback, the linear end delta = 30)."
        ),
        scale_note=(
            "quick: two backbones on EPF, one on the control, 16 shape trials, a two-value lr "
            "grid (budget); FAN is not run (the abstract names RevIN, SAN, Dish-TS); full adds "
            "vic_elec, 30 epochs, lr 1e-2 and 25 trials."
        ),
        figure=_figure,
        caption=(
            "Left: delta during joint gradient training, one line per configuration; rising lines "
            "are the degeneration toward the linear limit. Right: BO trials' validation MSE "
            "against delta (stars: selected); the dashed line is delta = 10."
        ),
    )
)
