"""claims.pool: per-configuration engine runs pooled into the table's arms."""

from __future__ import annotations

import math

import pytest

from normlab.claims.arms import Trained, run_arms
from normlab.claims.pool import pool, pooled_record
from normlab.claims.rule import learned_premises


def _config(arms, lrs=(1e-3, 1e-2)):
    return {"seeds": 1, "search": {"arms": list(arms), "space": {"lr": list(lrs)}, "extend": 0}}


def _measurement(offset, diverge=()):
    def train(arm, params, seed):
        val = abs(math.log10(params["lr"]) + 2) + offset
        return Trained(val, val, {"step": 1, "last": None} if arm in diverge else None)

    def test(arm, t):
        return {"mse": t.model + 1.0, "note": "text"}

    return run_arms(_config(["s/a", "s/b"]), 0, train, test, reference=2.0 + offset)


def test_rows_are_means_and_records_one_per_arm():
    ms = {"H1": _measurement(0.0), "H2": _measurement(0.5)}
    out = pool(ms)
    assert out["table"]["s/a"] == {"mse": pytest.approx(1.25), "lr": pytest.approx(1e-2)}
    rec = out["tuning"]["s/a"]
    assert rec["val"] == pytest.approx(0.25) and rec["reference"] == pytest.approx(2.25)
    assert rec["chosen"] == {"H1": {"lr": 1e-2}, "H2": {"lr": 1e-2}}
    assert rec["trials"] == rec["grid_trials"] == 4 and set(rec["configs"]) == {"H1", "H2"}
    assert pool(ms, ("mse", "absent"))["table"]["s/b"] == {"mse": pytest.approx(1.25)}


def test_an_arm_that_diverged_anywhere_fails_its_learned_premise():
    ms = {"H1": _measurement(0.0), "H2": _measurement(0.5, diverge=("s/b",))}
    out = pool(ms)
    assert out["diverged"] == {"s/b": {"step": 1, "last": None}}
    assert out["tuning"]["s/b"]["val"] is None and out["tuning"]["s/a"]["val"] is not None
    premises = {p.name: p for p in learned_premises([out], ())}
    assert premises["s/b_learned"].state == "failed"


def test_placebo_marks_survive_only_when_every_configuration_ran_it():
    base = {"chosen": {"lr": 1}, "val": 1.0, "reference": 2.0, "trials": 1, "grid_trials": 1}
    base |= {"extended": 0, "on_edge": False}
    both = pooled_record({"x": {**base, "placebo_of": "b"}, "y": {**base, "placebo_of": "b"}})
    one = pooled_record({"x": {**base, "placebo_of": "b"}, "y": base})
    assert both["placebo_of"] == "b" and "placebo_of" not in one
    assert pooled_record({"x": {**base, "on_edge": True}, "y": base})["on_edge"]
    with pytest.raises(ValueError):
        pooled_record({})
