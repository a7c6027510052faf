"""Fake quantization formats: error bounds, grids, straight-through gradients, idempotence."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

import normlab
from normlab.quant import (
    E2M1_GRID,
    FakeQuantize,
    QuantFormat,
    fake_quant_int,
    fake_quant_mxfp4,
    fake_quant_nvfp4,
    round_e2m1,
    round_e4m3,
)

GRID = torch.tensor(E2M1_GRID, dtype=torch.float64)


def sample(seed: int, shape=(3, 5, 48), scale: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * scale
    x[..., 7] *= 30  # an outlier channel
    return x


def scale_of(x, bits, symmetric, granularity, group=16):
    """The scale computed independently of the implementation."""
    if granularity == "group":
        x = x.unflatten(-1, (-1, group))
        dims = (-1,)
    elif granularity == "token":
        dims = (-1,)
    elif granularity == "channel":
        dims = tuple(range(1, x.dim()))
    else:
        dims = tuple(range(x.dim()))
    lo = x.amin(dims, keepdim=True).clamp(max=0)
    hi = x.amax(dims, keepdim=True).clamp(min=0)
    if symmetric:
        s = torch.maximum(-lo, hi) / (2 ** (bits - 1) - 1)
    else:
        s = (hi - lo) / (2**bits - 1)
    return s.expand(x.shape).reshape(-1) if granularity == "group" else s.expand(x.shape)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    bits=st.sampled_from([2, 3, 4, 8]),
    symmetric=st.booleans(),
    granularity=st.sampled_from(["tensor", "token", "channel", "group"]),
)
def test_int_error_is_at_most_half_a_step(seed, bits, symmetric, granularity):
    x = sample(seed)
    q = fake_quant_int(
        x, bits=bits, symmetric=symmetric, granularity=granularity, group_size=16, ste=False
    )
    s = scale_of(x, bits, symmetric, granularity).reshape(x.shape)
    assert torch.all((x - q).abs() <= s / 2 * (1 + 1e-6) + 1e-12)
    steps = q / s
    if symmetric:  # values are integer multiples of the scale, inside the integer range
        assert torch.allclose(steps, steps.round(), atol=1e-6)
        levels = steps.round()
        assert levels.min() >= -(2 ** (bits - 1)) and levels.max() <= 2 ** (bits - 1) - 1


def test_int_uses_at_most_2_to_the_bits_levels():
    x = sample(1)
    for bits in (2, 3, 4):
        q = fake_quant_int(x, bits=bits, symmetric=False, ste=False)
        assert q.unique().numel() <= 2**bits


def test_explicit_denominator_and_static_bounds():
    x = torch.linspace(-2, 2, 101, dtype=torch.float64)
    q = fake_quant_int(x, bits=8, denominator=128, ste=False)  # s = 2/128, +2 clips to 127 s
    assert q.max().item() == pytest.approx(127 * 2 / 128)
    assert q.min().item() == pytest.approx(-2.0)
    clipped = fake_quant_int(x, bits=8, symmetric=False, bounds=(-1.0, 1.0), ste=False)
    assert clipped.min() >= -1 - 1e-2 and clipped.max() <= 1 + 1e-2
    inside = x.abs() <= 1
    assert torch.all((clipped - x)[inside].abs() <= 2 / 255 / 2 + 1e-12)


def test_round_e2m1_and_e4m3():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.3, -2.6, 0.1])
    expected = torch.tensor([0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5, -3.0, 0.0])
    assert torch.equal(round_e2m1(x), expected)
    dense = torch.linspace(-8, 8, 2001, dtype=torch.float64)
    r = round_e2m1(dense)
    nearest = (dense.abs().clamp(max=6)[:, None] - GRID).abs().min(-1).values
    assert torch.allclose((r.abs() - dense.abs().clamp(max=6)).abs(), nearest)
    e = round_e4m3(torch.tensor([1.0625, 1.1875, 500.0, -3.3, 0.0]))
    assert e.tolist() == [1.0, 1.25, 448.0, -3.25, 0.0]


def on_grid(v: torch.Tensor) -> bool:
    return bool(torch.all((v.abs()[..., None] - GRID).abs().min(-1).values < 1e-9))


@pytest.mark.parametrize("seed", range(3))
def test_nvfp4_values_lie_on_the_scaled_grid(seed):
    x = sample(seed)
    q = fake_quant_nvfp4(x, ste=False)
    s_t = x.abs().max() / (6 * 448)
    blocks, qb = x.unflatten(-1, (-1, 16)), q.unflatten(-1, (-1, 16))
    s_b = round_e4m3(blocks.abs().amax(-1, keepdim=True) / (6 * s_t))
    assert torch.equal(round_e4m3(s_b), s_b) and s_b.max() == 448
    assert on_grid(qb / (s_b * s_t))
    # nearest grid point: the error is at most half the widest gap (2 -> 4... = 1) x scale
    assert torch.all((qb - blocks).abs() <= s_b * s_t * 1.0 + 1e-12)
    assert (q - x).abs().max() < 0.25 * x.abs().max()


@pytest.mark.parametrize("seed", range(3))
def test_mxfp4_power_of_two_scale_and_saturation(seed):
    x = sample(seed, shape=(4, 64))
    q = fake_quant_mxfp4(x, ste=False)
    blocks, qb = x.unflatten(-1, (-1, 32)), q.unflatten(-1, (-1, 32))
    scale = torch.exp2(torch.floor(torch.log2(blocks.abs().amax(-1, keepdim=True))) - 2)
    assert on_grid(qb / scale)
    assert torch.all(qb.abs() <= 6 * scale)
    saturating = torch.full((1, 32), 7.0, dtype=torch.float64)  # scale 1: 7 saturates at 6
    assert torch.all(fake_quant_mxfp4(saturating, ste=False) == 6.0)


def test_fp4_pads_ragged_blocks_and_zero_blocks():
    x = torch.randn(2, 20, dtype=torch.float64)
    x[:, :16] = 0
    for fn in (fake_quant_nvfp4, fake_quant_mxfp4):
        q = fn(x, ste=False)
        assert q.shape == x.shape and torch.isfinite(q).all()
        assert torch.all(q[:, :16] == 0)
    assert torch.all(fake_quant_nvfp4(torch.zeros(3, 16), ste=False) == 0)


FORMATS = {
    "int8-tensor": QuantFormat("int", bits=8),
    "int4-token": QuantFormat("int", bits=4, granularity="token"),
    "int4-channel": QuantFormat("int", bits=4, granularity="channel", axis=-1),
    "int3-group": QuantFormat("int", bits=3, granularity="group", group_size=16),
    "nvfp4": QuantFormat("nvfp4"),
    "mxfp4": QuantFormat("mxfp4"),
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_straight_through_gradient(name):
    fmt = FORMATS[name]
    x = sample(4).float().requires_grad_()
    w = torch.randn(x.shape)
    (fmt(x) * w).sum().backward()
    torch.testing.assert_close(x.grad, w)
    assert not fmt(x).requires_grad or fmt(x).grad_fn is not None
    assert fmt(x, ste=False).grad_fn is None


@pytest.mark.parametrize("name", ["int8-tensor", "int4-token", "int4-channel", "nvfp4", "mxfp4"])
def test_idempotent(name):
    fmt = FORMATS[name]
    q = fmt(sample(5), ste=False)
    torch.testing.assert_close(fmt(q, ste=False), q, rtol=0, atol=1e-12)


def test_dtype_preserved_and_registry():
    x = sample(6).to(torch.bfloat16)
    for fmt in FORMATS.values():
        assert fmt(x).dtype == torch.bfloat16
    for name in ("int-quant", "nvfp4", "mxfp4"):
        method = normlab.get(name)
        assert method.kind == "quant" and method.layout == "other"
        assert isinstance(normlab.create(name), FakeQuantize)
    q = normlab.create("int-quant", bits=4, granularity="token")
    assert str(q.format) == "int4-sym-token"


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="granularity"):
        QuantFormat("int", granularity="row")
    with pytest.raises(ValueError, match="kind"):
        QuantFormat("fp8")
    with pytest.raises(ValueError, match="bits"):
        fake_quant_int(torch.randn(3), bits=1)
    with pytest.raises(TypeError, match="floating"):
        fake_quant_nvfp4(torch.ones(3, dtype=torch.long))
