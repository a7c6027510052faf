"""The kappa-attention claim: smoke table, operator checks, and the effect's sign."""

from __future__ import annotations

import math

import torch

from normlab.claims import get_claim
from normlab.claims.catalogue.kappa_attention import abe_deviation, softmax_limit, tail_exponent

CLAIM = get_claim("kappa-attention")


def test_smoke_table(smoke_measurement):
    table = smoke_measurement("kappa-attention")["table"]
    assert set(table) == {"softmax", "kappa-softmax"}
    assert all(math.isfinite(row["val_bpb"]) for row in table.values())
    assert CLAIM.config("quick")["seeds"] >= 5


def test_operator_properties_hold_tightly():
    config = CLAIM.config("smoke")
    g = torch.Generator().manual_seed(1)
    limit = softmax_limit(config, g)
    assert limit["max_err"] < 1e-5 and abs(limit["order_in_kappa"] - 2) < 0.05
    tail, _ = tail_exponent(config, g)
    assert tail["max_rel_error"] < 0.1
    abe, _ = abe_deviation(config, g)
    assert abs(abe["order_in_eps"] - 2) < 0.1 and abe["reciprocal_gap"] < 1e-12


def test_effect_sign_on_hand_built_tables():
    def m(kappa: float) -> dict:
        return {"table": {"softmax": {"val_bpb": 3.3}, "kappa-softmax": {"val_bpb": kappa}}}

    assert CLAIM.primary.fn(m(3.25)) < 0 < CLAIM.primary.fn(m(3.4))
