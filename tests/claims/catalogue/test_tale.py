"""The tale claim: its smoke run, its control arms and the signs of its effects."""

from __future__ import annotations

import math

from normlab.claims.catalogue.tale import CLAIM
from normlab.claims.core import CheckOutcome
from normlab.claims.rule import judge_claim


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


def _table(ood_gain, id_gain, random_gain, realign, late=0.01, ood_mse=100.0, gap=0.5):
    def row(gain, gap_after, mse=1.0):
        return {
            "log10_gain": gain,
            "profile_gap": gap,
            "profile_gap_pruned": gap_after,
            "test_mse": mse,
            "test_mse_pruned": mse * 10**-gain,
        }

    return {
        "table": {
            "full-ood": {"test_mse_pruned": ood_mse},
            "full-id": {"test_mse_pruned": 1.0, "late_share": late},
            "tale-ood": row(ood_gain, gap - realign, ood_mse),
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


def test_primary_is_ood_gain_minus_id_gain():
    assert abs(CLAIM.primary.fn(_table(0.3, 0.1, 0.0, 0.0)) - 0.2) < 1e-12
    assert CLAIM.primary.fn(_table(0.3, 0.3, 0.0, 0.0)) == 0.0  # helps both: no claim


def test_premises_can_fail():
    checks = {c.name: CheckOutcome(True, 0.0, "") for c in CLAIM.checks}

    def judge(**kw):
        return judge_claim(
            CLAIM, [_table(0.2 + 0.01 * i, 0.0, 0.0, 0.1, **kw) for i in range(8)], checks
        )

    assert judge().verdict == "supported"
    assert judge(late=0.3).verdict == "untestable"  # the network was still learning
    assert judge(ood_mse=1.5).verdict == "untestable"  # the shift does not hurt
    realign = next(e for e in judge(gap=0.01).effects if e.name == "geometry_realigns")
    assert realign.verdict == "untestable"  # no distortion to repair
