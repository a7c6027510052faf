"""The kalman-reward claim: smoke run, checks, metrics, and effects on either side."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim
from normlab.rl import KalmanRewardNormalizer, RunningRewardNormalizer
from normlab.training.policy import normalize_returns, summarize_returns

CLAIM = get_claim("kalman-reward")
ARMS = tuple(CLAIM.config("smoke")["search"]["per_arm"])


def test_smoke_run_tunes_every_arm_and_checks_pass():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    assert set(m["table"]) == set(ARMS) == set(m["tuning"]) == set(m["curves"])
    for effect in CLAIM.effects:
        assert math.isfinite(effect.fn(m)), effect.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name


def test_summarize_counts_episodes_to_475_and_the_budget_when_unreached():
    rets = [10.0] * 20 + [500.0] * 10
    s = summarize_returns(rets)
    assert s["episodes_to_475"] == 28  # the first 8-episode window at >= 475 ends at episode 28
    assert s["solved"] == 1.0
    assert summarize_returns([10.0] * 30)["episodes_to_475"] == 30
    assert summarize_returns([10.0] * 30)["solved"] == 0.0
    assert s["auc"] == pytest.approx((200 + 5000) / 30)


def test_zscore_standardises_each_episode():
    g = torch.arange(10.0, dtype=torch.float64).numpy()
    z = normalize_returns(
        "zscore", g, RunningRewardNormalizer(center=True), KalmanRewardNormalizer()
    )
    assert abs(z.mean()) < 1e-12 and abs(z.std() - 1) < 1e-6
    with pytest.raises(ValueError, match="Unknown normalization"):
        normalize_returns("bogus", g, RunningRewardNormalizer(), KalmanRewardNormalizer())


def _m(auc_k: float, auc_z: float, sd_k: float = 50.0) -> dict:
    row = {"auc": 0.0, "final": 200.0, "late_sd": 50.0, "episodes_to_475": 100.0}
    table = {arm: dict(row) for arm in ARMS}
    table["kalman"].update(auc=auc_k, late_sd=sd_k, episodes_to_475=200 - auc_k / 2)
    table["kalman-step"]["auc"] = auc_k
    table["zscore"].update(auc=auc_z, episodes_to_475=200 - auc_z / 2)
    table["reinforce-kalman"]["auc"] = auc_k
    table["reinforce-running"]["auc"] = auc_z
    return {"table": table}


def test_effects_take_both_signs():
    better, worse = _m(300, 150, sd_k=10), _m(100, 250, sd_k=90)
    for effect in CLAIM.effects:
        hi, lo = effect.fn(better), effect.fn(worse)
        if effect.direction == "greater":
            assert hi > effect.margin.value and lo < -effect.margin.value, effect.name
        else:
            assert hi < -effect.margin.value and lo > effect.margin.value, effect.name


def test_episodes_to_475_is_read_only_when_the_baseline_solves():
    pre = next(p for p in CLAIM.preconditions if p.name == "zscore_solves")
    assert pre.gates == ("episodes_to_475",)
    solved = {"table": {"zscore": {"solved": 1.0}}}
    unsolved = {"table": {"zscore": {"solved": 0.0}}}
    assert pre.fn(solved) >= pre.threshold > pre.fn(unsolved)


def test_primary_is_the_per_episode_filter_and_the_per_step_form_a_secondary():
    assert (CLAIM.primary.method, CLAIM.primary.baseline) == ("kalman", "zscore")
    per_step = next(e for e in CLAIM.secondary if e.method == "kalman-step")
    assert per_step.baseline == "zscore"
    quick = CLAIM.config("quick")["search"]
    assert quick["extend"] >= 1
    for arm in ("kalman", "kalman-step", "reinforce-kalman"):  # Q and R both searched
        assert {"lr", "q", "r"} <= set(quick["per_arm"][arm]), arm
        assert all(len(quick["per_arm"][arm][k]) >= 2 for k in ("q", "r")), arm


def test_training_sd_is_untestable_when_kalman_does_not_learn():
    row = {"auc": 100.0, "final": 150.0, "late_sd": 50.0, "episodes_to_475": 160.0}
    row |= {"solved": 0.0}
    ms = []
    for i in range(8):
        table = {arm: dict(row) for arm in ARMS}
        table["kalman"].update(final=30.0 + i, late_sd=10.0 + i)  # 8-15 above random
        ms.append({"table": table})
    verdict = judge_claim(CLAIM, ms)
    premise = next(p for p in verdict.premises if p.name == "kalman_learns")
    assert not premise.held
    sd = next(e for e in verdict.effects if e.name == "training_sd")
    assert sd.verdict == "untestable"
    for i, m in enumerate(ms):  # learning: the premise holds and the spread is read
        m["table"]["kalman"]["final"] = 200.0 + i
    verdict = judge_claim(CLAIM, ms)
    assert next(p for p in verdict.premises if p.name == "kalman_learns").held
    assert next(e for e in verdict.effects if e.name == "training_sd").verdict == "supported"
