"""The looped claim: smoke run, the parameter-free check, effect and premise signs."""

from __future__ import annotations

import math

from normlab.claims import get_claim
from normlab.claims.core import CheckOutcome
from normlab.claims.rule import judge_claim

CLAIM = get_claim("looped")
ARMS = ("plain-large", "fully-large", "signal-large", "attn-large", "plain-mild", "fully-mild")

CHECKS = {"parameter_free": CheckOutcome(True, 0.0)}


def _table(plain_large, fully_large, plain_mild=3.6, fully_mild=3.55, growth=(2.0, 1.0)):
    def row(v, g=1.0):
        return {"test_bpb": v, "residual_growth": g}

    return {
        "table": {
            "plain-large": row(plain_large, growth[0]),
            "fully-large": row(fully_large, growth[1]),
            "signal-large": row(fully_large),
            "attn-large": row(plain_large),
            "plain-mild": row(plain_mild),
            "fully-mild": row(fully_mild),
        }
    }


def test_smoke_run_and_checks(smoke_measurement):
    cfg = CLAIM.config("smoke")
    m = smoke_measurement(CLAIM.id)
    assert set(m["table"]) == set(ARMS) == set(m["tuning"])
    for e in CLAIM.effects:
        assert math.isfinite(e.fn(m)), e.name
    for arm, row in m["table"].items():
        assert row["lr"] == m["tuning"][arm]["chosen"]["lr"]
    assert cfg["n_layers"] >= 2  # a stack per loop: "all layers" differs from the entry
    for c in CLAIM.checks:
        assert c.fn(cfg).passed, c.name
    assert CLAIM.figure([m]) is not None


def test_effects_land_on_both_sides():
    by_name = {e.name: e for e in CLAIM.effects}
    collapsed = _table(6.0, 3.5, growth=(3.0, 1.0))
    assert CLAIM.primary.fn(collapsed) < -CLAIM.primary.margin.value
    assert by_name["mild_no_worse"].fn(collapsed) < by_name["mild_no_worse"].margin.value
    resid = by_name["residual_explosion"]
    assert resid.fn(collapsed) < -resid.margin.value
    reversed_ = _table(3.4, 3.8, 3.5, 3.9, growth=(1.0, 2.0))
    assert CLAIM.primary.fn(reversed_) > 0
    assert by_name["mild_no_worse"].fn(reversed_) > by_name["mild_no_worse"].margin.value
    assert resid.fn(reversed_) > 0


def test_no_degradation_of_the_plain_model_makes_stability_untestable():
    collapsed = [_table(6.0 + 0.1 * i, 3.5) for i in range(4)]
    assert judge_claim(CLAIM, collapsed, CHECKS).verdict == "supported"
    # the plain model does as well at many loops as at few: the premise fails
    flat = [_table(3.6 + 0.01 * i, 3.5) for i in range(4)]
    verdict = judge_claim(CLAIM, flat, CHECKS)
    assert verdict.verdict == "untestable"
    assert {e.name: e.verdict for e in verdict.effects}["mild_no_worse"] != "untestable"


def test_a_diverged_plain_model_counts_as_the_uniform_predictor():
    from normlab.claims.rule import with_divergence

    m = {**_table(3.6, 3.5), "diverged": {"plain-large": {"step": 40, "last": 3.9}}}
    value = CLAIM.primary.fn(with_divergence(m, CLAIM.primary.if_diverged))
    assert value < -4


def test_quick_trains_every_arm_its_measured_effects_name():
    from normlab.claims.core import measured_at

    for scale in ("quick", "full"):
        arms = set(CLAIM.config(scale)["search"]["arms"])
        for effect in CLAIM.effects:
            if measured_at(effect, scale):
                assert {effect.method, effect.baseline} <= arms, (scale, effect.name)
    assert set(CLAIM.config("full")["search"]["arms"]) == set(ARMS)


def test_a_plain_model_that_collapses_at_every_lr_reads_did_not_train():
    """The open design question of issue 35: the paper's phenomenon is the baseline
    collapsing, but the engine's learned premise makes a plain-large arm whose every trial
    diverged "did not train" (untestable), not a supported stability gap."""
    ms = []
    for i in range(5):
        m = _table(3.6, 3.5 + 0.01 * i)
        m["tuning"] = {
            arm: {"reference": 8.0, "val": None if arm == "plain-large" else 3.6}
            for arm in m["table"]
        }
        m["diverged"] = {"plain-large": {"step": 40, "last": 9.0}}
        ms.append(m)
    verdict = judge_claim(CLAIM, ms, CHECKS)
    assert verdict.verdict == "untestable"
    assert "plain-large did not train" in verdict.effects[0].reason
