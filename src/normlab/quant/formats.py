"""Fake quantization: integer grids and the 4-bit floating-point formats NVFP4 and MXFP4.

Fake quantization rounds a tensor to the values a low-bit format can represent and returns
them in the input's dtype, so a float model computes what the low-bit model would. Every
function here takes ``ste=True`` to pass gradients straight through the rounding
(``y = x + (q(x) - x).detach()``, Bengio et al. 2013), so models can train through it.

Formats:

- integers (``fake_quant_int``): symmetric ``q = clamp(round(x / s), -2^(b-1), 2^(b-1) - 1)``,
  ``s = max|x| / D`` with ``D = 2^(b-1) - 1`` unless ``denominator`` is given; asymmetric
  ``q = clamp(round(x / s) + z, 0, 2^b - 1)``, ``s = (max - min) / (2^b - 1)``,
  ``z = round(-min / s)``, with min/max widened to include 0. One scale per tensor, per
  token (last axis), per channel (a slice along ``axis``) or per group of the last axis.
- NVFP4 (``fake_quant_nvfp4``): blocks of 16 along the last axis, elements on the E2M1 grid
  ``{0, 0.5, 1, 1.5, 2, 3, 4, 6}``, each block scaled by an E4M3 number and the tensor by an
  FP32 scale ``amax / (6 * 448)``, so the largest block scale is E4M3's maximum 448.
- MXFP4 (``fake_quant_mxfp4``): blocks of 32, E2M1 elements, a power-of-two (E8M0) block
  scale ``2^(floor(log2 amax) - 2)`` (2 = E2M1's largest exponent); values beyond 6 x scale
  saturate at +-6 (OCP Microscaling spec v1.0).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from normlab._checks import check_float, check_min_rank
from normlab.functional._precision import upcast

__all__ = [
    "E2M1_GRID",
    "GRANULARITIES",
    "fake_quant_int",
    "fake_quant_mxfp4",
    "fake_quant_nvfp4",
    "round_e2m1",
    "round_e4m3",
    "ste",
]

#: Non-negative values of the E2M1 (FP4) element format.
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
GRANULARITIES = ("tensor", "token", "channel", "group")
E4M3_MAX = 448.0
E2M1_MAX = 6.0


def ste(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``q`` in the forward pass, identity gradient to ``x`` in the backward pass."""
    return x + (q - x).detach()


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest E2M1 value (ties to even), saturating at +-6.

    The grid has spacing 0.5 below 2, 1 on [2, 4) and 2 on [4, 6], so rounding is
    ``round(|x| / step) * step`` with round-half-to-even inside each binade, which puts
    every tie on the neighbour with the even code (0.25 -> 0, 0.75 -> 1, 5 -> 4, ...).
    """
    a = x.abs().clamp_(max=E2M1_MAX)
    step = (a >= 2).to(a.dtype).add_((a >= 4).to(a.dtype), alpha=2.0).add_(1.0).mul_(0.5)
    return a.div_(step).round_().mul_(step).copysign_(x)


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest FP8 E4M3 value (ties to even), saturating at +-448."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(x.dtype)


def _blocks(x: torch.Tensor, size: int) -> tuple[torch.Tensor, int]:
    """``x`` as ``(..., n_blocks, size)`` along its last axis, zero-padded; and the pad."""
    pad = (-x.shape[-1]) % size
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    return x.unflatten(-1, (-1, size)), pad


def _unblocks(y: torch.Tensor, pad: int) -> torch.Tensor:
    y = y.flatten(-2)
    return y[..., : y.shape[-1] - pad] if pad else y


def _reduce(x: torch.Tensor, granularity: str, axis: int, fn: str) -> torch.Tensor:
    """``amax``/``amin`` over the axes that share one scale, keeping dims."""
    if granularity == "tensor":
        dims = tuple(range(x.dim()))
    elif granularity in ("token", "group"):
        dims = (-1,)
    else:
        keep = axis % x.dim()
        dims = tuple(d for d in range(x.dim()) if d != keep)
    return getattr(x, fn)(dim=dims, keepdim=True) if dims else x


def fake_quant_int(
    x: torch.Tensor,
    *,
    bits: int = 8,
    symmetric: bool = True,
    granularity: str = "tensor",
    axis: int = 0,
    group_size: int = 128,
    denominator: float | None = None,
    bounds: tuple[torch.Tensor | float, torch.Tensor | float] | None = None,
    ste: bool = True,
) -> torch.Tensor:
    """Round ``x`` to a ``bits``-bit integer grid and back (round to nearest, ties to even).

    Args:
        x: the tensor.
        bits: grid bits, 2 to 16.
        symmetric: a grid symmetric around 0 (no zero point) or asymmetric min-max.
        granularity: "tensor" (one scale), "token" (one per row of the last axis: per token
            for activations ``(..., d)``, per output channel for a weight ``(out, in)``),
            "channel" (one per index of ``axis``) or "group" (groups of ``group_size``
            along the last axis, zero-padded).
        axis: the channel axis for "channel".
        group_size: elements per group for "group".
        denominator: ``D`` in ``s = max|x| / D`` (symmetric) or ``s = (max - min) / D``
            (asymmetric); ``None`` for ``2^(b-1) - 1`` or ``2^b - 1``.
        bounds: a static range ``(lo, hi)`` (calibrated ranges) instead of the measured
            one, broadcastable to the reduced shape; values outside it are clipped.
        ste: straight-through gradient.

    Returns:
        The dequantized tensor, same shape and dtype as ``x``; an empty ``x`` comes back
        as it is.

    Non-finite values are confined to themselves: the measured range ignores them, so one
    NaN or infinity does not change the scale of its tensor, row or group; a NaN stays NaN
    and an infinity saturates at the grid's end (``+-2^(b-1) s``, or the asymmetric grid's
    ends).
    """
    check_float(x)
    if not 2 <= bits <= 16:
        raise ValueError(f"bits must be in [2, 16], got {bits}.")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}.")
    if x.numel() == 0:
        return x.clone()
    xf = upcast(x.detach())
    pad = 0
    if granularity == "group":
        xf, pad = _blocks(xf, group_size)
    if bounds is None:
        finite = torch.where(torch.isfinite(xf), xf, 0.0)  # NaN/inf do not set the range
        lo = _reduce(finite, granularity, axis, "amin")
        hi = _reduce(finite, granularity, axis, "amax")
    else:
        lo, hi = (torch.as_tensor(b, dtype=xf.dtype, device=x.device) for b in bounds)
    lo, hi = lo.clamp(max=0.0), hi.clamp(min=0.0)
    tiny = torch.finfo(xf.dtype).tiny
    if symmetric:
        d = 2 ** (bits - 1) - 1 if denominator is None else float(denominator)
        s = (torch.maximum(-lo, hi) / d).clamp_min(tiny)
        q = torch.clamp(torch.round(xf / s), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1) * s
    else:
        d = 2**bits - 1 if denominator is None else float(denominator)
        s = ((hi - lo) / d).clamp_min(tiny)
        z = torch.round(-lo / s)
        q = (torch.clamp(torch.round(xf / s) + z, 0, 2**bits - 1) - z) * s
    if granularity == "group":
        q = _unblocks(q, pad)
    q = q.to(x.dtype)
    return x + (q - x).detach() if ste and x.requires_grad else q


def _fp4_round_trip(
    x: torch.Tensor,
    block: int,
    ste: bool,
    block_scale: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``y = e2m1(x / s) * s`` in blocks of ``block`` along the last axis, in float32.

    ``s = block_scale(amax)`` from each block's largest finite ``|x|`` (NaN and infinity set
    no scale); a zero scale zeroes its block. Shared checks, empty input and STE of the FP4
    formats.
    """
    check_float(x)
    check_min_rank(x, 1, "(..., features) with the blocks along the last axis")
    if x.numel() == 0:
        return x.clone()
    xf, pad = _blocks(upcast(x.detach()), block)
    scale = block_scale(torch.where(torch.isfinite(xf), xf.abs(), 0.0).amax(-1, keepdim=True))
    q = round_e2m1(xf / (scale + (scale == 0))) * scale
    q = _unblocks(q, pad).to(x.dtype)
    return x + (q - x).detach() if ste and x.requires_grad else q


def fake_quant_nvfp4(
    x: torch.Tensor,
    *,
    block: int = 16,
    tensor_amax: torch.Tensor | float | None = None,
    ste: bool = True,
) -> torch.Tensor:
    """NVFP4 round trip: E2M1 elements in blocks of ``block`` along the last axis.

    ``y = e2m1(x / (s_b s_t)) * s_b * s_t`` with the tensor scale ``s_t = amax / (6 * 448)``
    (FP32) and the block scale ``s_b = e4m3(amax_block / (6 s_t))``. A block whose scale
    rounds to 0 (tiny next to the tensor's maximum) becomes 0, as in hardware.

    Args:
        x: the tensor.
        block: elements per scaling block (16 for NVFP4).
        tensor_amax: fixed tensor range (nGPT's recipe uses 1.0 for unit-norm data);
            ``None`` measures ``max|x|``. Values beyond it saturate.
        ste: straight-through gradient.

    Returns:
        The dequantized tensor, same shape and dtype as ``x``; an empty ``x`` comes back
        as it is.

    Non-finite values are confined to themselves: the block and tensor ranges ignore them,
    so one NaN or infinity changes no scale; a NaN stays NaN and an infinity saturates at
    its block's largest value ``6 s_b s_t`` (FP4 has no infinity).

    Raises:
        ValueError: for a 0-d ``x`` (blocks run along the last axis).
    """

    def block_scale(block_amax: torch.Tensor) -> torch.Tensor:
        amax = block_amax.amax() if tensor_amax is None else torch.as_tensor(float(tensor_amax))
        dtype = block_amax.dtype
        s_t = (amax.to(dtype) / (E2M1_MAX * E4M3_MAX)).clamp_min(torch.finfo(dtype).tiny)
        return round_e4m3(block_amax / (E2M1_MAX * s_t)) * s_t

    return _fp4_round_trip(x, block, ste, block_scale)


def fake_quant_mxfp4(x: torch.Tensor, *, block: int = 32, ste: bool = True) -> torch.Tensor:
    """MXFP4 round trip: E2M1 elements in blocks of ``block`` with a power-of-two scale.

    ``scale = 2^(floor(log2 amax_block) - 2)`` (an E8M0 number, exponent clamped to
    [-127, 127]); ``y = e2m1(x / scale) * scale``, saturating at +-6 scale.

    Non-finite values are confined to themselves, as in the other formats: the block range
    ignores them, so a NaN stays NaN and an infinity saturates at its block's ``+-6 scale``
    while every other value is quantized as without it. An empty ``x`` comes back as it is.

    Raises:
        ValueError: for a 0-d ``x`` (blocks run along the last axis).
    """

    def block_scale(amax: torch.Tensor) -> torch.Tensor:
        exponent = torch.floor(torch.log2(torch.where(amax > 0, amax, 1.0))) - 2
        return torch.exp2(exponent.clamp(-127, 127))

    return _fp4_round_trip(x, block, ste, block_scale)
