"""claims.pool: forecasting arms through the engine, and the late share pooled."""

from __future__ import annotations

from dataclasses import replace

import pytest

from normlab.claims.pool import forecast_arms, pool, pooled_record
from normlab.data.series import named_series, split_windows
from normlab.training.fit import late_share
from normlab.training.forecast import ForecastTrainConfig, build_forecaster, train_forecaster


def _record(late_share=None):
    record = {"chosen": {"lr": 1e-3}, "val": 0.5, "reference": 1.0, "trials": 2}
    record |= {"grid_trials": 2, "extended": 0, "on_edge": False}
    return record if late_share is None else {**record, "late_share": late_share}


def test_late_share_is_the_mean_of_the_configurations_that_gave_one():
    assert pooled_record({"a": _record(0.1), "b": _record(0.3)})["late_share"] == 0.2
    assert pooled_record({"a": _record(0.1), "b": _record()})["late_share"] == 0.1
    assert "late_share" not in pooled_record({"a": _record(), "b": _record()})


def test_forecast_arms_runs_the_engine_with_the_validation_curve():
    series = named_series("cyclic", length=900, seed=0)
    splits = split_windows(series, lookback=48, horizon=24)
    config = {"val_windows": 32, "test_windows": 32}
    config["search"] = {"arms": [], "space": {"lr": [1e-3, 1e-2]}, "extend": 0}
    fc = ForecastTrainConfig(epochs=9, patience=9, batches_per_epoch=2, val_windows=32)

    def train(method, lr, seed):
        model = build_forecaster(method, "linear", splits, seed=seed)
        return model, train_forecaster(model, splits, replace(fc, lr=lr), seed=seed), None

    kept = {}
    m = forecast_arms(config, 0, splits, ["s/revin"], train, kept)
    row, record = m["table"]["s/revin"], m["tuning"]["s/revin"]
    assert set(row) >= {"mse", "mae", "best_is_last", "epochs", "lr"} and row["epochs"] == 9
    assert record["reference"] > 0 and "late_share" in record
    assert set(kept) == {"s/revin"}
    # the curve is the best validation MSE so far: an early-stopped run ends flat
    vals = [h["val"] for h in kept["s/revin"][1].history]
    best = [min(vals[: i + 1]) for i in range(len(vals))]
    assert record["late_share"] == pytest.approx(late_share(best))
    assert pool({"c": m})["tuning"]["s/revin"]["late_share"] == pytest.approx(record["late_share"])
