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
