"""The complex-bn claim at smoke scale and its data."""

from __future__ import annotations

import math

import torch

from normlab.claims.catalogue.complex_bn import CLAIM
from normlab.functional import manifolds as MF
from normlab.models.spd_net import SPDNet, clutter_covariances


def test_smoke_run_check_and_effect_signs():
    torch.set_num_threads(1)
    cfg = CLAIM.config("smoke")
    m = CLAIM.run(cfg, 0)
    assert all(math.isfinite(e.fn(m)) for e in CLAIM.effects)
    assert all(c.fn(cfg).passed for c in CLAIM.checks)
    good = {
        "table": {
            "bn": {"mean_acc": 0.9, "final_acc": 0.9},
            "no-bn": {"mean_acc": 0.6, "final_acc": 0.8},
        }
    }
    bad = {
        "table": {
            "bn": {"mean_acc": 0.5, "final_acc": 0.5},
            "no-bn": {"mean_acc": 0.6, "final_acc": 0.8},
        }
    }
    assert CLAIM.primary.fn(good) > CLAIM.primary.margin.value
    assert CLAIM.primary.fn(bad) < 0 and CLAIM.secondary[0].fn(bad) < -0.02


def test_clutter_matrices_are_hpd_and_net_runs():
    d = clutter_covariances(
        3,
        6,
        rhos=(0.9, 0.5),
        freqs=(0.1, 0.2),
        snapshots=12,
        generator=torch.Generator().manual_seed(0),
    )
    assert d.x.shape == (6, 6, 6) and MF.is_hpd(d.x) and sorted(d.y.tolist()) == [0] * 3 + [1] * 3
    net = SPDNet(6, 3, 2)
    w = net.bimap_weight()
    assert torch.allclose(w.mH @ w, torch.eye(3, dtype=w.dtype), atol=1e-12)
    out = net(d.x)
    out.sum().backward()
    assert out.shape == (6, 2) and torch.isfinite(net.bimap_real.grad).all()
