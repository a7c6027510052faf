"""The tale claim: its smoke run, its control arms and the signs of its effects."""

from __future__ import annotations

import math

from normlab.claims.catalogue.tale import CLAIM


def test_smoke_run_has_tale_and_random_arms(smoke_measurement):
    m = smoke_measurement("tale")
    depth, remove = CLAIM.config("smoke")["depth"], CLAIM.config("smoke")["max_remove"]
    for arm in ("tale-id", "tale-ood", "random-id", "random-ood"):
        row = m["table"][arm]
        assert row["test_mse"] > 0 and math.isfinite(row["log10_gain"]), arm
    for dist in ("id", "ood"):
        path = m["curves"][dist]["tale"]
        assert len(path["steps"]) == remove and len(path["steps"][-1]["kept"]) == depth - remove
        assert len(m["curves"][dist]["profile"]["norms"]) == depth + 1
        # the arm keeps the best validation point of the path, the full model included
        chosen = m["table"][f"tale-{dist}"]["removed"]
        assert chosen == depth - len(path["best_kept"]) and 0 <= chosen <= remove
        full = m["table"][f"full-{dist}"]["test_mse_pruned"]
        assert full == m["table"][f"tale-{dist}"]["test_mse"]
    # the full model's ID-vs-ID gap is zero only when both come from the same inputs
    assert m["table"]["tale-ood"]["profile_gap"] > 0


def _table(ood_gain, id_gain, random_gain, realign):
    def row(gain, gap_after):
        return {
            "log10_gain": gain,
            "profile_gap": 0.5,
            "profile_gap_pruned": gap_after,
            "test_mse": 1.0,
            "test_mse_pruned": 10**-gain,
        }

    return {
        "table": {
            "full-ood": {"test_mse_pruned": 1.0},
            "full-id": {"test_mse_pruned": 1.0},
            "tale-ood": row(ood_gain, 0.5 - realign),
            "tale-id": row(id_gain, 0.5),
            "random-ood": row(random_gain, 0.5),
            "random-id": row(0.0, 0.5),
        }
    }


def test_effects_take_both_signs_on_constructed_tables():
    good, bad = _table(0.3, -0.2, 0.0, 0.2), _table(-0.3, 0.2, 0.1, -0.2)
    for effect in CLAIM.effects:
        assert effect.fn(good) * effect.fn(bad) < 0, effect.name
    assert CLAIM.primary.fn(good) > CLAIM.primary.margin.value
