"""Fake quantization on empty, 0-d and non-finite input: a clear error or a confined result."""

from __future__ import annotations

import math

import pytest
import torch

import normlab
from normlab.quant.formats import fake_quant_int, fake_quant_mxfp4, fake_quant_nvfp4

FORMATS = {
    "int": fake_quant_int,
    "int-token": lambda x: fake_quant_int(x, granularity="token"),
    "int-asym": lambda x: fake_quant_int(x, symmetric=False),
    "nvfp4": fake_quant_nvfp4,
    "mxfp4": fake_quant_mxfp4,
}


#: The values that share the scale of entry (0, 5) of a (4, 64) input.
GROUP = {
    "int": (slice(None), slice(None)),
    "int-token": (0, slice(None)),
    "int-asym": (slice(None), slice(None)),
    "nvfp4": (0, slice(0, 16)),
    "mxfp4": (0, slice(0, 32)),
}


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 64)])
def test_empty_input_comes_back_empty(name, shape):
    x = torch.zeros(shape)
    q = FORMATS[name](x)
    assert q.shape == x.shape and q.dtype == x.dtype


@pytest.mark.parametrize("name", ["int-quant", "nvfp4", "mxfp4"])
def test_registered_quantizers_on_empty_input(name):
    quantizer = normlab.create(name)
    assert quantizer(torch.zeros(0, 32)).shape == (0, 32)


@pytest.mark.parametrize("fn", [fake_quant_nvfp4, fake_quant_mxfp4])
def test_zero_dim_input_is_a_clear_error(fn):
    with pytest.raises(ValueError, match="at least 1 dimensions"):
        fn(torch.tensor(1.5))


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_one_non_finite_value_is_confined_to_itself(name, bad):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=g)
    x[0, 5] = 0.0  # not the range-setting value, so the clean result is the reference
    reference = FORMATS[name](x)
    y = x.clone()
    y[0, 5] = bad
    q = FORMATS[name](y)
    others = torch.ones_like(q, dtype=torch.bool)
    others[0, 5] = False
    assert torch.equal(q[others], reference[others])
    if math.isnan(bad):
        assert math.isnan(q[0, 5])
    else:  # saturates at the end of its scale group's grid
        group = reference[GROUP[name]]
        assert math.isfinite(q[0, 5])
        assert q[0, 5] >= group.max() if bad > 0 else q[0, 5] <= group.min()
