"""The forecasting trainer: divergence is an outcome, and the best epoch's weights return."""

from __future__ import annotations

import math

import torch

from normlab.data.series import named_series, split_windows
from normlab.training.forecast import ForecastTrainConfig, build_forecaster, train_forecaster


def _splits():
    return split_windows(named_series("cyclic", length=800, seed=0), lookback=24, horizon=12)


def test_a_diverging_run_is_recorded_and_the_best_weights_restored():
    torch.set_num_threads(1)
    splits = _splits()
    model = build_forecaster("revin", "linear", splits, seed=0)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    config = ForecastTrainConfig(epochs=3, lr=1e30, batches_per_epoch=5, val_windows=32)
    result = train_forecaster(model, splits, config, seed=0)
    assert result.diverged is not None and result.diverged["step"] < 15
    assert all(torch.isfinite(v).all() for v in model.state_dict().values())
    if not result.history:  # diverged in the first epoch: the initial weights come back
        assert math.isinf(result.val_mse)
        assert all(torch.equal(start[k], v) for k, v in model.state_dict().items())


def test_a_stable_run_has_no_divergence_and_keeps_its_best_epoch():
    splits = _splits()
    model = build_forecaster("revin", "linear", splits, seed=0)
    config = ForecastTrainConfig(epochs=3, lr=1e-3, batches_per_epoch=5, val_windows=32)
    result = train_forecaster(model, splits, config, seed=0)
    assert result.diverged is None and len(result.history) == 3
    assert result.val_mse == min(h["val"] for h in result.history)
