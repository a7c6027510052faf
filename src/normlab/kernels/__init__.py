"""Fused fast paths for the row-wise normalizers, with the plain torch path as fallback.

Six operations, forward and backward, each a drop-in for its :mod:`normlab.functional`
form (same signature, same numbers within float32 rounding; into bfloat16 and float16 outputs
DyT's and Softmax1's forwards shorten tanh and exp to what the output keeps, relative errors
5.3e-5 and 3.4e-6 before its rounding, :mod:`normlab.kernels.cpu`):

- :func:`rms_norm` ``x / sqrt(mean(x^2) + eps) * (weight + offset)`` (Zhang & Sennrich,
  2019; ``offset=1`` is Gemma's ``1 + w``, formed in float32),
- :func:`layer_norm` ``(x - mean) / sqrt(var + eps) * (weight + offset) + bias`` (Ba et al.,
  2016),
- :func:`add_rms_norm` / :func:`add_layer_norm`: ``s = x + residual`` and ``norm(s)`` in one
  pass, returning ``(norm(s), s)`` (the fused residual op of vLLM and Liger-Kernel),
- :func:`dyt` ``weight * tanh(alpha * x) + bias`` (Zhu et al., 2025),
- :func:`softmax1` ``exp(x_i) / (1 + sum_j exp(x_j))`` (Miller, 2023).

And :func:`attention`, softmax attention ``softmax(q k^T * scale) v`` with a fused CPU kernel
for small head dimensions (:mod:`normlab.kernels.sdpa`; torch's own op elsewhere).

Where they apply: float32, bfloat16 or float16 tensors, on the CPU (:mod:`normlab.kernels.cpu`,
a C++ library built on first use) or on CUDA when Triton is installed
(:mod:`normlab.kernels.triton_kernels`); a plain ``torch.Tensor`` (no subclass, no functorch
transform), a weight of exactly ``normalized_shape`` (any float dtype: the gain is formed in
float32), softmax over the last dimension. Anything else takes the plain path. Autograd
saves the input (the sum, for the fused forms) and fp32 statistics per row: rstd, and
LayerNorm's mean (:mod:`normlab.kernels.autograd`); ``torch.compile`` sees the kernels as
custom ops.

Cost on small inputs: a call pays a fixed cost in Python (the checks, the ctypes call, and
under autograd the autograd function's ~35 us) that torch's own C++ ops do not. On inputs
that stay in cache LayerNorm's forward + backward is slower than ``F.layer_norm`` up to
about 1M elements (float32, two threads, 2026-12-05: 64 x 256 98 us against 43, 1024 x 256
205 against 156, 4096 x 256 452 against 435, 1024 x 1024 452 against 541), RMSNorm only in
the forward of the smallest (64 x 256: 18 us against 15; torch's RMSNorm backward is a
composite of several ops, 89 against 139). ``normlab bench`` prints this table.

Turning them off: per layer, ``RMSNorm(d, backend="torch")`` (also ``LayerNorm``, ``DyT``)
always takes the plain path; for a block of code, ``with normlab.kernels.disabled(): ...``
(the plain path while the block runs, in every thread; compiled graphs are re-traced);
for a whole process, ``NORMLAB_KERNELS=0`` in the environment, read once at import: the one
documented exception to "no global switches". :func:`normlab.papers.paper` keys:
``rmsnorm``, ``layernorm``, ``dyt``, ``softmax1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import torch

from normlab import functional as NF
from normlab._checks import check_float, check_trailing_shape
from normlab.kernels._dispatch import (
    BACKENDS,
    _applies,
    _f32,
    _grad,
    available,
    check_backend,
    disabled,
    enabled,
)
from normlab.kernels.sdpa import attention

__all__ = [
    "BACKENDS",
    "add_layer_norm",
    "add_rms_norm",
    "attention",
    "available",
    "check_backend",
    "disabled",
    "dyt",
    "enabled",
    "layer_norm",
    "rms_norm",
    "softmax1",
]


def _exact(shape: tuple[int, ...], *params: torch.Tensor | None) -> bool:
    return all(p is None or tuple(p.shape) == shape for p in params)


# The reshapes below are skipped where they would change nothing: under autograd each one is
# a view node of its own (~5 us a call, forward and backward), and small inputs are
# overhead-bound. With the other trims of the same change (parameters converted only when
# they are not flat float32 already, scratch passed as addresses, the float32 weight kept
# for the backward) a LayerNorm forward + backward of 64 x 64 floats went from 147-152 to
# 89 us, RMSNorm's from 122-129 to 81 (torch's F.layer_norm: 38; two threads, 2026-12-05).
def _rows(t: torch.Tensor, d: int) -> torch.Tensor:
    """``t`` as ``(rows, d)`` (``d`` its trailing size): itself when already so shaped."""
    return t if t.dim() == 2 and t.shape[1] == d else t.reshape(-1, d)


def _like(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    return t if t.shape == shape else t.reshape(shape)


def _flat(*params: torch.Tensor | None) -> list[torch.Tensor | None]:
    return [p if p is None or p.dim() == 1 else p.reshape(-1) for p in params]


def rms_norm(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    *,
    offset: float = 0.0,
) -> torch.Tensor:
    """:func:`normlab.functional.rms_norm` on the fast path where it applies."""
    shape = tuple(normalized_shape)
    if not _applies(x, weight, d=prod(shape)) or not _exact(shape, weight):
        return NF.rms_norm(x, shape, weight, eps, offset=offset)
    check_trailing_shape(x, shape)
    from normlab.kernels._ops import call
    from normlab.kernels.autograd import RMSNormFn

    eps = torch.finfo(x.dtype).eps if eps is None else eps
    x2 = _rows(x, prod(shape))
    if not _grad(x, weight):
        y = call("rms_fwd", x2.contiguous(), None, _f32(weight), eps, offset)[1]
        return _like(y, x.shape)
    return _like(RMSNormFn.apply(x2, *_flat(weight), eps, offset), x.shape)


def _fused(x: torch.Tensor, residual: torch.Tensor, shape: tuple[int, ...], *params) -> bool:
    """Whether the fused residual kernels apply (same shape and dtype for both inputs)."""
    same = residual.shape == x.shape and residual.dtype == x.dtype
    return same and _applies(x, residual, *params, d=prod(shape)) and _exact(shape, *params)


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    *,
    offset: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`normlab.functional.add_rms_norm` (``(rms_norm(s), s)``, ``s = x + residual``)
    fused where it applies: ``x`` and ``residual`` are read once, the sum and the normalized
    sum written in the same pass (the unfused form reads the sum again)."""
    shape = tuple(normalized_shape)
    if not _fused(x, residual, shape, weight):
        return NF.add_rms_norm(x, residual, shape, weight, eps, offset=offset)
    check_trailing_shape(x, shape)
    from normlab.kernels._ops import call
    from normlab.kernels.autograd import AddRMSNormFn

    eps = torch.finfo(x.dtype).eps if eps is None else eps
    d = prod(shape)
    x2, r2 = _rows(x, d), _rows(residual, d)
    if not _grad(x, residual, weight):
        s, y, _ = call("rms_fwd", x2.contiguous(), r2.contiguous(), _f32(weight), eps, offset)
    else:
        y, s = AddRMSNormFn.apply(x2, r2, *_flat(weight), eps, offset)
    return _like(y, x.shape), _like(s, x.shape)


def layer_norm(
    x: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    offset: float = 0.0,
) -> torch.Tensor:
    """:func:`normlab.functional.layer_norm` on the fast path where it applies."""
    shape = tuple(normalized_shape)
    if not _applies(x, weight, bias, d=prod(shape)) or not _exact(shape, weight, bias):
        return NF.layer_norm(x, shape, weight, bias, eps, offset=offset)
    check_trailing_shape(x, shape)
    from normlab.kernels._ops import call
    from normlab.kernels.autograd import LayerNormFn

    x2 = _rows(x, prod(shape))
    if not _grad(x, weight, bias):
        y = call("ln_fwd", x2.contiguous(), None, _f32(weight), _f32(bias), eps, offset)[1]
        return _like(y, x.shape)
    return _like(LayerNormFn.apply(x2, *_flat(weight, bias), eps, offset), x.shape)


def add_layer_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    normalized_shape: Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    offset: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`normlab.functional.add_layer_norm` (``(layer_norm(s), s)``,
    ``s = x + residual``) fused where it applies, as :func:`add_rms_norm`."""
    shape = tuple(normalized_shape)
    if not _fused(x, residual, shape, weight, bias):
        return NF.add_layer_norm(x, residual, shape, weight, bias, eps, offset=offset)
    check_trailing_shape(x, shape)
    from normlab.kernels._ops import call
    from normlab.kernels.autograd import AddLayerNormFn

    d = prod(shape)
    x2, r2 = _rows(x, d), _rows(residual, d)
    if not _grad(x, residual, weight, bias):
        args = (x2.contiguous(), r2.contiguous(), _f32(weight), _f32(bias), eps, offset)
        s, y, _, _ = call("ln_fwd", *args)
    else:
        y, s = AddLayerNormFn.apply(x2, r2, *_flat(weight, bias), eps, offset)
    return _like(y, x.shape), _like(s, x.shape)


def dyt(
    x: torch.Tensor,
    alpha: torch.Tensor | float,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`normlab.functional.dyt` on the fast path where it applies."""
    if not isinstance(alpha, torch.Tensor):
        alpha = torch.tensor(float(alpha), device=x.device)
    shapes = {tuple(p.shape) for p in (weight, bias) if p is not None}
    shape = shapes.pop() if len(shapes) == 1 else (x.shape[-1:] if not shapes else None)
    fast = (
        shape is not None
        and alpha.numel() == 1
        and _applies(x, alpha, weight, bias, d=prod(shape or (1,)))
    )
    if not fast or tuple(x.shape[x.dim() - len(shape) :]) != tuple(shape):
        return NF.dyt(x, alpha, weight, bias)
    from normlab.kernels._ops import call
    from normlab.kernels.autograd import DyTFn

    x2 = _rows(x, prod(shape))
    if not _grad(x, alpha, weight, bias):
        a = alpha.detach().to(torch.float32).reshape(1)
        return _like(call("dyt_fwd", x2.contiguous(), a, _f32(weight), _f32(bias)), x.shape)
    return _like(DyTFn.apply(x2, alpha, *_flat(weight, bias)), x.shape)


def softmax1(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """:func:`normlab.functional.softmax1` on the fast path where it applies (last dim)."""
    check_float(x)
    if not _applies(x) or dim not in (-1, x.dim() - 1):
        return NF.softmax1(x, dim)
    from normlab.kernels._ops import call
    from normlab.kernels.autograd import Softmax1Fn

    x2 = _rows(x, x.shape[-1])
    if not _grad(x):
        return _like(call("softmax1_fwd", x2.contiguous()), x.shape)
    return _like(Softmax1Fn.apply(x2), x.shape)
