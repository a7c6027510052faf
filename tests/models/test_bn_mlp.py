"""bn_mlp: the same Linear weights with and without BatchNorm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.models.bn_mlp import bn_mlp


def test_matched_initialization():
    for init in ("default", "he"):
        a = bn_mlp(4, 2, bn=True, seed=3, init=init)
        b = bn_mlp(4, 2, bn=False, seed=3, init=init)
        assert torch.equal(a[0].weight, b[0].weight) and torch.equal(a[3].weight, b[3].weight)
    he = bn_mlp(4, 2, bn=False, seed=3, init="he")
    assert torch.count_nonzero(he[0].bias) == 0
    hb = bn_mlp(4, 2, bn=False, seed=3, init="he-bias", bias_std=2.0)
    assert all(torch.equal(hb[i].weight, he[i].weight) for i in (0, 3))  # biases drawn after
    offsets = hb[0].bias / hb[0].weight.norm(dim=1)
    assert offsets.abs().min() > 0 and len(set(offsets.tolist())) == 4


def test_layout_and_bad_init():
    net = bn_mlp(6, 3, bn=True, seed=0, in_features=4)
    kinds = [type(m).__name__ for m in net]
    assert kinds == ["Linear", "BatchNorm1d", "ReLU"] * 3 + ["Linear"]
    assert net[0].in_features == 4 and net[-1].out_features == 1
    assert all(p.dtype == torch.float64 for p in net.parameters())
    assert isinstance(bn_mlp(6, 1, bn=False, seed=0)[1], nn.Identity)
    with pytest.raises(ValueError, match="init"):
        bn_mlp(4, 2, bn=True, seed=0, init="xavier")
