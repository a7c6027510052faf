"""The oasis claim: smoke table, variants, the coupling that can move, gates and signs."""

from __future__ import annotations

import math

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim
from normlab.training.oasis import ATTNRES as BASELINE
from normlab.training.oasis import SOFTMAX1, VARIANTS, variant_config, variant_train_config

CLAIM = get_claim("oasis")


def test_smoke_table(smoke_measurement):
    m = smoke_measurement("oasis")
    table = m["table"]
    assert set(table) == set(CLAIM.config("smoke")["variants"])
    for row in table.values():
        assert all(math.isfinite(v) for v in row.values()), row
        assert 0.0 <= row["sink_score"] <= 1.0 and 0 < row["fp_bpb"] < 9
        assert math.isclose(row["w8a8_degradation"], row["w8a8_bpb"] - row["fp_bpb"])
    assert table["attnres"]["null_mass"] < 1e-6 < table["oasis"]["null_mass"]
    assert "beta" not in table[SOFTMAX1] and table["oasis"]["beta"] > 0.5  # softplus(0) = 0.69
    beta = m["curves"]["beta"]
    assert beta["step"][0] == 0 and math.isclose(beta["beta"][0], math.log(2), rel_tol=1e-6)
    assert CLAIM.config("quick")["seeds"] >= 5


def test_variants():
    config = CLAIM.config("quick")
    built = {name: variant_config(name, config) for name in VARIANTS}
    assert built["oasis"].residual == "oasis" and built["oasis"].score == "softmax1"
    assert built["oasis"].null_beta_init == config["beta_init"]
    assert built[SOFTMAX1].residual == "attnres" and built[SOFTMAX1].score == "softmax1"
    assert built[BASELINE].residual == "attnres" and built[BASELINE].score == "softmax"
    assert config["d_model"] == 128  # the size at which the baseline's outliers form
    assert built["attnres+clipped"].score_kwargs == {"gamma": -12 / config["context"]}
    assert set(CLAIM.config("full")["variants"]) == set(VARIANTS)


def _m(oasis_inf: float, kurtosis: float = 20.0, degradation: float = 0.1) -> dict:
    row = {"max_inf_norm": 10.0, "avg_kurtosis": kurtosis, "sink_score": 0.5,
           "w8a8_degradation": degradation, "w4a4_degradation": 0.2}  # fmt: skip
    return {"table": {"pre-ln": dict(row), BASELINE: dict(row), SOFTMAX1: dict(row),
                      "oasis": {**row, "max_inf_norm": oasis_inf, "beta": 0.7,
                                "w8a8_degradation": 0.0}}}  # fmt: skip


def test_primary_sign_and_premises_gate_only_their_effects():
    assert CLAIM.primary.fn(_m(9.0)) < 0 < CLAIM.primary.fn(_m(11.0))
    values = (8.0, 8.1, 8.2, 8.1)
    assert judge_claim(CLAIM, [_m(v) for v in values]).verdict == "supported"
    no_outliers = judge_claim(CLAIM, [_m(v, 3.0) for v in values])
    assert no_outliers.verdict == "untestable"
    effects = {e.name: e for e in no_outliers.effects}
    assert effects["inf_norm_lower"].would_be == "supported"  # shown, not hidden
    assert effects["attnres_worsens_outliers"].verdict != "untestable"  # ungated
    intact = judge_claim(CLAIM, [_m(v, degradation=0.001) for v in values])
    effects = {e.name: e.verdict for e in intact.effects}
    assert intact.verdict == "supported" and effects["w8a8_smaller"] == "untestable"
    still = [_m(v) for v in values]
    for m in still:  # the coupling never moved: OASIS is AttnRes+Softmax1
        m["table"]["oasis"]["beta"] = 0.01
    assert judge_claim(CLAIM, still).verdict == "untestable"


def test_the_primary_compares_oasis_with_its_softmax1_twin_only():
    m = _m(10.0)
    m["table"][BASELINE]["max_inf_norm"] = 100.0  # AttnRes (softmax) far worse: not the primary
    assert CLAIM.primary.fn(m) == 0.0
    vs_attnres = next(e for e in CLAIM.secondary if e.name == "inf_norm_lower_vs_attnres")
    assert vs_attnres.fn(m) < -0.5
    m = _m(10.0)
    m["table"][SOFTMAX1]["max_inf_norm"] = 5.0  # OASIS worse than its twin: the other side
    assert CLAIM.primary.fn(m) > 0


def test_a_diverged_baseline_counts_as_exploded():
    from normlab.claims.rule import with_divergence

    m = {**_m(9.0), "diverged": {SOFTMAX1: {"step": 9, "last": 5.0}}}
    assert CLAIM.primary.fn(with_divergence(m, CLAIM.primary.if_diverged)) < -0.99


def test_coupling_trains_at_its_own_rate():
    from normlab.models.gpt import TinyGPT
    from normlab.training.lm import _param_groups

    config = CLAIM.config("quick")
    assert variant_train_config(config, BASELINE).lr_multipliers == ()
    tc = variant_train_config(config, "oasis")
    model = TinyGPT(variant_config("oasis", CLAIM.config("smoke")))
    groups = _param_groups(model, tc.weight_decay, tc.lr_multipliers)
    scaled = [g for g in groups if g["lr_scale"] != 1.0]
    n_beta = sum(1 for n, _ in model.named_parameters() if n.endswith("beta_raw"))
    assert len(scaled) == 1 and scaled[0]["lr_scale"] == config["beta_lr_scale"] > 1
    assert len(scaled[0]["params"]) == n_beta > 0 and scaled[0]["weight_decay"] == 0.0
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_trajectory_in_smoke(smoke_measurement):
    paths = smoke_measurement("oasis")["curves"]["trajectory"]
    assert set(paths) == {"pre-ln", BASELINE}
    for path in paths.values():
        steps = path["step"]
        assert steps == sorted(steps) and steps[-1] == CLAIM.config("smoke")["steps"]
        for key in ("avg_kurtosis", "max_inf_norm", "sink_score"):
            assert len(path[key]) == len(steps) and all(math.isfinite(v) for v in path[key])
    assert CLAIM.figure is not None


def test_quick_trains_every_arm_its_measured_effects_name():
    from normlab.claims.core import measured_at

    for scale in ("quick", "full"):
        variants = set(CLAIM.config(scale)["variants"])
        for effect in CLAIM.effects:
            if measured_at(effect, scale):
                assert {effect.method, effect.baseline} <= variants, (scale, effect.name)
    assert CLAIM.primary.baseline == SOFTMAX1 in CLAIM.config("quick")["variants"]


def test_no_sinks_gates_the_sink_effect():
    values = (8.0, 8.1, 8.2, 8.1)
    ms = [_m(v) for v in values]
    for i, m in enumerate(ms):
        m["table"][BASELINE]["sink_score"] = 0.1 + 0.01 * i
    verdict = judge_claim(CLAIM, ms)
    assert not next(p for p in verdict.premises if p.name == "sinks_present").held
    assert {e.name: e.verdict for e in verdict.effects}["sink_lower"] == "untestable"
