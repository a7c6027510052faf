"""The tuning protocol: equal trial counts, selection on validation, edge extension."""

from __future__ import annotations

import math

import pytest

from normlab.claims.protocol import Search, diverged, searches, tune, tune_arms


def test_searches_read_shared_and_per_arm_spaces():
    shared = searches({"search": {"arms": ["a", "b"], "space": {"lr": [1, 2, 3]}}})
    assert set(shared) == {"a", "b"} and shared["a"].trials == 3
    per = searches({"search": {"per_arm": {"a": {"lr": [1, 2]}, "b": {"lr": [10, 20]}}}})
    assert per["b"].space["lr"] == [10, 20]
    with pytest.raises(ValueError, match="same number of trials"):
        searches({"search": {"per_arm": {"a": {"lr": [1, 2]}, "b": {"lr": [1, 2, 3]}}}})
    with pytest.raises(ValueError, match="no 'search'"):
        searches({})
    with pytest.raises(ValueError, match="Unreadable"):
        searches({"search": {"space": {"lr": [1]}}})


def test_tune_selects_on_validation_and_returns_that_trials_result():
    seen = []

    def evaluate(p):
        seen.append(p["lr"])
        return (p["lr"] - 0.01) ** 2, {"test": -p["lr"]}  # best validation at 1e-2

    t = tune(Search({"lr": [1e-3, 1e-2, 1e-1]}), evaluate)
    assert t.chosen == {"lr": 1e-2} and t.result == {"test": -1e-2}
    assert t.trials == 3 and t.extended == 0 and not t.on_edge
    assert seen == [1e-3, 1e-2, 1e-1]


def test_an_edge_choice_extends_the_space_geometrically():
    t = tune(Search({"lr": [1e-3, 1e-2]}, extend=2), lambda p: (-p["lr"], None))
    assert t.chosen["lr"] == pytest.approx(1.0)  # 1e-1, then 1.0
    assert t.extended == 2 and t.trials == 4 and t.on_edge  # still on the edge: flagged
    low = tune(Search({"lr": [1e-2, 1e-1]}, extend=1), lambda p: (p["lr"], None))
    assert low.chosen["lr"] == pytest.approx(1e-3) and low.on_edge


def test_extension_stops_once_the_choice_is_interior():
    t = tune(
        Search({"lr": [1e-3, 1e-2]}, extend=3), lambda p: (abs(math.log10(p["lr"]) + 1), None)
    )
    assert t.chosen["lr"] == pytest.approx(0.1) and t.extended == 2 and not t.on_edge


def test_diverged_trials_lose_and_nan_counts_as_divergence():
    t = tune(
        Search({"lr": [1, 2, 3]}, extend=0), lambda p: (math.nan if p["lr"] == 1 else p["lr"], 0)
    )
    assert t.chosen == {"lr": 2}
    assert t.record()["history"][0]["val"] is None  # strict JSON


def test_tune_arms_gives_every_arm_the_same_budget():
    config = {"search": {"arms": ["x", "y"], "space": {"lr": [1, 2, 3]}, "extend": 0}}
    calls = {"x": 0, "y": 0}

    def evaluate(arm, p):
        calls[arm] += 1
        return p["lr"], arm

    tuned, records = tune_arms(config, evaluate)
    assert tuned["y"].chosen == {"lr": 1} and tuned["y"].result == "y"
    assert calls == {"x": 3, "y": 3}
    assert records["x"]["grid_trials"] == records["y"]["grid_trials"] == 3
    with pytest.raises(ValueError, match="no search space"):
        tune_arms(config, evaluate, arms=["z"])


def test_divergence_record():
    assert diverged(12, float("inf")) == {"step": 12, "last": None}
    assert diverged(3, 2.5) == {"step": 3, "last": 2.5}


def test_an_edge_choice_extends_every_axis_it_sits_on():
    # the best is at high lr *and* high r: both axes extend in the same round
    t = tune(
        Search({"lr": [1e-3, 1e-2], "r": [0.1, 1.0]}, extend=1),
        lambda p: (-math.log10(p["lr"]) - math.log10(p["r"]), None),
    )
    tried = [p for p, _ in t.history]
    assert {"lr": 1e-1, "r": 1.0} in [pytest.approx(p) for p in tried]
    assert {"lr": 1e-2, "r": 10.0} in [pytest.approx(p) for p in tried]
    assert t.extended == 2 and t.trials == 6


def test_a_second_axis_is_not_starved_while_the_first_stays_on_its_edge():
    # lr keeps improving upward forever; r's optimum is one step below its grid
    def score(p):
        return -math.log10(p["lr"]) + abs(math.log10(p["r"]) + 2), None

    t = tune(Search({"lr": [1e-3, 1e-2], "r": [0.1, 1.0]}, extend=2), score)
    assert t.chosen["r"] == pytest.approx(1e-2)


def test_ties_do_not_go_to_the_smallest_value():
    flat = tune(Search({"lr": [1e-3, 1e-2, 1e-1]}, extend=0), lambda p: (0.0, None))
    assert flat.chosen == {"lr": 1e-2} and flat.tie == "centre"
    # two tied ends of a two-value grid: a hash draw, the same on every call
    a = tune(Search({"lr": [1e-3, 1e-2]}, extend=0), lambda p: (0.0, None))
    b = tune(Search({"lr": [1e-3, 1e-2]}, extend=0), lambda p: (0.0, None))
    assert a.tie == "hash" and a.chosen == b.chosen


def test_tie_rule_has_no_direction_bias_over_many_grids():
    lows = highs = 0
    for k in range(200):
        grid = [10.0**-k / 7, 10.0 ** (1 - k) / 7]
        t = tune(Search({"lr": grid}, extend=0), lambda p: (1.0, None))
        lows += t.chosen["lr"] == grid[0]
        highs += t.chosen["lr"] == grid[1]
    assert lows + highs == 200 and 60 < lows < 140  # a fair coin, not always one end


def test_the_reference_is_recorded_for_the_learned_premise():
    config = {"search": {"arms": ["x", "y"], "space": {"lr": [1, 2, 3]}}}
    _, records = tune_arms(config, lambda arm, p: (p["lr"], None), reference={"x": 5, "y": 0})
    assert records["x"]["reference"] == 5 and records["y"]["reference"] == 0
    assert records["x"]["tie"] == "unique"
    _, bare = tune_arms(config, lambda arm, p: (p["lr"], None))
    assert bare["x"]["reference"] is None  # not declared: written as null
