"""The bn-unlearning claim: its smoke run, its unlearning modes and its effects' signs."""

from __future__ import annotations

from normlab.claims.catalogue.bn_unlearning import CLAIM, MODES


def test_smoke_run_has_every_arm(smoke_measurement):
    m = smoke_measurement("bn-unlearning")
    for method in ("grad-ascent", "neggrad+"):
        for mode in MODES:
            row = m["table"][f"batch/{method}/{mode}"]
            assert 0 <= row["forget_acc"] <= 1 and 0 <= row["forget_acc_attacker"] <= 1
            assert row["bn_mean_shift"] > 0
    control = m["table"]["group/grad-ascent/train"]
    assert control["recal_gap"] == 0.0  # no running statistics: nothing to recalibrate


def _table(after, recal, attack, eval_recal):
    row = {
        "forget_acc_trained": 0.95,
        "forget_acc": after,
        "recal_gap": recal - after,
        "attacker_fraction": (attack - after) / max(recal - after, 0.01),
    }
    table = {f"batch/{k}/train": dict(row) for k in ("grad-ascent", "neggrad+")}
    for k in ("grad-ascent", "neggrad+"):
        table[f"batch/{k}/eval"] = {**row, "recal_gap": eval_recal - after}
    table["group/grad-ascent/train"] = {"forget_acc": after, "recal_gap": 0.0}
    return {"table": table}


def test_effects_take_both_signs_on_constructed_tables():
    artifact, none = _table(0.02, 0.8, 0.7, 0.1), _table(0.3, 0.1, 0.1, 0.6)
    for effect in CLAIM.effects:
        margin = 0.5 if effect.name == "attacker_recovers_most" else 0.0
        assert effect.fn(artifact) > margin > effect.fn(none), effect.name
