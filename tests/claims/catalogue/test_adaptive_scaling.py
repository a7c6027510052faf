"""The adaptive-scaling claim: smoke run, and effect signs on hand-built tables."""

from __future__ import annotations

import json
import math

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim
from normlab.training.streaks import SCALINGS

CLAIM = get_claim("adaptive-scaling")
FIXED = ("zscore", "minmax", "asinh")


def _table(learned: float, fixed: tuple[float, float, float], frozen: float = 0.1) -> dict:
    rows = zip(FIXED, fixed, strict=True)
    table = {arm: {"val_f1": f, "test_f1": f, "lr": 1e-2} for arm, f in rows}
    table["learned"] = {"val_f1": learned, "test_f1": learned, "lr": 1e-2}
    table["frozen"] = {"val_f1": frozen, "test_f1": frozen, "lr": 1e-2}
    return {"table": table}


def test_smoke_run_gives_finite_effects(smoke_measurement):
    m = smoke_measurement(CLAIM.id)
    json.dumps(m)
    for arm in SCALINGS:
        assert 0.0 <= m["table"][arm]["test_f1"] <= 1.0
    for effect in CLAIM.effects:
        for e in effect.parts or (effect,):
            assert math.isfinite(e.fn(m)), e.name
    assert set(m["tuning"]) == set(SCALINGS)
    assert m["table"]["learned"]["softening"] > 0 and "softening" not in m["table"]["asinh"]
    assert m["table"]["data"]["streak_pixel_fraction"] > 0
    assert CLAIM.config("quick")["seeds"] >= 5


def test_effects_land_on_both_sides():
    good, bad = _table(0.6, (0.1, 0.2, 0.4)), _table(0.2, (0.1, 0.2, 0.5))
    for effect in (CLAIM.primary, *CLAIM.secondary):
        for e in effect.parts or (effect,):
            assert e.fn(good) > e.margin.value, e.name
    assert CLAIM.primary.fn(bad) < -CLAIM.primary.margin.value
    assert (
        next(e for e in CLAIM.secondary if e.name == "learning_helps").fn(_table(0.05, (0.1,) * 3))
        < 0
    )
    pre = CLAIM.premises[0]
    assert pre.fn(good) > pre.margin.value > pre.fn(_table(0.2, (0.1, 0.1, 0.2)))


def test_best_fixed_is_chosen_on_validation():
    m = _table(0.5, (0.1, 0.2, 0.4))
    m["table"]["asinh"]["test_f1"] = 0.3  # best on validation, worse on test than minmax's
    m["table"]["minmax"]["test_f1"] = 0.45
    selected = next(e for e in CLAIM.secondary if e.name == "f1_vs_best_fixed")
    assert math.isclose(selected.fn(m), 0.5 - 0.3)
    assert CLAIM.primary.baseline == "asinh"


def test_checks_pass():
    for check in CLAIM.checks:
        outcome = check.fn(CLAIM.config("smoke"))
        assert outcome.passed, (check.name, outcome)


def _tuned(table: dict, learned_val: float, late: float = 0.01) -> dict:
    """The engine's tuning records: every arm's validation score (minus F1) against the
    every-pixel reference, and the late share of its training curve."""
    tuning = {a: {"reference": -0.035, "val": -0.6, "late_share": 0.01} for a in SCALINGS}
    tuning["learned"].update(val=-learned_val, late_share=late)
    return {**table, "tuning": tuning}


def test_a_learned_arm_that_did_not_train_makes_the_primary_untestable():
    ok = [_tuned(_table(0.6 + 0.01 * i, (0.1, 0.2, 0.6)), 0.6 + 0.01 * i) for i in range(5)]
    assert judge_claim(CLAIM, ok).primary.verdict != "untestable"
    flat = [_tuned(_table(0.0, (0.1, 0.2, 0.6)), 0.0) for _ in range(5)]  # F1 0: as min-max
    verdict = judge_claim(CLAIM, flat)
    assert not next(p for p in verdict.premises if p.name == "learned_learned").held
    assert verdict.primary.verdict == "untestable"
    late = [_tuned(_table(0.6, (0.1, 0.2, 0.6)), 0.6, late=0.3 + 0.01 * i) for i in range(5)]
    assert judge_claim(CLAIM, late).primary.verdict == "untestable"  # under-trained


def test_the_start_is_asinh_with_the_linear_start_its_neighbour():
    assert CLAIM.config("quick")["start"] == "asinh"
    start = next(f for f in CLAIM.free_settings if f.key == "start")
    assert start.neighbours(CLAIM.config("quick")) == ("linear", "linear")
