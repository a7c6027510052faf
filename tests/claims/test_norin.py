"""The norin claim runs at smoke scale; its table, curves and effects are well formed."""

from __future__ import annotations

import json
import math

import torch

from normlab.claims import get_claim
from normlab.claims.catalogue.norin import BASELINES


def test_smoke_run_table_curves_and_effects():
    torch.set_num_threads(1)
    claim = get_claim("norin")
    measurement = claim.run(claim.config("smoke"), 0)
    json.loads(json.dumps(measurement))
    table = measurement["table"]
    assert set(table) == {*BASELINES, "norin", "norin-joint"}
    for row in table.values():
        assert set(row) == {"mse", "mae"}
        assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in row.values())
    configs = list(measurement["per_config"])
    assert configs and set(measurement["delta_trajectory"]) == set(configs) == set(
        measurement["bo"]
    )
    for key in configs:
        trajectory = measurement["delta_trajectory"][key]
        assert trajectory[0] == claim.config("smoke")["delta_init"]
        assert len(trajectory) == claim.config("smoke")["epochs"] + 1
        search = measurement["bo"][key]
        assert len(search["trials"]) == claim.config("smoke")["trials"]
        assert 0.3 <= search["delta"] <= 30 and -3 <= search["epsilon"] <= 3
        # NoRIN's test row is the selected trial's
        assert math.isfinite(search["value"])
    for fit in measurement["slifker_shapiro"].values():
        assert fit["family"] in {"SU", "SB", "boundary", "degenerate"}
    for effect in claim.effects:
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), effect.name
    assert claim.config("quick")["seeds"] >= 3
    assert {"linear", "mlp"} <= set(claim.config("quick")["backbones"])
    assert claim.config("quick")["horizons"] == [96]
    assert set(claim.config("full")["horizons"]) == {96, 192, 336, 720}


def test_effects_have_the_claimed_sign_on_constructed_measurements():
    claim = get_claim("norin")
    effects = {e.name: e.fn for e in claim.effects}
    good = {
        "delta_trajectory": {"a": [1.0, 1.2, 1.5]},
        "bo": {"a": {"delta": 1.5}},
        "per_config": {"a": {"revin": {"mse": 1.0}, "norin": {"mse": 0.9}}},
    }
    bad = {
        "delta_trajectory": {"a": [1.0, 0.9]},
        "bo": {"a": {"delta": 25.0}},
        "per_config": {"a": {"revin": {"mse": 1.0}, "norin": {"mse": 1.1}}},
    }
    for name, fn in effects.items():
        assert fn(good) > 0 > fn(bad), name
