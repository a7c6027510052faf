"""The curvature-spikes claim: smoke run, check, statistics on planted series, effect signs."""

from __future__ import annotations

import math

from normlab.claims.catalogue.curvature_spikes import CLAIM
from normlab.claims.rule import judge_claim


def test_smoke_run_checks_and_effect_signs(smoke_measurement):
    cfg = CLAIM.config("smoke")
    m = smoke_measurement(CLAIM.id)
    for e in CLAIM.effects:
        assert math.isfinite(e.fn(m)), e.name
    for c in CLAIM.checks:
        assert c.fn(cfg).passed, c.name
    assert CLAIM.figure([m]) is not None
    assert len(m["curves"]["loss"]) == len(m["curves"]["curvature"]) == cfg["steps"]
    margin = CLAIM.primary.margin.value
    assert m["table"]["observed"]["rho"] == m["table"]["modular"]["rho"]
    assert m["table"]["placebo"]["rho"] == m["table"]["modular"]["rho_placebo"]

    def table(rho: float, spiked: float) -> dict:
        rows = {"observed": {"rho": rho}, "placebo": {"rho": 0.0}}
        return {"table": {**rows, "modular": {"spiked": spiked}}}

    assert CLAIM.primary.fn(table(0.3, 1.0)) > margin and CLAIM.primary.fn(table(-0.2, 1)) < 0
    premise = CLAIM.premises[0]
    assert premise.fn(table(0.3, 1.0)) > premise.margin.value > premise.fn(table(0.3, 0.0))


def _m(rho: float, spiked: float, acc: float = 1.0) -> dict:
    rows = {"observed": {"rho": rho}, "placebo": {"rho": 0.0}}
    return {"table": {**rows, "modular": {"spiked": spiked, "test_acc": acc}}}


def _primary(measurements: list) -> str:
    return judge_claim(CLAIM, measurements).effects[0].verdict


def test_the_controls_can_fail():
    rhos = [0.2, 0.25, 0.3, 0.22, 0.28, 0.24]
    assert _primary([_m(r, 1.0) for r in rhos]) == "supported"
    # no spikes in most seeds: nothing to coincide, untestable
    assert _primary([_m(r, float(i < 2)) for i, r in enumerate(rhos)]) == ("untestable")
    # a model that only memorises (test accuracy at chance): untestable
    assert _primary([_m(r, 1.0, 0.1) for r in rhos]) == "untestable"


def test_spikes_are_read_on_the_training_sets_loss(smoke_measurement):
    cfg = CLAIM.config("smoke")
    assert cfg["loss_sequences"] == cfg["train_size"]
    assert CLAIM.config("quick")["loss_sequences"] == CLAIM.config("quick")["train_size"]


def test_the_closed_form_check_can_fail(monkeypatch):
    """A closed-form LayerNorm Jacobian off by 1e-6 (here: scaled) fails the check."""
    from normlab.claims.catalogue import curvature_spikes as claim_module

    check = next(c for c in CLAIM.checks if c.name == "closed_form_curvature")
    config = CLAIM.config("smoke")
    assert check.fn(config).passed
    exact = claim_module.norm_jacobian
    monkeypatch.setattr(claim_module, "norm_jacobian", lambda *a: exact(*a) * (1 + 1e-6))
    assert not check.fn(config).passed
