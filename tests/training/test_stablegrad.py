"""The StableGrad trainers: PINN and BN-free CNN runs, their divergence, and the invariance
StableGrad promises a PINN."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.data.images import load_digits_tensors
from normlab.optim import StableGrad
from normlab.training.stablegrad import (
    OPTIMIZERS,
    accuracy,
    make_optimizer,
    stablegrad_invariance,
    train_digits_cnn,
    train_pinn,
)


def test_make_optimizer_wraps_adam_by_kind():
    model = torch.nn.Linear(2, 2)
    assert isinstance(make_optimizer(model, "adam", 1e-3), torch.optim.Adam)
    for kind in OPTIMIZERS[1:]:
        assert isinstance(make_optimizer(model, kind, 1e-3), StableGrad)
    with pytest.raises(ValueError, match="kind"):
        make_optimizer(model, "sgd", 1e-3)


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_pinn_training_lowers_the_held_out_loss_and_is_reproducible(kind):
    torch.set_num_threads(1)
    shape = {"depth": 2, "width": 8, "points": 16, "seed": 3}
    untrained = train_pinn(kind, 0.0, steps=0, **shape)
    a = train_pinn(kind, 3e-3, steps=30, **shape)
    b = train_pinn(kind, 3e-3, steps=30, **shape)
    assert a.diverged is None and a.val == b.val and a.val < untrained.val


def test_a_pinn_that_blows_up_is_a_divergence_not_an_error():
    run = train_pinn("adam", 1e30, steps=20, depth=2, width=4, points=8, seed=0)
    assert run.diverged is not None and run.diverged.step == 1 and run.val == math.inf


def test_digits_cnn_scores_validation_accuracy():
    torch.set_num_threads(1)
    data = load_digits_tensors(0)
    run = train_digits_cnn(
        data, "stablegrad", 3e-3, blocks=1, width=4, epochs=1, batch=64, seed=0, train_size=200
    )
    assert run.diverged is None and 0.0 <= run.val <= 1.0
    assert 0.0 <= accuracy(run.model, data.test_x, data.test_y) <= 1.0


def test_stablegrad_leaves_the_pinn_forward_untouched():
    same, worst = stablegrad_invariance()
    assert same and worst < 1e-6
