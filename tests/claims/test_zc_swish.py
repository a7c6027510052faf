"""The zc-swish claim at smoke scale, its CNN and its data."""

from __future__ import annotations

import json
import math

import pytest
import torch

from normlab.claims import get_claim
from normlab.claims.catalogue.zc_swish import layer_mean_profile, mean_drift
from normlab.data.images import load_digits_tensors
from normlab.layers import ZCSwish
from normlab.models.conv import plain_cnn


def test_digits_split_is_fixed_by_seed_stratified_and_scaled():
    a, b = load_digits_tensors(0), load_digits_tensors(0)
    assert torch.equal(a.test_y, b.test_y) and torch.equal(a.train_x, b.train_x)
    assert not torch.equal(a.test_y, load_digits_tensors(1).test_y)
    assert len(a.train_y) + len(a.test_y) == 1797 and a.train_x.shape[1:] == (1, 8, 8)
    assert float(a.train_x.min()) == 0.0 and float(a.train_x.max()) == 1.0
    counts = torch.bincount(a.test_y, minlength=10).float()
    assert counts.min() >= 0.9 * counts.mean() and a.classes == 10
    train_x, train_y, test_x, test_y = a  # unpacks as a 4-tuple
    assert len(train_x) == len(train_y) == 1797 - len(test_x) == 1797 - len(test_y)


def test_plain_cnn_has_no_norm_and_no_residual():
    net = plain_cnn(6, 8, "zc-swish")
    assert len(net.convs) == 6 and all(isinstance(m, ZCSwish) for m in net.acts)
    assert not any("Norm" in type(m).__name__ for m in net.modules())
    x = torch.randn(4, 1, 8, 8)
    assert net(x).shape == (4, 10) and len(net.features(x)) == 6
    with pytest.raises(ValueError, match="activation"):
        plain_cnn(2, 4, "gelu")


def test_mean_drift_is_the_average_relative_mean():
    net = plain_cnn(3, 4, "relu")
    x = torch.rand(16, 1, 8, 8)
    profile = layer_mean_profile(net, x)
    assert len(profile) == 3 and all(0 < v <= 1 for v in profile)  # ReLU outputs are >= 0
    assert mean_drift(net, x) == pytest.approx(sum(profile) / 3)
    assert net.training  # the probe restores the mode


def test_smoke_run_table_and_effects():
    torch.set_num_threads(1)
    claim = get_claim("zc-swish")
    measurement = claim.run(claim.config("smoke"), 0)
    json.dumps(measurement)
    table = measurement["table"]
    depth = max(claim.config("smoke")["depths"])
    for act in ("relu", "swish", "zc-swish"):
        for name in (act, f"{act}-d{depth}"):
            assert set(table[name]) == set(claim.metrics), name
            assert all(isinstance(v, float) and math.isfinite(v) for v in table[name].values())
    for effect in claim.effects:
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), effect.name
    assert claim.config("quick")["seeds"] >= 3 and claim.config("full")["depths"] == [8, 16, 32]
