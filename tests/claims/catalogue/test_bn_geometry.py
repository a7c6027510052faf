"""The bn-geometry claim at smoke scale."""

from __future__ import annotations

import math

import torch

from normlab.claims.catalogue.bn_geometry import CLAIM


def test_smoke_run_check_and_effect_signs():
    torch.set_num_threads(1)
    cfg = CLAIM.config("smoke")
    m = CLAIM.run(cfg, 0)
    assert math.isfinite(CLAIM.primary.fn(m))
    assert all(c.fn(cfg).passed for c in CLAIM.checks)
    t = {
        "table": {
            "bn-he": {"density": 8.0},
            "no-bn-he": {"density": 4.0},
            "bn-centred": {"density": 1.0},
            "no-bn-centred": {"density": 2.0},
        }
    }
    assert CLAIM.secondary[0].fn(t) < 0
    assert CLAIM.primary.fn(t) > CLAIM.primary.margin.value
    t = {"table": {"bn-he": {"density": 2.0}, "no-bn-he": {"density": 4.0}}}
    assert CLAIM.primary.fn(t) < 0
