"""The norin claim: its smoke run, its placebo, its neutral start and its effects' signs."""

from __future__ import annotations

import math

import pytest

from normlab.claims import get_claim

CLAIM = get_claim("norin")
ARMS = ("revin", "dish-ts", "san", "norin", "norin-joint")
NEUTRAL = (3.0, 0.0)  # the search's start where the windows are not S_U
PRIOR_LOG10_DELTA = math.log10(3.0)  # the placebo: mean log10 delta of the search's prior


def test_smoke_run_has_every_series_arm_and_search(smoke_measurement):
    m = smoke_measurement("norin")
    config = CLAIM.config("smoke")
    for series, backbones in config["series"].items():
        for arm in ARMS:
            row = m["table"][f"{series}/{arm}"]
            assert row["mse"] > 0 and math.isfinite(row["mae"]), (series, arm)
        selected = m["table"][f"{series}/selected"]["log10_delta"]
        assert math.log10(0.3) - 1e-9 <= selected <= math.log10(30) + 1e-9
        for backbone in backbones:
            key = f"{series}/{backbone}"
            assert m["delta_trajectory"][key][0] == config["delta_init"]
            assert len(m["bo"][key]["trials"]) == config["trials"]
            for arm in ARMS:  # one record per table arm, pooling its backbones
                assert key in m["tuning"][f"{series}/{arm}"]["configs"]
    assert {k for k in m["tuning"]} == {f"{s}/{a}" for s in config["series"] for a in ARMS}
    # EPF windows are S_B: the fit falls back, and the search starts at the neutral point
    fit = m["slifker_shapiro"]["epf_prices/linear"]
    assert fit["family"] == "SB" and fit["fallback"]
    assert m["bo"]["epf_prices/linear"]["trials"][0][:2] == pytest.approx(list(NEUTRAL))


def test_placebo_is_the_log_uniform_prior(smoke_measurement):
    placebo = smoke_measurement("norin")["table"]["epf_prices/placebo"]
    assert abs(placebo["log10_delta"] - PRIOR_LOG10_DELTA) < 1e-12
    assert abs(placebo["backbone_gap"] - 2 / 3) < 1e-12


def _table(norin, others, log10_delta, gap, drift, spread):
    rows = {}
    for s in ("epf_prices", "heavy_tailed"):
        for arm in ARMS:
            rows[f"{s}/{arm}"] = {"mse": others, "best_is_last": 0.0}
        rows[f"{s}/norin"] = {"mse": norin, "best_is_last": 0.0}
        rows[f"{s}/norin-joint"]["drift_fraction"] = drift
        rows[f"{s}/selected"] = {"log10_delta": log10_delta, "backbone_gap": gap}
        rows[f"{s}/placebo"] = {"log10_delta": PRIOR_LOG10_DELTA, "backbone_gap": 2 / 3}
        rows[f"{s}/shape"] = {"shape_matters": spread}
    return {"table": rows}


def test_effects_take_both_signs_on_constructed_tables():
    good, bad = _table(0.8, 1.0, 0.0, 1.2, 0.5, 1.0), _table(1.2, 1.0, 1.4, 0.1, -0.5, 0.0)
    for effect in (e for top in CLAIM.effects for e in top.parts or (top,)):
        g, b = effect.fn(good), effect.fn(bad)
        assert g * b < 0, effect.name
        assert (g > 0) == (effect.direction == "greater"), effect.name
    premise = CLAIM.premises[0]
    assert premise.fn(good) > premise.margin.value > premise.fn(bad)


def test_a_diverged_joint_run_is_recorded_and_counts_as_no_drift(monkeypatch):
    import dataclasses

    import normlab.training.forecast as forecast
    from normlab.claims.rule import learned_premises, with_divergence

    real = forecast.train_forecaster

    def diverging(model, *args, **kwargs):
        result = real(model, *args, **kwargs)
        if kwargs.get("on_epoch") is not None:  # the joint arm, as if its loss turned non-finite
            result = dataclasses.replace(result, diverged={"step": 2, "last": 0.5})
        return result

    monkeypatch.setattr(forecast, "train_forecaster", diverging)
    config = {**CLAIM.config("smoke"), "series": {"epf_prices": ["linear"]}}
    m = CLAIM.run(config, 0)
    assert m["diverged"] == {"epf_prices/norin-joint": {"step": 2, "last": 0.5}}
    drift = next(e for e in CLAIM.effects if e.name == "epf_prices_delta_drift")
    assert drift.fn(with_divergence(m, drift.if_diverged)) == 0.0
    versus = next(e for e in CLAIM.effects if e.name == "heavy_tailed_vs_revin")
    assert versus.if_diverged["mse"] == 1.0
    joint = next(
        p for p in learned_premises([m], CLAIM.effects) if p.name.endswith("joint_learned")
    )
    assert joint.name == "epf_prices/norin-joint_learned" and drift.name in joint.gates
    assert joint.state == "failed"
