"""The nsnquant claim: smoke run, checks, and effect signs on hand-built tables."""

from __future__ import annotations

import json
import math

from normlab.claims.catalogue.nsnquant import CLAIM
from normlab.claims.core import measured_at
from normlab.claims.rule import judge_claim


def _table(nsn: float, kmeans: float, kivi: float, shift: float = 0.02) -> dict:
    """Every row at error ``err`` on the shifted domains (tables, prose); k-means is
    ``shift`` better in domain (code) and calibrated on tables (the oracle)."""
    table = {"fp": {"tables_bpb": 3.5, "prose_bpb": 3.0, "code_bpb": 2.5}}
    rows = (("nsn", nsn), ("kmeans", kmeans), ("kivi", kivi), ("kmeans-matched", kmeans))
    rows += (("kivi-matched", kivi), ("kmeans-oracle", kmeans - shift), ("hqq", kivi))
    rows += (("quanto", kivi),)
    for name, err in rows:
        for bits in (1, 2):
            table[f"{name}-{bits}bit"] = {
                "tables_attn_err": err,
                "prose_attn_err": err,
                "code_attn_err": err - (shift if name == "kmeans" else 0),
                "tables_bpb": 3.5 + err,
                "prose_bpb": 3.0 + err,
                "code_bpb": 2.5,
                "bytes_per_token": 10.0,
            }
    return {"table": table}


def test_smoke_run_checks_and_finite_effects(smoke_measurement):
    config = CLAIM.config("smoke")
    m = smoke_measurement(CLAIM.id)
    json.dumps(m)
    for effect in CLAIM.effects:
        assert measured_at(effect, "smoke"), effect.name
        for e in effect.parts or (effect,):
            assert math.isfinite(e.fn(m)), e.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name
    rows = m["table"]
    for domain in ("tables", "prose", "code"):
        assert rows["nsn-2bit"][f"{domain}_attn_err"] < rows["nsn-1bit"][f"{domain}_attn_err"]
    assert rows["kmeans-2bit"]["bytes_per_token"] == 2 * rows["kmeans-1bit"]["bytes_per_token"]
    for bits in (1, 2):  # matched baselines store no more than NSNQuant's bytes
        nsn = rows[f"nsn-{bits}bit"]["bytes_per_token"]
        assert rows[f"kmeans-matched-{bits}bit"]["bytes_per_token"] <= nsn
        assert rows[f"kivi-matched-{bits}bit"]["bytes_per_token"] <= nsn


def test_effects_land_on_both_sides():
    good, bad = _table(0.05, 0.10, 0.12), _table(0.12, 0.08, 0.10)
    former = next(e for e in CLAIM.secondary if e.name == "attn_err_2bit_tables")
    assert former.baseline == "kmeans-matched-2bit"
    assert former.fn(good) < -former.margin.value and former.fn(bad) > 0
    every = next(e for e in CLAIM.secondary if e.name == "attn_err_2bit_vs_every")
    for part in every.parts:
        assert part.fn(good) < -part.margin.value and part.fn(bad) > 0
    (pre,) = CLAIM.premises
    assert pre.fn(good) > pre.margin.value > pre.fn(_table(0.05, 0.1, 0.1, -0.02))
    assert pre.gates == ("shift_degradation",)
    p = CLAIM.primary
    assert p.name == "shift_degradation" and "calibration-free" in CLAIM.quote
    assert p.fn(good) < 0 < p.fn(_table(0.05, 0.1, 0.1, shift=-0.02))


def _seeds(shift: float, oracle_gain: float) -> list[dict]:
    """Seeds where k-means' error grows by ``shift`` from code to tables (NSNQuant's does
    not) and calibrating k-means on tables lowers its table error by ``oracle_gain``."""
    out = []
    for i in range(7):
        m = _table(0.10, 0.10, 0.12, shift=shift * (1 + 0.05 * i))
        m["table"]["kmeans-oracle-2bit"]["tables_attn_err"] = 0.10 - oracle_gain * (1 + 0.05 * i)
        out.append(m)
    return out


def test_the_primary_can_fail_and_its_premise_gates_it():
    assert judge_claim(CLAIM, _seeds(0.05, 0.03)).primary.verdict == "supported"
    assert judge_claim(CLAIM, _seeds(-0.05, 0.03)).primary.verdict == "contradicted"
    verdict = judge_claim(CLAIM, _seeds(0.05, -0.03))  # the shift does not hurt k-means
    assert not next(p for p in verdict.premises if p.name == "shift_hurts_calibration").held
    assert verdict.primary.verdict == "untestable"
