"""One trainer for every reversible normalizer: a backbone between normalize and denormalize.

:func:`train_forecaster` trains a :class:`~normlab.models.forecaster.Forecaster` (a
normalizer, any ``normlab.series`` method or None, around a backbone of
:mod:`normlab.models.forecast`) with Adam on MSE, early stopping on validation MSE, and uses
each normalizer's extra training signal as its ``aux_schedule`` says: FAN's auxiliary loss
is added every step ("joint"); SAN's statistics predictor is trained alone first, then
frozen ("pretrain"). Each epoch's steps run through :func:`normlab.training.fit.fit`, so a
run whose loss turns non-finite stops there and is recorded as diverged
(``TrainResult.diverged``), the best validation epoch's weights restored.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab.data.series import Splits, Windows
from normlab.models.forecast import build_backbone
from normlab.models.forecaster import Forecaster, build_norm
from normlab.training.fit import fit

__all__ = [
    "ForecastTrainConfig",
    "TrainResult",
    "build_forecaster",
    "evaluate",
    "fit_and_test",
    "train_forecaster",
]


@dataclass(frozen=True)
class ForecastTrainConfig:
    """How to train a forecaster.

    Attributes:
        epochs: most epochs of the main stage.
        batch: windows per step.
        lr: Adam learning rate.
        patience: stop after this many epochs without a better validation MSE.
        batches_per_epoch: steps per epoch (random windows), or None for one full pass.
        val_windows: validate on this many evenly spaced windows, or None for all.
        pretrain_epochs: epochs of the first stage for ``aux_schedule == "pretrain"`` (SAN).
        weight_decay: Adam's L2 penalty.
    """

    epochs: int = 10
    batch: int = 32
    lr: float = 1e-3
    patience: int = 3
    batches_per_epoch: int | None = None
    val_windows: int | None = None
    pretrain_epochs: int = 3
    weight_decay: float = 0.0


@dataclass
class TrainResult:
    """What training gives back: the best validation MSE, the per-epoch history, and the
    divergence record (``{"step", "last"}``, counted in main-stage steps) or None."""

    val_mse: float
    best_epoch: int
    history: list[dict[str, float]] = field(default_factory=list)
    diverged: dict[str, Any] | None = None


@torch.no_grad()
def evaluate(
    model: Forecaster, windows: Windows, *, n: int | None = None, batch: int = 512
) -> dict[str, float]:
    """MSE and MAE of ``model`` on up to ``n`` evenly spaced windows (standardized scale)."""
    was_training = model.training
    model.eval()
    ids = windows.spread(n)
    se, ae, count = 0.0, 0.0, 0
    for chunk in ids.split(batch):
        x, y, index = windows.get(chunk)
        pred = model(x, index)[0]
        se += float((pred - y).pow(2).sum())
        ae += float((pred - y).abs().sum())
        count += y.numel()
    model.train(was_training)
    return {"mse": se / count, "mae": ae / count}


def _epoch_ids(
    windows: Windows, config: ForecastTrainConfig, gen: torch.Generator
) -> list[torch.Tensor]:
    order = torch.randperm(len(windows), generator=gen)
    if config.batches_per_epoch is not None:
        order = order[: config.batches_per_epoch * config.batch]
    return list(order.split(config.batch))


def _pretrain(
    model: Forecaster, splits: Splits, config: ForecastTrainConfig, gen: torch.Generator
) -> None:
    norm = model.norm
    assert norm is not None
    params = [p for p in norm.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)

    def loss_fn(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        x, y, index = splits.train.get(ids)
        _, state = norm.normalize(x, index=index)
        return norm.auxiliary_loss(None, state, y)  # type: ignore[arg-type]

    for _ in range(config.pretrain_epochs):
        ids = _epoch_ids(splits.train, config, gen)
        if fit(norm, loss_fn, ids, len(ids), opt).diverged is not None:
            break
    norm.requires_grad_(False)


def train_forecaster(
    model: Forecaster,
    splits: Splits,
    config: ForecastTrainConfig,
    *,
    seed: int = 0,
    on_epoch: Callable[[int, Forecaster], None] | None = None,
) -> TrainResult:
    """Train ``model`` on ``splits.train``, early-stopping on validation MSE.

    The weights of the best validation epoch are restored at the end. ``on_epoch(epoch,
    model)`` is called before training (epoch 0) and after each epoch of the main stage,
    e.g. to record NoRIN's learned shape.
    """
    gen = torch.Generator().manual_seed(seed)
    schedule = model.norm.aux_schedule if model.norm is not None else "none"
    if schedule == "pretrain" and config.pretrain_epochs > 0:
        _pretrain(model, splits, config, gen)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    best, best_epoch, best_state, stale = math.inf, 0, copy.deepcopy(model.state_dict()), 0
    history: list[dict[str, float]] = []
    diverged: dict[str, Any] | None = None
    done = 0

    def loss_fn(module: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        x, y, index = splits.train.get(ids)
        pred, y_hat, state = model(x, index)
        loss = F.mse_loss(pred, y)
        if schedule == "joint" and model.norm is not None and state is not None:
            aux = model.norm.auxiliary_loss(y_hat, state, y)
            if aux is not None:
                loss = loss + aux
        return loss

    if on_epoch is not None:
        on_epoch(0, model)
    for epoch in range(1, config.epochs + 1):
        ids = _epoch_ids(splits.train, config, gen)
        run = fit(model, loss_fn, ids, len(ids), opt)
        if run.diverged is not None:
            diverged = run.diverged.record()
            diverged["step"] += done
            break
        done += run.steps
        val = evaluate(model, splits.val, n=config.val_windows)["mse"]
        history.append({"epoch": epoch, "train": sum(run.losses) / max(run.steps, 1), "val": val})
        if on_epoch is not None:
            on_epoch(epoch, model)
        if val < best:
            best, best_epoch, stale = val, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            stale += 1
            if stale >= config.patience:
                break
    model.load_state_dict(best_state)
    return TrainResult(best, best_epoch, history, diverged)


def build_forecaster(
    norm: str | None,
    backbone: str,
    splits: Splits,
    *,
    seed: int,
    periods: Sequence[int] = (24,),
    **norm_kwargs: Any,
) -> Forecaster:
    """A fresh forecaster for ``splits`` (its channels, lookback and horizon), seeded."""
    lookback, horizon = splits.train.lookback, splits.train.horizon
    channels = int(splits.train.data.shape[1])
    torch.manual_seed(seed)
    normalizer = (
        None
        if norm is None
        else build_norm(
            norm, channels, lookback=lookback, horizon=horizon, periods=periods, **norm_kwargs
        )
    )
    return Forecaster(normalizer, build_backbone(backbone, lookback=lookback, horizon=horizon))


def fit_and_test(
    norm: str | None,
    backbone: str,
    splits: Splits,
    config: ForecastTrainConfig,
    *,
    seed: int,
    periods: Sequence[int] = (24,),
    test_windows: int | None = None,
    on_epoch: Callable[[int, Forecaster], None] | None = None,
    **norm_kwargs: Any,
) -> tuple[Forecaster, TrainResult, dict[str, float]]:
    """Build (seeded), train and test one normalizer + backbone on ``splits``.

    Returns the trained model, its :class:`TrainResult` and its test MSE/MAE on up to
    ``test_windows`` evenly spaced test windows.
    """
    model = build_forecaster(norm, backbone, splits, seed=seed, periods=periods, **norm_kwargs)
    result = train_forecaster(model, splits, config, seed=seed, on_epoch=on_epoch)
    return model, result, evaluate(model, splits.test, n=test_windows)
