"""The ngpt-fp4 claim runs at smoke scale; its SNR measurement behaves as defined."""

from __future__ import annotations

import json
import math

import torch

from normlab.claims import get_claim
from normlab.quant import QuantFormat
from normlab.quant.snr import gemm_snr


def test_smoke_run_table_and_effects():
    torch.set_num_threads(1)
    claim = get_claim("ngpt-fp4")
    measurement = claim.run(claim.config("smoke"), 0)
    json.dumps(measurement)
    table = measurement["table"]
    assert set(table) == {"tinygpt", "ngpt"}
    for row in table.values():
        assert {"fp32_bpb", "fp4_bpb", "ptq_bpb", "gap", "snr_db", "snr_slope"} <= set(row)
        assert all(isinstance(v, float) and math.isfinite(v) for v in row.values()), row
        assert row["gap"] == row["fp4_bpb"] - row["fp32_bpb"]
        assert 5 < row["snr_db"] < 40  # 4-bit formats give roughly 15-25 dB
    lengths = measurement["curves"]["length"]
    assert lengths == [16, 32]
    for effect in claim.effects:
        value = effect.fn(measurement)
        assert isinstance(value, float) and math.isfinite(value), effect.name
    assert claim.config("quick")["seeds"] >= 3


def test_snr_rises_with_length_only_for_correlated_products():
    g = torch.Generator().manual_seed(0)
    fmt = QuantFormat("nvfp4")
    x = torch.randn(256, 512, generator=g, dtype=torch.float64)
    w = torch.randn(64, 512, generator=g, dtype=torch.float64)
    lengths = [16, 64, 256, 512]
    independent = gemm_snr(x, w, fmt, lengths=lengths)
    spread = max(independent.values()) / min(independent.values())
    assert spread < 1.5  # signal and noise both grow like k
    aligned = w[:1] + 0.5 * torch.randn(256, 512, generator=g, dtype=torch.float64)
    correlated = gemm_snr(aligned, w[:1], fmt, lengths=lengths)
    assert correlated[512] > 10 * correlated[16]  # signal grows like k^2, noise like k
    assert gemm_snr(x, w, QuantFormat("int", bits=8))[512] > 10 * independent[512]
