"""Every registered claim runs end to end at smoke scale; its checks pass; effects are finite."""

from __future__ import annotations

import math

import pytest

from normlab.claims import all_claims

CLAIMS = all_claims()


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim_runs_at_smoke_scale(claim, smoke_measurement):
    measurement = smoke_measurement(claim.id)
    table = measurement["table"]
    assert table and all(isinstance(row, dict) and row for row in table.values())
    for method, row in table.items():
        for metric, value in row.items():
            assert isinstance(value, float | int), (method, metric, value)
    for effect in (p for e in claim.effects for p in (e.parts or (e,))):
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), (effect.name, value)
    for pre in claim.preconditions:
        assert math.isfinite(float(pre.fn(measurement))), pre.name


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim_checks_pass_at_smoke_scale(claim):
    config = claim.config("smoke")
    for check in claim.checks:
        outcome = check.fn(config)
        assert outcome.passed, (check.name, outcome)
