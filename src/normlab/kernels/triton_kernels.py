"""GPU fast paths: Triton kernels for the same operations and signatures as :mod:`.cpu`.

Triton is imported on first use (extra ``normlab[gpu]``), so this module imports without
it. Storage may be float32, bfloat16 or float16; the arithmetic and every per-row statistic
are float32. A row must fit one program (``D <= MAX_D``); longer rows take the plain path.
With ``TRITON_INTERPRET=1`` set before triton is imported, the kernels run on CPU tensors
(Triton's interpreter), which is how the tests check them without a GPU.

On an NVIDIA H200 (2026-12-04, torch 2.11, Triton 3.6; benchmarks/gpu.sh and
benchmarks/gpu_tune.py, results in benchmarks/results/h200/): the 72 GPU tests pass
(tests/kernels/test_cuda.py). Kernel time alone (CUDA events, L2 flushed) at 32768x4096:
forwards 0.95-0.98x the copy bandwidth (4.2 TB/s) in float32 and bfloat16, backwards
0.87-0.92x in float32 and 0.70-0.78x in bfloat16; a whole RMSNorm forward+backward 0.95x
(float32) and 0.81x (bfloat16) of the memory limit in the profiler's kernel times. Through
the layers the host sets the pace wherever a kernel is shorter than its call: one
``rms_norm`` call costs the host 89-98 us (Triton's launch 47-53 us of it; torch's
``F.rms_norm`` 17-20 us), so at 8192x1024 the forward reaches 0.07-0.37x copy where the
kernel alone reaches 0.6-1.0x (20-40 us: too short to time closely), and forward+backward at
32768x4096 bfloat16 takes 0.84 ms of wall time for 0.39 ms of kernels (torch's op 0.60,
Liger-Kernel 0.73, torch.compile 0.58). At 32768x4096 forward normlab is 1.13-1.35x torch's
own op and 0.88-1.00x Liger-Kernel; the TinyGPT training step (float32, d 1024, 8 layers,
batch 32x128) is 1.15x the plain path and 1.11x torch.compile. Swept and left: programs per
SM in the backward (2 beats 8 by 1-4 points at 32768 rows, noise at 8192) and ``num_stages``
(no effect: the row loop is not pipelined).
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


def _warps(row_bytes: int) -> int:
    """Warps of a row program, by the bytes of its (power-of-two) row block: 4 up to 8 KiB,
    8 up to 32 KiB, else 16. By bytes, not elements: on an H200 (benchmarks/gpu_tune.py,
    32768x4096, two runs) a bfloat16 LayerNorm forward ran at 0.95x copy with 4 warps and
    0.84x with 8, RMSNorm's at 0.95 / 0.97; the backward kernels within 2 points of each
    other at 4 and 8; float32 rows keep the element rule's warps."""
    return 4 if row_bytes <= 8192 else (8 if row_bytes <= 32768 else 16)


def _launch(block: int, x: torch.Tensor) -> dict[str, int]:
    """Launch options of a row kernel over ``x`` (benchmarks/gpu_tune.py sweeps them)."""
    return {"num_warps": _warps(block * x.element_size())}


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
            eps, HAS_RES=res is not None, HAS_W=w is not None, BLOCK=b, **_launch(b, x),
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
            HAS_W=w is not None, HAS_DS=dsum is not None, BLOCK=b, **_launch(b, x),
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
            HAS_B=b is not None, BLOCK=blk, **_launch(blk, x),
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
            HAS_W=w is not None, HAS_DS=dsum is not None, BLOCK=blk, **_launch(blk, x),
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
            BLOCK=blk, **_launch(blk, x),
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
            **_launch(blk, x),
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
        _jit().softmax1_fwd[(rows,)](x, y, d, BLOCK=blk, **_launch(blk, x))
    return y


def softmax1_bwd(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y * (dy - sum(dy * y))`` over the rows."""
    rows, d = y.shape
    dx = torch.empty_like(y)
    if rows:
        blk = _block(d)
        _jit().softmax1_bwd[(rows,)](dy, y, dx, d, BLOCK=blk, **_launch(blk, dy))
    return dx
