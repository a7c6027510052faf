"""Outputs above the streaming threshold (written with non-temporal stores) are the same
numbers, bit for bit, as the same rows computed below it (ordinary stores)."""

from __future__ import annotations

import ctypes

import pytest
import torch

from normlab import kernels as K
from normlab.kernels import cpu


@pytest.fixture(scope="module")
def threshold() -> int:
    lib = cpu.library()
    if lib is None:
        pytest.skip("no C++ compiler: the CPU kernels are unavailable here")
    lib.nl_stream_bytes.restype = ctypes.c_long
    return int(lib.nl_stream_bytes())


OPS = {
    "rms_norm": lambda x, r, w, b: K.rms_norm(x, (x.shape[-1],), w, 1e-6),
    "layer_norm": lambda x, r, w, b: K.layer_norm(x, (x.shape[-1],), w, b),
    "add_rms_norm": lambda x, r, w, b: K.add_rms_norm(x, r, (x.shape[-1],), w, 1e-6),
    "dyt": lambda x, r, w, b: K.dyt(x, b[:1].detach() * 0 + 0.7, w, b),
    "softmax1": lambda x, r, w, b: K.softmax1(x),
}


def _grads(op: str, rows: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    leaves = [t.detach().clone().requires_grad_(True) for t in (rows, r)]
    out = OPS[op](leaves[0], leaves[1], w, b)
    outs = out if isinstance(out, tuple) else (out,)
    gen = torch.Generator().manual_seed(1)
    g = torch.randn(outs[0].shape, generator=gen).to(rows.dtype)
    dx = torch.autograd.grad(outs, leaves[0], [g] * len(outs))[0]
    return [o.detach() for o in outs], dx


@pytest.mark.parametrize(("dtype", "d"), [(torch.float32, 1024), (torch.bfloat16, 1000)], ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
def test_streamed_rows_equal_cached_rows(op: str, d: int, dtype: torch.dtype, threshold: int):
    _check(op, d, dtype, threshold)


WIDE_ROW, WIDE_BYTES = 4096, 16 << 20  # norms.cpp: kWideRow, kWideStreamBytes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("op", sorted(OPS))
def test_wide_rows_streamed_from_16_mb(op: str, dtype: torch.dtype, threshold: int):
    """Rows of 4096 stream from 16 MB of output, whatever the reported last-level cache."""
    _check(op, WIDE_ROW, dtype, min(threshold, WIDE_BYTES))


@pytest.mark.parametrize("op", ["add_rms_norm", "layer_norm", "rms_norm"])
def test_float32_norm_rows_of_1024_streamed_from_16_mb(op: str, threshold: int):
    """RMSNorm's and LayerNorm's float32 outputs stream from 16 MB at any width (norms.cpp:
    streams_norm, one fence a thread): the same bits as ordinary stores."""
    _check(op, 1024, torch.float32, min(threshold, WIDE_BYTES))


def _check(op: str, d: int, dtype: torch.dtype, threshold: int) -> None:
    rows = -(-threshold // (d * dtype.itemsize)) + 3  # just above the threshold
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(rows, d, generator=gen) * 2).to(dtype)
    r = torch.randn(rows, d, generator=gen).to(dtype)
    w = torch.randn(d, generator=gen) * 0.5 + 1
    b = torch.randn(d, generator=gen) * 0.1
    assert x.numel() * x.element_size() >= threshold
    big_outs, big_dx = _grads(op, x, r, w, b)
    k = 48  # far below the threshold: ordinary stores
    small_outs, small_dx = _grads(op, x[:k], r[:k], w, b)
    for a, s in zip(big_outs, small_outs, strict=True):
        assert torch.equal(a[:k], s), f"{op} output differs between streamed and cached rows"
    assert torch.equal(big_dx[:k], small_dx), f"{op} dx differs between streamed and cached rows"
    assert torch.isfinite(big_outs[0].float()).all()
