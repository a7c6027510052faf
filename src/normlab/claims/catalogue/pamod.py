"""Claim ``pamod``: periodic phase-amplitude modulation beats time-aware RevIN on cyclic shifts.

Per seed, each series is split and windowed by the Time-Series-Library protocol (L = 96);
each backbone is trained with RevIN, RevIN with calendar features
(:class:`~normlab.series.CalendarRevIN`, a learned additive Fourier term of the time of day
and week: the time-aware baseline) and PAMod (RevIN plus learned day and week tables
indexed by the absolute time step), by the same trainer; on the real demand series also
with SAN, FAN and Dish-TS (the abstract's comparison). Every method's Adam lr is tuned per
seed and configuration over the same grid on the validation split (early stopping on it
too); test MSE is read only for the chosen lr. A run whose loss turns non-finite scores
infinite validation MSE; an arm all of whose runs diverged is recorded under ``"diverged"``
and counts as forecasting the training mean (test MSE 1, standardized). Series with
cyclical mean/variance shifts: a synthetic one (day- and week-dependent mean and variance;
with L = 96 < 168 the weekly position is not visible in the window) and the real
``vic_elec`` demand (hourly) and EPF prices (hour-of-day and weekday phases). Control: the
same synthetic generator without cyclic shifts (random-walk level plus AR noise).

Primary: ``log10(MSE_pamod / MSE_revin-calendar)`` on the demand series (mean over
horizons x backbones): PAMod against a baseline that also knows the time. Premise: the
demand series has a cyclic structure a time-blind RevIN misses (calendar features lower
RevIN's test MSE). Secondary: against time-blind RevIN, against each of SAN / FAN /
Dish-TS (an intersection-union test), on prices and the synthetic series, and "no worse"
on the control (within 2% of RevIN).
"""

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
from normlab.claims.protocol import tune_arms
from normlab.data.series import named_series, split_windows
from normlab.papers import paper
from normlab.training.forecast import ForecastTrainConfig, fit_and_test

__all__ = ["CLAIM", "CONTROL_MARGIN", "IF_DIVERGED", "run"]

#: PAMod may be this much worse (relative test MSE) than RevIN on the control and still pass.
CONTROL_MARGIN = 0.02
METHODS = ("revin", "revin-calendar", "pamod")
#: The abstract's comparison, run on the primary (demand) series only.
COMPARISON = ("san", "fan", "dishts")
#: Table rows are keyed by what a series stands for, so every scale has the same effects.
ROLES = {
    "vic_elec_hourly": "demand",
    "vic_elec": "demand",
    "epf_prices": "prices",
    "epf_fr_be": "prices",
    "cyclic": "synthetic",
    "cyclic_control": "control",
}
#: A diverged arm forecasts the training mean: test MSE 1 on the standardized scale.
IF_DIVERGED = {"mse": 1.0}


_COMMON = {
    "lookback": 96,
    "batch": 32,
    "patience": 2,
    "control": ["cyclic_control"],
    "search": {"arms": [*METHODS, *COMPARISON], "space": {"lr": [3e-4, 1e-3, 3e-3]}},
}
CONFIGS: dict[str, dict[str, Any]] = {
    "smoke": {
        **_COMMON,
        "seeds": 1,
        "cyclic": ["cyclic", "vic_elec_hourly", "epf_prices"],
        "length": 1500,
        "horizons": [96],
        "backbones": ["linear"],
        "epochs": 2,
        "batches_per_epoch": 8,
        "search": {"arms": [*METHODS, *COMPARISON], "space": {"lr": [1e-3]}, "extend": 0},
        "val_windows": 64,
        "test_windows": 128,
    },
    "quick": {
        **_COMMON,
        "seeds": 6,
        "cyclic": ["cyclic", "vic_elec_hourly", "epf_prices"],
        "length": 8000,
        "horizons": [96],
        "backbones": ["linear", "mlp"],
        "epochs": 6,
        "patience": 3,
        "batches_per_epoch": 14,
        # Two values (the previous grid's choices were mostly 3e-3 and its extension 9e-3)
        # and one edge extension, which every quick search has.
        "search": {"arms": [*METHODS, *COMPARISON], "space": {"lr": [3e-3, 1e-2]}, "extend": 1},
        "val_windows": 256,
        "test_windows": 1024,
    },
    "full": {
        **_COMMON,
        "seeds": 5,
        "cyclic": ["cyclic", "vic_elec", "epf_fr_be"],
        "length": None,
        "horizons": [96, 192, 336, 720],
        "backbones": ["linear", "dlinear", "mlp", "patch"],
        "epochs": 10,
        "patience": 3,
        "batches_per_epoch": None,
        "val_windows": None,
        "test_windows": None,
    },
}


def run(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Train every method on every series x horizon x backbone, each method's lr tuned on
    the validation split, for one seed."""
    start = time.perf_counter()
    seed_everything(seed)
    groups = {"cyclic": list(config["cyclic"]), "control": list(config["control"])}
    per_config: dict[str, dict[str, Any]] = {}
    tables: dict[str, dict[str, list[float]]] = {}
    tuning: dict[str, Any] = {}
    diverged: dict[str, Any] = {}
    arms: dict[str, list[str]] = {}
    for group, names in groups.items():
        for name in names:
            series = named_series(name, length=config["length"], seed=seed)
            methods = [*METHODS, *(COMPARISON if ROLES[name] == "demand" else ())]
            arms[name] = methods
            for horizon in config["horizons"]:
                splits = split_windows(series, lookback=int(config["lookback"]), horizon=horizon)
                for backbone in config["backbones"]:
                    key = f"{name}/H{horizon}/{backbone}"

                    def evaluate(
                        method: str,
                        params: dict[str, Any],
                        backbone: str = backbone,
                        splits: Any = splits,
                        periods: Any = series.periods,
                    ) -> tuple[float, Any]:
                        train = ForecastTrainConfig(
                            epochs=int(config["epochs"]),
                            batch=int(config["batch"]),
                            lr=float(params["lr"]),
                            patience=int(config["patience"]),
                            batches_per_epoch=config["batches_per_epoch"],
                            val_windows=config["val_windows"],
                        )
                        model, result, test = fit_and_test(
                            method,
                            backbone,
                            splits,
                            train,
                            seed=seed,
                            periods=periods,
                            test_windows=config["test_windows"],
                        )
                        if result.diverged is not None:  # never chosen over a finite run
                            return math.inf, (model, test, result.diverged)
                        return result.val_mse, (model, test, None)

                    # trivial reference: the training mean (0, standardized) on validation
                    y_val = splits.val.get(splits.val.spread(config["val_windows"]))[1]
                    ref = float(y_val.square().mean())
                    tuned, records = tune_arms(config, evaluate, arms=methods, reference=ref)
                    rows: dict[str, Any] = {"group": group}
                    for method, t in tuned.items():
                        rows[method] = {**t.result[1], "lr": t.chosen["lr"]}
                        tuning[f"{key}/{method}"] = records[method]
                        if t.result[2] is not None:  # every lr diverged: {"step", "last"}
                            diverged[f"{ROLES[name]}/{method}"] = t.result[2]
                    per_config[key] = rows
                    norm: Any = tuned["pamod"].result[0].norm
                    tables[key] = {  # the longest period's learned tables, channel 0
                        "amplitude": norm.amplitude[-1][:, 0].detach().exp().tolist(),
                        "phase": norm.phase[-1][:, 0].detach().tolist(),
                    }
    table = {  # one row per (series, method): MSE/MAE averaged over horizons x backbones
        f"{ROLES[name]}/{method}": {
            metric: float(
                np.mean(
                    [r[method][metric] for k, r in per_config.items() if k.split("/")[0] == name]
                )
            )
            for metric in ("mse", "mae")
        }
        for name, methods in arms.items()
        for method in methods
    }
    return {
        "table": table,
        "per_config": per_config,
        "tables": tables,
        "tuning": tuning,
        "diverged": diverged,
        "seconds": time.perf_counter() - start,
    }


def _figure(measurements: Sequence[Mapping[str, Any]]) -> Any:
    """Relative gain per configuration (left) and a learned weekly phase table (right)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    keys = list(measurements[0]["per_config"])
    for m in measurements:
        gains = [
            (r["revin"]["mse"] - r["pamod"]["mse"]) / r["revin"]["mse"]
            for r in m["per_config"].values()
        ]
        left.scatter(range(len(gains)), gains, s=15)
    left.axhline(0, color="grey", lw=0.8)
    left.axhline(-CONTROL_MARGIN, color="grey", ls=":", lw=0.8)
    left.set_xticks(range(len(keys)), keys, rotation=60, ha="right", fontsize=6)
    left.set_ylabel("(MSE_revin - MSE_pamod) / MSE_revin")
    key = keys[0]
    right.plot(measurements[0]["tables"][key]["phase"], label="phase")
    right.plot(measurements[0]["tables"][key]["amplitude"], label="amplitude")
    right.set(xlabel="position in the longest period", title=key)
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


_GAIN = Margin(
    math.log10(1.02),
    "normlab's choice: 2% lower test MSE, the size of gains forecasting papers report as "
    "improvements",
)


def _effect(series: str, baseline: str) -> Effect:
    """``log10(MSE_pamod / MSE_baseline)`` on ``series`` (negative: PAMod better)."""
    return difference(
        f"{series}_vs_{baseline}",
        f"log10(PAMod / {baseline} test MSE) on {series} (mean over horizons x backbones)",
        f"{series}/pamod",
        f"{series}/{baseline}",
        "mse",
        direction="less",
        margin=_GAIN,
        unit="log10 MSE",
        log10=True,
        if_diverged=IF_DIVERGED,
    )


_COMPARISON_PARTS = tuple(_effect("demand", b) for b in COMPARISON)


CLAIM = register_claim(
    Claim(
        id="pamod",
        paper=paper("pamod"),
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
                if_diverged=IF_DIVERGED,
            ),
        ),
        secondary=(
            _effect("demand", "revin"),
            Effect(
                "demand_vs_every_comparison",
                "log10(PAMod / each of SAN, FAN, Dish-TS test MSE) on demand (intersection-union)",
                lambda m: max(p.fn(m) for p in _COMPARISON_PARTS),  # display only
                direction="less",
                margin=_GAIN,
                baseline="demand/san, demand/fan, demand/dishts",
                method="demand/pamod",
                unit="log10 MSE",
                parts=_COMPARISON_PARTS,
                if_diverged=IF_DIVERGED,
            ),
            _effect("prices", "revin"),
            _effect("prices", "revin-calendar"),
            _effect("synthetic", "revin"),
            _effect("synthetic", "revin-calendar"),
            difference(
                "control_no_worse",
                "log10(PAMod / RevIN test MSE) on the non-cyclic control series",
                "control/pamod",
                "control/revin",
                "mse",
                direction="no_greater",
                margin=Margin(
                    math.log10(1 + CONTROL_MARGIN),
                    "normlab's choice: within 2% of RevIN where there is no cycle to learn",
                ),
                unit="log10 MSE",
                log10=True,
                if_diverged=IF_DIVERGED,
            ),
        ),
        free_settings=(
            FreeSetting.scaled("epochs", "normlab's choice: the training budget"),
            FreeSetting.scaled("lookback", "normlab's choice: TSLib's convention L = 96"),
            FreeSetting("horizons", [48], [192], "normlab's choice: TSLib's shortest, 96"),
            FreeSetting(
                "backbones",
                ["mlp"],
                ["linear", "dlinear", "mlp"],
                "normlab's choice: two cheap backbones at quick",
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
            FreeSetting("batches_per_epoch", 7, 28, "normlab's choice: an epoch's length"),
            FreeSetting("val_windows", 128, 512, "normlab's choice: validation windows"),
            FreeSetting("test_windows", 512, 2048, "normlab's choice: test windows"),
        ),
        # both epochs neighbours (3, 12) turned the quick verdict (inconclusive) supported
        decisive="epochs",
        headline=(
            "state of the art on twelve real-world benchmarks with fewer computational "
            "resources (the abstract gives no single number)"
        ),
        configs=CONFIGS,
        run=run,
        setup=(
            "L=96, H=96 (quick); Linear and MLP; synthetic day/week-shifted series, hourly "
            "vic_elec and EPF prices (first 8,000 steps); control without cyclic shifts; "
            "RevIN, RevIN + Fourier calendar features (day, week; 3 harmonics), PAMod, and "
            "SAN / FAN / Dish-TS on demand; up to 6 epochs of 14 batches of 32 with early "
            "stopping (patience 3); Adam lr tuned per method over {3e-3, 1e-2} (quick, no "
            "edge extension; full: {3e-4, 1e-3, 3e-3} +1 edge step) on validation MSE."
        ),
        scale_note="the primary is the real demand series; quick is cut to 14 batches per "
        "epoch and a two-value lr grid without edge extension (budget); full scale adds "
        "horizons, backbones, whole epochs and the three-value grid.",
        figure=_figure,
        caption=(
            "Left: PAMod's relative test-MSE gain over RevIN per configuration, one dot per "
            "seed; above 0 is a gain, the dotted line is the control's tolerance. Right: the "
            "learned weekly phase and amplitude tables of the first configuration."
        ),
    )
)
