"""The numerics claim: its smoke run, its overflow rule and the signs of its effects."""

from __future__ import annotations

import math

import torch

from normlab.claims.catalogue.numerics import CLAIM
from normlab.claims.common import spearman
from normlab.claims.rule import judge_claim
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes.numerics import bound_failures, residual_scaling_errors


def test_smoke_run_has_every_scale_and_finite_errors(smoke_measurement):
    m = smoke_measurement("numerics")
    scales = {1.0, *CLAIM.config("smoke")["scales"]}
    for s in scales:
        row = m["table"][f"gpt-s{s:g}"]
        assert 0 < row["rel_err_final"] < 0.1 and row["growth"] > 0
    assert m["table"]["gpt-s64"]["growth"] > m["table"]["gpt-s1"]["growth"]
    assert m["table"]["gpt-mild"] == m["table"]["gpt-s2"]
    # the positive control: fp16 (10 mantissa bits) errs several times less than bf16 (7)
    fp16, bf16 = m["table"]["gpt-s1-fp16"]["rel_err_final"], m["table"]["gpt-s1"]["rel_err_final"]
    assert 2 < bf16 / fp16 < 32


def test_scaling_by_one_is_the_model_itself():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8))
    idx = torch.randint(0, 256, (2, 8))
    a = residual_scaling_errors(model, idx, 1.0)
    b = residual_scaling_errors(model, idx, 1.0)
    assert a == b and len(a["errors"]) == 3
    assert model.blocks[0].attn.out.weight.dtype == torch.float32  # the model is not changed


def test_overflow_counts_as_failure_unless_documented():
    ok = {"dtype": "bfloat16", "compute": "native", "outlier": 1e4, "error": 0.01, "bound": 0.02}
    over = {**ok, "error": math.inf}
    fp16 = {**over, "dtype": "float16"}
    assert bound_failures([ok]) == (0, 1, 0)
    assert bound_failures([over]) == (1, 1, 0)
    assert bound_failures([fp16]) == (0, 0, 1)
    assert bound_failures([{**ok, "error": 0.6, "bound": 1.0}]) == (1, 1, 0)


def _table(err_mild, err_large, ln, rms, rho):
    rows = {
        "gpt-s1": {"rel_err_final": 0.01, "growth": 2.0},
        "gpt-s1-fp16": {"rel_err_final": 0.00125, "growth": 2.0},
        "gpt-mild": {"rel_err_final": err_mild, "growth": 4.0},
        "gpt-large": {"rel_err_final": err_large, "growth": 100.0},
        "layernorm-bfloat16-native": {"error": ln},
        "rmsnorm-bfloat16-native": {"error": rms},
        "bounds": {"bound_error_spearman": rho, "softmax_kappa_error_spearman": rho},
    }
    return {"table": rows}


def test_effects_take_both_signs_on_constructed_tables():
    up, down = _table(0.05, 0.1, 0.02, 0.01, 0.9), _table(0.002, 0.001, 0.01, 0.02, -0.5)
    for effect in CLAIM.effects:
        assert effect.fn(up) * effect.fn(down) < 0, effect.name
    assert CLAIM.primary.fn(_table(0.01, 0.01, 1, 1, 0)) == 0.0
    control = CLAIM.premises[0]
    assert control.fn(up) > control.margin.value


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert abs(spearman([1, 2, 3, 4], [1, 3, 2, 4]) - 0.8) < 1e-12
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def _seeds(err_mild, err_large, fp16=0.00125, growth_mild=4.0, growth_large=100.0):
    out = []
    for i in range(5):
        m = _table(err_mild * (1 + 0.01 * i), err_large * (1 + 0.01 * i), 0.02, 0.01, 0.9)
        m["table"]["gpt-s1-fp16"]["rel_err_final"] = fp16 * (1 + 0.01 * i)
        m["table"]["gpt-mild"]["growth"] = growth_mild
        m["table"]["gpt-large"]["growth"] = growth_large * (1 + 0.01 * i)
        out.append(m)
    return out


def test_the_primary_is_the_abstracts_claim_and_can_fail():
    assert "residual-projection weights preserves" in CLAIM.quote
    assert judge_claim(CLAIM, _seeds(0.012, 0.05)).primary.verdict == "supported"
    assert judge_claim(CLAIM, _seeds(0.05, 0.05)).primary.verdict == "contradicted"


def test_a_blind_measurement_makes_the_scaling_effects_untestable():
    verdict = judge_claim(CLAIM, _seeds(0.012, 0.05, fp16=0.01))  # fp16 errs as bf16 does
    assert not next(p for p in verdict.premises if p.name == "control_detects_precision").held
    assert verdict.primary.verdict == "untestable"


def test_the_growth_preconditions_can_fail():
    verdict = judge_claim(CLAIM, _seeds(0.012, 0.05, growth_mild=40.0, growth_large=4.0))
    held = {p.name: p.held for p in verdict.premises}
    assert not held["mild_scaling_keeps_dynamics"] and not held["large_scaling_changes_dynamics"]
    effects = {e.name: e.verdict for e in verdict.effects}
    assert (
        effects["scaling_preserves_error"] == effects["transition_changes_error"] == "untestable"
    )
