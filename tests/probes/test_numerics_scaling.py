"""residual_scaling_errors, sweep_table and rank_correlation (numerics claim's probes)."""

from __future__ import annotations

import math

import torch

from normlab.claims.common import spearman
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.probes.numerics import (
    bound_failures,
    rank_correlation,
    residual_scaling_errors,
    sweep_table,
)


def test_scaling_grows_the_stream_and_fp16_errs_less_than_bf16():
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=32, n_layers=2, n_heads=2, context=16))
    idx = torch.randint(0, 256, (2, 16))
    one, big = (residual_scaling_errors(model, idx, s) for s in (1.0, 16.0))
    assert big["growth"] > one["growth"]
    fp16 = residual_scaling_errors(model, idx, 1.0, torch.float16)
    assert fp16["errors"][-1] < one["errors"][-1]
    assert fp16["growth"] == one["growth"]  # the growth is measured in float64


def test_sweep_table_summarizes_the_sweeps_within_the_bound():
    out = sweep_table([1.0, 10.0, 100.0, 1e4], [0.0, 5.0, 20.0, 80.0], d=64, rows=4, n=32)
    rows = out["rows"]
    assert {"layernorm-bfloat16-native", "rmsnorm-float16-upcast", "bounds"} <= set(rows)
    assert bound_failures(out["norm_sweep"])[0] == 0
    assert -1 <= rows["bounds"]["bound_error_spearman"] <= 1
    assert len(out["softmax_sweep"]) == 4 * 2 * 2  # sinks x dtypes x shifted


def test_rank_correlation_matches_the_claims_spearman():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a = torch.randint(0, 4, (7,), generator=g).tolist()
        b = torch.rand(7, generator=g).tolist()
        x, y = spearman(a, b), rank_correlation(a, b)
        assert (math.isnan(x) and math.isnan(y)) or abs(x - y) < 1e-12


def test_the_residual_scaling_table_names_its_rows_and_keeps_the_control():
    from normlab.models.gpt import GPTConfig, TinyGPT
    from normlab.probes.numerics import residual_scaling_errors, residual_scaling_table

    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8))
    idx = torch.randint(0, 256, (2, 8))
    rows, curves = residual_scaling_table(model, idx, [0.5, 4.0], {"mild": 4.0})
    assert rows["gpt-mild"] == rows["gpt-s4"] and set(curves) == {"0.5", "1", "4"}
    assert (
        rows["gpt-s4"]["rel_err_final"] == residual_scaling_errors(model, idx, 4.0)["errors"][-1]
    )
    fp16, bf16 = rows["gpt-s1-fp16"]["rel_err_final"], rows["gpt-s1"]["rel_err_final"]
    assert fp16 < bf16  # fp16 keeps 3 more mantissa bits than bf16 at these magnitudes
