"""The correctness matrix: every norm variant x dtype x layout x width x affine, both paths.

Each case runs forward and backward on the kernel path (:mod:`normlab.kernels`) and on
the plain path (:mod:`normlab.functional`) and compares the output, the input gradient(s)
and the weight (and bias) gradients with a float64 evaluation of the formula on the same
(rounded) inputs. The bound is ULP-style: ``ULPS[dtype] * eps(dtype)`` times the magnitude of
the terms the result is formed from (at least 1e-2; for dx ``rstd |dy| |w + offset|``, since
the exact dx may cancel to ~0), i.e. 8 ulp for float32 (sums of up to 4096 terms) and 2 ulp
for bfloat16/float16 (one rounding of the output plus float32 arithmetic). The weight
gradient is always checked when the weight requires grad (unsloth#4533 returned None); dy
may be non-contiguous or a broadcast (FlagGems#1082 gave NaN).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from normlab import functional as NF
from normlab import kernels as K

OPS = ("rms", "ln", "add_rms", "add_ln", "rms_offset", "ln_zero_centered")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
LAYOUTS = ("contiguous", "strided_x", "strided_dy", "broadcast_dy", "sliced_rows")
WIDTHS = (1, 7, 64, 96, 1000, 4096)
ULPS = {torch.float32: 8, torch.bfloat16: 2, torch.float16: 2}
M = 3  # rows per case: the matrix is about coverage, not size
EPS = {"rms": 1e-6, "ln": 1e-5}


def _family(op: str) -> str:
    return "rms" if op.startswith(("rms", "add_rms")) else "ln"


def _offset(op: str) -> float:
    return 1.0 if op in ("rms_offset", "ln_zero_centered") else 0.0


def _reference(op: str, x, r, w, b):
    """The formula in float64 (independent of normlab's code)."""
    s = x if r is None else x + r
    off, eps = _offset(op), EPS[_family(op)]
    if _family(op) == "rms":
        y = s / torch.sqrt(s.square().mean(-1, keepdim=True) + eps)
    else:
        c = s - s.mean(-1, keepdim=True)
        y = c / torch.sqrt(c.square().mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * (w + off)
    if b is not None:
        y = y + b
    return (y,) if r is None else (y, s)


def _call(op: str, kernel: bool, x, r, w, b):
    mod = K if kernel else NF
    n, off, eps = (x.shape[-1],), _offset(op), EPS[_family(op)]
    if op.startswith("add_rms"):
        return mod.add_rms_norm(x, r, n, w, eps, offset=off)
    if op.startswith("add_ln"):
        return mod.add_layer_norm(x, r, n, w, b, eps, offset=off)
    if _family(op) == "rms":
        return (mod.rms_norm(x, n, w, eps, offset=off),)
    return (mod.layer_norm(x, n, w, b, eps, offset=off),)


def _strided(rows: int, n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(rows, 2 * n, generator=gen).to(dtype)[:, ::2]


def _inputs(op, dtype, layout, n, affine, gen):
    def act() -> torch.Tensor:
        if layout == "strided_x":
            return _strided(M, n, dtype, gen)
        if layout == "sliced_rows":
            return (torch.randn(2 * M, n, generator=gen) * 2).to(dtype)[::2]
        return (torch.randn(M, n, generator=gen) * 2).to(dtype)

    x = act()
    r = act() if op.startswith("add") else None
    # the offset variants take a float32 weight with a half input (Gemma's layout)
    wdtype = torch.float32 if _offset(op) else dtype
    w = b = None
    if affine:
        w = (torch.randn(n, generator=gen) * 0.5 + (0.0 if _offset(op) else 1.0)).to(wdtype)
        b = torch.randn(n, generator=gen).to(wdtype) if _family(op) == "ln" else None
    if layout == "strided_dy":
        dy = _strided(M, n, dtype, gen)
    elif layout == "broadcast_dy":
        dy = torch.randn(1, n, generator=gen).to(dtype).expand(M, n)
    else:
        dy = torch.randn(M, n, generator=gen).to(dtype)
    ds = torch.randn(M, n, generator=gen).to(dtype) if r is not None else None
    return x, r, w, b, dy, ds


def _grads(outs, leaves, grads) -> list[torch.Tensor | None]:
    torch.autograd.backward(list(outs), list(grads))
    return [t.grad for t in leaves]


def _check(case, kernel, x, r, w, b, dy, ds, want) -> list[str]:
    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in (x, r, w, b)]
    outs = _call(case[0], kernel, *leaves)
    live = [t for t in leaves if t is not None]
    got = [o.detach() for o in outs] + _grads(outs, live, (dy,) if ds is None else (dy, ds))
    bad = []
    for (name, ref, dtype, scale), g in zip(want, got, strict=True):
        if g is None:
            bad.append(f"{name} is None")
        elif g.dtype != dtype or g.shape != ref.shape:
            bad.append(f"{name}: {g.dtype}{tuple(g.shape)} != {dtype}{tuple(ref.shape)}")
        else:
            # the input's dtype sets the bound (a float32 weight's gradient of a half input
            # is accumulated from half-precision dy)
            tol = ULPS[case[1]] * torch.finfo(case[1]).eps * max(scale, 1e-2)
            err = float((g.double() - ref).abs().max())
            if not err <= tol:
                bad.append(f"{name}: error {err:.3g} > {tol:.3g}")
    path = "kernel" if kernel else "plain"
    return [f"{path} {case}: {m}" for m in bad]


def _want(op, x, r, w, b, dy, ds) -> list[tuple[str, torch.Tensor, torch.dtype, float]]:
    """(name, float64 reference, expected dtype, scale of its terms) per checked tensor.

    The scale is the magnitude of the terms the result is formed from (for dx:
    ``rstd |dy| |gain|``, where the exact result may cancel to ~0), so the bound is a
    number of ulps of what float arithmetic on those terms can resolve."""
    leaves = [
        None if t is None else t.detach().double().requires_grad_(True) for t in (x, r, w, b)
    ]
    outs = _reference(op, *leaves)
    gs = (dy,) if ds is None else (dy, ds)
    torch.autograd.backward(list(outs), [g.double() for g in gs])
    s = outs[-1].detach() if r is not None else leaves[0].detach()
    c = s - s.mean(-1, keepdim=True) if _family(op) == "ln" else s
    rstd = 1 / torch.sqrt(c.square().mean(-1, keepdim=True) + EPS[_family(op)])
    # x_hat = (s - mean) rstd is resolved to ulps of |s| rstd (the centring rounds in s's scale)
    xh, g = (s.abs() + (s - c).abs()) * rstd, dy.double().abs()
    gain = 1.0 if w is None else (w.double() + _offset(op)).abs()
    dscale = float((rstd * g * gain).max()) + (0.0 if ds is None else float(ds.abs().max()))
    result = [
        (
            "y",
            outs[0].detach(),
            x.dtype,
            float((xh * gain).max()) + (0 if b is None else float(b.abs().max())),
        )
    ]
    if r is not None:
        result.append(("s", s, x.dtype, float(s.abs().max())))
    scales = {
        "dx": dscale,
        "dr": dscale,
        "dw": float((g * xh).sum(0).max()),
        "db": float(g.sum(0).max()),
    }
    for name, t, orig in zip(("dx", "dr", "dw", "db"), leaves, (x, r, w, b), strict=True):
        if t is not None:
            result.append((name, t.grad, orig.dtype, scales[name]))
    return result


@pytest.mark.slow
def test_correctness_matrix() -> None:
    gen = torch.Generator().manual_seed(0)
    cases = list(itertools.product(OPS, DTYPES, LAYOUTS, WIDTHS, (True, False)))
    failures: list[str] = []
    for case in cases:
        op, dtype, layout, n, affine = case
        x, r, w, b, dy, ds = _inputs(op, dtype, layout, n, affine, gen)
        want = _want(op, x, r, w, b, dy, ds)
        for kernel in (True, False):
            failures += _check(case, kernel, x, r, w, b, dy, ds, want)
    print(f"correctness matrix: {len(cases)} cases x 2 paths, {len(failures)} failures")
    assert len(cases) >= 600
    assert not failures, "\n".join(failures[:40]) + f"\n... {len(failures)} failures"


@pytest.mark.parametrize("rows", [37, 70])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", ["rms", "ln", "add_ln"])
def test_row_groups_of_wide_rows(
    op: str, dtype: torch.dtype, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of at least 4096 run the backward in groups of 4 rows of one row block, 512 columns
    at a time (norms.cpp kGroupRows, kChunk): 37 rows are blocks of 18 / 19 (groups ending in 2
    and 3 rows), 70 rows blocks of 17 / 18 (1 and 2), and 4100 columns end in a 4-wide chunk."""
    monkeypatch.setattr(f"{__name__}.M", rows)
    gen = torch.Generator().manual_seed(rows)
    case = (op, dtype, "contiguous", 4100, True)
    x, r, w, b, dy, ds = _inputs(op, dtype, "contiguous", 4100, True, gen)
    want = _want(op, x, r, w, b, dy, ds)
    assert not _check(case, True, x, r, w, b, dy, ds, want)
