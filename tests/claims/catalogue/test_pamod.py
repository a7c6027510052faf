"""The pamod claim: its smoke run, the calendar baseline and the signs of its effects."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from normlab.claims import get_claim
from normlab.series import CalendarRevIN

CLAIM = get_claim("pamod")
METHODS = ("revin", "revin-calendar", "pamod")
COMPARISON = ("san", "fan", "dishts")
ROLES = {"cyclic": "synthetic", "vic_elec_hourly": "demand", "epf_prices": "prices"}
ROLES["cyclic_control"] = "control"


def test_smoke_run_has_every_series_and_method(smoke_measurement):
    m = smoke_measurement("pamod")
    config = CLAIM.config("smoke")
    for name in (*config["cyclic"], *config["control"]):
        for method in METHODS:
            row = m["table"][f"{ROLES[name]}/{method}"]
            assert row["mse"] > 0 and math.isfinite(row["mae"])
    for method in COMPARISON:
        assert m["table"][f"demand/{method}"]["mse"] > 0
    assert all(r["grid_trials"] == 1 for r in m["tuning"].values())
    # one tuning record per table arm, so the learned premise gates the effects reading it
    assert set(m["tuning"]) == set(m["table"])
    assert set(m["tuning"]["demand/pamod"]["configs"]) == {"vic_elec_hourly/H96/linear"}
    assert {k for k in m["per_config"]} == {f"{n}/H96/linear" for n in ROLES}
    for tables in m["tables"].values():
        assert len(tables["phase"]) == len(tables["amplitude"]) == 168


def test_calendar_revin_modulates_only_the_mean_by_time_step():
    norm = CalendarRevIN(2, periods=(24, 168))
    x = torch.randn(3, 96, 2)
    index = torch.tensor([0, 5, 100])
    z, _ = norm.normalize(x, index=index)
    with torch.no_grad():
        norm.coef.normal_()
    z2, _ = norm.normalize(x, index=index)
    assert not torch.allclose(z, z2)
    a, phi = norm.modulation(torch.arange(24)[None])
    assert torch.equal(a, torch.ones_like(a)) and phi.shape == (1, 24, 2)
    norm.reset_parameters()
    torch.testing.assert_close(norm.normalize(x, index=index)[0], z)  # zero coef: RevIN


def _table(pamod, revin, control):
    rows = {}
    for role in ("demand", "prices", "synthetic"):
        rows[f"{role}/pamod"] = {"mse": pamod}
        rows[f"{role}/revin"] = {"mse": revin}
        rows[f"{role}/revin-calendar"] = {"mse": revin}
    for method in COMPARISON:
        rows[f"demand/{method}"] = {"mse": revin}
    rows["control/pamod"] = {"mse": control}
    rows["control/revin"] = {"mse": 1.0}
    return {"table": rows}


def test_effects_take_both_signs_on_constructed_tables():
    good, bad = _table(0.8, 1.0, 0.99), _table(1.2, 1.0, 1.2)
    for effect in (e for top in CLAIM.effects for e in top.parts or (top,)):
        assert effect.fn(good) < 0 < effect.fn(bad), effect.name


def test_an_arm_whose_every_run_diverged_is_recorded_and_counts_as_the_mean(monkeypatch):
    import normlab.training.forecast as forecast
    from normlab.claims.rule import learned_premises, with_divergence

    real = forecast.train_forecaster

    def diverging(model, *args, **kwargs):
        result = real(model, *args, **kwargs)
        if type(model.norm).__name__ == "PAMod":  # as if its loss had turned non-finite
            result = dataclasses.replace(result, diverged={"step": 3, "last": None})
        return result

    monkeypatch.setattr(forecast, "train_forecaster", diverging)
    config = {**CLAIM.config("smoke"), "cyclic": ["vic_elec_hourly"], "control": []}
    m = CLAIM.run(config, 0)
    assert m["diverged"] == {"demand/pamod": {"step": 3, "last": None}}
    assert m["tuning"]["demand/pamod"]["val"] is None
    (pamod,) = (
        p for p in learned_premises([m], CLAIM.effects) if p.name == "demand/pamod_learned"
    )
    assert not pamod.held and CLAIM.primary.name in pamod.gates
    primary = CLAIM.primary
    counted = primary.fn(with_divergence(m, primary.if_diverged))
    assert counted == pytest.approx(-math.log10(m["table"]["demand/revin-calendar"]["mse"]))


def _seeds(calendar: float, late_share: float = 0.0, n: int = 6):
    out = []
    for i in range(n):
        m = _table(0.8 + 0.01 * i, 1.0, 0.99)
        m["table"]["demand/revin-calendar"]["mse"] = calendar
        m["tuning"] = {"demand/pamod": {"late_share": late_share}}
        out.append(m)
    return out


def test_the_calendar_premise_can_fail_and_then_the_primary_is_untestable():
    from normlab.claims.rule import judge_claim

    assert judge_claim(CLAIM, _seeds(0.95)).verdict == "supported"
    verdict = judge_claim(CLAIM, _seeds(1.05))  # calendar features hurt RevIN: no usable cycle
    premise = next(p for p in verdict.premises if p.name == "calendar_helps_revin")
    assert not premise.held and verdict.verdict == "untestable"


def test_an_under_trained_pamod_makes_the_primary_untestable():
    from normlab.claims.rule import judge_claim

    verdict = judge_claim(CLAIM, _seeds(0.95, late_share=0.3))
    assert verdict.verdict == "untestable" and "under-trained" in verdict.reason
