"""The dyt-regime claim: smoke table, the crossing effect's sign, the saturation gate."""

from __future__ import annotations

import math

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim

CLAIM = get_claim("dyt-regime")
ROWS = ("ln-small", "dyt-small", "ln-large", "dyt-large")


LRS = [f"{lr:g}" for lr in CLAIM.config("quick")["report_lrs"]]


def _m(small: float, large: float, saturation: float = 0.3, ln_small: float = 3.5) -> dict:
    table = {}
    for at in ("", *(f"@{lr}" for lr in LRS)):
        table[f"ln-small{at}"] = {"test_bpb": ln_small}
        table[f"ln-large{at}"] = {"test_bpb": 3.0}
        table[f"dyt-small{at}"] = {"test_bpb": ln_small * small, "saturation": saturation}
        table[f"dyt-large{at}"] = {"test_bpb": 3.0 * large, "saturation": saturation / 2}
    return {"table": table}


def test_smoke_table(smoke_measurement):
    m = smoke_measurement("dyt-regime")
    table = m["table"]
    assert set(table) == set(ROWS) | {f"{r}@{lr}" for r in ROWS for lr in LRS}
    assert 0.0 <= table["dyt-small"]["saturation"] <= 1.0
    assert all(math.isfinite(v) for row in table.values() for v in row.values())
    assert set(m["tuning"]) == set(ROWS)
    assert CLAIM.config("quick")["seeds"] >= 5


def _verdicts(ms: list) -> dict:
    return {e.name: e.verdict for e in judge_claim(CLAIM, ms).effects}


def test_the_trend_is_the_primary_and_the_crossing_an_intersection_union_test():
    pairs = [(0.9, 1.1), (0.89, 1.11), (0.9, 1.12), (0.91, 1.1)]
    v = _verdicts([_m(*p) for p in pairs])
    assert v["regime_trend"] == v["crossing"] == "supported"
    # DyT wins at both budgets, less at the large one: the trend holds, the crossing does not
    both = [(0.9, 0.95), (0.89, 0.96), (0.9, 0.97), (0.91, 0.95)]
    v = _verdicts([_m(*p) for p in both])
    assert v["regime_trend"] == "supported" and v["crossing"] == "contradicted"
    # DyT's relative loss does not worsen with data
    flat = [(1.1, 1.1), (1.09, 1.09), (1.1, 1.1), (1.11, 1.1)]
    assert _verdicts([_m(*p) for p in flat])["regime_trend"] == "contradicted"


def test_saturation_and_the_regime_gate_the_primary():
    pairs = [(0.9, 1.1), (0.89, 1.11), (0.9, 1.12), (0.91, 1.1)]
    unsaturated = judge_claim(CLAIM, [_m(*p, 0.0) for p in pairs])
    assert unsaturated.verdict == "untestable"  # the mechanism is absent
    effects = {e.name: e.verdict for e in unsaturated.effects}
    assert effects["saturation_falls"] == effects["crossing"] == "untestable"
    assert effects[f"crossing_lr{LRS[0]}"] == "supported"  # a fixed-lr reading, not gated
    no_regime = judge_claim(CLAIM, [_m(*p, ln_small=3.0 + 0.01 * i) for i, p in enumerate(pairs)])
    assert no_regime.verdict == "untestable"
