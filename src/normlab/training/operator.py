"""Training the 2D neural operator (:func:`~normlab.models.operator.operator_net`) on
Darcy flow (:mod:`normlab.data.darcy`): the QuadNorm claim's testbed.

:func:`darcy_splits` draws training, validation and test problems and
:func:`darcy_tensors` turns coefficient and solution grids into the network's inputs and
targets; :func:`train_operator` runs Adam with a one-cycle schedule over epochs of
minibatches of the quadrature relative L2 error
(:func:`~normlab.functional.quad_relative_error`), which :func:`relative_error` also
reports on held-out data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from normlab import functional as NF
from normlab.data.darcy import darcy_dataset
from normlab.models.operator import operator_net
from normlab.training.fit import Divergence, EpochBatches, fit

__all__ = ["DarcySplits", "darcy_splits", "darcy_tensors", "relative_error", "train_operator"]

Pair = tuple[torch.Tensor, torch.Tensor]


def darcy_tensors(
    a: np.ndarray, u: np.ndarray, u_scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``(n, 1, N, N)``: the coefficient mapped from {3, 12} to {-1, 1}; targets: the
    solution times ``u_scale`` (float32)."""
    x = torch.tensor((a - 7.5) / 4.5, dtype=torch.float32)[:, None]  # a in {3, 12} -> -1, 1
    return x, torch.tensor(u * u_scale, dtype=torch.float32)[:, None]


class DarcySplits(NamedTuple):
    """Inputs and targets of each split: ``train`` and ``val`` at the training resolution,
    ``test`` per test resolution."""

    train: Pair
    val: Pair
    test: dict[int, Pair]


def darcy_splits(
    n_train: int,
    n_val: int,
    n_test: int,
    *,
    train_res: int,
    test_res: Sequence[int],
    train_fine: int,
    fine: int,
    seed: int,
) -> DarcySplits:
    """Darcy problems for an operator trained at one resolution and tested at others.

    Training and validation problems (one draw, split in that order) are solved on a
    ``train_fine`` grid and subsampled to ``train_res``; test problems (an independent draw,
    seed ``seed + 100_000``) are solved on a ``fine`` grid and subsampled to each of
    ``test_res``. Targets are scaled by the inverse RMS of the training solutions.
    """
    data = darcy_dataset(n_train + n_val, train_fine, seed=seed)
    test_data = darcy_dataset(n_test, fine, seed=seed + 100_000)
    scale = 1.0 / float(np.sqrt(np.mean(data.u[:n_train] ** 2)))
    a, u = data.at(train_res)
    return DarcySplits(
        darcy_tensors(a[:n_train], u[:n_train], scale),
        darcy_tensors(a[n_train:], u[n_train:], scale),
        {r: darcy_tensors(*test_data.at(r), scale) for r in test_res},
    )


def train_operator(
    norm: str,
    norm_kwargs: dict[str, Any],
    train: Pair,
    lr: float,
    *,
    width: int,
    modes: int,
    layers: int,
    batch: int,
    epochs: int,
    seed: int,
) -> tuple[torch.nn.Module, list[float], Divergence | None]:
    """Train an operator whose norms are ``norm(**norm_kwargs)`` on ``train`` (inputs,
    targets) with Adam under a one-cycle schedule peaking at ``lr``, over ``epochs`` of
    shuffled minibatches of ``batch`` (a short last batch dropped).

    Returns:
        The model, each epoch's mean training loss (the last over the steps run, if the loss
        turned non-finite) and the divergence or None.
    """
    torch.manual_seed(seed)
    model = operator_net(norm, width=width, modes=modes, layers=layers, norm_kwargs=norm_kwargs)
    x, y = train
    batches = EpochBatches(len(x), batch, torch.Generator().manual_seed(seed), drop_last=True)
    steps = batches.steps(epochs)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    # OneCycleLR also cycles Adam's beta1, which fit's lr-only schedule cannot express
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    result = fit(
        model,
        lambda m, idx: NF.quad_relative_error(m(x[idx]), y[idx]).mean(),
        batches,
        steps,
        opt,
        after_step=lambda step, loss: sched.step(),
    )
    per = batches.per_epoch
    losses = [
        sum(result.losses[i : i + per]) / len(result.losses[i : i + per])
        for i in range(0, result.steps, per)
    ]
    return model, losses, result.diverged


@torch.no_grad()
def relative_error(model: torch.nn.Module, data: Pair) -> float:
    """The mean quadrature relative L2 error of ``model`` on ``data`` (inputs, targets)."""
    x, y = data
    return float(NF.quad_relative_error(model(x), y).mean())
