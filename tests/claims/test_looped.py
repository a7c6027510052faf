"""The looped claim: smoke run, the parameter-free check, effect and precondition signs."""

from __future__ import annotations

import math

from normlab.claims.catalogue.looped import CLAIM


def _table(plain_large, fully_large, plain_mild, fully_mild, growth=(2.0, 1.0)):
    def row(v, g=1.0):
        return {"val_bpb": v, "residual_growth": g}

    return {
        "table": {
            "plain-large": row(plain_large, growth[0]),
            "fully-large": row(fully_large, growth[1]),
            "plain-mild": row(plain_mild),
            "fully-mild": row(fully_mild),
        }
    }


def test_smoke_run_and_checks(smoke_measurement):
    cfg = CLAIM.config("smoke")
    m = smoke_measurement(CLAIM.id)
    assert set(m["table"]) == {"plain-large", "fully-large", "plain-mild", "fully-mild"}
    for e in CLAIM.effects:
        assert math.isfinite(e.fn(m)), e.name
    for row in m["table"].values():
        assert row["lr"] in cfg["lrs"] and row["diverged"] == 0
    for c in CLAIM.checks:
        assert c.fn(cfg).passed, c.name
    assert CLAIM.figure([m]) is not None


def test_effects_land_on_both_sides():
    primary, mild, resid = CLAIM.effects
    collapsed = _table(6.0, 3.5, 3.6, 3.55, growth=(3.0, 1.0))
    assert primary.fn(collapsed) > primary.margin.value
    assert mild.fn(collapsed) < mild.margin.value
    assert resid.fn(collapsed) > resid.margin.value
    reversed_ = _table(3.4, 3.8, 3.5, 3.9, growth=(1.0, 2.0))
    assert primary.fn(reversed_) < 0
    assert mild.fn(reversed_) > mild.margin.value
    assert resid.fn(reversed_) < 0
    pre = CLAIM.preconditions[0]
    assert pre.holds(pre.fn(collapsed)) and not pre.holds(pre.fn(_table(7, 7, 7, 7)))
