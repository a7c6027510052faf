"""train_flow: a CDFlow learns two moons, reports its parameter counts and a divergence."""

from __future__ import annotations

import math

import torch

from normlab.data.toy import standardize, two_moons
from normlab.training.flows import train_flow

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
    none = train_flow(train, val, test, mixing="none", lr=3e-3, steps=1, **_FLOW)
    assert none["mixing_params"] == 0.0


def test_a_diverged_flow_scores_inf_and_records_where():
    train, val, test = _moons()
    out = train_flow(train, val, test, mixing="lu", lr=1e12, steps=30, **_FLOW)
    assert out["val_nll"] == out["test_nll"] == math.inf
    assert set(out["diverged"]) == {"step", "last"} and out["diverged"]["step"] <= 30
