"""GRPO-family advantages: group properties, errors, bad rewards, P-GRPO history.

Equivalence with TRL's own code is in test_trl_equivalence.py."""

from __future__ import annotations

import pytest
import torch

import normlab
from normlab.rl import METHODS, PreferenceGroupAdvantage, advantages


def test_group_ids_equal_group_size_layout_and_permutation_equivariance():
    gen = torch.Generator().manual_seed(2)
    r = torch.randn(20, generator=gen, dtype=torch.float64)
    ids = torch.arange(20) // 5
    perm = torch.randperm(20, generator=gen)
    for method in ("grpo", "batch-std", "dr-grpo", "rloo", "gdpo", "slas"):
        base = advantages(r, 5, method=method)
        torch.testing.assert_close(base, advantages(r, ids * 7 - 3, method=method))
        # shuffling samples (with their ids) shuffles the advantages the same way
        torch.testing.assert_close(advantages(r[perm], ids[perm], method=method), base[perm])


def test_zero_mean_unit_std_and_group_independence():
    gen = torch.Generator().manual_seed(3)
    r = torch.randn(4, 6, generator=gen, dtype=torch.float64).flatten() * 3 + 1
    a = advantages(r, 6, method="grpo", eps=0.0).view(4, 6)
    torch.testing.assert_close(a.mean(1), torch.zeros(4, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(a.std(1), torch.ones(4, dtype=torch.float64))
    for method in ("dr-grpo", "rloo"):
        m = advantages(r, 6, method=method).view(4, 6).mean(1)
        torch.testing.assert_close(m, torch.zeros(4, dtype=torch.float64), atol=1e-12, rtol=0)
    gd = advantages(r, 6, method="gdpo", eps=0.0)
    assert abs(gd.mean().item()) < 1e-12 and abs(gd.std().item() - 1) < 1e-12
    # changing one group's rewards leaves group-local methods' other groups unchanged
    r2 = r.clone()
    r2[:6] = r2[:6] * 10 + 5
    for method in ("grpo", "dr-grpo", "rloo"):
        torch.testing.assert_close(
            advantages(r2, 6, method=method)[6:], advantages(r, 6, method=method)[6:]
        )


def test_rloo_is_leave_one_out():
    r = torch.tensor([1.0, 2.0, 6.0, 0.0, 0.0, 3.0], dtype=torch.float64)
    a = advantages(r, 3, method="rloo")
    expect = [1 - 4, 2 - 3.5, 6 - 1.5, 0 - 1.5, 0 - 1.5, 3 - 0.0]
    expect = torch.tensor(expect, dtype=torch.float64)
    torch.testing.assert_close(a, expect)


def test_slas_is_superlinear_in_the_batch_std_advantage():
    gen = torch.Generator().manual_seed(4)
    r = torch.randn(16, generator=gen, dtype=torch.float64)
    base = advantages(r, 4, method="batch-std")
    for gamma in (0.0, 0.5, 1.0):
        s = advantages(r, 4, method="slas", gamma=gamma)
        torch.testing.assert_close(s, base.sign() * base.abs() ** (1 + gamma))


def test_gdpo_normalises_columns_before_summing():
    gen = torch.Generator().manual_seed(5)
    r = torch.randn(12, 2, generator=gen, dtype=torch.float64)
    w = torch.tensor([1.0, 2.0], dtype=torch.float64)
    g = r.view(3, 4, 2)
    z = (g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)
    s = (z * w).sum(-1).flatten()
    torch.testing.assert_close(
        advantages(r, 4, method="gdpo", weights=w), (s - s.mean()) / (s.std() + 1e-4)
    )
    # a column's scale does not matter to GDPO; it dominates a sum-then-normalise GRPO
    big = r * torch.tensor([1.0, 1e3], dtype=torch.float64)
    torch.testing.assert_close(
        advantages(big, 4, method="gdpo", eps=1e-12), advantages(r, 4, method="gdpo", eps=1e-12)
    )
    assert not torch.allclose(advantages(big, 4), advantages(r, 4), atol=1e-2)


def test_constant_single_and_empty_groups():
    const = torch.full((8,), 2.5)
    for method in ("grpo", "batch-std", "dr-grpo", "rloo", "gdpo", "slas"):
        assert torch.equal(advantages(const, 4, method=method), torch.zeros(8))
    assert torch.equal(advantages(torch.tensor([1.0, 5.0]), 1, method="grpo"), torch.zeros(2))
    with pytest.raises(ValueError, match="at least 2"):
        advantages(torch.tensor([1.0, 5.0]), 1, method="rloo")
    with pytest.raises(ValueError, match="no rewards"):
        advantages(torch.zeros(0), 4)
    with pytest.raises(ValueError, match="does not divide"):
        advantages(torch.zeros(6), 4)
    with pytest.raises(ValueError, match="one id per reward"):
        advantages(torch.zeros(6), [0, 1])
    with pytest.raises(TypeError, match="integers"):
        advantages(torch.zeros(2), torch.tensor([0.0, 1.0]))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        advantages([1.0, 2.0], 2)
    with pytest.raises(ValueError, match="Unknown advantage"):
        advantages(torch.zeros(2), 2, method="ppo")
    with pytest.raises(ValueError, match="state="):
        advantages(torch.zeros(2), 2, method="p-grpo")


def test_p_grpo_scores_against_history_before_the_batch():
    pg = PreferenceGroupAdvantage(eps=0.0)
    first = torch.tensor([1.0, 3.0, 10.0, 30.0], dtype=torch.float64)
    a1 = advantages(first, [0, 0, 1, 1], method="p-grpo", state=pg)  # cold start: in-batch
    torch.testing.assert_close(a1, torch.tensor([-1, 1, -1, 1], dtype=torch.float64) / 2**0.5)
    second = torch.tensor([2.0, 20.0, 5.0], dtype=torch.float64)
    a2 = pg(second, [0, 1, 0])
    h0, h1 = torch.tensor([1.0, 3.0]), torch.tensor([10.0, 30.0])
    expect = [(2 - h0.mean()) / h0.std(), (20 - h1.mean()) / h1.std(), (5 - h0.mean()) / h0.std()]
    torch.testing.assert_close(a2, torch.tensor(expect, dtype=torch.float64))
    hist = torch.tensor([1.0, 3.0, 2.0, 5.0], dtype=torch.float64)  # Welford == batch stats
    assert pg.count[0] == 4 and abs(pg.mean[0] - hist.mean().item()) < 1e-12
    assert abs(pg.std[0] - hist.std().item()) < 1e-12
    clone = PreferenceGroupAdvantage(eps=0.0)
    clone.load_state_dict(pg.state_dict())
    probe = torch.tensor([4.0, 4.0], dtype=torch.float64)
    torch.testing.assert_close(clone(probe, [0, 1]), pg(probe, [0, 1]))


def test_registry_lists_every_advantage_method():
    names = {m.name for m in normlab.methods(kind="advantage")}
    assert names == set(METHODS)
    assert all(normlab.get(n).layout == "other" for n in names)
    r = torch.randn(8)
    torch.testing.assert_close(normlab.create("grpo", r, 4), advantages(r, 4))
    assert isinstance(normlab.create("p-grpo"), PreferenceGroupAdvantage)
