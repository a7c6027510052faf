"""Backbones and the generic trainer, with every series normalizer."""

from __future__ import annotations

import math

import pytest
import torch

import normlab
from normlab.data.series import cyclic_series, split_windows
from normlab.models.forecast import BACKBONES, build_backbone
from normlab.training.forecast import (
    Forecaster,
    ForecastTrainConfig,
    build_norm,
    evaluate,
    fit_and_test,
    train_forecaster,
)

L, H = 48, 24
TINY = ForecastTrainConfig(
    epochs=2, batch=16, lr=3e-3, batches_per_epoch=5, val_windows=32, pretrain_epochs=1
)


@pytest.fixture(scope="module")
def splits():
    return split_windows(cyclic_series(1200, 2, seed=0), lookback=L, horizon=H)


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_backbones_map_windows_to_horizons(name):
    model = build_backbone(name, lookback=L, horizon=H)
    x = torch.randn(3, L, 5, requires_grad=True)
    y = model(x)
    assert y.shape == (3, H, 5)
    y.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    # channel independence: one channel's forecast ignores the others
    model.eval()
    x2 = x.detach().clone()
    x2[..., 1:] = torch.randn(3, L, 4)
    torch.testing.assert_close(model(x2)[..., 0], model(x.detach())[..., 0])


def test_unknown_backbone():
    with pytest.raises(ValueError, match="Unknown backbone"):
        build_backbone("lstm", lookback=L, horizon=H)


@pytest.mark.parametrize("norm", [m.name for m in normlab.methods(kind="series")] + [None])
def test_trainer_works_with_every_normalizer(splits, norm):
    model, result, test = fit_and_test(
        norm, "linear", splits, TINY, seed=0, periods=(24, 168), test_windows=64
    )
    assert math.isfinite(result.val_mse) and 1 <= result.best_epoch <= TINY.epochs
    assert len(result.history) >= 1
    assert set(test) == {"mse", "mae"} and all(math.isfinite(v) for v in test.values())
    # the restored weights are the best epoch's
    val = evaluate(model, splits.val, n=TINY.val_windows)["mse"]
    assert val == pytest.approx(result.val_mse, rel=1e-5)


def test_san_is_pretrained_then_frozen(splits):
    torch.manual_seed(0)
    norm = build_norm("san", 2, lookback=L, horizon=H, periods=(24,))
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    model = Forecaster(norm, build_backbone("linear", lookback=L, horizon=H))
    snapshots = []
    train_forecaster(
        model, splits, TINY, seed=0, on_epoch=lambda e, m: snapshots.append(m.norm.state_dict())
    )
    assert all(not p.requires_grad for p in norm.parameters())
    first = snapshots[0]  # after the first stage, before the main stage
    assert any(not torch.equal(first[k], before[k]) for k in before)
    for later in snapshots[1:]:
        assert all(torch.equal(later[k], first[k]) for k in first)


def test_joint_norin_records_a_shape_trajectory(splits):
    trajectory = []
    fit_and_test(
        "norin",
        "mlp",
        splits,
        TINY,
        seed=0,
        learn_shape=True,
        delta=1.0,
        on_epoch=lambda e, m: trajectory.append(float(m.norm.delta.detach().mean())),
    )
    assert trajectory[0] == pytest.approx(1.0)
    assert len(trajectory) == TINY.epochs + 1 and trajectory[-1] != trajectory[0]


def test_training_is_deterministic_given_the_seed(splits):
    a = fit_and_test("dish-ts", "mlp", splits, TINY, seed=3, test_windows=32)[2]
    b = fit_and_test("dish-ts", "mlp", splits, TINY, seed=3, test_windows=32)[2]
    assert a == b


def test_build_norm_rejects_other_kinds():
    with pytest.raises(ValueError, match="not a series normalizer"):
        build_norm("layernorm", 2, lookback=L, horizon=H)


def test_tune_norin_starts_at_slifker_shapiro_and_keeps_the_selected_model(splits):
    from normlab.training.norin import tune_norin

    tuned = tune_norin(
        "linear", splits, TINY, n_trials=3, seed=0, fit_windows=200, test_windows=64
    )
    first = tuned.search.trials[0]
    assert first[0] == pytest.approx(min(max(tuned.fit.delta, 0.3), 30.0))
    assert first[1] == pytest.approx(min(max(tuned.fit.gamma, -3.0), 3.0))
    norm = tuned.model.norm
    assert float(norm.delta.mean()) == pytest.approx(tuned.search.delta, rel=1e-5)
    assert float(norm.epsilon.mean()) == pytest.approx(tuned.search.epsilon, rel=1e-5, abs=1e-6)
    val = evaluate(tuned.model, splits.val, n=TINY.val_windows)["mse"]
    assert val == pytest.approx(tuned.search.value, rel=1e-5)
    assert all(math.isfinite(v) for v in tuned.test.values())
