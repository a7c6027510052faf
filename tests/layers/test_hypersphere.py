"""nGPT pieces: unit-sphere projection, normalized linear layers and residual updates."""

from __future__ import annotations

import math

import torch

from normlab.functional import l2_normalize
from normlab.layers import (
    HypersphereNorm,
    HypersphereResidual,
    LearnedScale,
    NormalizedLinear,
    renormalize_weights_,
)


def test_projection_gives_unit_vectors_and_keeps_zero_at_zero():
    x = torch.randn(5, 16, dtype=torch.float64)
    x[2] = 0.0
    y = HypersphereNorm(16)(x)
    norms = y.norm(dim=-1)
    torch.testing.assert_close(norms[[0, 1, 3, 4]], torch.ones(4, dtype=torch.float64))
    assert torch.equal(y[2], torch.zeros(16, dtype=torch.float64))


def test_normalized_linear_keeps_rows_or_columns_on_the_sphere():
    rows = NormalizedLinear(8, 4)
    cols = NormalizedLinear(8, 4, norm_dim="out")
    torch.testing.assert_close(rows.weight.norm(dim=1), torch.ones(4))
    torch.testing.assert_close(cols.weight.norm(dim=0), torch.ones(8))
    with torch.no_grad():
        rows.weight.mul_(3.0)
    model = torch.nn.Sequential(rows, torch.nn.ReLU(), cols)
    assert renormalize_weights_(model) == 2
    torch.testing.assert_close(rows.weight.norm(dim=1), torch.ones(4))


def test_learned_scale_acts_at_init_but_is_stored_at_scale():
    scale = LearnedScale(4, init=0.05, scale=1 / math.sqrt(64))
    torch.testing.assert_close(scale(), torch.full((4,), 0.05))
    torch.testing.assert_close(scale.param.detach(), torch.full((4,), 0.125))


def test_residual_update_stays_on_sphere_and_moves_toward_block_output():
    res = HypersphereResidual(32)
    h = l2_normalize(torch.randn(3, 32))
    target = l2_normalize(torch.randn(3, 32))
    out = res(h, target * 7.0)  # the block output's scale must not matter
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(3))
    assert ((out * target).sum(-1) > (h * target).sum(-1)).all()
