"""The numerics claim at smoke scale: every finite error is within its bound."""

from __future__ import annotations

import math

from normlab.claims import get_claim
from normlab.claims.common import spearman


def test_smoke_run():
    claim = get_claim("numerics")
    m = claim.run(claim.config("smoke"), 0)
    finite = [r for r in m["norm_sweep"] if math.isfinite(r["error"]) and r["error"] < 0.5]
    assert finite and all(r["error"] <= r["bound"] for r in finite)
    assert m["table"]["softmax-float16-unshifted"]["first_overflow_sink"] <= 20.0


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert abs(spearman([1, 2, 3, 4], [1, 3, 2, 4]) - 0.8) < 1e-12
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
