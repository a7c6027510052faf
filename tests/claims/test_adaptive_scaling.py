"""The adaptive-scaling claim: smoke run, and effect signs on hand-built tables."""

from __future__ import annotations

import json
import math

from normlab.claims.catalogue.adaptive_scaling import ARMS, CLAIM, FIXED, f1_score


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
        assert math.isfinite(effect.fn(m)), effect.name
    assert m["table"]["data"]["streak_pixel_fraction"] > 0
    assert CLAIM.config("quick")["seeds"] >= 5


def test_effects_land_on_both_sides():
    good, bad = _table(0.6, (0.1, 0.2, 0.4)), _table(0.2, (0.1, 0.2, 0.5))
    for effect in (CLAIM.primary, *CLAIM.secondary):
        assert effect.fn(good) > effect.margin.value, effect.name
    assert CLAIM.primary.fn(bad) < -CLAIM.primary.margin.value
    assert (
        next(e for e in CLAIM.secondary if e.name == "learning_helps").fn(_table(0.05, (0.1,) * 3))
        < 0
    )
    pre = CLAIM.preconditions[0]
    assert pre.holds(pre.fn(good)) and not pre.holds(pre.fn(_table(0.2, (0.1, 0.1, 0.2))))


def test_best_fixed_is_chosen_on_validation():
    m = _table(0.5, (0.1, 0.2, 0.4))
    m["table"]["asinh"]["test_f1"] = 0.3  # best on validation, worse on test than minmax's
    m["table"]["minmax"]["test_f1"] = 0.45
    got = {e.name: e.fn(m) for e in CLAIM.effects}
    assert math.isclose(got["f1_vs_best_fixed"], 0.5 - 0.3)
    assert math.isclose(got["f1_vs_max_fixed"], 0.5 - 0.45)


def test_f1_score_closed_form():
    import torch

    mask = torch.tensor([1.0, 1.0, 0.0, 0.0])
    logits = torch.tensor([2.0, -1.0, 3.0, -2.0])  # TP 1, FN 1, FP 1
    assert math.isclose(f1_score(logits, mask), 2 / 4)


def test_learned_and_frozen_arms_start_as_the_asinh_arm():
    import torch

    from normlab.claims.catalogue.adaptive_scaling import _net
    from normlab.data.streaks import streak_frames

    x, _ = streak_frames(4, torch.Generator().manual_seed(0), size=8, frames=3, stars=2)
    outs = {}
    for arm in ("asinh", "learned", "frozen"):
        torch.manual_seed(0)
        outs[arm] = _net(arm, x, 3, 4).scale(x)
    torch.testing.assert_close(outs["learned"], outs["asinh"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs["frozen"], outs["asinh"], rtol=1e-5, atol=1e-5)
    assert not any(p.requires_grad for p in _net("frozen", x, 3, 4).scaling.parameters())
