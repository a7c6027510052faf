"""The kernels' operations in plain torch, for a compiled graph on a machine without them.

A model compiled before any eager kernel call holds ``torch.ops.normlab.*`` nodes (see
:mod:`normlab.kernels._ops`); when such a node runs and the device has no kernel library
(no C++ compiler, no Triton), it lands here. Same signatures and outputs as
:mod:`normlab.kernels.cpu`: ``x`` is a contiguous ``(rows, features)`` tensor, weights,
biases and statistics are float32, outputs have ``x``'s dtype, and gradients of the
parameters are float32 (an empty tensor where not asked for). Formulas:
RMSNorm ``y = x r (w + off)``, ``r = 1 / sqrt(mean(x^2) + eps)`` and
``dx = r (g (w + off) - x_hat mean(g (w + off) x_hat))``; LayerNorm the same on ``x - mean``, minus
``mean(g w)``; DyT ``y = w tanh(a x) + b``; Softmax1 ``y = exp(x) / (1 + sum exp(x))``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from normlab import functional as NF

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


def _empty(x: Tensor) -> Tensor:
    return x.new_empty(0, dtype=torch.float32)


def _ones(w: Tensor | None, x: Tensor) -> Tensor:
    return torch.ones(x.shape[1], device=x.device) if w is None else w


def _gain(w: Tensor | None, x: Tensor, off: float) -> Tensor:
    return torch.ones(x.shape[1], device=x.device) if w is None else w + off


def rms_fwd(
    x: Tensor, res: Tensor | None, w: Tensor | None, eps: float, off: float
) -> tuple[Tensor, Tensor, Tensor]:
    """``(sum or empty, y, rstd)`` of (residual-add +) RMSNorm with gain ``w + off``."""
    s = None if res is None else x + res
    src = (x if s is None else s).double()  # float64: no overflow for any float32 row
    rstd = torch.rsqrt(src.square().mean(-1) + eps).float()
    y = NF.rms_norm(x if s is None else s, (x.shape[1],), w, eps, offset=off)
    return (x.new_empty(0) if s is None else s), y, rstd


def rms_bwd(
    dy: Tensor,
    x: Tensor,
    w: Tensor | None,
    rstd: Tensor,
    dsum: Tensor | None,
    need_dw: bool,
    off: float,
) -> tuple[Tensor, Tensor]:
    """``(dx, dw or empty)``; ``dsum`` is added to ``dx``."""
    g, xh = dy.float(), x.float() * rstd[:, None]
    gw = g * _gain(w, x, off)
    dx = rstd[:, None] * (gw - xh * (gw * xh).mean(-1, keepdim=True))
    if dsum is not None:
        dx = dx + dsum.float()
    dw = (g * xh).sum(0) if need_dw else _empty(x)
    return dx.to(x.dtype), dw


def ln_fwd(
    x: Tensor,
    res: Tensor | None,
    w: Tensor | None,
    b: Tensor | None,
    eps: float,
    off: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(sum or empty, y, mean, rstd)`` of (residual-add +) LayerNorm."""
    s = None if res is None else x + res
    src = x if s is None else s
    var, mean = torch.var_mean(src.double(), -1, correction=0)
    y = NF.layer_norm(src, (x.shape[1],), w, b, eps, offset=off)
    out = x.new_empty(0) if s is None else s
    return out, y, mean.float(), torch.rsqrt(var + eps).float()


def ln_bwd(
    dy: Tensor,
    x: Tensor,
    w: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    dsum: Tensor | None,
    need_dw: bool,
    need_db: bool,
    off: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(dx, dw or empty, db or empty)`` of LayerNorm; ``dsum`` is added to ``dx``."""
    g = dy.float()
    xh = (x.float() - mean[:, None]) * rstd[:, None]
    gw = g * _gain(w, x, off)
    c1 = gw.mean(-1, keepdim=True)
    c2 = (gw * xh).mean(-1, keepdim=True)
    dx = rstd[:, None] * (gw - c1 - xh * c2)
    if dsum is not None:
        dx = dx + dsum.float()
    dw = (g * xh).sum(0) if need_dw else _empty(x)
    db = g.sum(0) if need_db else _empty(x)
    return dx.to(x.dtype), dw, db


def dyt_fwd(x: Tensor, alpha: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
    """``w tanh(alpha x) + b``."""
    return NF.dyt(x, alpha, w, b)


def dyt_bwd(
    dy: Tensor, x: Tensor, alpha: Tensor, w: Tensor | None, need_dw: bool, need_db: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(dx, dalpha (1 element), dw or empty, db or empty)`` of DyT."""
    xf, g = x.float(), dy.float()
    t = torch.tanh(alpha * xf)
    gt = g * _ones(w, x) * (1 - t * t)
    dx = (gt * alpha).to(x.dtype)
    da = (gt * xf).sum().reshape(1)
    dw = (g * t).sum(0) if need_dw else _empty(x)
    db = g.sum(0) if need_db else _empty(x)
    return dx, da, dw, db


def softmax1_fwd(x: Tensor) -> Tensor:
    """Off-by-one softmax over the rows."""
    return NF.softmax1(x, -1)


def softmax1_bwd(dy: Tensor, y: Tensor) -> Tensor:
    """``y (dy - sum(dy y))`` over the rows."""
    yf, g = y.float(), dy.float()
    return (yf * (g - (g * yf).sum(-1, keepdim=True))).to(y.dtype)
