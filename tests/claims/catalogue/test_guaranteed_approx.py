"""The guaranteed-approx claim: its smoke table, effect signs, and premises that can fail."""

from __future__ import annotations

import math

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim
from normlab.surgery.approx import datapaths

CLAIM = get_claim("guaranteed-approx")


def test_guarantee_holds_and_its_control_breaks_it(smoke_measurement):
    table = smoke_measurement("guaranteed-approx")["table"]
    guaranteed, control = table["guaranteed"], table["unguaranteed"]
    assert guaranteed["max_sum_error"] < 1e-6 and guaranteed["max_sigma_error"] < 1e-4
    assert control["max_sum_error"] > 1e-3 and control["max_sigma_error"] > 1e-3
    assert table["guaranteed-fixed8"]["max_sum_error"] == 0.0  # exact in fixed point


def test_smoke_table(smoke_measurement):
    table = smoke_measurement("guaranteed-approx")["table"]
    assert set(table) == {"exact", *datapaths()}
    finite = [v for row in table.values() for k, v in row.items() if k != "late_share"]
    assert all(math.isfinite(v) for v in finite)
    assert CLAIM.config("quick")["seeds"] >= 5


def _m(default: float, exact: float = 3.2, guaranteed: float = 3.3, sum_error: float = 0.02):
    rows = {n: {"test_bpb": 3.3, "max_sum_error": 0.0} for n in datapaths()}
    rows["exact"] = {"test_bpb": exact}
    rows["default"]["test_bpb"] = default
    rows["guaranteed"]["test_bpb"] = guaranteed
    rows["unguaranteed"]["max_sum_error"] = sum_error
    return {"table": rows}


def test_the_primary_is_the_degradation_against_exact_and_can_go_both_ways():
    assert CLAIM.primary.name == "default_vs_exact" and CLAIM.primary.direction == "no_greater"
    assert "minimal degradation" in CLAIM.quote
    small = [_m(3.2 + 1e-4 * (1 + i % 3)) for i in range(5)]
    large = [_m(3.2 + 1e-2 * (1 + i % 3)) for i in range(5)]
    assert judge_claim(CLAIM, small).primary.verdict == "supported"
    assert judge_claim(CLAIM, large).primary.verdict == "contradicted"
    helps = next(e for e in CLAIM.secondary if e.name == "guarantee_helps")
    assert helps.fn(_m(3.2, guaranteed=3.2)) < 0 < helps.fn(_m(3.2, guaranteed=3.4))


def test_an_untrained_model_makes_the_primary_untestable():
    ms = [_m(7.6 + 1e-4 * i, exact=7.6) for i in range(5)]  # within a bit of uniform (8)
    verdict = judge_claim(CLAIM, ms)
    assert not next(p for p in verdict.premises if p.name == "exact_model_learned").held
    assert verdict.primary.verdict == "untestable"


def test_a_normalizing_control_makes_the_guarantee_untestable():
    ms = [_m(3.2 + 1e-4 * i, sum_error=1e-5) for i in range(5)]
    verdict = judge_claim(CLAIM, ms)
    assert not next(p for p in verdict.premises if p.name == "unguaranteed_breaks_sum").held
    helps = next(e for e in verdict.effects if e.name == "guarantee_helps")
    assert helps.verdict == "untestable"
    assert verdict.primary.verdict == "supported"


def test_the_guarantees_check_can_fail(monkeypatch):
    """A datapath whose softmax leaves |sum p - 1| = 1e-3 (or whose LayerNorm's std is off
    by 1e-3) fails the check; the model and probe stand in for the trained ones."""
    from normlab.claims.catalogue import guaranteed_approx as claim_module

    check = next(c for c in CLAIM.checks if c.name == "guarantees_hold")
    config = CLAIM.config("smoke")
    monkeypatch.setattr(claim_module, "_trained", lambda config, seed: (None, {}))
    monkeypatch.setattr(claim_module, "_probe", lambda config, seed: None)
    for errors in ((0.0, 0.0), (1e-3, 0.0), (0.0, 1e-3)):
        row = {"max_sum_error": errors[0], "max_sigma_error": errors[1]}
        monkeypatch.setattr(claim_module, "normalization_errors", lambda *a, row=row, **k: row)
        assert check.fn(config).passed == (errors == (0.0, 0.0))
