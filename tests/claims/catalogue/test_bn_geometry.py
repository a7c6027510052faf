"""The bn-geometry claim at smoke scale, and its controls failing."""

from __future__ import annotations

import math

import torch

from normlab.claims.catalogue.bn_geometry import CLAIM
from normlab.claims.core import CheckOutcome
from normlab.claims.rule import judge_claim


def test_smoke_run_check_and_effect_signs():
    torch.set_num_threads(1)
    cfg = CLAIM.config("smoke")
    m = CLAIM.run(cfg, 0)
    assert math.isfinite(CLAIM.primary.fn(m))
    # BN cancels every raw bias: the BN arm is the same function under either He init
    assert m["table"]["bn-he-bias"]["density"] == m["table"]["bn-he"]["density"]
    assert all(c.fn(cfg).passed for c in CLAIM.checks)
    t = {
        "table": {
            "bn-he-bias": {"density": 8.0},
            "no-bn-he-bias": {"density": 4.0},
            "bn-he": {"density": 1.0},
            "no-bn-he": {"density": 2.0},
        }
    }
    assert CLAIM.secondary[0].fn(t) < 0
    assert CLAIM.primary.fn(t) > CLAIM.primary.margin.value
    t = {"table": {"bn-he-bias": {"density": 2.0}, "no-bn-he-bias": {"density": 4.0}}}
    assert CLAIM.primary.fn(t) < 0


def _fake(i: int, no_bn_count: float) -> dict:
    table = {arm: {"density": 10.0 + i, "mean_count": 3.0} for arm in CLAIM_ARMS}
    table["no-bn-he-bias"] = {"density": 5.0 + i, "mean_count": no_bn_count}
    return {"table": table}


CLAIM_ARMS = ("bn-he-bias", "bn-he", "no-bn-he", "bn-centred", "no-bn-centred", "bn", "no-bn")


def test_saturation_premise_can_fail():
    checks = {c.name: CheckOutcome(True, 0.0, "") for c in CLAIM.checks}
    ok = judge_claim(CLAIM, [_fake(i, 3.0 + 0.1 * i) for i in range(6)], checks)
    bad = judge_claim(CLAIM, [_fake(i, 1.0 - 0.01 * i) for i in range(6)], checks)
    assert ok.verdict == "supported"
    assert bad.verdict == "untestable"
