"""The Triton kernels themselves (imports triton; loaded only by :mod:`.triton_kernels`).

One program normalizes one row held in registers (``BLOCK >= D``, a power of two), in
float32 whatever the storage dtype. Backward kernels walk a contiguous range of rows per
program and write per-program partial weight gradients, summed afterwards in a fixed order
(deterministic, no atomics).
"""

import triton
import triton.language as tl

__all__ = [
    "dyt_bwd",
    "dyt_fwd",
    "ln_bwd",
    "ln_fwd",
    "rms_bwd",
    "rms_fwd",
    "softmax1_bwd",
    "softmax1_fwd",
]


@triton.jit
def _tanh(z):
    a = tl.abs(z)
    small = z - z * z * z / 3.0 + 2.0 * z * z * z * z * z / 15.0
    big = 1.0 - 2.0 / (tl.exp(2.0 * tl.minimum(a, 9.0)) + 1.0)
    big = tl.where(z < 0.0, -big, big)
    return tl.where(a < 0.004, small, big)


@triton.jit
def _affine(y, W, B, cols, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """``y * weight + bias`` of a forward program, with the parts that exist."""
    if HAS_W:
        y = y * tl.load(W + cols, mask=mask, other=0.0)
    if HAS_B:
        y = y + tl.load(B + cols, mask=mask, other=0.0)
    return y


@triton.jit
def _weight(W, cols, cmask, HAS_W: tl.constexpr, BLOCK: tl.constexpr):
    """The weight row of a backward program, or ones without a weight."""
    if HAS_W:  # noqa: SIM108  (a constexpr branch: only one side is compiled)
        w = tl.load(W + cols, mask=cmask, other=0.0)
    else:
        w = tl.full([BLOCK], 1.0, tl.float32)
    return w


@triton.jit
def _row_pair(X, DY, offs, mask):
    """One row of the input and of the upstream gradient, in float32."""
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    return x, dy


@triton.jit
def rms_fwd(X, RES, W, S, Y, RSTD, D, eps, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
            BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    x = tl.load(X + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        r = tl.load(RES + row * D + cols, mask=mask, other=0.0).to(tl.float32)
        s = (x + r).to(S.dtype.element_ty)
        tl.store(S + row * D + cols, s, mask=mask)
        x = s.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
    tl.store(RSTD + row, rstd)
    y = _affine(x * rstd, W, W, cols, mask, HAS_W, False)
    tl.store(Y + row * D + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rms_bwd(DY, X, W, RSTD, DS, DX, DWP, R, D, PER, HAS_W: tl.constexpr, HAS_DS: tl.constexpr,
            BLOCK: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    cmask = cols < D
    w = _weight(W, cols, cmask, HAS_W, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(pid * PER, tl.minimum(pid * PER + PER, R)):
        mask = cmask
        x, dy = _row_pair(X, DY, row * D + cols, mask)
        rstd = tl.load(RSTD + row)
        xh = x * rstd
        g = dy * w
        c = tl.sum(g * xh, axis=0) / D
        dx = rstd * (g - xh * c)
        if HAS_DS:
            dx += tl.load(DS + row * D + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + row * D + cols, dx.to(DX.dtype.element_ty), mask=mask)
        acc += dy * xh
    tl.store(DWP + pid * D + cols, acc, mask=cmask)


@triton.jit
def ln_fwd(X, RES, W, B, S, Y, MEAN, RSTD, D, eps, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
           HAS_B: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    x = tl.load(X + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        r = tl.load(RES + row * D + cols, mask=mask, other=0.0).to(tl.float32)
        s = (x + r).to(S.dtype.element_ty)
        tl.store(S + row * D + cols, s, mask=mask)
        x = s.to(tl.float32)
    mean = tl.sum(x, axis=0) / D
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / D + eps)
    tl.store(MEAN + row, mean)
    tl.store(RSTD + row, rstd)
    y = xc * rstd
    y = _affine(y, W, B, cols, mask, HAS_W, HAS_B)
    tl.store(Y + row * D + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def ln_bwd(DY, X, W, MEAN, RSTD, DS, DX, DWP, DBP, R, D, PER, HAS_W: tl.constexpr,
           HAS_DS: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    cmask = cols < D
    w = _weight(W, cols, cmask, HAS_W, BLOCK)
    aw = tl.zeros([BLOCK], dtype=tl.float32)
    ab = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(pid * PER, tl.minimum(pid * PER + PER, R)):
        mask = cmask
        x, dy = _row_pair(X, DY, row * D + cols, mask)
        rstd = tl.load(RSTD + row)
        mean = tl.load(MEAN + row)  # saved by the forward pass
        xh = tl.where(mask, (x - mean) * rstd, 0.0)
        g = tl.where(mask, dy * w, 0.0)
        c1 = tl.sum(g, axis=0) / D
        c2 = tl.sum(g * xh, axis=0) / D
        dx = rstd * (g - c1 - xh * c2)
        if HAS_DS:
            dx += tl.load(DS + row * D + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + row * D + cols, dx.to(DX.dtype.element_ty), mask=mask)
        aw += dy * xh
        ab += dy
    tl.store(DWP + pid * D + cols, aw, mask=cmask)
    tl.store(DBP + pid * D + cols, ab, mask=cmask)


@triton.jit
def dyt_fwd(X, ALPHA, W, B, Y, D, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
            BLOCK: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    a = tl.load(ALPHA)
    y = _tanh(a * tl.load(X + row * D + cols, mask=mask, other=0.0).to(tl.float32))
    y = _affine(y, W, B, cols, mask, HAS_W, HAS_B)
    tl.store(Y + row * D + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def dyt_bwd(DY, X, ALPHA, W, DX, DWP, DBP, DAP, R, D, PER, HAS_W: tl.constexpr,
            BLOCK: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    cmask = cols < D
    a = tl.load(ALPHA)
    w = _weight(W, cols, cmask, HAS_W, BLOCK)
    aw = tl.zeros([BLOCK], dtype=tl.float32)
    ab = tl.zeros([BLOCK], dtype=tl.float32)
    aa = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(pid * PER, tl.minimum(pid * PER + PER, R)):
        mask = cmask
        x, dy = _row_pair(X, DY, row * D + cols, mask)
        t = _tanh(a * x)
        gt = dy * w * (1.0 - t * t)
        tl.store(DX + row * D + cols, (gt * a).to(DX.dtype.element_ty), mask=mask)
        aw += dy * t
        ab += dy
        aa += gt * x
    tl.store(DWP + pid * D + cols, aw, mask=cmask)
    tl.store(DBP + pid * D + cols, ab, mask=cmask)
    tl.store(DAP + pid, tl.sum(aa, axis=0))


@triton.jit
def softmax1_fwd(X, Y, D, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    x = tl.load(X + row * D + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.maximum(tl.max(x, axis=0), 0.0)
    e = tl.exp(x - m)
    y = e / (tl.exp(-m) + tl.sum(e, axis=0))
    tl.store(Y + row * D + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def softmax1_bwd(DY, Y, DX, D, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    y = tl.load(Y + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(dy * y, axis=0))
    tl.store(DX + row * D + cols, dx.to(DX.dtype.element_ty), mask=mask)
