"""Supervised classification on in-memory tensors through the one loop
(:func:`~normlab.training.fit.fit`): Adam over epochs of shuffled minibatches, the mean
training loss of each epoch, and accuracy.

:func:`train_classifier` trains ``model`` on ``(x, y)`` with cross-entropy; a run whose loss
turns non-finite stops there and reports its :class:`~normlab.training.fit.Divergence`
(never raises). :func:`validation_split` holds out a validation set drawn by a seed;
:func:`epoch_means` turns a run's per-step losses into per-epoch means
weighted by batch size (a diverged run's last epoch is the mean over the steps it ran).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from normlab.training.fit import EpochBatches, FitResult, fit

__all__ = ["ClassifierRun", "accuracy", "epoch_means", "train_classifier", "validation_split"]


@dataclass(frozen=True)
class ClassifierRun:
    """One classifier's training.

    Attributes:
        epoch_losses: the mean training loss of each epoch run (see :func:`epoch_means`).
        fit: the loop's :class:`~normlab.training.fit.FitResult` (steps, losses, divergence).
    """

    epoch_losses: list[float]
    fit: FitResult


def epoch_means(result: FitResult, batches: EpochBatches) -> list[float]:
    """The mean training loss of each epoch ``result`` ran, each step weighted by its batch
    size; the last epoch of a run that stopped early averages the steps it completed.

    Examples:
        >>> import torch
        >>> b = EpochBatches(5, 2, torch.Generator().manual_seed(0))  # sizes 2, 2, 1
        >>> epoch_means(FitResult(steps=4, losses=[1.0, 2.0, 4.0, 3.0]), b)
        [2.0, 3.0]
    """
    out = []
    for start in range(0, result.steps, batches.per_epoch):
        steps = range(start, min(start + batches.per_epoch, result.steps))
        total = sum(result.losses[s] * batches.size(s) for s in steps)
        out.append(total / sum(batches.size(s) for s in steps))
    return out


def train_classifier(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch: int,
    lr: float,
    generator: torch.Generator,
    take: int | None = None,
) -> ClassifierRun:
    """Adam with cross-entropy over ``epochs`` epochs of shuffled minibatches of ``(x, y)``.

    Args:
        model: maps ``x[idx]`` to logits.
        x: the training inputs.
        y: their integer labels.
        epochs: passes over the data (each over ``take`` examples when given).
        batch: examples per Adam step.
        lr: Adam's learning rate.
        generator: draws every epoch's permutation.
        take: examples used per epoch, a fresh random subset each time (None: all).
    """
    batches = EpochBatches(len(y), batch, generator, take=take)
    result = fit(
        model,
        lambda m, idx: F.cross_entropy(m(x[idx]), y[idx]),
        batches,
        batches.steps(epochs),
        torch.optim.Adam(model.parameters(), lr=lr),
    )
    return ClassifierRun(epoch_means(result, batches), result)


def validation_split(
    x: torch.Tensor, y: torch.Tensor, n_val: int, seed: int
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``((train_x, train_y), (val_x, val_y))``: ``n_val`` examples drawn without
    replacement by ``seed`` for validation (model selection), the rest for training.

    Examples:
        >>> import torch
        >>> (tx, ty), (vx, vy) = validation_split(torch.arange(10.0), torch.arange(10), 3, 0)
        >>> len(vy), len(ty), sorted(torch.cat([ty, vy]).tolist()) == list(range(10))
        (3, 7, True)
    """
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    val, train = perm[:n_val], perm[n_val:]
    return (x[train], y[train]), (x[val], y[val])


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The fraction of ``x`` whose arg-max logit is its label, with ``model`` in eval mode.

    Examples:
        >>> import torch
        >>> accuracy(torch.nn.Identity(), torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        ...          torch.tensor([0, 0]))
        0.5
    """
    model.eval()
    return float((model(x).argmax(1) == y).float().mean())
