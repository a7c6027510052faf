"""Low-precision norms and softmax: condition numbers vs autograd, bounds, overflow."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normlab.probes import (
    condition_number,
    lowp_norm,
    lowp_softmax,
    outlier_sweep,
    sink_sweep,
    unit_roundoff,
)
from normlab.probes._lowp import pairwise_sum


def _reference(x: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), eps=1e-5)
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-5)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_condition_number_matches_autograd_jacobian(kind):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 12, generator=g, dtype=torch.float64)
    x[:, 0] += 30.0
    bulk = torch.ones(12, dtype=torch.bool)
    bulk[0] = False
    kappa = condition_number(x, kind, bulk=bulk)
    for r in range(3):
        jac = torch.autograd.functional.jacobian(lambda v: _reference(v, kind), x[r])
        amp = (jac.abs() @ x[r].abs())[bulk]
        assert float(kappa[r]) == pytest.approx(
            float(amp.norm() / _reference(x[r], kind)[bulk].norm())
        )


def test_rmsnorm_is_well_conditioned_for_any_outlier():
    g = torch.Generator().manual_seed(0)
    for m in (0.0, 1e2, 1e5):
        x = torch.randn(8, 64, generator=g, dtype=torch.float64)
        x[:, 3] += m
        assert float(condition_number(x, "rmsnorm").max()) <= 2.0 + 1e-9


def test_lowp_norm_in_float64_is_exact_and_units():
    x = torch.randn(4, 33, dtype=torch.float64)
    for kind in ("layernorm", "rmsnorm"):
        y = lowp_norm(x, kind, torch.float64)
        assert torch.allclose(y, _reference(x, kind), rtol=0, atol=1e-12)
    assert unit_roundoff(torch.float16) == 2.0**-11 and unit_roundoff(torch.bfloat16) == 2.0**-8
    assert float(pairwise_sum(x, torch.float64)[0]) == pytest.approx(float(x[0].sum()))


def test_measured_error_is_within_the_bound():
    records = outlier_sweep([1.0, 100.0], d=64, rows=8, compute="native")
    records += outlier_sweep([1.0, 100.0, 1e4], d=64, rows=8, compute="upcast")
    assert len(records) == 20
    for r in records:
        assert 0 < r.error <= r.bound, r


def test_fp16_native_squares_overflow_for_big_outliers():
    records = outlier_sweep([1000.0], d=64, rows=4, dtypes=(torch.float16,), compute="native")
    assert all(r.error >= 0.99 for r in records)  # x^2 > 65504: the output collapses


def test_softmax_shift_trade_off():
    records = {
        (r.dtype, r.shifted, r.sink): r for r in sink_sweep([0.0, 20.0, 80.0], n=32, rows=8)
    }
    assert records["float16", False, 20.0].overflow  # exp(20) > 65504
    assert not records["float16", True, 20.0].overflow
    assert not records["bfloat16", False, 80.0].overflow
    shifted_small, shifted_big = records["bfloat16", True, 0.0], records["bfloat16", True, 80.0]
    assert shifted_big.error > 5 * shifted_small.error  # error grows with the sink distance
    assert shifted_big.kappa > shifted_small.kappa
    assert records["bfloat16", False, 80.0].error < shifted_big.error
    x = torch.randn(3, 10, dtype=torch.float64)
    assert torch.allclose(lowp_softmax(x, torch.float64, shifted=True), x.softmax(-1), rtol=1e-12)
