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
    widths = CLAIM.config("smoke")["widths"]
    for name in ("tinygpt", "ngpt"):
        assert m["table"][name]["lr"] in CLAIM.config("smoke")["lrs"]
        for w in widths:
            row = m["table"][f"{name}-d{w}"]
            assert all(math.isfinite(v) for v in row.values()), row
            assert math.isclose(row["gap"], row["fp4_bpb"] - row["fp32_bpb"])
            assert 5 < row["snr_db"] < 40  # 4-bit formats give roughly 15-25 dB
    assert len(CLAIM.config("quick")["widths"]) >= 3 and CLAIM.config("quick")["seeds"] >= 5


def test_gap_effect_sign():
    def m(ngpt_gap: float) -> dict:
        table = {}
        for w in (16, 64):
            table[f"tinygpt-d{w}"] = {"gap": 0.05, "snr_db": 20.0}
            table[f"ngpt-d{w}"] = {"gap": ngpt_gap, "snr_db": 21.0}
        return {"table": table}

    assert CLAIM.primary.fn(m(0.01)) < 0 < CLAIM.primary.fn(m(0.09))


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
