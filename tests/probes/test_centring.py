"""centring: the output mean of an activation on standard-normal input, by Monte Carlo."""

from __future__ import annotations

import torch

from normlab.layers import ZCSwish
from normlab.probes.centring import gaussian_output_mean


def test_zc_swish_is_centred_and_plain_swish_is_not():
    zc = gaussian_output_mean(ZCSwish(3, dtype=torch.float64), 3, draws=2**16)
    assert zc.worst < 4 * zc.se and zc.se > 0
    plain = gaussian_output_mean(torch.nn.SiLU(), 3, draws=2**16)
    assert abs(plain.worst - 0.2066) < 4 * plain.se + 1e-3  # Swish's mean under N(0, 1)


def test_the_draws_are_fixed_by_the_seed():
    a = gaussian_output_mean(torch.nn.Identity(), 2, draws=1024, seed=5)
    assert a == gaussian_output_mean(torch.nn.Identity(), 2, draws=1024, seed=5)
    assert a != gaussian_output_mean(torch.nn.Identity(), 2, draws=1024, seed=6)
