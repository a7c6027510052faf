"""NSNQuant dequantizes at any float32 magnitude, and refuses input that is not a chunk."""

from __future__ import annotations

import pytest
import torch

from normlab.quant.nsn import NSNQuantizer


@pytest.fixture(scope="module")
def quantizer():
    return NSNQuantizer(bits=2, samples=2048)


@pytest.mark.parametrize("scale", [1e5, 1e-8, 1e-30, 1e19, 1e30])
def test_scaled_input_dequantizes_as_the_unit_input_scaled(quantizer, scale):
    # fp16 scales gave all NaN at x 1e5 and zeros at x 1e-8
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(0))
    unit = quantizer.dequantize(quantizer.quantize(x))
    # a power of two as close to scale as possible, so x * p has x's digits exactly
    p = 2.0 ** round(torch.log2(torch.tensor(scale)).item())
    y = quantizer.dequantize(quantizer.quantize(x * p))
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y / p, unit, rtol=2e-3, atol=2e-3)
    err = ((y / p - x).norm() / x.norm()).item()
    assert err < 0.5  # 2 bits: about 0.34 relative error at every scale


def test_scale_storage_is_counted(quantizer):
    x = torch.randn(3, 32, 64)
    q = quantizer.quantize(x)
    assert q.data["s1_exp"].dtype == torch.int16 and q.data["s1_exp"].shape == (3, 1, 1)
    tokens = 3 * 32
    expected = tokens * 64 * 2 + 2 * tokens * 16 + 3 * 64 * 16 + 3 * 16
    assert q.bits == expected


@pytest.mark.parametrize("shape", [(), (64,)])
def test_input_without_a_token_axis_is_a_clear_error(quantizer, shape):
    with pytest.raises(ValueError, match=r"\(\.\.\., tokens, d\)"):
        quantizer.quantize(torch.randn(shape))


def test_integer_input_is_a_clear_error(quantizer):
    with pytest.raises(TypeError, match="floating-point"):
        quantizer.quantize(torch.ones(2, 4, 64, dtype=torch.int32))
