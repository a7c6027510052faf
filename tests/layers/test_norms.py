"""LayerNorm and RMSNorm against torch, in float64 and in half precision."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.layers import LayerNorm, RMSNorm

SHAPES = [((4, 7, 16), 16), ((3, 5, 6), (5, 6)), ((2, 32), 32)]


def _perturb(*modules: nn.Module) -> None:
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for params in zip(*(m.parameters() for m in modules), strict=True):
            noise = torch.randn(params[0].shape, generator=g, dtype=params[0].dtype)
            for p in params:
                p.add_(noise)


@pytest.mark.parametrize(("shape", "normalized"), SHAPES)
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layer_norm_equals_torch_float64(shape, normalized, eps):
    ours = LayerNorm(normalized, eps=eps, dtype=torch.float64)
    ref = nn.LayerNorm(normalized, eps=eps, dtype=torch.float64)
    _perturb(ours, ref)
    x = torch.randn(shape, dtype=torch.float64) * 3 + 1
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("shape", "normalized"), SHAPES)
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm_equals_torch_float64(shape, normalized, eps):
    ours = RMSNorm(normalized, eps=eps, dtype=torch.float64)
    ref = nn.RMSNorm(normalized, eps=eps, dtype=torch.float64)
    _perturb(ours, ref)
    x = torch.randn(shape, dtype=torch.float64) * 3 + 1
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_without_affine_or_bias(cls):
    kwargs = {"bias": False} if cls is LayerNorm else {}
    norm = cls(8, **kwargs)
    assert norm.bias is None
    assert not list(cls(8, elementwise_affine=False).parameters())


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_half_inputs_are_normalized_in_float32(low):
    x = (torch.randn(4, 64) * 50 + 200).to(low)
    y = LayerNorm(64)(x)
    assert y.dtype == low
    expected = nn.functional.layer_norm(x.float(), (64,)).to(low)
    # within one rounding of the dtype: float32 sums in another order may round the other way
    torch.testing.assert_close(y, expected, rtol=torch.finfo(low).eps, atol=0)
    # float16 statistics of these values would overflow: sum of squares > 65504.
    assert torch.isfinite(RMSNorm(64)(x)).all()


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_constant_and_zero_rows_give_no_nan(cls):
    x = torch.stack([torch.full((8,), 3.0), torch.zeros(8)])
    assert torch.isfinite(cls(8)(x)).all()


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_nan_stays_in_its_row(cls):
    x = torch.randn(3, 8)
    x[1, 2] = float("nan")
    y = cls(8)(x)
    assert torch.isnan(y[1]).all()
    assert torch.isfinite(y[[0, 2]]).all()


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="normalized shape"):
        LayerNorm(8)(torch.randn(2, 9))
    with pytest.raises(TypeError, match="floating-point"):
        RMSNorm(8)(torch.ones(2, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="positive int"):
        LayerNorm(0)


def test_reprs_name_the_configuration():
    assert "eps=1e-05" in repr(LayerNorm(8))
    assert "(8,)" in repr(RMSNorm(8))
