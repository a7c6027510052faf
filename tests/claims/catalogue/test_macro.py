"""The macro claim: smoke run, its checks, and effect signs on hand-built tables."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.claims.catalogue.macro import CLAIM


def _m(macro_bpb, base_bpb, macro_growth=0.0, control_growth=1.0):
    def row(bpb, growth):
        return {"test_bpb": bpb, "scale_growth": growth, "final_scale": 10.0**growth}

    return {
        "table": {
            "nonorm-macro": row(macro_bpb, macro_growth),
            "rmsnorm-adamw": row(base_bpb, 0.5),
            "nonorm-adamw": row(4.0, control_growth),
        }
    }


def test_effects_come_out_both_ways():
    primary, bound, growth = CLAIM.primary, CLAIM.secondary[0], CLAIM.secondary[1]
    assert primary.fn(_m(3.0, 3.1)) == pytest.approx(-0.1)
    assert primary.fn(_m(3.3, 3.1)) > primary.margin.value
    for effect in (bound, growth):
        assert effect.fn(_m(3, 3, macro_growth=0.0, control_growth=1.0)) < -effect.margin.value
        assert effect.fn(_m(3, 3, macro_growth=1.0, control_growth=0.0)) > effect.margin.value


def test_search_is_decoupled_with_equal_trials():
    from normlab.claims.protocol import searches

    spaces = searches(CLAIM.config("quick"))
    assert set(spaces["nonorm-macro"].space) == {"lr", "macro_lr"}
    assert len({s.trials for s in spaces.values()}) == 1


def test_smoke_run_and_checks():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    assert set(m["tuning"]) == set(m["table"])
    for effect in CLAIM.effects:
        assert math.isfinite(effect.fn(m)), effect.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name
    assert CLAIM.config("quick")["seeds"] >= 5
