"""The dyt-regime claim: smoke table, the crossing effect's sign, the saturation gate."""

from __future__ import annotations

import math

from normlab.claims import get_claim
from normlab.claims.core import judge_claim

CLAIM = get_claim("dyt-regime")
ROWS = ("ln-small", "dyt-small", "ln-large", "dyt-large")


def _m(small: float, large: float, saturation: float = 0.3) -> dict:
    table = {name: {"val_bpb": 3.0} for name in ROWS}
    table["dyt-small"] = {"val_bpb": 3.0 * small, "saturation": saturation}
    table["dyt-large"] = {"val_bpb": 3.0 * large, "saturation": saturation / 2}
    return {"table": table}


def test_smoke_table(smoke_measurement):
    table = smoke_measurement("dyt-regime")["table"]
    assert set(table) == set(ROWS)
    assert 0.0 <= table["dyt-small"]["saturation"] <= 1.0
    assert all(math.isfinite(v) for row in table.values() for v in row.values())
    assert CLAIM.config("quick")["seeds"] >= 5


def test_crossing_needs_both_sides():
    crossing = CLAIM.primary.fn
    assert crossing(_m(0.9, 1.1)) > 0
    assert crossing(_m(1.1, 1.2)) < 0  # DyT loses at both budgets
    assert crossing(_m(0.8, 0.9)) < 0  # DyT wins at both budgets
    assert math.isclose(crossing(_m(0.95, 1.2)), 0.05)


def test_no_saturation_makes_the_crossing_untestable():
    pairs = [(0.9, 1.1), (0.89, 1.11), (0.9, 1.12), (0.91, 1.1)]
    assert judge_claim(CLAIM, [_m(*p, 0.0) for p in pairs]).verdict == "untestable"
    assert judge_claim(CLAIM, [_m(*p) for p in pairs]).verdict == "supported"
