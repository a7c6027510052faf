"""Numerical and affine rank with explicit tolerances; LayerNorm keeps the affine rank."""

from __future__ import annotations

import torch

from normlab.probes import affine_rank, layer_ranks, numerical_rank, rank_record


def test_rank_of_a_constructed_matrix():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 3, generator=g, dtype=torch.float64) @ torch.randn(
        3, 8, generator=g, dtype=torch.float64
    )
    assert int(numerical_rank(x)) == 3
    batch = torch.stack([x, x[:, :4] @ torch.randn(4, 8, dtype=torch.float64)])
    assert numerical_rank(batch).tolist() == [3, 3]


def test_affine_rank_of_points_on_a_line():
    t = torch.linspace(0, 1, 10, dtype=torch.float64)[:, None]
    points = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) + t * torch.tensor(
        [0.5, -1.0, 2.0], dtype=torch.float64
    )
    assert int(numerical_rank(points)) == 2  # the line does not pass through the origin
    assert int(affine_rank(points)) == 1


def test_explicit_tolerance_is_used_and_reported():
    x = torch.diag(torch.tensor([1.0, 1e-3, 1e-9], dtype=torch.float64))
    assert int(numerical_rank(x)) == 3
    assert int(numerical_rank(x, rtol=1e-6)) == 2
    assert int(numerical_rank(x, atol=0.01)) == 1
    record = rank_record(x, rtol=1e-6)
    assert record.rank == 2 and record.tol == 1e-6 and record.rtol == 1e-6
    assert record.singular_values[0] == 1.0


def test_affine_rank_is_translation_invariant_and_bounds_the_rank():
    g = torch.Generator().manual_seed(1)
    for k in (1, 2, 4):
        base = torch.randn(16, k, generator=g, dtype=torch.float64) @ torch.randn(
            k, 32, generator=g, dtype=torch.float64
        )
        x = base + torch.randn(32, generator=g, dtype=torch.float64)  # an affine subspace
        a = int(affine_rank(x, rtol=1e-8))
        assert a == k == int(affine_rank(3.0 * x - 7.0, rtol=1e-8))
        assert a <= int(numerical_rank(x, rtol=1e-8)) <= a + 1
        # per-token centring (LayerNorm without its scaling) is a linear map: it cannot
        # raise the affine rank
        assert int(affine_rank(x - x.mean(-1, keepdim=True), rtol=1e-8)) <= k


def test_layer_ranks_over_states():
    states = [torch.randn(2, 6, 4) for _ in range(3)]
    records = layer_ranks(states)
    assert len(records) == 3 and all(r.rank == 4 and r.affine_rank == 4 for r in records)
