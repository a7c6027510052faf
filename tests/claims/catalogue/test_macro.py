"""The macro claim: smoke run, its checks, effect signs on hand-built tables, and the
premises (scale growth, convergence) that gate the primary."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.claims.catalogue.macro import CLAIM
from normlab.claims.core import CheckOutcome
from normlab.claims.rule import judge_claim

_PASS = {c.name: CheckOutcome(True, 0.0) for c in CLAIM.checks}


def _m(macro_bpb, base_bpb, macro_growth=0.0, control_growth=1.0, k=0):
    def row(bpb, growth):
        bpb, growth = bpb + 0.01 * k, growth + 0.01 * k  # a spread over seeds
        return {"test_bpb": bpb, "scale_growth": growth, "final_scale": 10.0**growth}

    return {
        "table": {
            "nonorm-macro": row(macro_bpb, macro_growth),
            "rmsnorm-macro": row(base_bpb, 0.2),
            "rmsnorm-adamw": row(base_bpb + 0.2, 0.5),
            "nonorm-adamw": row(4.0, control_growth),
        }
    }


def test_the_primary_compares_the_norm_under_macro():
    assert (CLAIM.primary.method, CLAIM.primary.baseline) == ("nonorm-macro", "rmsnorm-macro")


def test_effects_come_out_both_ways():
    primary = CLAIM.primary
    bound, growth = (
        e for e in CLAIM.secondary if e.name in ("activation_bound", "growth_vs_adamw")
    )
    assert primary.fn(_m(3.0, 3.1)) == pytest.approx(-0.1)
    assert primary.fn(_m(3.3, 3.1)) > primary.margin.value
    for effect in (bound, growth):
        assert effect.fn(_m(3, 3, macro_growth=0.0, control_growth=1.0)) < -effect.margin.value
        assert effect.fn(_m(3, 3, macro_growth=1.0, control_growth=0.0)) > effect.margin.value


def test_the_premises_gate_the_primary():
    good = [_m(3.0, 3.0, k=k) for k in range(5)]
    assert judge_claim(CLAIM, good, _PASS).verdict == "supported"
    still = [_m(3.0, 3.0, control_growth=0.0, k=k) for k in range(5)]  # no-norm AdamW stays flat
    verdict = judge_claim(CLAIM, still, _PASS)
    assert verdict.verdict == "untestable"
    assert not next(p for p in verdict.premises if p.name == "nonorm_scale_grows").held
    slow = [_m(3.0, 3.0, k=k) for k in range(5)]
    for m in slow:  # RMSNorm + MACRO still learning when its budget ended
        m["tuning"] = {"rmsnorm-macro": {"late_share": 0.3}}
    verdict = judge_claim(CLAIM, slow, _PASS)
    assert verdict.verdict == "untestable" and "under-trained" in verdict.effects[0].reason


def test_search_is_decoupled_with_equal_trials():
    from normlab.claims.protocol import searches

    spaces = searches(CLAIM.config("quick"))
    assert set(spaces["nonorm-macro"].space) == {"lr", "macro_lr"}
    assert spaces["rmsnorm-macro"].space == spaces["nonorm-macro"].space
    assert len({s.trials for s in spaces.values()}) == 1


def test_smoke_run_and_checks():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    assert (
        set(m["tuning"])
        == set(m["table"])
        == {
            "rmsnorm-adamw",
            "nonorm-macro",
            "nonorm-adamw",
            "rmsnorm-macro",
        }
    )
    for effect in CLAIM.effects:
        assert math.isfinite(effect.fn(m)), effect.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name
    assert CLAIM.config("quick")["seeds"] >= 5
