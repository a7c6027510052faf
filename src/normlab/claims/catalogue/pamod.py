"""Claim ``pamod``: periodic phase-amplitude modulation beats time-aware RevIN on cyclic shifts.

Each series is windowed by the Time-Series-Library protocol and each backbone trained by
the same trainer with RevIN, RevIN with calendar features (the time-aware baseline) and
PAMod (RevIN plus learned day and week tables indexed by the absolute time step); on the
real demand series also with SAN, FAN and Dish-TS (the abstract's comparison). The engine
tunes each arm's lr per configuration on validation; rows, tuning and divergences are
pooled per series and method (:mod:`normlab.claims.pool`). The record's ``setup`` says
the rest.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

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
from normlab.training import forecast

__all__ = ["CLAIM", "run"]

#: PAMod may be this much worse (relative test MSE) than RevIN on the control and still pass.
_CONTROL_MARGIN = 0.02
_METHODS = ("revin", "revin-calendar", "pamod")
#: The abstract's comparison, run on the primary (demand) series only.
_COMPARISON = ("san", "fan", "dishts")
#: Table rows are keyed by what a series stands for, so every scale has the same effects.
_ROLES = {"vic_elec_hourly": "demand", "vic_elec": "demand", "epf_prices": "prices"}
_ROLES |= {"epf_fr_be": "prices", "cyclic": "synthetic", "cyclic_control": "control"}
#: A diverged arm forecasts the training mean: test MSE 1 on the standardized scale.
_IF_DIVERGED = {"mse": 1.0}


def _trainer(fc: Any, backbone: str, splits: Any, periods: Sequence[int]) -> Any:
    """``(method, lr, seed) -> (model, result, None)`` for :func:`forecast_arms`."""

    def train(method: str, lr: float, s: int) -> tuple[Any, Any, None]:
        model = forecast.build_forecaster(method, backbone, splits, seed=s, periods=periods)
        return model, forecast.train_forecaster(model, splits, replace(fc, lr=lr), seed=s), None

    return train


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Every method on every series x horizon x backbone, its lr tuned on validation by the
    engine (:func:`normlab.claims.pool.forecast_arms`); rows, tuning and divergences pooled
    per series and method."""
    start = time.perf_counter()
    seed_everything(seed)
    measurements, per_config, tables = {}, {}, {}
    keys = ("epochs", "batch", "patience", "batches_per_epoch", "val_windows")
    fc = forecast.ForecastTrainConfig(lr=0.0, **{k: config[k] for k in keys})
    for group in ("cyclic", "control"):
        for name in config[group]:
            series = named_series(name, length=config["length"], seed=seed)
            role = _ROLES[name]
            arms = [f"{role}/{m}" for m in (*_METHODS, *(_COMPARISON if role == "demand" else ()))]
            for horizon in config["horizons"]:
                splits = split_windows(series, lookback=int(config["lookback"]), horizon=horizon)
                for backbone in config["backbones"]:
                    train = _trainer(fc, backbone, splits, series.periods)
                    key, kept = f"{name}/H{horizon}/{backbone}", {}
                    m = measurements[key] = forecast_arms(config, seed, splits, arms, train, kept)
                    per_config[key] = {"group": group}
                    per_config[key] |= {a.split("/")[1]: row for a, row in m["table"].items()}
                    if f"{role}/pamod" not in kept:  # the A/A placebo trained a baseline there
                        continue
                    norm = kept[f"{role}/pamod"][0].norm  # the longest period's tables, channel 0
                    a, ph = (p[-1][:, 0].detach() for p in (norm.amplitude, norm.phase))
                    tables[key] = {"amplitude": a.exp().tolist(), "phase": ph.tolist()}
    extra = {"per_config": per_config, "tables": tables, "seconds": time.perf_counter() - start}
    return {**pool(measurements, ("mse", "mae")), **extra}


def _figure(measurements: Sequence[Mapping[str, Any]]) -> Any:
    """Relative gain per configuration (left) and a learned weekly phase table (right)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    keys = list(measurements[0]["per_config"])
    for m in measurements:
        gains = [1 - r["pamod"]["mse"] / r["revin"]["mse"] for r in m["per_config"].values()]
        left.scatter(range(len(gains)), gains, s=15)
    left.axhline(0, color="grey", lw=0.8)
    left.axhline(-_CONTROL_MARGIN, color="grey", ls=":", lw=0.8)
    left.set_xticks(range(len(keys)), keys, rotation=60, ha="right", fontsize=6)
    left.set_ylabel("(MSE_revin - MSE_pamod) / MSE_revin")
    for what in ("phase", "amplitude"):
        right.plot(measurements[0]["tables"][keys[0]][what], label=what)
    right.set(xlabel="position in the longest period", title=keys[0])
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


_GAIN = Margin(
    math.log10(1.02),
    "normlab's choice: 2% lower test MSE, the size of gains forecasting papers report as "
    "improvements",
)
_CONTROL = Margin(
    math.log10(1 + _CONTROL_MARGIN),
    "normlab's choice: within 2% of RevIN where there is no cycle to learn",
)
_KW = {"direction": "less", "margin": _GAIN, "unit": "log10 MSE", "if_diverged": _IF_DIVERGED}


def _effect(series: str, baseline: str, **kw: Any) -> Effect:
    what = f"log10(PAMod / {baseline} test MSE) on {series} (mean over horizons x backbones)"
    arms = (f"{series}/pamod", f"{series}/{baseline}")
    return difference(f"{series}_vs_{baseline}", what, *arms, "mse", log10=True, **{**_KW, **kw})


def _config(seeds: int, lrs: list[float], extend: int, **kw: Any) -> dict[str, Any]:
    common = {"lookback": 96, "batch": 32, "patience": 2, "control": ["cyclic_control"]}
    search = {"arms": [*_METHODS, *_COMPARISON], "space": {"lr": lrs}, "extend": extend}
    cyclic = ["cyclic", "vic_elec_hourly", "epf_prices"]
    return {**common, "seeds": seeds, "cyclic": cyclic, "horizons": [96], **kw, "search": search}


_SMOKE = {"length": 1500, "backbones": ["linear"], "epochs": 2, "batches_per_epoch": 8}
_QUICK = {"length": 8000, "backbones": ["linear", "mlp"], "epochs": 24, "patience": 4}
_QUICK |= {"batches_per_epoch": 7, "val_windows": 256, "test_windows": 1024}
_FULL = {"cyclic": ["cyclic", "vic_elec", "epf_fr_be"], "length": None, "epochs": 10}
_FULL |= {"horizons": [96, 192, 336, 720], "backbones": ["linear", "dlinear", "mlp", "patch"]}
_NONE = dict.fromkeys(("batches_per_epoch", "val_windows", "test_windows"))
_CONFIGS: dict[str, dict[str, Any]] = {
    "smoke": _config(1, [1e-3], 0, **_SMOKE, val_windows=64, test_windows=128),
    # three values (84-step runs chose 9e-4 to 3.3e-2) and two edge extensions
    "quick": _config(6, [1e-3, 3e-3, 1e-2], 2, **_QUICK),
    "full": _config(5, [3e-4, 1e-3, 3e-3], 1, **_FULL, patience=3, **_NONE),
}


CLAIM = register_claim(
    Claim(
        id="pamod",
        paper=paper("pamod"),
        quote=(
            "Extensive experiments on twelve real-world benchmarks demonstrate that PAMod "
            "achieves state-of-the-art performance with fewer computational resources."
        ),
        hypothesis=(
            "Learned periodic phase-amplitude modulation (PAMod) lowers test MSE relative to "
            "RevIN with calendar features on real demand with cyclical mean/variance shifts, "
            "beats SAN, FAN and Dish-TS there, and is no worse without cyclic shifts."
        ),
        primary=_effect("demand", "revin-calendar"),
        premises=(
            Premise(
                "calendar_helps_revin",
                "log10(RevIN + calendar features / time-blind RevIN test MSE) on demand: "
                "the cyclic structure a time-blind normalizer misses",
                lambda m: math.log10(
                    cell(m, "demand/revin-calendar", "mse") / cell(m, "demand/revin", "mse")
                ),
                direction="less",
                margin=Margin(0.0, "normlab's choice: any gain shows a usable cycle"),
                unit="log10 MSE",
                if_diverged=_IF_DIVERGED,
            ),
        ),
        secondary=(
            _effect("demand", "revin"),
            Effect(
                "demand_vs_every_comparison",
                "log10(PAMod / each of SAN, FAN, Dish-TS test MSE) on demand (intersection-union)",
                None,
                baseline="demand/san, demand/fan, demand/dishts",
                method="demand/pamod",
                parts=tuple(_effect("demand", b) for b in _COMPARISON),
                **_KW,
            ),
            _effect("prices", "revin"),
            _effect("prices", "revin-calendar"),
            _effect("synthetic", "revin"),
            _effect("synthetic", "revin-calendar"),
            _effect("control", "revin", direction="no_greater", margin=_CONTROL),
        ),
        free_settings=(
            FreeSetting.scaled("epochs", "normlab's choice: the training budget"),
            FreeSetting.scaled("lookback", "normlab's choice: TSLib's convention L = 96"),
            FreeSetting("horizons", [48], [192], "normlab's choice: TSLib's shortest, 96"),
            FreeSetting(
                "backbones", ["mlp"], ["linear", "dlinear", "mlp"], "normlab's choice: cheap ones"
            ),
            FreeSetting(
                "cyclic",
                ["vic_elec_hourly"],
                ["vic_elec_hourly", "epf_prices"],
                "normlab's choice: the cyclic series (the primary reads the demand one only)",
            ),
            FreeSetting("control", [], [], "normlab's choice: the no-shift control series"),
            FreeSetting.scaled("batch", "normlab's choice: windows per Adam step"),
            FreeSetting.scaled("patience", "normlab's choice: early stopping's patience"),
            FreeSetting("length", 4000, 16000, "normlab's choice: steps of each series"),
            FreeSetting("batches_per_epoch", 4, 14, "normlab's choice: steps between validations"),
            FreeSetting("val_windows", 128, 512, "normlab's choice: validation windows"),
            FreeSetting("test_windows", 512, 2048, "normlab's choice: test windows"),
        ),
        # both epochs neighbours (3, 12) turned the quick verdict (inconclusive) supported
        decisive="epochs",
        headline=(
            "state of the art on twelve real-world benchmarks with fewer computational "
            "resources (the abstract gives no single number)"
        ),
        configs=_CONFIGS,
        run=run,
        setup=(
            "L=96, H=96 (quick); Linear and MLP; synthetic day/week-shifted series (the week is "
            "not visible in a window), hourly vic_elec and EPF prices (first 8,000 steps); "
            "control without cyclic shifts; RevIN, RevIN + Fourier calendar features (day, week; "
            "3 harmonics), PAMod, and SAN / FAN / Dish-TS on demand; up to 24 epochs of 7 batches "
            "of 32, early stopping (patience 4); Adam lr tuned per method over {1e-3, 3e-3, 1e-2} "
            "(quick; full: {3e-4, 1e-3, 3e-3}), +2 edge steps at quick, on validation MSE."
        ),
        scale_note="the primary is the real demand series; quick validates every 7 batches, "
        "at most 168 steps (budget); full scale adds horizons, backbones and whole epochs.",
        figure=_figure,
        caption=(
            "Left: PAMod's relative test-MSE gain over RevIN per configuration, one dot per "
            "seed; above 0 is a gain, the dotted line is the control's tolerance. Right: the "
            "learned weekly phase and amplitude tables of the first configuration."
        ),
    )
)
