"""The zc-swish claim at smoke scale, its CNN and its data."""

from __future__ import annotations

import pytest
import torch

from normlab.claims.catalogue.zc_swish import CLAIM
from normlab.data.images import load_digits_tensors
from normlab.layers import ZCSwish
from normlab.models.conv import plain_cnn


def test_digits_split_is_fixed_by_seed_stratified_and_scaled():
    a, b = load_digits_tensors(0), load_digits_tensors(0)
    assert torch.equal(a.test_y, b.test_y) and torch.equal(a.train_x, b.train_x)
    assert not torch.equal(a.test_y, load_digits_tensors(1).test_y)
    assert len(a.train_y) + len(a.test_y) == 1797 and a.train_x.shape[1:] == (1, 8, 8)
    assert float(a.train_x.min()) == 0.0 and float(a.train_x.max()) == 1.0
    counts = torch.bincount(a.test_y, minlength=10).float()
    assert counts.min() >= 0.9 * counts.mean() and a.classes == 10
    train_x, train_y, test_x, test_y = a  # unpacks as a 4-tuple
    assert len(train_x) == len(train_y) == 1797 - len(test_x) == 1797 - len(test_y)


def test_plain_cnn_has_no_norm_and_no_residual():
    net = plain_cnn(6, 8, "zc-swish")
    assert len(net.convs) == 6 and all(isinstance(m, ZCSwish) for m in net.acts)
    assert not any("Norm" in type(m).__name__ for m in net.modules())
    x = torch.randn(4, 1, 8, 8)
    assert net(x).shape == (4, 10) and len(net.features(x)) == 6
    with pytest.raises(ValueError, match="activation"):
        plain_cnn(2, 4, "gelu")


def test_smoke_run_has_every_activation_and_depth(smoke_measurement):
    m = smoke_measurement("zc-swish")
    arms = CLAIM.config("smoke")["search"]["arms"]
    for arm in arms:
        row = m["table"][arm]
        assert 0 <= row["test_acc"] <= 1 and row["mean_drift"] >= 0
    assert all(f"{act}-d16" in m["table"] for act in ("relu", "swish", "swish-beta", "zc-swish"))
    assert set(m["tuning"]) == set(arms)
    assert CLAIM.config("quick")["seeds"] >= 5


def test_uncentred_zc_swish_is_silu_at_beta_one_and_learns_beta():
    act = ZCSwish(3, centred=False)
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(act(x), torch.nn.functional.silu(x))
    torch.testing.assert_close(
        ZCSwish(3)(x), torch.nn.functional.silu(x) - 0.2066, atol=1e-4, rtol=0
    )
    act(x).sum().backward()
    assert act.beta.grad is not None and act.beta.grad.shape == (3,)
    last = ZCSwish(3, centred=False, channel_dim=-1)
    y = torch.randn(5, 3)
    torch.testing.assert_close(last(y), torch.nn.functional.silu(y))


def _table(zc, swish, swish_beta, relu, drift_zc=0.1, drift_sb=0.3):
    depths = [8, 16]
    rows = {}
    for d in depths:
        for act, acc in (
            ("zc-swish", zc),
            ("swish", swish),
            ("swish-beta", swish_beta),
            ("relu", relu),
        ):
            drift = drift_zc if act == "zc-swish" else drift_sb
            rows[f"{act}-d{d}"] = {"test_acc": acc if d == 16 else 0.9, "mean_drift": drift}
    return {"table": rows, "depths": depths}


def test_effects_take_both_signs_on_constructed_tables():
    good, bad = _table(0.8, 0.1, 0.3, 0.4), _table(0.2, 0.5, 0.6, 0.7, 0.5, 0.1)
    for effect in (*CLAIM.primary.parts, *CLAIM.secondary):
        assert effect.fn(good) > 0 > effect.fn(bad), effect.name
    assert [p.fn(good) for p in CLAIM.primary.parts] == pytest.approx([0.4, 0.7, 0.5])
    premise = CLAIM.premises[0]
    assert premise.fn(good) == pytest.approx(0.8) and premise.fn(bad) == pytest.approx(0.4)


def _seeds(swish_d8: float, late_share: float = 0.0, n: int = 6):
    out = []
    for i in range(n):
        m = _table(0.8 + 0.01 * i, 0.1, 0.3, 0.4)
        m["table"]["swish-d8"]["test_acc"] = swish_d8
        m["tuning"] = {"zc-swish-d16": {"late_share": late_share}}
        out.append(m)
    return out


def test_the_collapse_premise_can_fail_and_then_the_primary_is_untestable():
    from normlab.claims.core import CheckOutcome
    from normlab.claims.rule import judge_claim

    ok = {c.name: CheckOutcome(True, 0.0) for c in CLAIM.checks}

    assert judge_claim(CLAIM, _seeds(0.9), ok).verdict == "supported"
    verdict = judge_claim(CLAIM, _seeds(0.12), ok)  # swish no better at depth 8: no collapse
    premise = next(p for p in verdict.premises if p.name == "swish_degrades_with_depth")
    assert not premise.held and verdict.verdict == "untestable"


def test_an_under_trained_zc_swish_makes_the_primary_untestable():
    from normlab.claims.core import CheckOutcome
    from normlab.claims.rule import judge_claim

    ok = {c.name: CheckOutcome(True, 0.0) for c in CLAIM.checks}

    verdict = judge_claim(CLAIM, _seeds(0.9, late_share=0.3), ok)
    assert verdict.verdict == "untestable" and "under-trained" in verdict.reason
