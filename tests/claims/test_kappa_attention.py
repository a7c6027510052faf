"""The kappa-attention claim runs at smoke scale and its effects are finite numbers."""

from __future__ import annotations

import json
import math

import torch

from normlab.claims import get_claim


def test_smoke_run_table_and_effects():
    torch.set_num_threads(1)
    claim = get_claim("kappa-attention")
    measurement = claim.run(claim.config("smoke"), 0)
    json.dumps(measurement)
    table = measurement["table"]
    assert {"operator", "tail", "abe", "softmax", "kappa-softmax", "lm"} <= set(table)
    for row in table.values():
        assert all(isinstance(v, float) and math.isfinite(v) for v in row.values()), row
    # the operator checks are exact enough to hold even at smoke size
    assert table["operator"]["max_err"] < 1e-5
    assert abs(table["operator"]["order_in_kappa"] - 2) < 0.05
    assert table["tail"]["max_rel_error"] < 0.1
    assert abs(table["abe"]["order_in_eps"] - 2) < 0.1
    assert table["abe"]["reciprocal_gap"] < 1e-12
    for effect in claim.effects:
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), effect.name
    assert set(claim.configs["quick"]) >= {"seeds", "steps", "lm_kappa", "lm_margin"}
    assert claim.config("quick")["seeds"] >= 3
