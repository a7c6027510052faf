"""training.norin: the study's arms, the shape search's seeds and its summaries."""

from __future__ import annotations

import math

import pytest

from normlab.data.series import named_series, split_windows
from normlab.training.forecast import ForecastTrainConfig
from normlab.training.norin import (
    arm_trainer,
    drift_fraction,
    search_shape,
    selection_rows,
    study_train_config,
    train_arm,
    trained_spread,
    tune_norin,
)


def test_trained_spread_ignores_blow_ups_and_diverged_trials():
    assert trained_spread([0.5, 0.55, 2.5e12, math.inf, math.nan], 1.0) == pytest.approx(
        math.log10(1.1)
    )
    assert trained_spread([0.5, 3.0], 1.0) == 0.0  # one trial trained: no spread


def test_drift_fraction_is_the_log_move_over_lr_steps():
    assert drift_fraction([1.0, math.e], 0.01, 200) == pytest.approx(0.5)
    assert drift_fraction([2.0, 1.0], 0.01, 100) < 0  # away from the linear limit


def test_selection_rows_and_the_prior():
    rows = selection_rows([2.0, 20.0], [0.05, 0.0], cut=10.0)
    assert rows["selected"]["below_linear"] == 0.5
    assert rows["selected"]["backbone_gap"] == pytest.approx(1.0)
    assert rows["placebo"]["below_linear"] == pytest.approx(math.log(10 / 0.3) / math.log(100))
    assert rows["placebo"]["backbone_gap"] == pytest.approx(2 / 3)
    assert rows["shape"]["shape_matters"] == 0.5


@pytest.fixture(scope="module")
def splits():
    series = named_series("heavy_tailed", length=700, seed=0)
    return split_windows(series, lookback=48, horizon=24)


FC = ForecastTrainConfig(epochs=2, lr=3e-3, batches_per_epoch=2, val_windows=16)


def test_train_arm_records_the_joint_shape(splits):
    _, result, trajectory = train_arm("norin-joint", "linear", splits, FC, seed=0)
    assert len(trajectory) == len(result.history) + 1 and trajectory[0] == pytest.approx(1.0)
    model, _, none = train_arm("norin", "linear", splits, FC, seed=0, shape=(2.0, 0.5))
    assert none == [] and float(model.norm.delta.mean()) == pytest.approx(2.0)


def test_the_sampler_seed_alone_changes_the_candidates(splits):
    kw = {"n_trials": 3, "seed": 0, "fit_windows": 64, "test_windows": 16}
    a = tune_norin("linear", splits, FC, sampler_seed=1, **kw).search.trials
    b = tune_norin("linear", splits, FC, sampler_seed=2, **kw).search.trials
    assert a[0][:2] == b[0][:2]  # the same start (the Slifker-Shapiro fit)
    assert a[1][:2] != b[1][:2]


_STUDY = {"epochs": 2, "batch": 8, "batches_per_epoch": 2, "val_windows": 16}
_STUDY |= {"pretrain_epochs": 1, "patience": 1, "fit_windows": 64, "delta_init": 1.5}


def test_study_train_config_trains_the_joint_run_every_epoch():
    plain, joint = study_train_config(_STUDY, 1e-3), study_train_config(_STUDY, 1e-3, joint=True)
    assert plain.lr == 1e-3 and plain.patience == 1 and joint.patience == _STUDY["epochs"]
    assert plain.batch == 8 and plain.pretrain_epochs == 1 and plain.val_windows == 16


def test_arm_trainer_starts_the_joint_arm_at_delta_init(splits):
    train = arm_trainer("linear", splits, _STUDY, periods=(24,))
    _, _, trajectory = train("norin-joint", 3e-3, 0)
    assert trajectory[0] == pytest.approx(1.5)
    model, _, none = train("norin", 3e-3, 0)
    assert none == [] and math.isfinite(float(model.norm.delta.mean()))


def test_search_shape_seeds_by_configuration_and_spreads(splits):
    kw = {"n_trials": 2, "fit_windows": 64, "test_windows": 16, "val_windows": 16}
    search, spread = search_shape("heavy", "linear", splits, FC, seed=0, **kw)
    again, _ = search_shape("heavy", "linear", splits, FC, seed=0, **kw)
    assert search.search.trials == again.search.trials and spread >= 0.0
    assert len(search.search.trials) == 2
