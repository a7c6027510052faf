"""linear_operands and gemm_snr_profile: what each Linear multiplies, and its SNR in NVFP4."""

from __future__ import annotations

import math

import torch
from torch import nn

from normlab.probes.gemm import gemm_snr_profile, linear_operands
from normlab.quant import QuantFormat, gemm_snr


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.Dropout(0.5), nn.ReLU(), nn.Linear(64, 16))


def test_operands_are_each_linear_input_and_weight_and_nothing_is_left_behind():
    net = _net().train()
    x = torch.randn(5, 32)
    ops = linear_operands(net, x)
    assert list(ops) == ["0", "3"]
    torch.testing.assert_close(ops["0"][0], x)
    torch.testing.assert_close(ops["3"][0], torch.relu(net[0](x)))  # eval: no dropout
    assert ops["3"][1] is not net[3].weight and torch.equal(ops["3"][1], net[3].weight)
    assert net.training and all(not m._forward_pre_hooks for m in net.modules())


def test_profile_is_the_mean_db_over_layers_long_enough():
    net, x = _net(), torch.randn(8, 32)
    fmt = QuantFormat("nvfp4")
    ops = linear_operands(net, x)
    first, second = (gemm_snr(xi, w, fmt, lengths=[16, 32]) for xi, w in ops.values())
    db = [10 * math.log10(v) for v in (first[16], second[16], first[32], second[32])]
    only_64 = 10 * math.log10(gemm_snr(*ops["3"], fmt, lengths=[64])[64])
    got = gemm_snr_profile(net, x, [16, 32, 64, 128])
    assert got[:2] == [sum(db[:2]) / 2, sum(db[2:]) / 2]
    assert got[2] == only_64 and math.isnan(got[3])  # only the second layer is 64 long
    assert gemm_snr_profile(net, x, [16], fmt=fmt) == got[:1]
