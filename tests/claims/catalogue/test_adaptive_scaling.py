"""The adaptive-scaling claim: smoke run, and effect signs on hand-built tables."""

from __future__ import annotations

import json
import math

from normlab.claims.catalogue.adaptive_scaling import ARMS, CLAIM, FIXED


def _table(learned: float, fixed: tuple[float, float, float], frozen: float = 0.1) -> dict:
    rows = zip(FIXED, fixed, strict=True)
    table = {arm: {"val_f1": f, "test_f1": f, "lr": 1e-2} for arm, f in rows}
    table["learned"] = {"val_f1": learned, "test_f1": learned, "lr": 1e-2}
    table["frozen"] = {"val_f1": frozen, "test_f1": frozen, "lr": 1e-2}
    return {"table": table}


def test_smoke_run_gives_finite_effects(smoke_measurement):
    m = smoke_measurement(CLAIM.id)
    json.dumps(m)
    for arm in ARMS:
        assert 0.0 <= m["table"][arm]["test_f1"] <= 1.0
    for effect in CLAIM.effects:
        for e in effect.parts or (effect,):
            assert math.isfinite(e.fn(m)), e.name
    assert set(m["tuning"]) == set(ARMS)
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


def test_learned_and_frozen_arms_start_alike_and_frozen_does_not_train():
    import torch

    from normlab.claims.catalogue.adaptive_scaling import _net
    from normlab.data.streaks import streak_frames

    x, _ = streak_frames(4, torch.Generator().manual_seed(0), size=8, frames=3, stars=2)
    for start in ("asinh", "linear"):
        outs = {}
        for arm in ("asinh", "learned", "frozen"):
            torch.manual_seed(0)
            outs[arm] = _net(arm, x, 3, 4, start).scale(x)
        torch.testing.assert_close(outs["frozen"], outs["learned"], rtol=1e-5, atol=1e-5)
        same = torch.allclose(outs["learned"], outs["asinh"], rtol=1e-5, atol=1e-5)
        assert same == (start == "asinh")
    assert not any(p.requires_grad for p in _net("frozen", x, 3, 4).scaling.parameters())
