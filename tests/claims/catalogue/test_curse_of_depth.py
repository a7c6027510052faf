"""The curse-of-depth claim: one profile per variant, per-variant effects, the gates."""

from __future__ import annotations

from normlab.claims import get_claim
from normlab.claims.catalogue._depth_models import train_config
from normlab.claims.rule import judge_claim, with_divergence

CLAIM = get_claim("curse-of-depth")
SPARSE = ("weight-decay", "gqa", "moe")


def test_smoke_profiles(smoke_measurement):
    config = CLAIM.config("smoke")
    m = smoke_measurement("curse-of-depth")
    assert set(m["table"]) == {"dense", *config["variants"]}
    for profile in m["curves"].values():
        assert len(profile["variance"]) == config["n_layers"] + 1
        assert len(profile["drop_loss"]) == config["n_layers"]
    assert CLAIM.config("quick")["seeds"] >= 5


def test_quick_trains_what_quick_measures():
    """Quick trains dense and weight decay only; the GQA/MoE effects are full-only, and the
    arms every scale trains are the arms its search tunes."""
    assert CLAIM.config("quick")["variants"] == ["weight-decay"]
    assert set(CLAIM.config("full")["variants"]) >= set(SPARSE)
    for scale in ("smoke", "quick", "full"):
        config = CLAIM.config(scale)
        assert config["search"]["arms"] == ["dense", *config["variants"]]
    full_only = {e.name for e in CLAIM.effects if e.scales == ("full",)}
    assert full_only == {
        f"{kind}_{v}" for kind in ("deep_useful", "variance_damped") for v in ("gqa", "moe")
    }


def test_weight_decay_only_in_its_variant():
    config = CLAIM.config("quick")
    assert train_config(config, "dense").weight_decay == 0.0
    assert train_config(config, "weight-decay").weight_decay == config["weight_decay"] > 0


def _m(wd_drop: float, wd_rms: float = 0.5, dense_shallow: float = 0.3) -> dict:
    row = {
        "variance_growth": 0.3,
        "deep_drop_loss": 0.1,
        "shallow_drop_loss": dense_shallow,
        "weight_rms": 1.0,
        "test_bpb": 3.0,
    }
    table = {v: dict(row) for v in ("dense", *SPARSE)}
    table["weight-decay"].update(
        deep_drop_loss=wd_drop, weight_rms=wd_rms, dense_weight_rms_same_lr=1.0
    )
    return {"table": table}


def test_one_effect_per_variant_and_gates():
    names = {e.name for e in CLAIM.effects}
    assert {f"variance_damped_{v.replace('-', '_')}" for v in SPARSE} <= names
    assert CLAIM.primary.name == "deep_useful_weight_decay"
    assert CLAIM.primary.fn(_m(0.2)) > 0 > CLAIM.primary.fn(_m(0.05))
    values = (0.2, 0.22, 0.21, 0.2)
    assert judge_claim(CLAIM, [_m(v) for v in values]).verdict == "supported"
    assert judge_claim(CLAIM, [_m(v, 0.99) for v in values]).verdict == "untestable"
    # no curse in the baseline (deep blocks matter as much as shallow ones): untestable
    lazy = [_m(v, dense_shallow=0.05 + 0.01 * i) for i, v in enumerate(values)]
    assert judge_claim(CLAIM, lazy).verdict == "untestable"


def test_a_diverged_arm_counts_as_useless_deep_layers():
    m = {**_m(0.2), "diverged": {"weight-decay": {"step": 3, "last": 4.0}}}
    assert CLAIM.primary.fn(with_divergence(m, CLAIM.primary.if_diverged)) < 0


def test_an_untrained_dense_model_or_a_lazy_stream_is_untestable():
    values = (0.2, 0.22, 0.21, 0.2)
    untrained = [_m(v) for v in values]
    for m in untrained:
        m["table"]["dense"]["test_bpb"] = 4.2
    assert judge_claim(CLAIM, untrained).verdict == "untestable"
    flat = [_m(v) for v in values]
    for m in flat:
        m["table"]["dense"]["variance_growth"] = 0.0
    pres = {p.name: p.held for p in judge_claim(CLAIM, flat).premises}
    assert pres["dense_variance_grows"] is False
    assert CLAIM.config("quick")["steps"] == 250  # 150 left both preconditions unmet
