"""The grpo-family claim: smoke run, the TRL check, and effects that can land on either side."""

from __future__ import annotations

import math

import torch

from normlab.claims import get_claim
from normlab.training.bandits import PREFERENCE_METHODS as PREF_ARMS

CLAIM = get_claim("grpo-family")
PROXY_ARMS = ("grpo", "dr-grpo", "batch-std", "slas")


def _table(good: bool) -> dict:
    hi, lo = (0.9, 0.5) if good else (0.5, 0.9)
    table = {f"a/{arm}": {"minority_true": lo, "majority_true": lo} for arm in PREF_ARMS}
    table["a/p-grpo"] = {"minority_true": hi, "majority_true": hi}
    table |= {f"b/{arm}": {"true": lo, "gap": 0.08, "gap_gain": 0.03} for arm in PROXY_ARMS}
    for arm in ("slas", "batch-std", "dr-grpo"):
        table[f"b/{arm}"] = {"true": hi, "gap": 0.02 if good else 0.1, "gap_gain": 0.0}
    return {"table": table}


def test_smoke_run_gives_finite_effects_and_checks_pass():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    assert set(m["tuning"]) == set(m["table"])
    assert set(m["table"]) == {f"a/{a}" for a in PREF_ARMS} | {f"b/{a}" for a in PROXY_ARMS}
    for effect in CLAIM.effects:
        assert math.isfinite(effect.fn(m)), effect.name
    for row in m["table"].values():
        assert all(0.0 <= row[k] <= 1.0 for k in ("minority_true", "true") if k in row)
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name


def test_effects_take_both_signs():
    good, bad = _table(True), _table(False)
    for effect in CLAIM.effects:
        g, b = effect.fn(good), effect.fn(bad)
        m = effect.margin.value
        if effect.direction == "greater":
            assert g > m and b < 0, effect.name
        elif effect.direction == "less":
            assert g < -m and b > 0, effect.name
        else:  # no_less
            assert g > -m and b < -m, effect.name
    under, hacks = CLAIM.premises
    good["table"]["a/grpo"] = {"minority_true": 0.4, "majority_true": 0.9}
    assert under.fn(good) > under.margin.value
    good["table"]["a/grpo"] = {"minority_true": 0.9, "majority_true": 0.9}
    assert under.fn(good) < under.margin.value
    assert hacks.fn(good) > hacks.margin.value
    good["table"]["b/grpo"]["gap_gain"] = -0.01
    assert hacks.fn(good) < hacks.margin.value


def test_every_arm_gets_the_same_number_of_trials_and_dr_grpo_a_wider_range():
    from normlab.claims.protocol import searches

    spaces = searches(CLAIM.config("quick"))
    assert len({s.trials for s in spaces.values()}) == 1
    assert min(spaces["b/dr-grpo"].space["lr"]) > max(spaces["b/grpo"].space["lr"]) / 2


def _seeds(good: bool, n: int = 5) -> list[dict]:
    seeds = []
    for k in range(n):
        m = _table(good)
        for row in m["table"].values():  # spread, so that intervals are finite
            for key in row:
                row[key] += 0.001 * k
        m["table"]["a/grpo"] = {"minority_true": 0.4 + 0.01 * k, "majority_true": 0.95}
        seeds.append(m)
    return seeds


def test_the_trl_check_fails_on_the_pre_1_16_formula(monkeypatch):
    """The old formula counted an all-NaN row as reward 0 (nansum): TRL 1.16 leaves it out."""
    import importlib

    adv = importlib.import_module("normlab.rl.advantages")  # the module, not the function

    def pre_1_16(r, groups, method="grpo", **kw):
        total = r.nansum(1)
        g = total.view(-1, groups)
        mean, std = g.mean(1).repeat_interleave(groups), g.std(1).repeat_interleave(groups)
        return (total - mean) / (std + 1e-4) if method == "grpo" else total - mean

    (check,) = CLAIM.checks
    config = CLAIM.config("smoke")
    assert check.fn(config).passed
    monkeypatch.setattr(adv, "advantages", pre_1_16)
    outcome = check.fn(config)
    assert not outcome.passed and outcome.value > 1e-3


def test_the_trl_check_fails_without_trl(monkeypatch):
    import normlab.rl.trl_reference as ref

    def missing() -> str:
        raise ImportError("no trl")

    monkeypatch.setattr(ref, "trl_version", missing)
    (check,) = CLAIM.checks
    outcome = check.fn(CLAIM.config("smoke"))
    assert not outcome.passed and "not installed" in outcome.detail


def test_the_premises_and_an_under_trained_grpo_gate_the_primary():
    from functools import partial

    from normlab.claims.core import CheckOutcome
    from normlab.claims.rule import judge_claim

    judge_claim = partial(judge_claim, check_outcomes={"trl_equivalence": CheckOutcome(True, 0.0)})

    assert judge_claim(CLAIM, _seeds(True)).verdict == "supported"
    served = _seeds(True)
    for m in served:  # GRPO leaves nobody behind: the premise fails
        m["table"]["a/grpo"]["majority_true"] = m["table"]["a/grpo"]["minority_true"]
    verdict = judge_claim(CLAIM, served)
    premise = next(p for p in verdict.premises if p.name == "minority_underserved")
    assert not premise.held and verdict.verdict == "untestable"
    slow = _seeds(True)
    for m in slow:
        m["tuning"] = {"a/grpo": {"late_share": 0.3}}
    verdict = judge_claim(CLAIM, slow)
    premise = next(p for p in verdict.premises if p.name == "a/grpo_converged")
    assert not premise.held and verdict.verdict == "untestable"
    assert "under-trained" in verdict.effects[0].reason
