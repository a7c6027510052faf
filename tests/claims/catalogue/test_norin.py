"""The norin claim: its smoke run, its placebo, its start, its effects' signs and its controls."""

from __future__ import annotations

import math

import pytest

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim

CLAIM = get_claim("norin")
ARMS = ("revin", "dish-ts", "san", "norin", "norin-joint")
LINEAR_END = (30.0, 0.0)  # the Slifker-Shapiro fallback where the windows are not S_U
PRIOR_BELOW = math.log(10 / 0.3) / math.log(100)  # a random pick's share below delta = 10


def test_smoke_run_has_every_series_arm_and_search(smoke_measurement):
    m = smoke_measurement("norin")
    config = CLAIM.config("smoke")
    for series, backbones in config["series"].items():
        for arm in ARMS:
            row = m["table"][f"{series}/{arm}"]
            assert row["mse"] > 0 and math.isfinite(row["mae"]), (series, arm)
        selected = m["table"][f"{series}/selected"]
        assert math.log10(0.3) - 1e-9 <= selected["log10_delta"] <= math.log10(30) + 1e-9
        assert selected["below_linear"] in (0.0, 0.5, 1.0)
        for backbone in backbones:
            key = f"{series}/{backbone}"
            assert m["delta_trajectory"][key][0] == config["delta_init"]
            assert len(m["bo"][key]["trials"]) == config["trials"]
            for arm in ARMS:  # one record per table arm, pooling its backbones
                assert key in m["tuning"][f"{series}/{arm}"]["configs"]
    assert {k for k in m["tuning"]} == {f"{s}/{a}" for s in config["series"] for a in ARMS}
    # EPF windows are S_B: the fit falls back, and the search starts at the linear end
    fit = m["slifker_shapiro"]["epf_prices/linear"]
    assert fit["family"] == "SB" and fit["fallback"]
    assert m["bo"]["epf_prices/linear"]["trials"][0][:2] == pytest.approx(list(LINEAR_END))


def test_placebo_is_the_log_uniform_prior(smoke_measurement):
    placebo = smoke_measurement("norin")["table"]["epf_prices/placebo"]
    assert placebo["below_linear"] == pytest.approx(PRIOR_BELOW)
    assert placebo["backbone_gap"] == pytest.approx(2 / 3)


def _table(norin, others, below, gap, drift, matters):
    rows = {}
    for s in ("epf_prices", "heavy_tailed"):
        for arm in ARMS:
            rows[f"{s}/{arm}"] = {"mse": others}
        rows[f"{s}/norin"] = {"mse": norin}
        rows[f"{s}/norin-joint"]["drift_fraction"] = drift
        rows[f"{s}/selected"] = {"below_linear": below, "backbone_gap": gap}
        rows[f"{s}/placebo"] = {"below_linear": PRIOR_BELOW, "backbone_gap": 2 / 3}
        rows[f"{s}/shape"] = {"shape_matters": matters}
    return {"table": rows}


def test_effects_take_both_signs_on_constructed_tables():
    good, bad = _table(0.8, 1.0, 1.0, 1.2, 0.5, 1.0), _table(1.2, 1.0, 0.0, 0.1, -0.5, 0.0)
    for effect in (e for top in CLAIM.effects for e in top.parts or (top,)):
        g, b = effect.fn(good), effect.fn(bad)
        assert g * b < 0, effect.name
        assert (g > 0) == (effect.direction == "greater"), effect.name
    premise = CLAIM.premises[0]
    assert premise.fn(good) > premise.margin.value > premise.fn(bad)


def test_the_primary_reads_every_delta_below_the_cut_as_supported():
    seeds = [_table(0.8, 1.0, 1.0, 1.2, 0.5, 1.0) for _ in range(5)]
    assert judge_claim(CLAIM, seeds).verdict == "supported"
    seeds[0]["table"]["epf_prices/selected"]["below_linear"] = 0.5  # one backbone near linear
    assert judge_claim(CLAIM, seeds).verdict == "inconclusive"


def test_shape_matters_fails_and_makes_the_primary_untestable():
    """No usable shape moved the validation MSE: delta* is noise, the primary untestable."""
    seeds = [_table(0.8, 1.0, 1.0, 1.2, 0.5, 0.0) for _ in range(5)]
    verdict = judge_claim(CLAIM, seeds)
    premise = next(p for p in verdict.premises if p.name == "shape_matters")
    assert not premise.held and verdict.verdict == "untestable"


def test_an_under_trained_arm_makes_its_comparisons_untestable():
    seeds = [_table(0.8, 1.0, 1.0, 1.2, 0.5, 1.0) for _ in range(5)]
    for m in seeds:
        m["tuning"] = {"epf_prices/revin": {"late_share": 0.3}}
    verdict = judge_claim(CLAIM, seeds)
    versus = next(e for e in verdict.effects if e.name == "epf_prices_beats_every_baseline")
    assert versus.verdict == "untestable" and verdict.verdict == "supported"


def test_a_diverged_joint_run_is_recorded_and_counts_as_no_drift(monkeypatch):
    import dataclasses

    import normlab.training.norin as study
    from normlab.claims.rule import learned_premises, with_divergence

    real = study.train_forecaster

    def diverging(model, *args, **kwargs):
        result = real(model, *args, **kwargs)
        if kwargs.get("on_epoch") is not None:  # the joint arm, as if its loss turned non-finite
            result = dataclasses.replace(result, diverged={"step": 2, "last": 0.5})
        return result

    monkeypatch.setattr(study, "train_forecaster", diverging)
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
