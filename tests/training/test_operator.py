"""The Darcy operator trainer: splits, training with its one-cycle schedule, divergence."""

from __future__ import annotations

import math

import numpy as np
import torch

from normlab.data.darcy import darcy_dataset
from normlab.training.operator import darcy_splits, relative_error, train_operator

_NET = {"width": 8, "modes": 4, "layers": 2, "batch": 5}


def _splits():
    return darcy_splits(10, 4, 3, train_res=9, test_res=[9, 17], train_fine=17, fine=17, seed=0)


def test_splits_have_their_resolutions_and_scale():
    splits = _splits()
    x, y = splits.train
    assert x.shape == y.shape == (10, 1, 9, 9) and splits.val[0].shape == (4, 1, 9, 9)
    assert {r: t[0].shape[-1] for r, t in splits.test.items()} == {9: 9, 17: 17}
    assert set(x.unique().tolist()) <= {-1.0, 1.0}
    fine = darcy_dataset(14, 17, seed=0).u[:10]  # scaled by the training solutions' RMS
    expected = fine[:, ::2, ::2] / np.sqrt(np.mean(fine**2))
    np.testing.assert_allclose(y[:, 0].numpy(), expected, rtol=1e-5)


def test_training_learns_and_reports_epoch_losses():
    torch.set_num_threads(1)
    splits = _splits()
    model, losses, div = train_operator(
        "quadnorm", {"rule": "trapezoid"}, splits.train, 1e-2, epochs=3, seed=0, **_NET
    )
    assert div is None and len(losses) == 3 and losses[-1] < losses[0]
    err = relative_error(model, splits.test[17])
    assert 0.0 < err < 1.0
    again, _, _ = train_operator(
        "quadnorm", {"rule": "trapezoid"}, splits.train, 1e-2, epochs=3, seed=0, **_NET
    )
    assert relative_error(again, splits.test[17]) == err


def test_an_exploding_lr_is_a_divergence():
    splits = _splits()
    _, losses, div = train_operator(
        "quadnorm", {"rule": "uniform"}, splits.train, 1e12, epochs=4, seed=0, **_NET
    )
    assert div is not None and div.step == 1 and math.isfinite(div.last)
    assert losses == [div.last]  # the epoch's mean over the steps run
