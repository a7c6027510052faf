"""The oasis claim runs at smoke scale: table structure and finite effects."""

from __future__ import annotations

import json
import math

import torch

from normlab.claims import get_claim
from normlab.claims.catalogue.oasis import VARIANTS, variant_config

METRICS = {
    "max_inf_norm",
    "avg_kurtosis",
    "sink_score",
    "first_token_mass",
    "null_mass",
    "fp_bpb",
    "w8a8_bpb",
    "w4a4_bpb",
    "w8a8_degradation",
    "w4a4_degradation",
}


def test_smoke_run_table_and_effects():
    torch.set_num_threads(1)
    claim = get_claim("oasis")
    measurement = claim.run(claim.config("smoke"), 0)
    json.dumps(measurement)
    table = measurement["table"]
    assert set(table) == set(VARIANTS)
    for name, row in table.items():
        assert set(row) >= METRICS, name
        assert all(isinstance(v, float) and math.isfinite(v) for v in row.values()), row
        assert 0.0 <= row["sink_score"] <= 1.0 and 0.0 < row["first_token_mass"] <= 1.0
        assert row["avg_kurtosis"] > 0 and row["max_inf_norm"] > 0
        assert 0 < row["fp_bpb"] < 9  # bits per byte of a byte model: below log2(257)
        assert row["w8a8_degradation"] == row["w8a8_bpb"] - row["fp_bpb"]
    assert table["attnres"]["null_mass"] < 1e-6 < table["oasis"]["null_mass"]
    assert table["attnres+softmax1"]["null_mass"] > 0
    assert "beta" not in table["attnres"] and 0 < table["oasis"]["beta"] < 0.05  # near no-op
    for effect in claim.effects:
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), effect.name
    assert claim.config("quick")["seeds"] >= 3
    assert set(measurement["curves"]) == set(VARIANTS)


def test_variants_are_the_six_of_the_catalogue():
    config = get_claim("oasis").config("quick")
    built = {name: variant_config(name, config) for name in VARIANTS}
    assert built["pre-ln"].residual == "pre"
    assert built["oasis"].residual == "oasis" and built["oasis"].score == "softmax1"
    assert built["attnres+clipped"].score_kwargs == {"gamma": -12 / config["context"]}
    assert built["attnres+gated"].gated_attention
    assert {built[n].residual for n in VARIANTS if n != "pre-ln"} <= {"attnres", "oasis"}
