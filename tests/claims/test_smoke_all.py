"""Every registered claim runs end to end at smoke scale and yields finite effects."""

from __future__ import annotations

import json
import math

import pytest
import torch

from normlab.claims import all_claims

CLAIMS = all_claims()


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim_runs_at_smoke_scale(claim):
    torch.set_num_threads(1)
    measurement = claim.run(claim.config("smoke"), 0)
    json.dumps(measurement)  # must be JSON-serialisable for the cache and the report
    table = measurement["table"]
    assert table and all(isinstance(row, dict) and row for row in table.values())
    for method, row in table.items():
        for metric, value in row.items():
            assert isinstance(value, float | int), (method, metric, value)
    for effect in claim.effects:
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), (effect.name, value)
