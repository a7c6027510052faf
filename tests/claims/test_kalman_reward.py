"""The kalman-reward claim: smoke run, checks, and effects that can land on either side."""

from __future__ import annotations

import math

import torch

from normlab.claims.catalogue.kalman_reward import ARMS, CLAIM


def _table(auc: dict[str, float], sd: float = 50.0) -> dict:
    return {
        "table": {
            arm: {"auc": auc[arm], "final": 200.0, "late_sd": sd if arm == "kalman" else 50.0}
            for arm in ARMS
        }
    }


def test_smoke_run_gives_finite_effects_and_checks_pass():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    assert set(m["table"]) == set(ARMS)
    for effect in CLAIM.effects:
        assert math.isfinite(effect.fn(m)), effect.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name
    assert all(len(m["curves"][arm]) == config["episodes"] // config["batch"] for arm in ARMS)


def test_effects_take_both_signs():
    better = _table({"none": 50, "running": 100, "kalman": 150, "kalman-episode": 150}, sd=10)
    worse = _table({"none": 200, "running": 200, "kalman": 100, "kalman-episode": 100}, sd=90)
    for effect in CLAIM.effects:
        hi, lo = effect.fn(better), effect.fn(worse)
        if effect.direction == "greater":
            assert hi > effect.margin.value and lo < 0, effect.name
        else:  # "less": lower spread is the claim
            assert hi < -effect.margin.value and lo > 0, effect.name
    pre = CLAIM.preconditions[0]
    assert pre.holds(pre.fn(better))
    better["table"]["running"]["final"] = 30.0
    assert not pre.holds(pre.fn(better))
