"""Instance-statistics normalizers make any forecaster equivariant to shift and scale.

For RevIN (both locations), NoRIN (any shape) and PAMod, the normalized window does not
change when the window is mapped to ``a x + b`` (a > 0), so the forecast
``denormalize(f(normalize(x)))`` maps to ``a y + b``, whatever the backbone ``f``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlab.models.forecast import MLPBackbone
from normlab.series import FAN, DishTS, NoRIN, PAMod, RevIN

L, H, C = 32, 16, 2
EPS = 1e-30  # equivariance is exact up to the variance floor; keep it negligible


def _forecast(norm, backbone, x, index):
    z, state = norm.normalize(x, index=index)
    return norm.denormalize(backbone(z), state)


def _norms():
    return {
        "revin": RevIN(C, eps=EPS),
        "revin-last": RevIN(C, eps=EPS, subtract_last=True),
        "norin-heavy": NoRIN(C, eps=EPS, delta=0.6, epsilon=-1.0),
        "norin-light": NoRIN(C, eps=EPS, delta=4.0, epsilon=2.0),
        "pamod": PAMod(C, eps=EPS, periods=(7, 24)),
    }


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(sorted(_norms())),
    seed=st.integers(0, 2**31 - 1),
    log_a=st.floats(-3, 3),
    b=st.floats(-1e4, 1e4),
)
def test_forecast_scales_and_shifts_with_the_window(name, seed, log_a, b):
    torch.manual_seed(seed)
    norm = _norms()[name].double()
    with torch.no_grad():
        for p in norm.parameters():
            p.add_(0.2 * torch.randn_like(p))
    backbone = MLPBackbone(L, H, hidden=16).double()
    x = torch.randn(3, L, C, dtype=torch.float64).cumsum(1)
    index = torch.tensor([0, 5, 100])
    a = 10.0**log_a
    with torch.no_grad():
        y = _forecast(norm, backbone, x, index)
        y_moved = _forecast(norm, backbone, a * x + b, index)
    torch.testing.assert_close(y_moved, a * y + b, rtol=1e-7, atol=1e-7 * (a + abs(b)))


@pytest.mark.parametrize(
    "norm", [DishTS(C, lookback=L), FAN(C, lookback=L, horizon=H)], ids=["dish-ts", "fan"]
)
def test_learned_statistics_are_not_equivariant(norm):
    # A sanity check that the test above can fail: learned-level normalizers are not
    # shift/scale equivariant.
    torch.manual_seed(0)
    backbone = MLPBackbone(L, H, hidden=16)
    x = torch.randn(3, L, C).cumsum(1)
    with torch.no_grad():
        y = _forecast(norm, backbone, x, None)
        y_moved = _forecast(norm, backbone, 5 * x + 3, None)
    assert not torch.allclose(y_moved, 5 * y + 3, rtol=1e-3, atol=1e-3)
