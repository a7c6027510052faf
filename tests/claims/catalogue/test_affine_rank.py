"""The affine-rank claim: LayerNorm's rank arithmetic, the stacks, and its effects' signs."""

from __future__ import annotations

import torch

from normlab.claims.catalogue.affine_rank import CLAIM, STACKS, _ln_rank_trials


def test_smoke_run_measures_every_stack(smoke_measurement):
    m = smoke_measurement("affine-rank")
    depth = CLAIM.config("smoke")["depth"]
    for name in STACKS:
        assert len(m["curves"][name]) == depth
        assert 0 <= m["table"][name]["residual_last"] <= 1 + 1e-12
    assert m["table"]["plain-out"]["gate_identifiability"] < 1e-12
    assert 0 <= m["table"]["pgop"]["gate_identifiability"] <= 1
    # the contradicted neutrality: +1 on low-rank sets off the origin, 0 in general position
    assert m["table"]["ln-low"]["affine_rank_change"] == 1.0
    assert m["table"]["ln-general"]["affine_rank_change"] == 0.0


def test_layernorm_adds_exactly_one_affine_dimension_off_the_origin():
    trials = _ln_rank_trials(6, 12, 4, torch.Generator().manual_seed(3))
    assert trials["general"] == [0] * 4 and trials["low"] == [1] * 4
    assert trials["through_origin"] == [0] * 4 and trials["matrix_zero_bias"] == [0] * 4


def _table(no_res, res, res_ln, no_res_ln):
    drops = {
        "attention": no_res,
        "attention+residual": res,
        "attention+ln": no_res_ln,
        "attention+residual+ln": res_ln,
    }
    table = {k: {"log10_drop": v, "residual_last": 0.1} for k, v in drops.items()}
    # PG-OP cells: identifiable and cheap in the "collapse" table, the reverse otherwise.
    good = no_res > res
    table["pgop"] = {"gate_identifiability": 0.2 if good else 0.0, "loss": 1.0 if good else 1.5}
    table["plain-out"] = {
        "gate_identifiability": 0.0 if good else 0.1,
        "loss": 1.2 if good else 1.0,
    }
    table["ln-low"] = {"affine_rank_change": 0.0 if good else 1.0}
    table["ln-general"] = {"affine_rank_change": 0.0 if good else 1.0}
    return {"table": table}


def test_effects_take_both_signs_on_constructed_tables():
    collapse, none = _table(10.0, 0.1, 0.2, 9.0), _table(0.1, 3.0, 4.0, 0.2)
    for effect in CLAIM.effects:
        lo, hi = sorted((effect.fn(collapse), effect.fn(none)))
        assert lo < 0 < hi or (lo < effect.margin.value < hi), effect.name
    assert CLAIM.primary.fn(collapse) > 0 > CLAIM.primary.fn(none)


def test_pgop_gates_each_head_per_position_and_starts_as_the_plain_projection():
    from normlab.attention import PositionGatedOutput, gate_identifiability

    torch.manual_seed(0)
    pgop = PositionGatedOutput(8, 2, 5).double()
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    torch.testing.assert_close(pgop(x), pgop.proj(x))
    with torch.no_grad():
        pgop.gate[1, 0] = 1.0  # head 0 at position 1 doubled
    expected = x.clone()
    expected[:, 1, :4] *= 2
    torch.testing.assert_close(pgop(x), pgop.proj(expected))
    assert pgop.overhead == 10 / (64 + 8)
    assert gate_identifiability(torch.ones(5, 2)) < 1e-12
    assert gate_identifiability(pgop.gains(5)) > 0
    import pytest

    with pytest.raises(ValueError, match="max_positions"):
        pgop(torch.randn(1, 6, 8, dtype=torch.float64))
