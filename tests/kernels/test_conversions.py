"""The kernels' bfloat16/float16 conversions equal torch's, bit for bit, on every 16-bit pattern.

Both directions go through real kernel calls, with rows of 1000 so the vectorised body (64
columns at a time) and the scalar tail both run:

- 16 bits -> float32 -> 16 bits: the residual sum of add + RMSNorm, ``x + (-0.0)``, is ``x``
  again for each of the 65,536 patterns, and ``x + r`` equals torch's ``(x.float() +
  r.float()).to(dtype)`` for r at exact half-ulp ties and at random smaller magnitudes (the
  sum is one float32 addition, so any difference is the conversion's);
- float32 -> 16 bits: DyT with ``alpha = 0`` and unit weight writes its float32 bias
  rounded, ``tanh(-0) * w + b = b``, which equals ``b.to(dtype)`` for random float32 bit patterns,
  ties, the overflow and subnormal boundaries, infinities and NaN.

NaN stays NaN (its payload is not compared: torch writes one canonical NaN).
"""

from __future__ import annotations

import pytest
import torch

from normlab.kernels import cpu

DTYPES = (torch.bfloat16, torch.float16)
D = 1000  # columns a row: 15 vector chunks of 64 and a tail of 40
MANTISSA = {torch.bfloat16: 7, torch.float16: 10}  # stored fraction bits


@pytest.fixture(scope="module", autouse=True)
def library() -> None:
    if cpu.library() is None:
        pytest.skip("no C++ compiler: the CPU kernels are unavailable here")


def _rows(flat: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """``flat`` padded with ``fill`` to whole rows of :data:`D`."""
    pad = -flat.numel() % D
    return torch.cat([flat, flat.new_full((pad,), fill)]).view(-1, D)


def _all_patterns(dtype: torch.dtype) -> torch.Tensor:
    return _rows(torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype))


def _same(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal bits, or NaN in both."""
    assert a.dtype == b.dtype and a.shape == b.shape
    bits = a.view(torch.int16) == b.view(torch.int16)
    ok = bits | (a.isnan() & b.isnan())
    assert bool(ok.all()), f"{int((~ok).sum())} values differ, e.g. {a[~ok][:4]} vs {b[~ok][:4]}"


def _sum(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    s, _, _ = cpu.rms_fwd(x, r, None, 1e-6, 0.0)
    return s


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_pattern_survives_the_round_trip(dtype: torch.dtype) -> None:
    x = _all_patterns(dtype)
    _same(_sum(x, torch.full_like(x, -0.0)), x)
    assert x.isnan().sum() > 0 and x.isinf().sum() == 2  # the set holds the special values


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sums_round_to_nearest_even_as_torch(dtype: torch.dtype) -> None:
    x = _all_patterns(dtype)
    xf = x.float()
    finite = xf.isfinite()
    mant = MANTISSA[dtype]
    _, e = torch.frexp(torch.where(finite & (xf != 0), xf, torch.ones_like(xf)))
    gen = torch.Generator().manual_seed(0)
    for shift in (1, 2, 3, 5, 9, 17):  # half an ulp (a tie), then smaller
        half_ulp = torch.ldexp(torch.ones_like(xf), (e - mant - shift).to(torch.int32))
        rand = torch.rand(xf.shape, generator=gen) * 2 - 1
        for r in (half_ulp * torch.sign(xf), -half_ulp * torch.sign(xf), half_ulp * rand):
            r = torch.where(finite, r, torch.zeros_like(r)).to(dtype)
            _same(_sum(x, r), (xf + r.float()).to(dtype))


def _float32_cases() -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    bits = torch.randint(-(2**31), 2**31, (400_000,), generator=gen, dtype=torch.int64)
    rand = bits.to(torch.int32).view(torch.float32)  # every exponent, NaN and inf included
    # around the boundaries: 16-bit values and the midpoints between neighbours (ties),
    # nudged by one float32 ulp either side
    grid = torch.cat([_all_patterns(t).flatten().float() for t in DTYPES])
    grid = grid[grid.isfinite()].unique()
    mids = (grid[1:].double() + grid[:-1].double()) / 2
    mids = mids[mids.abs() < 3.4e38].float()
    near = torch.cat([mids, mids.nextafter(torch.tensor(float("inf"))), mids.nextafter(-mids)])
    special = torch.tensor([0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e-8, 2.0**-25, 3e38, 1e39])
    return torch.cat([rand, grid, near, special, -special, torch.tensor([float("nan")])])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_float32_outputs_round_as_torch(dtype: torch.dtype) -> None:
    b = _float32_cases()
    b = torch.cat([b, b.new_zeros(-b.numel() % D)])
    for chunk in b.split(D * 64):  # DyT's bias is one row: one call a row of D values
        rows = chunk.view(-1, D)
        x = torch.full((rows.shape[0], D), -0.0, dtype=dtype)  # tanh(-0) w + b = b, even -0
        alpha = torch.zeros(1)
        ys = [cpu.dyt_fwd(x[i : i + 1], alpha, torch.ones(D), rows[i]) for i in range(len(rows))]
        _same(torch.cat(ys), rows.to(dtype))
