"""Sparse modular addition data and the curvature-recording training loop."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.training.modular import sparse_modular_addition, train_modular


def test_labels_are_the_sparse_sum_mod_p():
    x, y = sparse_modular_addition(50, 7, 5, (1, 3), generator=torch.Generator().manual_seed(0))
    assert x.shape == (50, 5) and int(x.max()) < 7
    assert torch.equal(y, (x[:, 1] + x[:, 3]) % 7)
    with pytest.raises(ValueError, match="positions"):
        sparse_modular_addition(5, 7, 3, (4,), generator=torch.Generator())


def _tiny(**budget):
    """A one-layer modular-addition transformer's config with the given budget."""
    shape = {"p": 5, "length": 4, "positions": [0, 1], "d_model": 8, "n_layers": 1}
    return {**shape, "n_heads": 2, "weight_decay": 0.0, **budget}


def test_training_records_finite_curvature_each_step():
    torch.set_num_threads(1)
    cfg = _tiny(lr=1e-3, train_size=64, batch=16, steps=3)
    out = train_modular(cfg, 0)
    assert len(out["loss"]) == len(out["curvature"]) == 3
    assert all(math.isfinite(c) and c > 0 for c in out["curvature"])
    # with unit LN gains at init the curvature is 1 / (smallest input std)
    assert out["curvature"][0] == pytest.approx(1 / out["min_scale"][0], rel=0.05)


def test_set_loss_is_the_fixed_sets_loss_at_the_steps_parameters():
    torch.set_num_threads(1)
    # full batch: the step's loss is the whole set's
    cfg = _tiny(lr=1e-2, train_size=32, batch=32, steps=4, loss_sequences=32)
    out = train_modular(cfg, 0)
    assert out["set_loss"] == pytest.approx(out["loss"], rel=1e-5)
    assert "set_loss" not in train_modular({**cfg, "loss_sequences": 0}, 0)
