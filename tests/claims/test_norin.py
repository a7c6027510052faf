"""The norin claim: its smoke run, its placebo and the signs of its effects."""

from __future__ import annotations

import math

from normlab.claims.catalogue.norin import (
    BASELINES,
    CLAIM,
    PRIOR_BELOW_LINEAR,
    PRIOR_LOG10_DELTA,
)


def test_smoke_run_has_every_series_method_and_search(smoke_measurement):
    m = smoke_measurement("norin")
    config = CLAIM.config("smoke")
    for series in config["series"]:
        for method in (*BASELINES, "norin", "norin-joint"):
            row = m["table"][f"{series}/{method}"]
            assert row["mse"] > 0 and math.isfinite(row["mae"]), (series, method)
        shape = m["table"][f"{series}/shape"]
        assert math.log10(0.3) - 1e-9 <= shape["log10_delta_star"] <= math.log10(30) + 1e-9
    for key, trajectory in m["delta_trajectory"].items():
        assert trajectory[0] == config["delta_init"], key
        assert len(m["bo"][key]["trials"]) == config["trials"]


def test_placebo_is_the_log_uniform_prior():
    assert math.log10(3.0) == PRIOR_LOG10_DELTA or abs(PRIOR_LOG10_DELTA - math.log10(3)) < 1e-12
    assert abs(PRIOR_BELOW_LINEAR - 0.7614) < 1e-3  # a flat objective already gives 0.76


def _table(norin, others, log10_delta, drift):
    rows = {}
    for s in ("epf_prices", "heavy_tailed"):
        rows[f"{s}/norin"] = {"mse": norin}
        for b in BASELINES:
            rows[f"{s}/{b}"] = {"mse": others}
        rows[f"{s}/shape"] = {"log10_delta_star": log10_delta, "log_delta_drift": drift}
    return {"table": rows}


def test_effects_take_both_signs_on_constructed_tables():
    good, bad = _table(0.8, 1.0, 0.0, 0.5), _table(1.2, 1.0, 1.4, -0.5)
    for effect in CLAIM.effects:
        g, b = effect.fn(good), effect.fn(bad)
        assert g * b < 0, effect.name
        assert (g > 0) == (effect.direction == "greater"), effect.name
