"""The kappa-attention claim: smoke table, operator checks, and the effect's sign."""

from __future__ import annotations

import math

import torch

from normlab.claims import get_claim
from normlab.probes.score_tails import (
    abe_deviation,
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
    assert all(math.isfinite(row["log10_tail_p"]) for row in table.values())
    assert CLAIM.primary.fn({"table": table}) > CLAIM.primary.margin.value
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


def test_effect_sign_on_hand_built_tables():
    def m(kappa: float, tail: float = -5.0) -> dict:
        return {
            "table": {
                "softmax": {"test_bpb": 3.3, "log10_tail_p": -13.0},
                "kappa-softmax": {"test_bpb": kappa, "log10_tail_p": tail},
            }
        }

    lm = CLAIM.secondary[0]
    assert lm.fn(m(3.25)) < 0 < lm.fn(m(3.4))
    assert CLAIM.primary.fn(m(3.3)) > 1 > CLAIM.primary.fn(m(3.3, tail=-13.5))


def test_lm_extension_is_full_scale_only():
    """The LM secondary is declared and trained at full; quick measures the operator only."""
    (lm,) = CLAIM.secondary
    assert lm.scales == ("full",)
    assert [CLAIM.config(s)["lm_extension"] for s in ("smoke", "quick", "full")] == [
        True,
        False,
        True,
    ]
    config = {**CLAIM.config("quick"), "rows": 4, "keys": 8}
    m = CLAIM.run(config, 0)
    assert set(m["table"]) == {"softmax", "kappa-softmax"} and "tuning" not in m
    assert all(set(row) == {"log10_tail_p"} for row in m["table"].values())
