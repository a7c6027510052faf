"""Classifier training that records validation and test accuracy after every epoch.

:func:`accuracy_curves` trains a model with Adam and cross-entropy over epochs of shuffled
minibatches (:class:`~normlab.training.fit.EpochBatches` through
:func:`~normlab.training.fit.fit`) and scores it on a validation and a test split after each
epoch: the curves a "trains faster" comparison reads (accuracy averaged over epochs). Data
splits are any objects with ``x`` (inputs the model takes) and ``y`` (integer labels), e.g.
:class:`normlab.models.spd_net.ClutterData`.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from normlab.training.fit import EpochBatches, fit

__all__ = ["Labelled", "accuracy_curves", "split_accuracy"]


class Labelled(Protocol):
    """A data split: inputs ``x`` and integer labels ``y``."""

    x: torch.Tensor
    y: torch.Tensor


@torch.no_grad()
def split_accuracy(model: nn.Module, data: Labelled) -> float:
    """The fraction of ``data.x`` whose arg-max logit is its label (``model`` in eval mode;
    counted in float64)."""
    model.eval()
    return float((model(data.x).argmax(1) == data.y).double().mean())


def accuracy_curves(
    model: nn.Module,
    train: Labelled,
    val: Labelled,
    test: Labelled,
    *,
    lr: float,
    epochs: int,
    batch: int,
    seed: int,
) -> dict[str, Any]:
    """Train ``model`` on ``train`` with Adam (``lr``) for ``epochs`` epochs of ``batch``
    examples shuffled by ``seed``.

    Returns:
        ``"val"`` and ``"test"``: the accuracy after each completed epoch (up to where a
        non-finite loss stopped training); ``"losses"``: the training cross-entropy of every
        step (a convergence curve, :func:`~normlab.training.fit.late_share`);
        ``"diverged"``: that :class:`~normlab.training.fit.Divergence`, or None.
    """
    batches = EpochBatches(len(train.y), batch, torch.Generator().manual_seed(seed))
    val_accs: list[float] = []
    test_accs: list[float] = []

    def after_step(step: int, loss: torch.Tensor) -> None:
        if (step + 1) % batches.per_epoch == 0:
            val_accs.append(split_accuracy(model, val))
            test_accs.append(split_accuracy(model, test))

    result = fit(
        model,
        lambda m, idx: F.cross_entropy(m(train.x[idx]), train.y[idx]),
        batches,
        batches.steps(epochs),
        torch.optim.Adam(model.parameters(), lr=lr),
        after_step=after_step,
    )
    return {
        "val": val_accs,
        "test": test_accs,
        "losses": result.losses,
        "diverged": result.diverged,
    }
