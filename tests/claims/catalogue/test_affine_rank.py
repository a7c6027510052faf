"""The affine-rank claim: LayerNorm's rank arithmetic, the stacks, and its effects' signs."""

from __future__ import annotations

import torch

from normlab.claims.catalogue.affine_rank import CLAIM, STACKS
from normlab.claims.core import CheckOutcome
from normlab.claims.rule import judge_claim
from normlab.training.attention_rank import ln_rank_trials

_TRAINED = ("trained-attention+ln", "trained-attention+residual+ln")


def test_smoke_run_measures_every_stack(smoke_measurement):
    m = smoke_measurement("affine-rank")
    depth = CLAIM.config("smoke")["depth"]
    for name in (*STACKS, *_TRAINED):
        assert len(m["curves"][name]) == depth
        assert 0 <= m["table"][name]["residual_last"] <= 1 + 1e-6
    assert m["table"][_TRAINED[1]]["loss"] > 0
    assert m["table"]["plain-out"]["gate_identifiability"] < 1e-12
    assert 0 <= m["table"]["pgop"]["gate_identifiability"] <= 1
    # the contradicted neutrality: +1 on low-rank sets off the origin, 0 in general position
    assert m["table"]["ln-low"]["affine_rank_change"] == 1.0
    assert m["table"]["ln-general"]["affine_rank_change"] == 0.0


def test_layernorm_adds_exactly_one_affine_dimension_off_the_origin():
    trials = ln_rank_trials(6, 12, 4, torch.Generator().manual_seed(3))
    assert trials["general"] == [0] * 4 and trials["low"] == [1] * 4
    assert trials["through_origin"] == [0] * 4 and trials["matrix_zero_bias"] == [0] * 4


def _table(no_res, res, trained_no_res=10.0, loss=1.0, late=0.01):
    good = no_res > res
    table = {
        "attention+ln": {"log10_drop": no_res},
        "attention+residual+ln": {"log10_drop": res},
        _TRAINED[0]: {"log10_drop": trained_no_res if good else no_res},
        _TRAINED[1]: {"log10_drop": res, "loss": loss, "late_share": late},
        # PG-OP cells: identifiable and cheap in the "collapse" table, the reverse otherwise
        "pgop": {"gate_identifiability": 0.2 if good else 0.0, "loss": 1.0 if good else 1.5},
        "plain-out": {"gate_identifiability": 0.0 if good else 0.1, "loss": 1.2 if good else 1.0},
        "ln-low": {"affine_rank_change": 0.0 if good else 1.0},
        "ln-general": {"affine_rank_change": 0.0 if good else 1.0},
    }
    return {"table": table}


def test_effects_take_both_signs_on_constructed_tables():
    collapse, none = _table(10.0, 0.1), _table(0.1, 3.0)
    for effect in CLAIM.effects:
        lo, hi = sorted((effect.fn(collapse), effect.fn(none)))
        assert lo < 0 < hi or (lo < effect.margin.value < hi), effect.name
    assert CLAIM.primary.fn(collapse) > 0 > CLAIM.primary.fn(none)


def _trained_verdict(**kw):
    checks = {c.name: CheckOutcome(True, 0.0, "") for c in CLAIM.checks}
    ms = [_table(10.0 + 0.1 * i, 0.1, **kw) for i in range(6)]
    verdict = judge_claim(CLAIM, ms, checks)
    return verdict, next(e for e in verdict.effects if e.name.endswith("_trained"))


def test_premises_can_fail():
    verdict, trained = _trained_verdict()
    assert verdict.verdict == "supported" and trained.verdict == "supported"
    assert _trained_verdict(loss=2.7)[1].verdict == "untestable"  # did not learn
    assert _trained_verdict(late=0.4)[1].verdict == "untestable"  # still learning
    checks = {c.name: CheckOutcome(True, 0.0, "") for c in CLAIM.checks}
    no_collapse = [_table(1.0 + 0.01 * i, 0.1) for i in range(6)]
    assert judge_claim(CLAIM, no_collapse, checks).verdict == "untestable"


def test_checks_pass_at_smoke():
    cfg = CLAIM.config("smoke")
    for check in CLAIM.checks:
        assert check.fn(cfg).passed, check.name


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
