"""The norin claim: its smoke run, its placebo, its neutral start and its effects' signs."""

from __future__ import annotations

import math

import pytest

from normlab.claims.catalogue.norin import (
    ARMS,
    CLAIM,
    NEUTRAL,
    PRIOR_LOG10_DELTA,
    PRIOR_LOG10_GAP,
)


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
            assert set(ARMS) <= {k.rsplit("/", 1)[1] for k in m["tuning"] if k.startswith(key)}
    # EPF windows are S_B: the fit falls back, and the search starts at the neutral point
    fit = m["slifker_shapiro"]["epf_prices/linear"]
    assert fit["family"] == "SB" and fit["fallback"]
    assert m["bo"]["epf_prices/linear"]["trials"][0][:2] == pytest.approx(list(NEUTRAL))


def test_placebo_is_the_log_uniform_prior():
    assert abs(PRIOR_LOG10_DELTA - math.log10(3.0)) < 1e-12
    assert abs(math.log10(NEUTRAL[0]) - PRIOR_LOG10_DELTA) < 0.01  # the neutral start
    assert abs(PRIOR_LOG10_GAP - 2 / 3) < 1e-12


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
    for effect in CLAIM.effects:
        g, b = effect.fn(good), effect.fn(bad)
        assert g * b < 0, effect.name
        assert (g > 0) == (effect.direction == "greater"), effect.name
    premise = CLAIM.premises[0]
    assert premise.fn(good) > premise.margin.value > premise.fn(bad)


def test_a_diverged_joint_run_is_recorded_and_counts_as_no_drift(monkeypatch):
    import dataclasses

    import normlab.claims.catalogue.norin as module
    from normlab.claims.rule import with_divergence

    real = module.fit_and_test

    def diverging(norm, *args, **kwargs):
        model, result, test = real(norm, *args, **kwargs)
        if kwargs.get("learn_shape"):  # the joint arm, as if its loss turned non-finite
            result = dataclasses.replace(result, diverged={"step": 2, "last": 0.5})
        return model, result, test

    monkeypatch.setattr(module, "fit_and_test", diverging)
    config = {**CLAIM.config("smoke"), "series": {"epf_prices": ["linear"]}}
    m = module.run(config, 0)
    assert m["diverged"] == {"epf_prices/norin-joint": {"step": 2, "last": 0.5}}
    drift = next(e for e in CLAIM.effects if e.name == "epf_prices_delta_drift")
    assert drift.fn(with_divergence(m, drift.if_diverged)) == 0.0
    versus = next(e for e in CLAIM.effects if e.name == "heavy_tailed_vs_revin")
    assert versus.if_diverged["mse"] == 1.0
