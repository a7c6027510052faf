"""The curse-of-depth claim: one profile per variant, per-variant effects, the gates."""

from __future__ import annotations

from normlab.claims import get_claim
from normlab.claims.catalogue._depth_models import train_config
from normlab.claims.core import judge_claim

CLAIM = get_claim("curse-of-depth")
SPARSE = ("weight-decay", "gqa", "moe")


def test_smoke_profiles(smoke_measurement):
    config = CLAIM.config("smoke")
    m = smoke_measurement("curse-of-depth")
    assert set(m["table"]) == {"dense", *config["variants"]}
    for profile in m["curves"].values():
        assert len(profile["variance"]) == config["n_layers"] + 1
        assert len(profile["drop_loss"]) == config["n_layers"]
    assert set(CLAIM.config("quick")["variants"]) == set(SPARSE)
    assert CLAIM.config("quick")["seeds"] >= 5


def test_weight_decay_only_in_its_variant():
    config = CLAIM.config("quick")
    assert train_config(config, "dense").weight_decay == 0.0
    assert train_config(config, "weight-decay").weight_decay == config["weight_decay"] > 0


def _m(wd_growth: float, wd_rms: float = 0.5) -> dict:
    row = {"variance_growth": 0.3, "deep_drop_loss": 0.1, "weight_rms": 1.0, "val_bpb": 3.0}
    table = {v: dict(row) for v in ("dense", *SPARSE)}
    table["weight-decay"].update(variance_growth=wd_growth, weight_rms=wd_rms)
    return {"table": table}


def test_one_effect_per_variant_and_gates():
    names = {e.name for e in CLAIM.effects}
    assert {f"variance_damped_{v.replace('-', '_')}" for v in SPARSE} <= names
    assert CLAIM.primary.fn(_m(0.1)) > 0 > CLAIM.primary.fn(_m(0.5))
    values = (0.1, 0.12, 0.11, 0.1)
    assert judge_claim(CLAIM, [_m(v) for v in values]).verdict == "supported"
    assert judge_claim(CLAIM, [_m(v, 0.99) for v in values]).verdict == "untestable"
