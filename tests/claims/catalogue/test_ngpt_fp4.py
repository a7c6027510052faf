"""The ngpt-fp4 claim: smoke table per width, the SNR measurement, effect signs."""

from __future__ import annotations

import math

import torch

from normlab.claims import get_claim
from normlab.quant import QuantFormat
from normlab.quant.snr import gemm_snr

CLAIM = get_claim("ngpt-fp4")


def test_smoke_table(smoke_measurement):
    m = smoke_measurement("ngpt-fp4")
    arms = {"tinygpt-d16", "tinygpt-wide", "ngpt-d16", "ngpt-wide"}  # wide: the widest, 32
    assert set(m["tuning"]) == arms and CLAIM.config("smoke")["widths"] == (16, 32)
    for arm in arms:  # the arm's fp32 row and its NVFP4 twin's, at the chosen lr
        fp32, fp4 = m["table"][arm], m["table"][f"{arm}-fp4"]
        assert fp32["lr"] == fp4["lr"] == m["tuning"][arm]["chosen"]["lr"]
        assert math.isfinite(fp32["bpb"]) and math.isfinite(fp4["bpb"])
        assert 5 < fp32["snr_db"] < 40  # 4-bit formats give roughly 15-25 dB
    for name in ("tinygpt", "ngpt"):
        assert math.isfinite(m["table"][name]["snr_width_slope"])  # two smoke widths
    assert CLAIM.config("quick")["seeds"] >= 5
    assert CLAIM.figure([m]) is not None


def test_quick_measures_the_width_effects_only_where_it_has_two_widths():
    from normlab.claims.core import measured_at

    for scale in ("quick", "full"):
        several = len(CLAIM.config(scale)["widths"]) > 1
        for name in ("gap_smaller_narrowest", "snr_advantage_grows"):
            effect = next(e for e in CLAIM.effects if e.name == name)
            assert measured_at(effect, scale) == several, (scale, name)
    assert measured_at(CLAIM.primary, "quick")


def _m(ngpt_fp4: float, diverged: dict | None = None) -> dict:
    table = {}
    for w in ("d16", "d64", "wide"):
        table[f"tinygpt-{w}"] = {"bpb": 3.0, "snr_db": 20.0}
        table[f"tinygpt-{w}-fp4"] = {"bpb": 3.05}
        table[f"ngpt-{w}"] = {"bpb": 3.0, "snr_db": 21.0}
        table[f"ngpt-{w}-fp4"] = {"bpb": ngpt_fp4}
    return {"table": table, "diverged": diverged or {}}


def test_gap_effect_sign_and_divergence_as_an_outcome():
    from normlab.claims.rule import with_divergence

    assert CLAIM.primary.fn(_m(3.01)) < 0 < CLAIM.primary.fn(_m(3.09))
    # the baseline diverging in NVFP4 counts as the uniform predictor: nGPT loses far less
    m = with_divergence(_m(3.09, {"tinygpt-wide-fp4": {"step": 5, "last": 4.0}}), {"bpb": 8.0})
    assert CLAIM.primary.fn(m) < -4
    # the fp32 arm diverging (the engine's record) counts as the uniform predictor too
    m = with_divergence(_m(3.09, {"ngpt-wide": {"step": 5, "last": 4.0}}), {"bpb": 8.0})
    assert m["table"]["ngpt-wide"]["bpb"] == 8.0 and m["table"]["ngpt-wide-fp4"]["bpb"] == 3.09


def test_each_recipe_evaluates_with_its_training_range():
    from normlab.training.fp4_twins import fp4_forward_formats

    amax = CLAIM.config("quick")["fp4_amax"]
    ngpt = fp4_forward_formats(amax["ngpt"])
    assert ngpt["weights"].tensor_amax == ngpt["activations"].tensor_amax == 1.0
    assert fp4_forward_formats(amax["tinygpt"]) == {}  # the measured per-tensor amax


def test_the_quick_lr_ladder_spans_both_optima_and_extends():
    search = CLAIM.config("quick")["search"]
    lrs = search["space"]["lr"]
    assert min(lrs) <= 3e-3 and max(lrs) >= 3e-2 and len(lrs) >= 3  # pre-LN's and nGPT's
    assert search["extend"] >= 2


def test_the_premise_gates_the_primary():
    from normlab.claims.rule import judge_claim

    ms = [_m(3.0 + 0.001 * i) for i in range(5)]  # pre-LN loses 0.05, nGPT ~0
    for i, m in enumerate(ms):
        m["table"]["tinygpt-wide-fp4"]["bpb"] += 0.002 * i
    assert judge_claim(CLAIM, ms, scale="quick").primary.verdict == "supported"
    for i, m in enumerate(ms):  # NVFP4 costs pre-LN nothing: nothing to lose less of
        m["table"]["tinygpt-wide-fp4"]["bpb"] = 3.0 + 0.001 * i
    verdict = judge_claim(CLAIM, ms, scale="quick")
    assert not next(p for p in verdict.premises if p.name == "nvfp4_hurts_baseline").held
    assert verdict.primary.verdict == "untestable"


def test_fixed_amax_changes_the_quantized_training():
    from dataclasses import replace

    from normlab.models.gpt import GPTConfig
    from normlab.training.lm import LMTrainConfig, train_lm

    tc = LMTrainConfig(steps=2, batch=2, lr=1e-2, warmup=1, eval_batches=1,
                       matmul_quant="nvfp4")  # fmt: skip
    gpt = GPTConfig(d_model=16, n_layers=1, n_heads=2, context=8)
    measured = train_lm(gpt, tc, 0, cache=False)[1]["val_bpb"][-1]
    fixed = train_lm(gpt, replace(tc, matmul_quant_amax=0.25), 0, cache=False)[1]["val_bpb"][-1]
    assert math.isfinite(fixed) and fixed != measured


def test_snr_rises_with_length_only_for_correlated_products():
    g = torch.Generator().manual_seed(0)
    fmt = QuantFormat("nvfp4")
    x = torch.randn(256, 512, generator=g, dtype=torch.float64)
    w = torch.randn(64, 512, generator=g, dtype=torch.float64)
    lengths = [16, 64, 256, 512]
    independent = gemm_snr(x, w, fmt, lengths=lengths)
    assert max(independent.values()) / min(independent.values()) < 1.5  # both grow like k
    aligned = w[:1] + 0.5 * torch.randn(256, 512, generator=g, dtype=torch.float64)
    correlated = gemm_snr(aligned, w[:1], fmt, lengths=lengths)
    assert correlated[512] > 10 * correlated[16]  # signal grows like k^2, noise like k
    assert gemm_snr(x, w, QuantFormat("int", bits=8))[512] > 10 * independent[512]
