"""The verdict rule: t-interval against the margin, its rates by simulation (at zero, at the
margin, power), intersection-union effects, premises, divergence outcomes, rule errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from normlab.claims import Check, CheckOutcome, Effect, Margin, Precondition, Premise
from normlab.claims.rule import interval, judge_claim, judge_effect, verdict
from tests.claims._toys import CHOICE, toy_claim, toy_effect, toy_measurements


@pytest.mark.parametrize(
    ("values", "direction", "margin", "expected", "why"),
    [
        ([0.10, 0.12, 0.11], "greater", 0.0, "supported", "above"),
        ([0.10, 0.12, 0.11], "greater", 0.2, "contradicted", "smaller than the margin"),
        ([-0.10, -0.12, -0.11], "greater", 0.0, "contradicted", "opposite direction"),
        ([-0.10, -0.12, -0.11], "greater", 0.05, "contradicted", "opposite direction"),
        ([0.1, -0.1, 0.05], "greater", 0.0, "inconclusive", "crosses"),
        ([0.15, 0.25, 0.2], "greater", 0.2, "inconclusive", "crosses"),
        ([-0.10, -0.12, -0.11], "less", 0.05, "supported", "below"),
        ([0.10, 0.12, 0.11], "less", 0.0, "contradicted", "opposite direction"),
        ([-0.01, -0.012, -0.011], "less", 0.05, "contradicted", "smaller than the margin"),
        ([0.01, 0.012, 0.011], "no_greater", 0.03, "supported", "below"),
        ([0.05, 0.052, 0.051], "no_greater", 0.03, "contradicted", "worse than the margin"),
        ([0.02, 0.04, 0.03], "no_greater", 0.03, "inconclusive", "crosses"),
        ([-0.01, -0.012, -0.011], "no_less", 0.03, "supported", "above"),
        ([-0.05, -0.052, -0.051], "no_less", 0.03, "contradicted", "worse than the margin"),
        ([0.3], "greater", 0.0, "inconclusive", "at least 2"),
        ([0.3, math.nan, 0.4], "greater", 0.0, "inconclusive", "non-finite"),
    ],
)
def test_verdict_rule(values, direction, margin, expected, why):
    label, reason = verdict(values, direction, margin)
    assert label == expected, reason
    assert why in reason


def test_interval_is_the_t_interval():
    vals = [1.0, 2.0, 4.0, 3.5]
    mean, se, lo, hi = interval(vals)
    ref = stats.t.interval(0.95, len(vals) - 1, loc=np.mean(vals), scale=stats.sem(vals))
    assert mean == pytest.approx(np.mean(vals))
    assert se == pytest.approx(stats.sem(vals))
    assert (lo, hi) == pytest.approx(ref, rel=1e-12)
    wide = interval(vals, 0.99)
    assert wide[2] < lo and wide[3] > hi


def _rates(effect_mean, n, margin, trials=4000, seed=0):
    rng = np.random.default_rng(seed + n)
    labels, reasons = [], []
    for _ in range(trials):
        label, reason = verdict(rng.normal(effect_mean, 1.0, n), "greater", margin)
        labels.append(label)
        reasons.append(reason)
    supported = labels.count("supported") / trials
    opposite = sum("opposite" in r for r in reasons) / trials
    smaller = sum("smaller than the margin" in r for r in reasons) / trials
    return supported, opposite, smaller


@pytest.mark.parametrize("n", [3, 5, 10])
def test_rates_at_a_true_zero_effect(n):
    supported, opposite, _ = _rates(0.0, n, margin=0.0)
    # Each side of a 95% two-sided interval excludes 0 with probability 2.5%.
    assert supported <= 0.05 and opposite <= 0.05, (supported, opposite)
    assert supported > 0.005 and opposite > 0.005  # the rule is not simply inert


@pytest.mark.parametrize("n", [3, 5, 10])
def test_rates_at_the_margin(n):
    """A true effect equal to the margin: "supported" and "contradicted" each <= 5%."""
    m = 0.5
    rng = np.random.default_rng(7 + n)
    labels = [verdict(rng.normal(m, 1.0, n), "greater", m)[0] for _ in range(4000)]
    assert labels.count("supported") / 4000 <= 0.05
    assert labels.count("contradicted") / 4000 <= 0.05


def test_a_precise_null_against_its_margin_is_contradicted():
    """Half the margin, measured precisely: "smaller than the margin" (v2 said
    inconclusive forever)."""
    rng = np.random.default_rng(3)
    labels = [verdict(rng.normal(0.5, 0.1, 5), "greater", 1.0) for _ in range(2000)]
    share = sum(lab == "contradicted" and "smaller" in r for lab, r in labels) / 2000
    assert share > 0.95


@pytest.mark.parametrize("n", [3, 5, 10])
def test_power_at_three_standard_errors(n):
    """A true effect of 3 SE is detected as often as the noncentral t says (n=5: ~0.50)."""
    supported, _, _ = _rates(3.0 / math.sqrt(n), n, margin=0.0, seed=100)
    crit = stats.t.ppf(0.975, n - 1)
    expected = float(stats.nct.sf(crit, n - 1, 3.0))
    assert supported == pytest.approx(expected, abs=0.03)


def _part(name, key):
    return Effect(
        name,
        f"method minus {key}",
        lambda m, key=key: m["table"]["method"]["x"] - m["table"][key]["x"],
        "greater",
        CHOICE,
        method="method",
        baseline=key,
    )


def _three_arms(method, a, b):
    return [
        {"table": {"method": {"x": x}, "a": {"x": y}, "b": {"x": z}}}
        for x, y, z in zip(method, a, b, strict=True)
    ]


def test_intersection_union_effect():
    every = Effect(
        "beats_all",
        "beats a and b",
        None,
        "greater",
        CHOICE,
        parts=(_part("vs_a", "a"), _part("vs_b", "b")),
    )
    assert every.groups == (("method", "a"), ("method", "b"))
    ms = _three_arms([1.0, 1.1, 1.05, 1.02], [0.0, 0.1, 0.05, 0.0], [0.5, 0.52, 0.55, 0.5])
    ev = judge_effect(every, ms)
    assert ev.verdict == "supported" and len(ev.parts) == 2
    assert ev.values == ev.parts[1].values  # the weakest part is shown (vs b)
    ms = _three_arms([1.0, 1.1, 1.05, 1.02], [0.0, 0.1, 0.05, 0.0], [2.0, 2.1, 2.2, 2.05])
    ev = judge_effect(every, ms)
    assert ev.verdict == "contradicted" and "b:" in ev.reason
    ms = _three_arms([1.0, 1.1, 1.05, 1.02], [0.0, 0.1, 0.05, 0.0], [1.0, 1.3, 0.8, 1.02])
    assert judge_effect(every, ms).verdict == "inconclusive"


def test_intersection_union_controls_the_union_at_the_corrected_level():
    """With k = 3 parts at a true zero effect, "contradicted" against any one part stays
    near 2.5% overall (Bonferroni), where an uncorrected rule gives ~7%."""
    parts = tuple(_part(f"vs_{k}", k) for k in "abc")
    every = Effect("all", "beats a, b, c", None, "greater", CHOICE, parts=parts)
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(600):
        ms = [
            {"table": {arm: {"x": float(rng.normal())} for arm in ("method", "a", "b", "c")}}
            for _ in range(5)
        ]
        hits += judge_effect(every, ms).verdict == "contradicted"
    assert hits / 600 <= 0.05


def test_failed_premise_makes_effects_untestable_but_keeps_the_values():
    premise = Premise(
        "phenomenon",
        "baseline kurtosis above 10",
        lambda m: float(m["table"]["method"]["k"]),
        "greater",
        Margin(10.0, "normlab's choice: test"),
    )
    claim = toy_claim(premises=(premise,))
    low = toy_measurements(("x", [0.5, 0.6, 0.55]), ("k", [3.0, 3.1, 2.9]))
    result = judge_claim(claim, low)
    assert result.verdict == "untestable"
    assert "phenomenon" in result.reason and "would say supported" in result.reason
    assert result.effects[0].would_be == "supported"
    assert result.effects[0].mean == pytest.approx(0.55)
    assert not result.premises[0].held
    high = toy_measurements(("x", [0.5, 0.6, 0.55]), ("k", [30.0, 31.0, 29.0]))
    assert judge_claim(claim, high).verdict == "supported"


def test_preconditions_are_judged_by_the_interval_not_the_mean():
    pre = Precondition(
        "big", "kurtosis", lambda m: float(m["table"]["method"]["k"]), ">=", 10.0, "test"
    )
    claim = toy_claim(preconditions=(pre,))
    spiky = toy_measurements(("x", [0.5, 0.6, 0.55, 0.5, 0.6]), ("k", [1.0, 1, 1, 1, 50]))
    result = judge_claim(claim, spiky)  # mean 10.8 >= 10, but the interval is not
    assert result.verdict == "untestable" and not result.premises[0].held


def test_primary_decides_and_secondary_never_changes_it():
    claim = toy_claim(primary=toy_effect("p", key="x"), secondary=(toy_effect("s", key="y"),))
    ms = toy_measurements(("x", [0.5, 0.6, 0.55]), ("y", [-1.0, -1.1, -1.2]))
    result = judge_claim(claim, ms)
    assert result.verdict == "supported"
    assert [e.verdict for e in result.effects] == ["supported", "contradicted"]
    assert [e.role for e in result.effects] == ["primary", "secondary"]


def test_a_diverged_arm_counts_as_its_declared_outcome():
    effect = Effect(
        "gap",
        "baseline minus method bpb",
        lambda m: m["table"]["base"]["bpb"] - m["table"]["method"]["bpb"],
        "greater",
        CHOICE,
        method="method",
        baseline="base",
        if_diverged={"bpb": 8.0},
    )
    ms = [
        {
            "table": {"method": {"bpb": 2.0}, "base": {"bpb": None}},
            "diverged": {"base": {"step": 10 + i, "last": 3.0}},
        }
        for i in range(3)
    ]
    ev = judge_effect(effect, ms)
    assert ev.verdict == "supported" and ev.mean == pytest.approx(6.0)
    undeclared = Effect("gap", "d", effect.fn, "greater", CHOICE, method="method", baseline="base")
    assert judge_effect(undeclared, ms).verdict == "inconclusive"
    claim = toy_claim(primary=effect)
    record = judge_claim(claim, ms, seeds=[0, 1, 2])
    assert [d["seed"] for d in record.divergences] == [0, 1, 2]
    assert record.divergences[0]["arm"] == "base" and record.divergences[0]["step"] == 10


def test_a_failing_effect_makes_the_claim_an_error_not_a_crash():
    def broken(m):
        return m["table"]["nobody"]["x"]

    claim = toy_claim(secondary=(Effect("broken", "d", broken, "greater", CHOICE),))
    result = judge_claim(claim, toy_measurements(("x", [0.5, 0.6, 0.55])))
    assert result.verdict == "error" and "KeyError" in result.reason


def test_failed_check_or_task_is_an_error_not_a_contradiction():
    check = Check("exact", "a property", lambda config: CheckOutcome(False, 1.0, "off"))
    claim = toy_claim(checks=(check,))
    ms = toy_measurements(("x", [0.5, 0.6, 0.55]))
    assert judge_claim(claim, ms, {"exact": CheckOutcome(False, 1.0)}).verdict == "error"
    assert judge_claim(claim, ms, {}).verdict == "error"  # a check that did not run
    assert judge_claim(claim, ms, {"exact": CheckOutcome(True, 0.0)}).verdict == "supported"
    assert judge_claim(toy_claim(), ms, failed_tasks=1).verdict == "error"


def test_degenerate_effect_is_flagged():
    ev = judge_effect(toy_effect(), toy_measurements(("x", [0.0, 0.0, 0.0])))
    assert ev.degenerate and ev.verdict == "inconclusive"
    assert "degenerate" in ev.reason


def test_the_readme_states_the_rule_the_code_applies():
    from pathlib import Path

    from normlab.claims.rule import RULE

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("<!-- rule:start -->")[1].split("<!-- rule:end -->")[0]
    assert " ".join(block.split()) == " ".join(RULE.split())


def test_an_effect_declared_for_full_only_is_left_out_at_quick():
    full_only = Effect(
        "costly",
        "needs arms quick does not train",
        lambda m: m["table"]["absent"]["x"],
        direction="greater",
        margin=Margin(0.0, "test"),
        scales=("full",),
    )
    claim = toy_claim(secondary=(full_only,))
    ms = toy_measurements(("x", [0.5, 0.6, 0.55]))
    quick = judge_claim(claim, ms, scale="quick")
    assert [e.name for e in quick.effects] == [claim.primary.name]
    assert quick.not_measured == ("costly",)
    # at full (or with no scale) the effect is judged, and its missing arm is an error
    assert judge_claim(claim, ms, scale="full").verdict == "error"


def test_the_primary_cannot_be_full_only():
    with pytest.raises(ValueError, match="measured at every scale"):
        toy_claim(
            primary=Effect(
                "p",
                "d",
                lambda m: 0.0,
                direction="greater",
                margin=Margin(0.0, "t"),
                scales=("full",),
            )
        )
    with pytest.raises(ValueError, match="unknown scales"):
        Effect(
            "p",
            "d",
            lambda m: 0.0,
            direction="greater",
            margin=Margin(0.0, "t"),
            scales=("medium",),
        )


def _phenomenon_premise():
    return Premise(
        "phenomenon",
        "baseline kurtosis above 10",
        lambda m: float(m["table"]["method"]["k"]),
        "greater",
        Margin(10.0, "normlab's choice: test"),
    )


@pytest.mark.parametrize(
    ("k", "state"),
    [
        ([30.0, 31.0, 29.0], "held"),
        ([3.0, 3.1, 2.9], "failed"),  # the interval lies on the wrong side
        ([9.0, 12.0, 11.0], "underpowered"),  # the mean passes, the interval crosses 10
        ([30.0], "underpowered"),  # one seed: no interval
    ],
)
def test_a_premise_reads_held_failed_or_underpowered(k, state):
    claim = toy_claim(premises=(_phenomenon_premise(),))
    result = judge_claim(claim, toy_measurements(("x", [0.5, 0.6, 0.55][: len(k)]), ("k", k)))
    (premise,) = result.premises
    assert premise.state == state and premise.held == (state == "held")
    if state != "held":
        assert result.verdict == "untestable" and f"phenomenon {state}" in result.reason


def _tuned(val, reference, arm="baseline"):
    return {arm: {"val": val, "reference": reference, "chosen": {"lr": 1e-3}}}


def test_an_arm_that_did_not_train_makes_the_claim_untestable_not_contradicted():
    claim = toy_claim()
    lost = toy_measurements(("x", [-0.5, -0.6, -0.55]))  # would be contradicted
    for m, val in zip(lost, [5.5, 5.6, 5.4], strict=True):
        m["tuning"] = _tuned(val, 5.545)  # no better than the uniform predictor
    result = judge_claim(claim, lost)
    assert result.verdict == "untestable"
    assert result.reason.startswith("untestable at this scale: baseline did not train")
    assert result.effects[0].would_be == "contradicted"
    (learned,) = result.premises
    assert learned.name == "baseline_learned" and learned.state != "held"


def test_a_trained_arm_passes_the_learned_premise_and_a_diverged_one_fails_it():
    claim = toy_claim()
    ms = toy_measurements(("x", [0.5, 0.6, 0.55]))
    for m, val in zip(ms, [2.0, 2.1, 2.2], strict=True):
        m["tuning"] = _tuned(val, 5.545)
    assert judge_claim(claim, ms).verdict == "supported"
    ms[1]["tuning"] = _tuned(None, 5.545)  # every trial of seed 1 diverged
    result = judge_claim(claim, ms)
    assert (
        result.verdict == "untestable" and "every trial diverged in seed(s) [1]" in result.reason
    )
    # an arm without a declared reference gets no learned premise
    for m in ms:
        m["tuning"] = _tuned(2.0, None)
    assert judge_claim(claim, ms).premises == ()


def test_the_learned_premise_gates_only_effects_that_compare_its_arm():
    other = Effect(
        "other",
        "the z cell of arm b",
        lambda m: float(m["table"]["b"]["z"]),
        direction="greater",
        margin=Margin(0.0, "normlab's choice: test"),
        method="b",
        baseline="c",
    )
    claim = toy_claim(secondary=(other,))
    ms = [
        {"table": {"method": {"x": x}, "b": {"z": z}}, "tuning": _tuned(9.0, 5.0)}
        for x, z in ((0.5, 1.0), (0.6, 1.1), (0.55, 1.2))
    ]
    result = judge_claim(claim, ms)
    assert [e.verdict for e in result.effects] == ["untestable", "supported"]


def test_every_effect_shows_its_verdict_at_margin_zero():
    effect = toy_effect(margin=1.0)
    ev = judge_effect(effect, toy_measurements(("x", [0.5, 0.6, 0.55])))
    assert ev.verdict == "contradicted" and ev.at_zero == "supported"


@pytest.mark.parametrize("n", [5, 8])
def test_power_matches_a_simulation(n):
    from normlab.claims.rule import power

    rng = np.random.default_rng(n)
    margin, sd = 0.3, 0.4
    draws = rng.normal(margin, sd, size=(4000, n))
    hits = np.mean([verdict(d, "greater", 0.0)[0] == "supported" for d in draws])
    assert power(n, sd, margin) == pytest.approx(hits, abs=0.025)
    # non-inferiority: "supported" at the margin when the truth is 0
    draws = rng.normal(0.0, sd, size=(4000, n))
    hits = np.mean([verdict(d, "no_greater", margin)[0] == "supported" for d in draws])
    assert power(n, sd, margin) == pytest.approx(hits, abs=0.025)


def test_the_minimum_detectable_effect_has_eighty_percent_power():
    from normlab.claims.rule import detectable

    n, sd, margin = 6, 0.5, 0.2
    mde = detectable(n, sd / math.sqrt(n), "greater", margin)
    rng = np.random.default_rng(0)
    draws = rng.normal(mde, sd, size=(4000, n))
    hits = np.mean([verdict(d, "greater", margin)[0] == "supported" for d in draws])
    assert hits == pytest.approx(0.8, abs=0.03)
    assert detectable(n, 0.1, "less", margin) < -margin


def _shares(ms, shares, arm="baseline"):
    for m, share in zip(ms, shares, strict=True):
        m["tuning"] = {arm: {"val": 2.0, "reference": 5.5, "late_share": share}}
    return ms


@pytest.mark.parametrize(
    ("shares", "state", "verdict_"),
    [
        ([0.02, 0.03, 0.025], "held", "supported"),
        ([0.24, 0.27, 0.26], "failed", "untestable"),  # still learning at a constant rate
        ([0.05, 0.2, 0.12], "underpowered", "untestable"),  # the interval crosses 0.1
    ],
)
def test_an_under_trained_arm_makes_the_claim_untestable(shares, state, verdict_):
    ms = _shares(toy_measurements(("x", [0.5, 0.6, 0.55])), shares)
    result = judge_claim(toy_claim(), ms)
    converged = {p.name: p for p in result.premises}["baseline_converged"]
    assert converged.state == state and result.verdict == verdict_
    if state == "failed":
        assert "baseline was under-trained at this scale (late share" in result.reason
        assert result.effects[0].would_be == "supported"


def test_a_claim_may_declare_its_own_convergence_bound():
    ms = _shares(toy_measurements(("x", [0.5, 0.6, 0.55])), [0.24, 0.27, 0.26])
    bound = Margin(0.5, "paper: trained to a fixed budget, not to convergence")
    result = judge_claim(toy_claim(convergence=bound), ms)
    assert result.verdict == "supported"
    # seeds without a curve (diverged, or a trainer that keeps none) are left out
    for m in ms:
        m["tuning"]["baseline"]["late_share"] = None
    assert [p.name for p in judge_claim(toy_claim(), ms).premises] == ["baseline_learned"]


def test_a_declared_premise_named_like_the_engines_keeps_its_own_framing():
    declared = Premise(
        "network_converged",
        "the network's own late share",
        lambda m: float(m["table"]["method"]["k"]),
        "no_greater",
        Margin(0.1, "normlab's choice: test"),
    )
    ms = toy_measurements(("x", [0.5, 0.6, 0.55]), ("k", [0.3, 0.31, 0.29]))
    result = judge_claim(toy_claim(premises=(declared,)), ms)
    assert result.verdict == "untestable"
    assert "premise network_converged failed" in result.reason, result.reason
