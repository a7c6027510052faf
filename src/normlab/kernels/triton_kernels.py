"""GPU fast paths: Triton kernels for the same operations and signatures as :mod:`.cpu`.

Triton is imported on first use (extra ``normlab[gpu]``), so this module imports without
it. Storage may be float32, bfloat16 or float16; the arithmetic and every per-row statistic
are float32. A row must fit one program (``D <= MAX_D``); longer rows take the plain path.
With ``TRITON_INTERPRET=1`` set before triton is imported, the kernels run on CPU tensors
(Triton's interpreter), which is how the tests check them without a GPU.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "MAX_D",
    "available",
    "dyt_bwd",
    "dyt_fwd",
    "ln_bwd",
    "ln_fwd",
    "rms_bwd",
    "rms_fwd",
    "softmax1_bwd",
    "softmax1_fwd",
]

#: Longest row one program holds.
MAX_D = 65536


def available() -> bool:
    """Whether triton can be imported."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _jit() -> Any:
    from normlab.kernels import _triton_jit

    return _triton_jit


def _block(d: int) -> int:
    import triton

    return max(16, triton.next_power_of_2(d))


def _programs(x: torch.Tensor) -> tuple[int, int]:
    """(programs, rows per program) of a backward pass: a fixed split for a given device."""
    rows = x.shape[0]
    # a few programs per SM on a GPU; four under the interpreter
    n = 8 * torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    n = max(1, min(n, rows))
    return n, -(-rows // n) if rows else 0


def _warps(block: int) -> int:
    return 4 if block <= 2048 else (8 if block <= 8192 else 16)


def _or(t: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    return x if t is None else t


def _gain(w: torch.Tensor | None, off: float) -> torch.Tensor | None:
    """The float32 gain ``w + off`` (None without a weight: the gain is 1)."""
    return w if w is None or off == 0.0 else w + off


def rms_fwd(
    x: torch.Tensor, res: torch.Tensor | None, w: torch.Tensor | None, eps: float, off: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sum or empty, y, rstd)`` of (residual-add +) RMSNorm with gain ``w + off``."""
    rows, d = x.shape
    w = _gain(w, off)
    y = torch.empty_like(x)
    s = torch.empty_like(x) if res is not None else x.new_empty(0)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows:
        b = _block(d)
        _jit().rms_fwd[(rows,)](
            x, _or(res, x), _or(w, rstd), _or(s if res is not None else None, x), y, rstd, d,
            eps, HAS_RES=res is not None, HAS_W=w is not None, BLOCK=b, num_warps=_warps(b),
        )  # fmt: skip
    return s, y, rstd


def _vec(x: torch.Tensor, need: bool) -> torch.Tensor:
    return x.new_empty(x.shape[1] if need else 0, dtype=torch.float32)


def rms_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor | None,
    rstd: torch.Tensor,
    dsum: torch.Tensor | None,
    need_dw: bool,
    off: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx, dw or empty)``; ``dsum`` is added to ``dx``."""
    rows, d = x.shape
    w = _gain(w, off)
    dx = torch.empty_like(x)
    n, per = _programs(x)
    part = torch.zeros(n, d, dtype=torch.float32, device=x.device)
    if rows:
        b = _block(d)
        _jit().rms_bwd[(n,)](
            dy, x, _or(w, rstd), rstd, _or(dsum, x), dx, part, rows, d, per,
            HAS_W=w is not None, HAS_DS=dsum is not None, BLOCK=b, num_warps=_warps(b),
        )  # fmt: skip
    return dx, (part.sum(0) if need_dw else _vec(x, False))


def ln_fwd(
    x: torch.Tensor,
    res: torch.Tensor | None,
    w: torch.Tensor | None,
    b: torch.Tensor | None,
    eps: float,
    off: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sum or empty, y, mean, rstd)`` of (residual-add +) LayerNorm with gain ``w + off``."""
    rows, d = x.shape
    w = _gain(w, off)
    y = torch.empty_like(x)
    s = torch.empty_like(x) if res is not None else x.new_empty(0)
    mean = torch.empty(rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    if rows:
        blk = _block(d)
        _jit().ln_fwd[(rows,)](
            x, _or(res, x), _or(w, rstd), _or(b, rstd), _or(s if res is not None else None, x),
            y, mean, rstd, d, eps, HAS_RES=res is not None, HAS_W=w is not None,
            HAS_B=b is not None, BLOCK=blk, num_warps=_warps(blk),
        )  # fmt: skip
    return s, y, mean, rstd


def ln_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    dsum: torch.Tensor | None,
    need_dw: bool,
    need_db: bool,
    off: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dw or empty, db or empty)`` of LayerNorm from its saved statistics."""
    rows, d = x.shape
    w = _gain(w, off)
    dx = torch.empty_like(x)
    n, per = _programs(x)
    pw = torch.zeros(n, d, dtype=torch.float32, device=x.device)
    pb = torch.zeros_like(pw)
    if rows:
        blk = _block(d)
        _jit().ln_bwd[(n,)](
            dy, x, _or(w, rstd), mean, rstd, _or(dsum, x), dx, pw, pb, rows, d, per,
            HAS_W=w is not None, HAS_DS=dsum is not None, BLOCK=blk, num_warps=_warps(blk),
        )  # fmt: skip
    dw = pw.sum(0) if need_dw else _vec(x, False)
    return dx, dw, (pb.sum(0) if need_db else _vec(x, False))


def dyt_fwd(
    x: torch.Tensor, alpha: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None
) -> torch.Tensor:
    """``weight * tanh(alpha * x) + bias``."""
    rows, d = x.shape
    y = torch.empty_like(x)
    if rows:
        blk = _block(d)
        a = alpha.to(device=x.device, dtype=torch.float32)
        _jit().dyt_fwd[(rows,)](
            x, a, _or(w, a), _or(b, a), y, d, HAS_W=w is not None, HAS_B=b is not None,
            BLOCK=blk, num_warps=_warps(blk),
        )  # fmt: skip
    return y


def dyt_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    alpha: torch.Tensor,
    w: torch.Tensor | None,
    need_dw: bool,
    need_db: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dalpha (1 element), dw or empty, db or empty)`` of DyT."""
    rows, d = x.shape
    dx = torch.empty_like(x)
    n, per = _programs(x)
    pw = torch.zeros(n, d, dtype=torch.float32, device=x.device)
    pb = torch.zeros_like(pw)
    pa = torch.zeros(n, dtype=torch.float32, device=x.device)
    if rows:
        blk = _block(d)
        a = alpha.to(device=x.device, dtype=torch.float32)
        _jit().dyt_bwd[(n,)](
            dy, x, a, _or(w, a), dx, pw, pb, pa, rows, d, per, HAS_W=w is not None, BLOCK=blk,
            num_warps=_warps(blk),
        )  # fmt: skip
    dw = pw.sum(0) if need_dw else _vec(x, False)
    db = pb.sum(0) if need_db else _vec(x, False)
    return dx, pa.sum().reshape(1), dw, db


def softmax1_fwd(x: torch.Tensor) -> torch.Tensor:
    """Off-by-one softmax over the rows of ``x``."""
    rows, d = x.shape
    y = torch.empty_like(x)
    if rows:
        blk = _block(d)
        _jit().softmax1_fwd[(rows,)](x, y, d, BLOCK=blk, num_warps=_warps(blk))
    return y


def softmax1_bwd(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y * (dy - sum(dy * y))`` over the rows."""
    rows, d = y.shape
    dx = torch.empty_like(y)
    if rows:
        blk = _block(d)
        _jit().softmax1_bwd[(rows,)](dy, y, dx, d, BLOCK=blk, num_warps=_warps(blk))
    return dx
