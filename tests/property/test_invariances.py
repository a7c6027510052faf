"""Invariances of the core norms, checked with hypothesis in float64."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlab.functional import layer_norm, rms_norm
from normlab.probes.rank import affine_rank

seeds = st.integers(0, 2**31 - 1)


def _rows(seed: int, n: int, d: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64) * 3


@settings(max_examples=40, deadline=None)
@given(seed=seeds, d=st.integers(2, 64), shift=st.floats(-1e3, 1e3), log_scale=st.floats(-6, 6))
def test_layer_norm_invariant_to_row_shift_and_positive_scale(seed, d, shift, log_scale):
    x = _rows(seed, 4, d)
    g = torch.Generator().manual_seed(seed + 1)
    scale = torch.exp(torch.tensor(log_scale, dtype=torch.float64))
    per_row = torch.rand(4, 1, generator=g, dtype=torch.float64) + 0.5
    y = x * scale * per_row + shift * per_row
    torch.testing.assert_close(
        layer_norm(y, (d,), eps=0.0), layer_norm(x, (d,), eps=0.0), rtol=1e-7, atol=1e-7
    )


@settings(max_examples=40, deadline=None)
@given(seed=seeds, d=st.integers(1, 64), log_scale=st.floats(-6, 6))
def test_rms_norm_invariant_to_positive_scale(seed, d, log_scale):
    x = _rows(seed, 4, d)
    scale = float(torch.exp(torch.tensor(log_scale)))
    torch.testing.assert_close(rms_norm(x * scale, (d,), eps=0.0), rms_norm(x, (d,), eps=0.0))


def _affine_rank(x: torch.Tensor) -> int:
    return int(affine_rank(x, rtol=1e-9))


@settings(max_examples=30, deadline=None)
@given(seed=seeds, d=st.integers(4, 48), data=st.data())
def test_layer_norm_is_affine_rank_neutral_in_general_position(seed, d, data):
    """Random token sets (n <= d, in general position) keep their affine rank under LN.

    Sets of planted low affine rank do not in general: LN's projection onto a sphere adds a
    dimension, which the affine-rank claim measures and reports.
    """
    n = data.draw(st.integers(2, d))
    x = _rows(seed, n, d) + 5.0
    g = torch.Generator().manual_seed(seed + 2)
    weight = torch.rand(d, generator=g, dtype=torch.float64) + 0.5
    bias = torch.randn(d, generator=g, dtype=torch.float64)
    y = layer_norm(x, (d,), weight, bias, eps=0.0)
    assert _affine_rank(y) == _affine_rank(x) == n - 1
