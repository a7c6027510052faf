"""The ssl-centering claim: smoke run, its check, NMI, and effect signs on hand-built tables."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.claims import get_claim

CLAIM = get_claim("ssl-centering")


def _m(none, center, prior, nmi_c=0.7, nmi_p=0.7):
    return {
        "clusters": 8,
        "table": {
            "none": {"effective_clusters": none, "nmi": 0.3},
            "center": {"effective_clusters": center, "nmi": nmi_c},
            "prior": {"effective_clusters": prior, "nmi": nmi_p},
        },
    }


def test_effects_come_out_both_ways():
    primary, collapses, c_vs_p, p_vs_c = CLAIM.primary, *CLAIM.secondary
    center, prior = primary.parts
    assert center.fn(_m(1.0, 7.0, 6.0)) == pytest.approx(6.0)
    assert prior.fn(_m(1.0, 7.0, 6.0)) == pytest.approx(5.0)
    assert prior.fn(_m(6.0, 7.0, 1.0)) == pytest.approx(-5.0)
    (premise,) = CLAIM.premises
    assert premise.fn(_m(5.0, 7, 7)) > premise.margin.value > premise.fn(_m(7.5, 7, 7))
    assert collapses.fn(_m(1.1, 7, 7)) < collapses.margin.value
    assert collapses.fn(_m(5.0, 7, 7)) > collapses.margin.value
    assert c_vs_p.fn(_m(1, 7, 7, nmi_c=0.5, nmi_p=0.8)) < -c_vs_p.margin.value
    assert p_vs_c.fn(_m(1, 7, 7, nmi_c=0.5, nmi_p=0.8)) > 0


@pytest.mark.slow
def test_smoke_run_and_checks():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    assert set(m["tuning"]) == {"none", "center", "prior"}
    for effect in CLAIM.effects:
        for e in effect.parts or (effect,):
            assert math.isfinite(e.fn(m)), e.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name
    assert CLAIM.config("quick")["seeds"] >= 5


def _seeds(none: float, n: int = 5) -> list[dict]:
    return [_m(none + 0.05 * k, 7.0 + 0.05 * k, 7.2 - 0.05 * k) for k in range(n)]


def test_the_premise_and_an_under_trained_arm_gate_the_primary():
    from normlab.claims.core import CheckOutcome
    from normlab.claims.rule import judge_claim

    passed = {c.name: CheckOutcome(True, 0.0) for c in CLAIM.checks}
    assert judge_claim(CLAIM, _seeds(4.0), passed).verdict == "supported"
    verdict = judge_claim(CLAIM, _seeds(7.6), passed)  # no partial collapse: nothing to prevent
    assert not verdict.premises[0].held and verdict.verdict == "untestable"
    slow = _seeds(4.0)
    for m in slow:
        m["tuning"] = {"none": {"late_share": 0.3}}
    verdict = judge_claim(CLAIM, slow, passed)
    premise = next(p for p in verdict.premises if p.name == "none_converged")
    assert not premise.held and verdict.verdict == "untestable"


def test_the_quick_grid_spans_a_decade_and_a_half_and_extends():
    space = CLAIM.config("quick")["search"]
    lrs = space["space"]["lr"]
    assert len(lrs) == 4 and max(lrs) / min(lrs) > 30 and space.get("extend", 1) >= 1


def test_self_distill_gives_its_loss_curve():
    from normlab.training.distill import gaussian_mixture, self_distill

    x, _ = gaussian_mixture(256, clusters=4, dim=8, seed=0)
    teacher, fitted = self_distill(x, clusters=4, mode="center", steps=12, batch=32, seed=0)
    assert fitted.diverged is None and len(fitted.losses) == 12
    assert all(math.isfinite(v) for v in fitted.losses) and not teacher.training
