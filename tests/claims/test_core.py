"""The verdict rule (t-interval), its error rates by simulation, and the claim records."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats

from normlab.claims import Check, CheckOutcome, Claim, Effect, Margin, Precondition
from normlab.claims.core import (
    SCALES,
    all_claims,
    get_claim,
    interval,
    judge_claim,
    judge_effect,
    verdict,
)

CHOICE = Margin(0.0, "normlab's choice: test")


def _effect(name="e", direction="greater", margin=0.0, key="x"):
    return Effect(
        name,
        f"the {key} cell",
        lambda m, key=key: float(m["table"]["method"][key]),
        direction=direction,
        margin=Margin(margin, "normlab's choice: test"),
        baseline="baseline",
    )


def _measurements(*columns):
    """One measurement per seed; ``columns`` maps cell name -> per-seed values."""
    (first, *_) = columns
    n = len(first[1])
    return [{"table": {"method": {k: v[i] for k, v in columns}}} for i in range(n)]


def _claim(**overrides):
    fields = {
        "id": "toy",
        "paper": "p",
        "hypothesis": "h",
        "primary": _effect(),
        "headline": "none",
        "configs": {s: {"seeds": 3} for s in SCALES},
        "run": lambda config, seed: {"table": {"method": {"x": 1.0}}},
    }
    fields.update(overrides)
    return Claim(**fields)


@pytest.mark.parametrize(
    ("values", "direction", "margin", "expected"),
    [
        ([0.10, 0.12, 0.11], "greater", 0.0, "supported"),
        ([0.10, 0.12, 0.11], "greater", 0.2, "inconclusive"),  # real, but under the margin
        ([-0.10, -0.12, -0.11], "greater", 0.0, "contradicted"),
        ([0.1, -0.1, 0.05], "greater", 0.0, "inconclusive"),
        ([-0.10, -0.12, -0.11], "less", 0.05, "supported"),
        ([0.10, 0.12, 0.11], "less", 0.0, "contradicted"),
        ([0.01, 0.012, 0.011], "no_greater", 0.03, "supported"),  # within the tolerance
        ([0.05, 0.052, 0.051], "no_greater", 0.03, "contradicted"),  # beyond it
        ([0.02, 0.04, 0.03], "no_greater", 0.03, "inconclusive"),
        ([-0.01, -0.012, -0.011], "no_less", 0.03, "supported"),
        ([-0.05, -0.052, -0.051], "no_less", 0.03, "contradicted"),
        ([0.3], "greater", 0.0, "inconclusive"),  # one seed: no interval
        ([0.3, math.nan, 0.4], "greater", 0.0, "inconclusive"),
    ],
)
def test_verdict_rule(values, direction, margin, expected):
    label, reason = verdict(values, direction, margin)
    assert label == expected, reason


def test_interval_is_the_t_interval():
    vals = [1.0, 2.0, 4.0, 3.5]
    mean, se, lo, hi = interval(vals)
    ref = stats.t.interval(0.95, len(vals) - 1, loc=np.mean(vals), scale=stats.sem(vals))
    assert mean == pytest.approx(np.mean(vals))
    assert se == pytest.approx(stats.sem(vals))
    assert (lo, hi) == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_false_positive_rate_at_a_true_zero_effect(n):
    rng = np.random.default_rng(n)
    trials = 4000
    labels = [verdict(rng.normal(0.0, 1.0, n), "greater", 0.0)[0] for _ in range(trials)]
    supported = labels.count("supported") / trials
    contradicted = labels.count("contradicted") / trials
    # Each side of a 95% two-sided interval excludes 0 with probability 2.5%.
    assert supported <= 0.05 and contradicted <= 0.05, (supported, contradicted)
    assert supported > 0.005 and contradicted > 0.005  # the rule is not simply inert


@pytest.mark.parametrize("n", [3, 5, 10])
def test_power_at_three_standard_errors(n):
    """A true effect of 3 SE is detected as often as the noncentral t says (n=5: ~0.50)."""
    rng = np.random.default_rng(100 + n)
    trials = 4000
    effect = 3.0 / math.sqrt(n)  # 3 standard errors of the mean for unit-variance seeds
    hits = sum(
        verdict(rng.normal(effect, 1.0, n), "greater", 0.0)[0] == "supported"
        for _ in range(trials)
    )
    crit = stats.t.ppf(0.975, n - 1)
    expected = float(stats.nct.sf(crit, n - 1, 3.0))
    assert hits / trials == pytest.approx(expected, abs=0.03)


def test_degenerate_effect_is_flagged_not_mixed():
    ev = judge_effect(_effect(), _measurements(("x", [0.0, 0.0, 0.0])))
    assert ev.degenerate and ev.verdict == "inconclusive"
    assert "degenerate" in ev.reason and "mixed" not in ev.reason


def test_primary_decides_and_secondary_never_changes_it():
    claim = _claim(primary=_effect("p", key="x"), secondary=(_effect("s", key="y"),))
    ms = _measurements(("x", [0.5, 0.6, 0.55]), ("y", [-1.0, -1.1, -1.2]))
    result = judge_claim(claim, ms)
    assert result.verdict == "supported"
    assert [e.verdict for e in result.effects] == ["supported", "contradicted"]
    assert [e.role for e in result.effects] == ["primary", "secondary"]


def test_failed_precondition_makes_gated_effects_untestable():
    pre = Precondition(
        "phenomenon",
        "baseline kurtosis",
        lambda m: float(m["table"]["method"]["k"]),
        op=">=",
        threshold=10.0,
        source="normlab's choice: test",
    )
    claim = _claim(preconditions=(pre,))
    low = _measurements(("x", [0.5, 0.6, 0.55]), ("k", [3.0, 3.1, 2.9]))
    result = judge_claim(claim, low)
    assert result.verdict == "untestable"
    assert "3" in result.reason and ">= 10" in result.reason
    assert not result.preconditions[0].held
    high = _measurements(("x", [0.5, 0.6, 0.55]), ("k", [30.0, 31.0, 29.0]))
    assert judge_claim(claim, high).verdict == "supported"


def test_failed_check_or_task_is_an_error_not_a_contradiction():
    check = Check("exact", "a property", lambda config: CheckOutcome(False, 1.0, "off"))
    claim = _claim(checks=(check,))
    ms = _measurements(("x", [0.5, 0.6, 0.55]))
    assert judge_claim(claim, ms, {"exact": CheckOutcome(False, 1.0)}).verdict == "error"
    assert judge_claim(claim, ms, {}).verdict == "error"  # a check that did not run
    assert judge_claim(claim, ms, {"exact": CheckOutcome(True, 0.0)}).verdict == "supported"
    assert judge_claim(_claim(), ms, failed_tasks=1).verdict == "error"


def test_claim_validation():
    with pytest.raises(ValueError, match="config for scale"):
        _claim(configs={"smoke": {"seeds": 1}})
    with pytest.raises(ValueError, match="seeds >= 1"):
        _claim(configs={s: {"seeds": 0} for s in SCALES})
    with pytest.raises(ValueError, match="repeat"):
        _claim(secondary=(_effect(),))
    with pytest.raises(ValueError, match="direction"):
        _effect(direction="up")
    with pytest.raises(ValueError, match="source"):
        Margin(0.1, " ")
    with pytest.raises(ValueError, match=">= 0"):
        Margin(-0.1, "paper")
    with pytest.raises(ValueError, match="caption"):
        _claim(figure=lambda ms: None)


def test_catalogue_lookup():
    claims = all_claims()
    assert claims and [c.id for c in claims] == sorted(c.id for c in claims)
    assert get_claim(claims[0].id) is claims[0]
    with pytest.raises(KeyError, match="Valid ids"):
        get_claim("no-such-claim")


# Every effect of every registered claim can come out both ways --------------------------


def _numeric_cells(table):
    return [
        (method, metric)
        for method, row in table.items()
        for metric, value in row.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]


def _perturbed_tables(table, rng, trials):
    """Tables built from ``table``: rows of methods exchanged, cells rescaled or redrawn."""
    cells = _numeric_cells(table)
    methods = list(table)
    for t in range(trials):
        new = copy.deepcopy(table)
        if t % 3 == 0 and len(methods) > 1:  # exchange the rows of two methods
            a, b = rng.choice(len(methods), 2, replace=False)
            shared = set(table[methods[a]]) & set(table[methods[b]])
            for metric in shared:
                new[methods[a]][metric] = table[methods[b]][metric]
                new[methods[b]][metric] = table[methods[a]][metric]
        for method, metric in cells:
            v = float(new[method][metric])
            r = rng.random()
            if r < 0.4:
                v *= math.exp(rng.uniform(-3, 3))
            elif r < 0.7:
                v = v + rng.normal(0.0, abs(v) + 1.0)
            elif r < 0.8:
                v = -v
            new[method][metric] = v
        yield new


def _sides(effect):
    m = effect.margin.value
    if effect.direction in ("greater", "less"):
        return -m, m  # must reach beyond the margin on the claimed side and past zero
    bound = m if effect.direction == "no_greater" else -m
    return bound, bound


CLAIMS = all_claims()


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_every_effect_can_come_out_both_ways(claim, smoke_measurement):
    base = smoke_measurement(claim.id)
    rng = np.random.default_rng(0)
    for effect in claim.effects:
        values = []
        for table in _perturbed_tables(base["table"], rng, 600):
            try:
                v = float(effect.fn({**base, "table": table}))
            except (ArithmeticError, ValueError, KeyError, TypeError):
                continue
            if math.isfinite(v):
                values.append(v)
        lo, hi = _sides(effect)
        assert values, f"{claim.id}/{effect.name}: no finite value from any table"
        assert min(values) < lo and max(values) > hi, (
            f"{claim.id}/{effect.name} ({effect.direction}, margin {effect.margin.value}) "
            f"only reached [{min(values):.3g}, {max(values):.3g}]"
        )
