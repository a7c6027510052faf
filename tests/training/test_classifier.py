"""classifier: cross-entropy training through fit, per-epoch losses, the validation split."""

from __future__ import annotations

import math

import torch

from normlab.training.classifier import (
    accuracy,
    epoch_means,
    train_classifier,
    validation_split,
)
from normlab.training.fit import EpochBatches, FitResult


def _blobs(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 2, generator=g) * 0.3 + torch.stack([y, 1 - y], 1).float() * 2
    return x, y


def test_a_linear_classifier_learns_separable_blobs_with_one_loss_per_epoch():
    x, y = _blobs()
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)
    gen = torch.Generator().manual_seed(0)
    out = train_classifier(model, x, y, epochs=5, batch=16, lr=0.1, generator=gen, take=48)
    assert len(out.epoch_losses) == 5 and out.fit.steps == 15 and out.fit.diverged is None
    assert out.epoch_losses[-1] < out.epoch_losses[0]
    assert accuracy(model, x, y) > 0.9 and not model.training


def test_a_nan_loss_stops_the_run_with_its_divergence():
    x, y = _blobs()
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.fill_(math.nan)
    gen = torch.Generator().manual_seed(0)
    out = train_classifier(model, x, y, epochs=3, batch=16, lr=0.1, generator=gen)
    assert out.fit.diverged is not None and out.fit.diverged.step == 0
    assert out.epoch_losses == []


def test_epoch_means_weight_steps_by_batch_size_and_keep_a_partial_epoch():
    b = EpochBatches(5, 2, torch.Generator().manual_seed(0))  # sizes 2, 2, 1
    full = epoch_means(FitResult(steps=3, losses=[1.0, 1.0, 4.0]), b)
    assert full == [(2 + 2 + 4) / 5]
    assert epoch_means(FitResult(steps=4, losses=[1.0, 1.0, 4.0, 7.0]), b) == [8 / 5, 7.0]


def test_validation_split_is_disjoint_fixed_by_seed_and_complete():
    x, y = torch.arange(20.0), torch.arange(20)
    (tx, ty), (vx, vy) = validation_split(x, y, 5, 3)
    assert len(vy) == 5 and set(ty.tolist()).isdisjoint(vy.tolist())
    assert sorted(torch.cat([ty, vy]).tolist()) == list(range(20))
    assert torch.equal(tx, ty.float()) and torch.equal(vx, vy.float())
    assert torch.equal(validation_split(x, y, 5, 3)[1][1], vy)
    assert not torch.equal(validation_split(x, y, 5, 4)[1][1], vy)
