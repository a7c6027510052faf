"""The wne claim: smoke run, its check, data, and effect signs on hand-built tables."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.claims import get_claim
from normlab.claims.rule import judge_claim
from normlab.models.denoise import DenoiseCNN, psnr, synthetic_scenes

CLAIM = get_claim("wne")


def _m(plain50, wne50, plain15=30.0, wne15=30.0, noisy15=24.6, noisy50=14.1):
    def row(p50, p15):
        return {
            "psnr_50": p50,
            "psnr_15": p15,
            "noisy_psnr_15": noisy15,
            "noisy_psnr_50": noisy50,
        }

    return {"table": {"plain": row(plain50, plain15), "wne": row(wne50, wne15)}}


def test_effects_and_premises_come_out_both_ways():
    primary, in_range = CLAIM.primary, CLAIM.secondary[0]
    assert primary.fn(_m(18.0, 19.0)) == pytest.approx(1.0)
    assert primary.fn(_m(19.0, 18.0)) == pytest.approx(-1.0)
    assert in_range.fn(_m(0, 0, wne15=29.0)) < -in_range.margin.value
    assert in_range.fn(_m(0, 0, wne15=30.5)) > 0
    learns, hurts = CLAIM.premises
    assert learns.fn(_m(0, 0)) > learns.margin.value > learns.fn(_m(0, 0, plain15=24.0))
    assert hurts.fn(_m(15.0, 0)) > hurts.margin.value > hurts.fn(_m(20.0, 0))


def test_data_and_model():
    imgs = synthetic_scenes(4, seed=0)
    assert imgs.shape == (4, 1, 16, 16) and imgs.min() >= 0 and imgs.max() <= 1
    assert torch.equal(imgs, synthetic_scenes(4, seed=0))
    assert DenoiseCNN(3, 4)(imgs).shape == imgs.shape
    assert psnr(imgs, imgs) == pytest.approx(120.0)


@pytest.mark.slow
def test_smoke_run_and_checks():
    torch.set_num_threads(1)
    config = CLAIM.config("smoke")
    m = CLAIM.run(config, 0)
    assert set(m["tuning"]) == {"plain", "wne"}
    for effect in CLAIM.effects:
        assert math.isfinite(effect.fn(m)), effect.name
    for check in CLAIM.checks:
        assert check.fn(config).passed, check.name
    assert CLAIM.config("quick")["seeds"] >= 5


def test_the_primary_is_untestable_without_a_mismatch_or_when_under_trained():
    def ms(plain50: float, late: float = 0.01) -> list[dict]:
        out = []
        for i in range(5):
            m = _m(plain50 + 0.01 * i, plain50 + 1.0 + 0.01 * i)
            records = {a: {"reference": -20.0, "val": -28.0, "late_share": late} for a in _ARMS}
            out.append({**m, "tuning": records})
        return out

    assert judge_claim(CLAIM, ms(15.0)).primary.verdict == "supported"
    assert judge_claim(CLAIM, ms(21.0)).primary.verdict == "untestable"  # no mismatch
    assert judge_claim(CLAIM, ms(15.0, late=0.4)).primary.verdict == "untestable"


_ARMS = ("plain", "wne")
