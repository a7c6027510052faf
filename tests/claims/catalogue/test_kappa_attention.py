"""The kappa-attention claim: smoke table, operator checks, the effect and its controls."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim
from normlab.probes.score_tails import (
    abe_deviation,
    attention_log_range,
    random_scores,
    softmax_limit,
    tail_exponent,
    tail_probability,
)

CLAIM = get_claim("kappa-attention")


def test_smoke_table(smoke_measurement):
    table = smoke_measurement("kappa-attention")["table"]
    assert set(table) == {"softmax", "kappa-softmax"}
    assert all(math.isfinite(row["test_bpb"]) for row in table.values())
    assert all(row["attention_log_range"] >= 0 for row in table.values())
    assert CLAIM.config("quick")["seeds"] >= 5


def test_operator_properties_hold_tightly():
    g = torch.Generator().manual_seed(1)

    def scores():
        return random_scores(8, 16, 2.0, g)

    limit = softmax_limit(scores(), (1e-3, 1e-2))
    assert limit["max_err"] < 1e-5 and abs(limit["order_in_kappa"] - 2) < 0.05
    tail, _ = tail_exponent(scores(), (0.1, 0.2, 0.4), 9)
    assert tail["max_rel_error"] < 0.1
    abe, _ = abe_deviation(scores(), (0.05, 0.1))
    assert abs(abe["order_in_eps"] - 2) < 0.1 and abe["reciprocal_gap"] < 1e-12


def test_tail_probability_is_algebraic_for_kappa_only():
    """Doubling the distance divides kappa-softmax's far-score mass by about 2^(1/kappa)
    and softmax's by about e^d."""
    head = random_scores(8, 16, 2.0, torch.Generator().manual_seed(0))
    near, far = tail_probability(head, 50.0, 0.2), tail_probability(head, 100.0, 0.2)
    kappa_drop = near["kappa-softmax"] - far["kappa-softmax"]
    assert abs(kappa_drop - math.log10(2) / 0.2) < 0.1
    assert abs(near["softmax"] - far["softmax"] - 50 / math.log(10)) < 1e-6


def _m(kappa_bpb: float, log_range: float = 8.0) -> dict:
    return {
        "table": {
            "softmax": {"test_bpb": 3.3, "attention_log_range": log_range},
            "kappa-softmax": {"test_bpb": kappa_bpb, "attention_log_range": log_range},
        }
    }


def test_effect_sign_on_hand_built_tables():
    assert CLAIM.primary.name == "lm_bpb_gap" and CLAIM.primary.scales == ()
    assert CLAIM.primary.fn(_m(3.25)) < 0 < CLAIM.primary.fn(_m(3.4))


def test_the_primary_can_fail_and_the_premise_gates_it():
    near = [_m(3.30 + 0.001 * i) for i in range(5)]
    assert judge_claim(CLAIM, near).primary.verdict == "supported"
    worse = [_m(3.40 + 0.001 * i) for i in range(5)]
    assert judge_claim(CLAIM, worse).primary.verdict == "contradicted"
    flat = [_m(3.30 + 0.001 * i, log_range=2.0 + 0.1 * i) for i in range(5)]
    verdict = judge_claim(CLAIM, flat)
    assert not next(p for p in verdict.premises if p.name == "softmax_reaches_far_scores").held
    assert verdict.primary.verdict == "untestable"


def test_checks_can_fail():
    config = CLAIM.config("quick")
    checks = {c.name: c for c in CLAIM.checks}
    assert checks["tail_heavier"].fn(config).passed
    assert not checks["tail_heavier"].fn({**config, "tail_distance": 3.0}).passed
    assert not checks["recovers_softmax"].fn({**config, "limit_kappas": (0.5, 0.6)}).passed


def test_attention_log_range_is_the_softmax_score_range():
    scores = torch.tensor([[0.0, -2.0, -7.0, -1.0]]).expand(1, 1, 4, 4).clone()
    causal = torch.ones(4, 4).tril().bool()
    probs = scores.masked_fill(~causal, -math.inf).softmax(-1)
    # rows with >= 4 keys: the last row, whose scores span 7
    assert attention_log_range([probs], min_keys=4) == pytest.approx(7.0)


def test_the_formula_checks_can_fail(monkeypatch):
    """The operator's tail slope and Abe's symmetry hold for every valid config, so a probe
    reading an operator without them stands in: an exponential tail (slope far from
    -1/kappa), a first-order deviation from softmax, an odd part left by q <-> 1/q."""
    from normlab.claims.catalogue import kappa_attention as claim_module

    config = CLAIM.config("quick")
    checks = {c.name: c for c in CLAIM.checks}
    st = claim_module.st
    bad_tail = {f"slope_kappa_{k:g}": -50.0 for k in config["tail_kappas"]}
    monkeypatch.setattr(st, "tail_exponent", lambda *a: ({**bad_tail, "max_rel_error": 4.0}, {}))
    assert not checks["algebraic_tail"].fn(config).passed
    for order, gap in ((1.0, 0.0), (2.0, 1e-3)):
        row = {"order_in_eps": order, "reciprocal_gap": gap}
        monkeypatch.setattr(st, "abe_deviation", lambda *a, row=row: (row, {}))
        assert not checks["abe_no_odd_terms"].fn(config).passed
