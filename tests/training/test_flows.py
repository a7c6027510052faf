"""train_flow: a CDFlow learns two moons, reports its parameter counts and a divergence."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from normlab.data.toy import standardize, two_moons
from normlab.training.flows import DATASETS, flow_splits, train_flow

_FLOW = {"flow_steps": 2, "hidden": (16,), "batch": 64, "seed": 0}


def _moons():
    g = torch.Generator().manual_seed(0)
    train, test = standardize(two_moons(600, g), two_moons(200, g))
    return train[:500], train[500:], test


def test_a_trained_flow_beats_the_base_density_and_counts_its_mixing_parameters():
    torch.manual_seed(0)
    train, val, test = _moons()
    out = train_flow(train, val, test, mixing="circulant", lr=3e-3, steps=60, **_FLOW)
    gaussian = -torch.distributions.Normal(0.0, 1.0).log_prob(test).mean().item()
    assert out["diverged"] is None
    assert out["test_nll"] < gaussian and math.isfinite(out["val_nll"])
    assert 0 < out["mixing_params"] < out["params"]
    assert len(out["curve"]) == 60 and out["curve"][-1] < out["curve"][0]  # the training NLL
    none = train_flow(train, val, test, mixing="none", lr=3e-3, steps=1, **_FLOW)
    assert none["mixing_params"] == 0.0


def test_a_diverged_flow_scores_inf_and_records_where():
    train, val, test = _moons()
    out = train_flow(train, val, test, mixing="lu", lr=1e12, steps=30, **_FLOW)
    assert out["val_nll"] == out["test_nll"] == math.inf
    assert set(out["diverged"]) == {"step", "last"} and out["diverged"]["step"] <= 30


def test_flow_splits_hold_out_the_last_fifteen_percent():
    for name in DATASETS:
        train, val, test = flow_splits(name, torch.Generator().manual_seed(0), moons_train=400)
        assert abs(len(val) / (len(train) + len(val)) - 0.15) < 0.01
        assert train.shape[1] == val.shape[1] == test.shape[1]
    moons = flow_splits("moons", torch.Generator().manual_seed(0), moons_train=400)
    assert len(moons[0]) + len(moons[1]) == 400 and len(moons[2]) == 2000
    with pytest.raises(ValueError, match="Unknown data set"):
        flow_splits("cifar", torch.Generator())


def test_early_stopping_keeps_the_best_validation_flow_and_its_curve():
    train, val, test = _moons()
    out = train_flow(train, val, test, mixing="circulant", lr=3e-3, steps=60, evals=6, **_FLOW)
    curve = out["curve"]
    assert len(curve) == 6  # every 10 steps (the last one at the end)
    assert all(b <= a for a, b in itertools.pairwise(curve))  # the best so far
    assert out["val_nll"] == pytest.approx(curve[-1], abs=1e-5)
