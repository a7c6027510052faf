"""The cdflow claim: smoke run, checks, and effect signs on hand-built tables."""

from __future__ import annotations

import json
import math

import torch

from normlab.claims import get_claim
from normlab.claims.placebo import placebo_override
from normlab.claims.rule import judge_claim
from normlab.flows import MIXINGS

CLAIM = get_claim("cdflow")


def _table(dense_slope: float, cd_slope: float, cd_nll: float, lu_nll: float) -> dict:
    timing = {
        "cd_logdet_slope": cd_slope,
        "dense_logdet_slope": dense_slope,
        "cd_inverse_slope": cd_slope,
        "dense_inverse_slope": dense_slope,
    }
    table = {"timing": timing, "machine": {"tasks_waiting": 0.0}}
    for data in ("moons", "digits"):
        table[f"{data}-gaussian"] = {"test_nll": 1.4}
        table[f"{data}-circulant"] = {"test_nll": cd_nll}
        table[f"{data}-lu"] = {"test_nll": lu_nll}
        table[f"{data}-none"] = {"test_nll": 1.3}
    return {"table": table}


def test_smoke_run_checks_and_finite_effects():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    json.dumps(m)
    arms = {f"{d}-{x}" for d in ("moons", "digits") for x in MIXINGS} - {"moons-none"}
    assert set(m["tuning"]) == arms  # no effect reads a moons flow without mixing
    assert m["table"]["digits-circulant"]["mixing_params"] == 2 * 3 * 64
    assert m["table"]["digits-lu"]["mixing_params"] == 2 * 64 * 64
    for effect in CLAIM.effects:
        for e in effect.parts or (effect,):
            assert math.isfinite(e.fn(m)), e.name
    for check in CLAIM.checks:
        outcome = check.fn(config)
        assert outcome.passed, (check.name, outcome)
    assert CLAIM.config("quick")["seeds"] >= 5


def test_effects_land_on_both_sides():
    good, bad = _table(2.5, 0.3, 1.0, 1.0), _table(1.0, 0.9, 1.35, 1.0)
    primary = CLAIM.primary
    assert primary.fn is None and len(primary.parts) == 2
    for part in primary.parts:
        assert part.fn(good) < part.margin.value < part.fn(bad)
    slope = next(e for e in CLAIM.secondary if e.name == "logdet_exponent_gap")
    assert slope.fn(good) > slope.margin.value > slope.fn(bad)
    assert not CLAIM.exclusive  # its seeds train beside other tasks; the gate is below
    helps = next(e for e in CLAIM.secondary if e.name == "digits_mixing_helps")
    assert helps.fn(good) > 0 > helps.fn(bad)


def test_the_primary_names_the_engines_arms():
    arms = set(CLAIM.config("quick")["search"]["arms"])
    primary = CLAIM.primary
    for names in (primary.method, primary.baseline):
        assert set(names.split(", ")) <= arms, names
    for part in primary.parts:
        assert {part.method, part.baseline} <= arms, part.name
    pair = placebo_override(CLAIM)["placebo"]
    assert {pair["method"], pair["baseline"]} <= arms


def test_the_primary_is_untestable_when_a_flow_did_not_learn():
    ms = [_table(2.5, 0.3, 1.0 + 0.001 * i, 1.0) for i in range(7)]
    assert judge_claim(CLAIM, ms).primary.verdict == "supported"
    for m in ms:  # the LU flow no better than the Gaussian on moons
        m["table"]["moons-lu"]["test_nll"] = 1.45
        m["table"]["moons-circulant"]["test_nll"] = 1.45
    verdict = judge_claim(CLAIM, ms)
    assert not next(p for p in verdict.premises if p.name == "moons_lu_flow_learns").held
    assert verdict.primary.verdict == "untestable"


def _secondary(verdict, name):
    return next(e for e in verdict.effects if e.name == name)


def test_the_timings_are_judged_only_where_no_task_waited_for_a_core():
    ms = [_table(2.5 + 0.01 * i, 0.3, 1.0 + 0.001 * i, 1.0) for i in range(7)]
    quiet = judge_claim(CLAIM, ms)
    assert _secondary(quiet, "logdet_exponent_gap").verdict == "supported"
    for m in ms[:3]:  # three seeds timed while a task waited for a core
        m["table"]["machine"]["tasks_waiting"] = 1.0
    busy = judge_claim(CLAIM, ms)
    for name in ("logdet_exponent_gap", "inverse_exponent_gap"):
        assert _secondary(busy, name).verdict == "untestable", name
    assert busy.primary.verdict == quiet.primary.verdict == "supported"  # training is not gated
