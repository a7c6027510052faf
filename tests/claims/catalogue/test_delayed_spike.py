"""The delayed-spike claim: smoke run, check, effect signs, and its reference model."""

from __future__ import annotations

import math

import torch

from normlab.claims.catalogue.delayed_spike import CLAIM
from normlab.claims.core import CheckOutcome
from normlab.claims.rule import judge_claim
from normlab.models.bn_linear import BNLinear, waiting_time_bound, whitened_regression


def test_smoke_run_checks_and_effect_signs():
    torch.set_num_threads(1)
    claim = CLAIM
    cfg = claim.config("smoke")
    m = claim.run(cfg, 0)
    for e in claim.effects:
        assert math.isfinite(e.fn(m)), e.name
    for c in claim.checks:
        assert c.fn(cfg).passed, c.name
    assert m["table"]["no-bn"]["spike_height"] == 0.0  # the control descends monotonically
    below = m["table"]["bn-below"]
    assert below["max_kappa"] < 2 and below["delayed_onset"] == 0.0  # the expected null
    assert m["table"]["bn"]["delayed_onset"] == 1.0  # the smoke run already shows the delay
    assert m["table"]["bn"]["onset_step"] > m["table"]["bn"]["crossing_step"]
    table = {
        "bn": {"spike_after_crossing": 0.0, "slack": -3.0, "delayed_onset": 0.0},
        "bn-below": {"spike_after_crossing": 1.0, "delayed_onset": 1.0},
    }
    assert claim.primary.fn({"table": table}) < -claim.primary.margin.value
    table = {
        "bn": {"spike_after_crossing": 2.0, "slack": 4.0, "delayed_onset": 1.0},
        "bn-below": {"spike_after_crossing": 0.0, "delayed_onset": 0.0},
    }
    assert claim.primary.fn({"table": table}) > claim.primary.margin.value
    assert claim.secondary[0].fn({"table": table}) > 0


def _fake(i: int, **bn: float) -> dict:
    row = {
        "spike_after_crossing": 1.5 + 0.1 * i,
        "spike_before_crossing": 0.0,
        "spike_height": 1.5 + 0.1 * i,
        "delayed_onset": 1.0,
        "slack": 5.0 + i,
        "descent_log2": 5.0 + 0.1 * i,
        "crossed": 1.0,
        "max_kappa": 3.0,
    }
    below = {**row, "spike_after_crossing": 0.0, "spike_height": 0.0, "delayed_onset": 0.0}
    below["max_kappa"] = 1.3 + 0.01 * i
    nobn = {"spike_height": 0.0}
    return {"table": {"bn": {**row, **bn}, "bn-below": below, "no-bn": nobn}}


def test_controls_can_fail():
    checks = {c.name: CheckOutcome(True, 0.0, "") for c in CLAIM.checks}
    ok = judge_claim(CLAIM, [_fake(i) for i in range(6)], checks)
    assert ok.verdict == "supported"
    no_descent = [_fake(i, descent_log2=0.1 + 0.01 * i) for i in range(6)]
    assert judge_claim(CLAIM, no_descent, checks).verdict == "untestable"
    never = [_fake(i, crossed=0.0) for i in range(6)]
    assert judge_claim(CLAIM, never, checks).verdict == "untestable"
    early = [_fake(i, spike_before_crossing=1.0 + 0.1 * i) for i in range(6)]
    edge = next(e for e in judge_claim(CLAIM, early, checks).effects if e.name == "no_rising_edge")
    assert edge.verdict == "contradicted"


def test_whitened_data_and_bn_model_is_scale_invariant():
    d = whitened_regression(64, 5, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(d.x.T @ d.x / 64, torch.eye(5, dtype=torch.float64), atol=1e-12)
    model = BNLinear(5)
    out = model(d.x)
    with torch.no_grad():
        model.weight.mul_(7.0)
    assert torch.allclose(model(d.x), out, atol=1e-10)
    assert math.isinf(waiting_time_bound(2.01, 1e-3, 0.5))  # vacuous when rho <= 1
    assert waiting_time_bound(3.0, 1e-3, 0.1) > 0
