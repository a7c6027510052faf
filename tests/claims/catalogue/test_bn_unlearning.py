"""The bn-unlearning claim: its smoke run, its unlearning modes, its effects' signs, and its
controls failing."""

from __future__ import annotations

from normlab.claims.catalogue.bn_unlearning import CLAIM
from normlab.claims.core import CheckOutcome
from normlab.claims.rule import judge_claim
from normlab.training.unlearn import UNLEARN_MODES


def test_smoke_run_has_every_arm(smoke_measurement):
    m = smoke_measurement("bn-unlearning")
    for method in ("grad-ascent", "neggrad+"):
        for mode in UNLEARN_MODES:
            row = m["table"][f"batch/{method}/{mode}"]
            assert 0 <= row["forget_acc"] <= 1 and 0 <= row["forget_acc_attacker"] <= 1
            assert row["bn_mean_shift"] > 0
            recal = m["table"][f"batch/{method}/{mode}/recalibrated"]
            assert recal["forget_acc"] == row["forget_acc_recalibrated"]
    assert not any(arm.startswith("group/") for arm in m["table"])  # the control is a check


def _table(after, recal, attack, eval_recal, trained=0.95):
    row = {
        "forget_acc_trained": trained,
        "forget_acc": after,
        "recal_gap": recal - after,
        "attacker_fraction": (attack - after) / max(recal - after, 0.01),
    }
    table = {f"batch/{k}/train": dict(row) for k in ("grad-ascent", "neggrad+")}
    for k in ("grad-ascent", "neggrad+"):
        table[f"batch/{k}/eval"] = {**row, "recal_gap": eval_recal - after}
        table[f"batch/{k}/train/recalibrated"] = {"forget_acc": recal}
        table[f"batch/{k}/eval/recalibrated"] = {"forget_acc": eval_recal}
    return {"table": table}


def test_effects_take_both_signs_on_constructed_tables():
    artifact, none = _table(0.02, 0.8, 0.7, 0.1), _table(0.3, 0.1, 0.1, 0.6)
    for effect in CLAIM.effects:
        margin = 0.5 if effect.name == "attacker_recovers_most" else 0.0
        assert effect.fn(artifact) > margin > effect.fn(none), effect.name


def test_controls_can_fail():
    checks = {c.name: CheckOutcome(True, 0.0, "") for c in CLAIM.checks}
    ok = [_table(0.02 + 0.001 * i, 0.8 + 0.01 * i, 0.7, 0.1) for i in range(6)]
    assert judge_claim(CLAIM, ok, checks).verdict == "supported"
    untrained = [_table(0.02, 0.8 + 0.01 * i, 0.7, 0.1, trained=0.3 + 0.01 * i) for i in range(6)]
    assert judge_claim(CLAIM, untrained, checks).verdict == "untestable"
    not_forgotten = [_table(0.6 + 0.01 * i, 0.9, 0.8, 0.7) for i in range(6)]
    assert judge_claim(CLAIM, not_forgotten, checks).verdict == "untestable"
    no_artifact = [_table(0.02, 0.02 + 0.001 * i, 0.02, 0.02) for i in range(6)]
    assert judge_claim(CLAIM, no_artifact, checks).verdict == "contradicted"
    broken = {**checks, "groupnorm_no_artifact": CheckOutcome(False, 0.1, "")}
    assert judge_claim(CLAIM, ok, broken).verdict == "error"
