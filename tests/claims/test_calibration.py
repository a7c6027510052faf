"""Null calibration catches biased constructions; robustness labels."""

from __future__ import annotations

import numpy as np

from normlab.claims import Effect, Margin
from normlab.claims.calibration import null_calibration, null_passes, robustness_label

CHOICE = Margin(0.0, "normlab's choice: test")


def _seeds(rng, n, arms):
    return [{"table": {a: {"x": float(rng.normal())} for a in arms}} for _ in range(n)]


def _honest_difference() -> Effect:
    return Effect(
        "d",
        "method - base",
        lambda m: m["table"]["m"]["x"] - m["table"]["b"]["x"],
        "greater",
        CHOICE,
        method="m",
        baseline="b",
    )


def test_an_honest_difference_is_calibrated():
    effect = _honest_difference()
    rng = np.random.default_rng(0)
    null = null_calibration(effect, _seeds(rng, 6, ["m", "b"]), draws=1000)
    assert null_passes(null), null
    assert null["supported_rate"] > 0  # not inert


def test_best_of_k_on_test_is_caught():
    """method - max(b1, b2, b3): under exchangeable arms the effect is biased negative."""

    def best_of_k(m):
        t = m["table"]
        return t["m"]["x"] - max(t[k]["x"] for k in ("b1", "b2", "b3"))

    effect = Effect(
        "d",
        "method - best baseline",
        best_of_k,
        "greater",
        CHOICE,
        exchangeable=(("m", "b1", "b2", "b3"),),
    )
    rng = np.random.default_rng(1)
    null = null_calibration(effect, _seeds(rng, 8, ["m", "b1", "b2", "b3"]), draws=1000)
    assert null["opposite_rate"] > 0.05 and not null_passes(null)


def test_effect_without_arms_is_not_calibrated():
    effect = Effect("slope", "a fitted slope", lambda m: 1.0, "greater", CHOICE)
    assert null_calibration(effect, [{"table": {}}] * 5) is None
    assert not null_passes(None)


def test_diverged_records_travel_with_their_rows():
    effect = Effect(
        "d",
        "base - method",
        lambda m: m["table"]["b"]["x"] - m["table"]["m"]["x"],
        "greater",
        CHOICE,
        method="m",
        baseline="b",
        if_diverged={"x": 8.0},
    )
    ms = [{"table": {"m": {"x": 1.0}, "b": {"x": None}}, "diverged": {"b": {"step": 1}}}] * 6
    null = null_calibration(effect, ms, draws=300)
    # Whichever row is called "b", the diverged one counts 8: the values are +-7 at random.
    assert 0 < null["supported_rate"] < 0.1


def test_robustness_label():
    assert robustness_label("supported", []) == "not run"
    recs = [{"setting": "lr", "value": 0.1, "verdict": "supported"}]
    assert robustness_label("supported", recs) == "robust"
    recs.append({"setting": "lr", "value": 1.0, "verdict": "inconclusive"})
    assert robustness_label("supported", recs) == "fragile: flips at lr=1.0"


def _judged_every_draw(effect, measurements, draws, seed=0):
    """The null's rates with every draw judged afresh (the definition the cache must keep)."""
    from normlab.claims.calibration import _exchangeable, _is_opposite, _orders, _permuted
    from normlab.claims.rule import judge_effect

    rng = np.random.default_rng(seed)
    light, arms = _exchangeable(measurements, effect.groups)
    supported = opposite = 0
    for _ in range(draws):
        permuted = [_permuted(m, a, _orders(a, rng)) for m, a in zip(light, arms, strict=True)]
        ev = judge_effect(effect, permuted)
        supported += ev.verdict == "supported"
        opposite += _is_opposite(ev)
    return supported / draws, opposite / draws


def test_judging_each_ordering_once_gives_the_rates_of_judging_every_draw():
    """Two-arm (5 seeds: 32 orderings, each drawn many times) and four-arm groups."""

    def best_of_k(m):
        t = m["table"]
        return t["m"]["x"] - max(t[k]["x"] for k in ("b1", "b2", "b3"))

    honest = _honest_difference()
    biased = Effect(
        "d", "m - best b", best_of_k, "greater", CHOICE, exchangeable=(("m", "b1", "b2", "b3"),)
    )
    rng = np.random.default_rng(3)
    for effect, arms in ((honest, ["m", "b"]), (biased, ["m", "b1", "b2", "b3"])):
        ms = _seeds(rng, 5, arms)
        null = null_calibration(effect, ms, draws=400)
        expected = _judged_every_draw(effect, ms, 400)
        assert (null["supported_rate"], null["opposite_rate"]) == expected
    assert null["opposite_rate"] > 0.05  # the biased construction is still caught
