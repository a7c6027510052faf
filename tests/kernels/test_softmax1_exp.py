"""Softmax1's vectorised exp and the forward built on it, against float64.

``fast_exp`` (csrc/fast_exp.h: Cody-Waite reduction, degree-7 polynomial, 2^n through the
exponent bits; ``nl_exp`` runs its 16-lane form, as softmax1's forward does) is within 1 ulp
of exp over the whole range the kernel evaluates it on: the unshifted pass sees logits up to
64, the shifted pass ``x - max <= 0``, and below -87.33 (where float32 turns subnormal) it
returns 0. Measured over every 97th float32 in [-87.33, 88.37] (23M values): at most 0.92
ulp, mean 0.06. The test samples every 997th. Into bfloat16 and float16 outputs the forward
uses the degree-5 polynomial (relative truncation error below 3.4e-6), checked here through
the outputs' own rounding."""

from __future__ import annotations

import ctypes

import pytest
import torch

from normlab.kernels import cpu

TINY = torch.finfo(torch.float32).tiny  # 2^-126


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    lib = cpu.library()
    if lib is None:
        pytest.skip("no C++ compiler: the CPU kernels are unavailable here")
    return lib


def _exp(lib: ctypes.CDLL, x: torch.Tensor, degree: int = 7, vector: int = 1) -> torch.Tensor:
    y = torch.empty_like(x)
    lib.nl_exp(x.data_ptr(), y.data_ptr(), x.numel(), degree, vector)
    return y


@pytest.mark.parametrize("degree", [7, 5])
def test_vector_form_equals_the_scalar_form(lib: ctypes.CDLL, degree: int) -> None:
    """The kernels' 16-lane exp (2^n by vscalefps) gives gcc's vectorised scalar form's values
    bit for bit, over the whole float32 line (every 4099th pattern, both signs, specials)."""
    bits = torch.arange(0, 0x7F800000, 4099, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), -87.33, 88.37, 88.5])
    x = torch.cat([x, -x, specials, torch.linspace(-90, 90, 10_007)])
    vector, scalar = _exp(lib, x, degree, 1), _exp(lib, x, degree, 0)
    assert torch.equal(vector.view(torch.int32), scalar.view(torch.int32))


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|got - exact| in units of the last place of float32 at ``exact``."""
    e32 = exact.float()
    ulp = (e32.nextafter(torch.tensor(float("inf"))).double() - e32.double()).clamp_min(2.0**-149)
    return (got.double() - exact).abs() / ulp


@pytest.mark.parametrize("sign", [1, -1])
def test_exp_within_one_ulp(lib: ctypes.CDLL, sign: int) -> None:
    bits = torch.arange(0, 0x7F800000, 997, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32) * sign
    x = x[(x >= -87.33) & (x <= 88.37)]
    err = _ulps(_exp(lib, x), torch.exp(x.double()))
    assert err.max().item() <= 1.0, f"{err.max().item():.3f} ulp at {x[err.argmax()].item()}"


def test_degree_5_within_its_truncation_error(lib: ctypes.CDLL) -> None:
    """The 16-bit outputs' exp: r^6 e^|r| / 720 <= 3.4e-6 relative (|r| <= ln 2 / 2), 1 ulp."""
    bits = torch.arange(0, 0x7F800000, 997, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    x = torch.cat([x, -x])
    x = x[(x >= -87.33) & (x <= 88.37)]
    exact = torch.exp(x.double())
    rel = (_exp(lib, x, 5).double() - exact).abs() / exact
    assert rel.max().item() <= 3.4e-6 + torch.finfo(torch.float32).eps
    assert rel.max().item() > 1e-6  # not degree 7 (whose worst is ~1e-7)


@pytest.mark.parametrize("degree", [7, 5])
def test_exp_edges(lib: ctypes.CDLL, degree: int) -> None:
    x = torch.tensor([-87.34, -88.0, -104.0, -1e30, float("-inf"), 0.0, -0.0, float("nan")])
    y = _exp(lib, x, degree)
    assert torch.equal(y[:5], torch.zeros(5))  # exact values below 2^-126: absolute error
    assert torch.equal(y[5:7], torch.ones(2)) and y[7].isnan()


def _rows(gen: torch.Generator) -> dict[str, torch.Tensor]:
    d = 1000
    r = torch.randn(6, d, generator=gen)
    return {
        "unshifted": r * 8,  # max <= 64: one pass, exp(x) / (1 + sum)
        "near_64": r.clamp(-3, 3) * 3 + 55,
        "large_negative": r * 30 - 120,  # most exps underflow to 0
        "with_-inf": torch.where(r > 0.5, float("-inf"), r * 4),
        "shifted": r * 40 + 60,  # max > 64: summed again shifted by the max
        "shifted_far": r * 1e3,
    }


def _exact_and_bound(x: torch.Tensor, exp_error: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax1 of ``x`` in float64 and the float32 kernel's error bound around it."""
    x64 = x.double()
    c = x64.max(-1, keepdim=True).values.clamp_min(0.0)  # the implicit logit 0
    e = torch.exp(x64 - c)
    exact = e / (torch.exp(-c) + e.sum(-1, keepdim=True))
    # exp (1 ulp, or its polynomial's truncation), the rounding of x - max (|x - max| ulps of
    # the exponent's argument), the row sum (1000 terms in 16 lanes: ~63 roundings), the
    # division and the product
    shift = torch.where(c > 64, (x64 - c).abs(), torch.zeros_like(x64))
    eps = torch.finfo(torch.float32).eps
    bound = (eps * (shift + 70) + exp_error) * exact + 2 * TINY  # exps below -87.33 are 0
    return exact, bound


@pytest.mark.parametrize("case", list(_rows(torch.Generator())))
def test_forward_matches_float64(case: str) -> None:
    if cpu.library() is None:
        pytest.skip("no C++ compiler")
    x = _rows(torch.Generator().manual_seed(0))[case]
    y = cpu.softmax1_fwd(x)
    exact, bound = _exact_and_bound(x, 0.0)
    err = (y.double() - exact).abs()
    assert (err <= bound).all(), f"{case}: worst {(err / bound).max().item():.2f} of the bound"
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=str)
@pytest.mark.parametrize("case", list(_rows(torch.Generator())))
def test_16bit_forward_is_the_exact_value_rounded(case: str, dtype: torch.dtype) -> None:
    """Degree 5 costs at most 3.4e-6 relative before the output's rounding to 16 bits."""
    if cpu.library() is None:
        pytest.skip("no C++ compiler")
    x = _rows(torch.Generator().manual_seed(0))[case].to(dtype)
    y = cpu.softmax1_fwd(x).double()
    exact, bound = _exact_and_bound(x, 3.4e-6)
    info = torch.finfo(dtype)  # an ulp of the output, subnormals' spacing included
    ulp = info.eps * torch.exp2(torch.floor(torch.log2(exact))).clamp_min(info.smallest_normal)
    err = (y - exact).abs()
    assert (err <= ulp / 2 + bound).all(), f"{case}: worst {(err / (ulp / 2 + bound)).max():.2f}"
