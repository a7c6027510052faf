"""activation_stats: per-layer activation statistics read through hooks that are removed."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from normlab.layers import ZCSwish
from normlab.models.conv import plain_cnn
from normlab.probes.activations import activation_stats, is_activation


@pytest.mark.parametrize("activation", ["relu", "swish", "zc-swish"])
def test_statistics_are_those_of_each_activation_layer(activation):
    torch.manual_seed(0)
    net = plain_cnn(3, 4, activation).double()
    x = torch.rand(16, 1, 8, 8, dtype=torch.float64)
    stats = activation_stats(net, x)
    feats = net.features(x)
    assert [a.name for a in stats.layers] == ["acts.0", "acts.1", "acts.2"]
    for a, f in zip(stats.layers, feats, strict=True):
        assert a.mean == pytest.approx(float(f.mean()), rel=1e-12)
        assert a.std == pytest.approx(float(f.std(correction=0)), rel=1e-12)
        assert a.rms == pytest.approx(float(f.pow(2).mean().sqrt()), rel=1e-12)
        assert a.mean_rms == pytest.approx(a.mean / a.rms, rel=1e-12)
        assert a.std**2 + a.mean**2 == pytest.approx(a.rms**2, rel=1e-9)
    drift = sum(abs(a.mean_rms) for a in stats.layers) / 3
    assert stats.mean_drift() == pytest.approx(drift)
    assert json.loads(json.dumps(stats.to_dict()))["mean_drift"] == pytest.approx(drift)


def test_relu_outputs_are_not_centred_and_a_constant_reads_one():
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    (relu,) = activation_stats(net, torch.randn(64, 4)).layers
    assert 0 < relu.mean_rms <= 1
    const = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    with torch.no_grad():
        const[0].weight.zero_()
        const[0].bias.fill_(2.0)
    assert activation_stats(const, torch.randn(8, 4)).mean_drift() == pytest.approx(1.0)


def test_model_is_unchanged_and_hooks_are_removed():
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.GELU())
    net.train()
    net[1].eval()  # a mixed mode survives the probe
    activation_stats(net, torch.randn(3, 4))
    assert net.training and net[0].training and not net[1].training
    assert all(not m._forward_hooks for m in net.modules())


def test_named_modules_and_errors():
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    stats = activation_stats(net, torch.randn(5, 4), modules=["0", "2"])
    assert [a.name for a in stats.layers] == ["0", "2"]
    assert is_activation(ZCSwish(3)) and not is_activation(net)
    with pytest.raises(ValueError, match="not modules"):
        activation_stats(net, torch.randn(5, 4), modules=["head"])
    with pytest.raises(ValueError, match="no probed module"):
        activation_stats(nn.Linear(4, 4), torch.randn(5, 4))
