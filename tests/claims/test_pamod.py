"""The pamod claim runs at smoke scale; its table and effects are well formed."""

from __future__ import annotations

import json
import math

import torch

from normlab.claims import get_claim
from normlab.claims.catalogue.pamod import CONTROL_MARGIN


def test_smoke_run_table_and_effects():
    torch.set_num_threads(1)
    claim = get_claim("pamod")
    measurement = claim.run(claim.config("smoke"), 0)
    json.loads(json.dumps(measurement))
    table = measurement["table"]
    assert set(table) == {"revin", "pamod"}
    for row in table.values():
        assert set(row) == {"mse", "mae", "mse_control", "mae_control"}
        assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in row.values())
    groups = {r["group"] for r in measurement["per_config"].values()}
    assert groups == {"cyclic", "control"}
    for tables in measurement["tables"].values():
        assert len(tables["phase"]) == len(tables["amplitude"]) == 168
        assert all(a > 0 for a in tables["amplitude"])
    for effect in claim.effects:
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), effect.name
    assert claim.config("quick")["seeds"] >= 3


def test_effects_have_the_claimed_sign_on_constructed_measurements():
    claim = get_claim("pamod")
    gain, control = (e.fn for e in claim.effects)

    def measurement(cyclic_pamod, control_pamod):
        return {
            "per_config": {
                "c": {"group": "cyclic", "revin": {"mse": 1.0}, "pamod": {"mse": cyclic_pamod}},
                "n": {"group": "control", "revin": {"mse": 1.0}, "pamod": {"mse": control_pamod}},
            }
        }

    assert gain(measurement(0.8, 1.0)) > 0 > gain(measurement(1.1, 1.0))
    assert control(measurement(0.8, 1.0 + CONTROL_MARGIN / 2)) > 0
    assert control(measurement(0.8, 1.0 + 2 * CONTROL_MARGIN)) < 0
