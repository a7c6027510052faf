"""The stablegrad claim: smoke run, its check, and effect signs on hand-built tables."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim
from normlab.models.pinn import PINN, ResidualCNN, poisson_exact, poisson_loss

CLAIM = get_claim("stablegrad")


def _m(adam_deep, sg_deep, adam_shallow=-1.0, adam_acc=0.5, sg_acc=0.5):
    t = {
        "adam-shallow": {"log10_rel_l2": adam_shallow, "rel_l2": 10**adam_shallow},
        "adam-deep": {"log10_rel_l2": adam_deep},
        "stablegrad-deep": {"log10_rel_l2": sg_deep},
        "stablegrad-last-deep": {"log10_rel_l2": sg_deep},
        "adam-cnn": {"test_acc": adam_acc},
        "stablegrad-cnn": {"test_acc": sg_acc},
    }
    return {"table": t, "depths": [4, 16]}


def test_effects_and_premises_come_out_both_ways():
    primary, last, cnn = CLAIM.primary, *CLAIM.secondary
    for effect in (primary, last):
        assert effect.fn(_m(-0.2, -0.8)) == pytest.approx(-0.6)
        assert effect.fn(_m(-0.8, -0.2)) == pytest.approx(0.6)
    assert cnn.fn(_m(0, 0, adam_acc=0.3, sg_acc=0.7)) > cnn.margin.value
    assert cnn.fn(_m(0, 0, adam_acc=0.7, sg_acc=0.3)) < 0
    (pre,) = CLAIM.premises
    assert pre.fn(_m(-0.2, 0, adam_shallow=-1.0)) > pre.margin.value
    assert pre.fn(_m(-1.0, 0, adam_shallow=-0.2)) < pre.margin.value
    learns = CLAIM.preconditions[0]
    assert learns.fn(_m(0, 0, adam_shallow=-1.0)) <= learns.threshold
    assert learns.fn(_m(0, 0, adam_shallow=0.01)) > learns.threshold


def test_pinn_knows_the_exact_solution():
    x = torch.linspace(0, 1, 5)[:, None]
    assert torch.allclose(poisson_exact(x)[[0, -1]], torch.zeros(2, 1), atol=1e-6)
    loss, u = poisson_loss(PINN(2, 4), torch.rand(8, 1))
    assert loss.item() > 0 and u.shape == (10, 1)
    assert ResidualCNN(2, 4)(torch.rand(3, 1, 8, 8)).shape == (3, 10)


def test_smoke_run_and_checks():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    assert set(m["tuning"]) == set(config["search"]["arms"]) == set(m["table"])
    assert all("lr" in row for row in m["table"].values())
    for effect in CLAIM.effects:
        assert math.isfinite(effect.fn(m)), effect.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name
    assert CLAIM.config("quick")["seeds"] >= 5


def test_quick_trains_the_last_layer_arm_with_an_edge_step():
    search = CLAIM.config("quick")["search"]
    assert "stablegrad-last-deep" in search["arms"] and search["extend"] >= 1
    last = next(e for e in CLAIM.secondary if e.method == "stablegrad-last-deep")
    assert not last.scales  # measured at every scale


def test_an_under_trained_arm_makes_its_comparison_untestable():
    def m(i: int, late: float) -> dict:
        out = _m(-0.2 + 0.01 * i, -0.8)
        out["table"]["adam-shallow"]["rel_l2"] = 0.05
        out["table"]["adam-shallow"]["log10_rel_l2"] = -1.3
        records = {a: {"reference": 10.0, "val": 1.0, "late_share": 0.01} for a in out["table"]}
        records["stablegrad-deep"]["late_share"] = late + 0.01 * i
        return {**out, "tuning": records}

    assert judge_claim(CLAIM, [m(i, 0.01) for i in range(8)]).primary.verdict == "supported"
    verdict = judge_claim(CLAIM, [m(i, 0.3) for i in range(8)])
    assert not next(p for p in verdict.premises if p.name == "stablegrad-deep_converged").held
    assert verdict.primary.verdict == "untestable"
