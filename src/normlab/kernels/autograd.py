"""Autograd functions over the kernels: they save the input and fp32 statistics per row.

Each function takes a contiguous ``(rows, features)`` view (the dispatch in
:mod:`normlab.kernels` flattens the leading dimensions) and returns new tensors; the
caller's tensors are never written. RMSNorm saves ``rstd = 1 / sqrt(. + eps)`` per row and
LayerNorm the row mean and ``rstd`` (the backward pass recomputes no statistic); the fused
residual forms save the sum instead of their two inputs. DyT saves nothing beyond its input
(``tanh`` is recomputed), Softmax1 saves its output. Weight gradients are reduced over a
fixed set of row blocks in a fixed order, so they are deterministic. A double backward
(``create_graph=True``) is served by the plain torch formula, recomputed from the saved
input, so higher derivatives stay correct.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from normlab import functional as NF
from normlab.kernels._dispatch import _f32
from normlab.kernels._ops import call

__all__ = [
    "AddLayerNormFn",
    "AddRMSNormFn",
    "DyTFn",
    "LayerNormFn",
    "RMSNormFn",
    "Softmax1Fn",
]


def _cast(g: Tensor, like: Tensor | None, need: bool) -> Tensor | None:
    """A parameter's gradient ``g`` (flat float32) in the parameter's dtype and shape."""
    if not need or like is None:
        return None
    if g.dtype == like.dtype and g.shape == like.shape:
        return g
    return g.to(like.dtype).reshape(like.shape)


def _reference_grads(
    fn: Callable[..., Tensor], inputs: tuple[Tensor | None, ...], grads: tuple[Tensor, ...]
) -> tuple[Tensor | None, ...]:
    """Gradients through the plain formula on the saved inputs (their graph kept), so the
    result can itself be differentiated (``create_graph=True``)."""
    with torch.enable_grad():
        outs = fn(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        wanted = [t for t in inputs if t is not None and t.requires_grad]
        got = torch.autograd.grad(outs, wanted, grads, create_graph=True, allow_unused=True)
    it = iter(got)
    picked = [t is not None and t.requires_grad for t in inputs]
    return tuple(next(it) if p else None for p in picked)


def _dy(dy: Tensor | None, like: Tensor) -> Tensor:
    """The output gradient (zeros where autograd sent None: that output was not used)."""
    return torch.zeros_like(like) if dy is None else dy.contiguous()


class RMSNormFn(torch.autograd.Function):
    """``x * rstd * (weight + off)`` with ``rstd = 1 / sqrt(mean(x^2) + eps)`` per row."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor | None, eps: float, off: float) -> Tensor:
        x = x.contiguous()
        ctx.w32 = _f32(weight)  # the backward's too (half weights: one conversion a step)
        _, y, rstd = call("rms_fwd", x, None, ctx.w32, eps, off)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps, ctx.off = eps, off
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, weight, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: differentiate the formula instead
            d = x.shape[-1]

            def ref(a: Tensor, b: Tensor | None) -> Tensor:
                return NF.rms_norm(a, (d,), b, ctx.eps, offset=ctx.off)

            return (*_reference_grads(ref, (x, weight), (dy,)), None, None)
        need_w = weight is not None and ctx.needs_input_grad[1]
        dx, dw = call("rms_bwd", dy.contiguous(), x, ctx.w32, rstd, None, need_w, ctx.off)
        return dx, _cast(dw, weight, need_w), None, None


class AddRMSNormFn(torch.autograd.Function):
    """``s = x + residual`` and ``rms_norm(s)`` in one pass; returns ``(y, s)``."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, residual: Tensor, weight: Tensor | None, eps: float, off: float
    ) -> tuple[Tensor, Tensor]:
        ctx.w32 = _f32(weight)
        s, y, rstd = call("rms_fwd", x.contiguous(), residual.contiguous(), ctx.w32, eps, off)
        ctx.save_for_backward(s, weight, rstd)
        ctx.eps, ctx.off = eps, off
        ctx.set_materialize_grads(False)  # an unused output costs no zero tensor
        return y, s

    @staticmethod
    def backward(ctx: Any, dy: Tensor | None, ds: Tensor | None) -> tuple[Tensor | None, ...]:
        s, weight, rstd = ctx.saved_tensors
        dy = _dy(dy, s)
        if torch.is_grad_enabled():
            d = s.shape[-1]

            def ref(a: Tensor, b: Tensor | None) -> Tensor:
                return NF.rms_norm(a, (d,), b, ctx.eps, offset=ctx.off)

            gs, gw = _reference_grads(ref, (s, weight), (dy,))
            g = gs if ds is None else gs + ds
            return g, g, gw, None, None
        need_w = weight is not None and ctx.needs_input_grad[2]
        dsum = None if ds is None else ds.contiguous()
        g, dw = call("rms_bwd", dy, s, ctx.w32, rstd, dsum, need_w, ctx.off)
        return g, g, _cast(dw, weight, need_w), None, None


class LayerNormFn(torch.autograd.Function):
    """``(x - mean) * rstd * (weight + off) + bias`` per row (biased variance); the mean
    and rstd are saved, so the backward pass recomputes no statistic."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, off: float
    ) -> Tensor:
        x = x.contiguous()
        ctx.w32 = _f32(weight)
        _, y, mean, rstd = call("ln_fwd", x, None, ctx.w32, _f32(bias), eps, off)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.eps, ctx.off = eps, off
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, weight, bias, mean, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():
            d = x.shape[-1]

            def ref(a: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
                return NF.layer_norm(a, (d,), w, b, ctx.eps, offset=ctx.off)

            return (*_reference_grads(ref, (x, weight, bias), (dy,)), None, None)
        need_w = weight is not None and ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        dx, dw, db = call(
            "ln_bwd", dy.contiguous(), x, ctx.w32, mean, rstd, None, need_w, need_b, ctx.off
        )
        return dx, _cast(dw, weight, need_w), _cast(db, bias, need_b), None, None


class AddLayerNormFn(torch.autograd.Function):
    """``s = x + residual`` and ``layer_norm(s)`` in one pass; returns ``(y, s)``."""

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        residual: Tensor,
        weight: Tensor | None,
        bias: Tensor | None,
        eps: float,
        off: float,
    ) -> tuple[Tensor, Tensor]:
        ctx.w32 = _f32(weight)
        s, y, mean, rstd = call(
            "ln_fwd", x.contiguous(), residual.contiguous(), ctx.w32, _f32(bias), eps, off
        )
        ctx.save_for_backward(s, weight, bias, mean, rstd)
        ctx.eps, ctx.off = eps, off
        ctx.set_materialize_grads(False)
        return y, s

    @staticmethod
    def backward(ctx: Any, dy: Tensor | None, ds: Tensor | None) -> tuple[Tensor | None, ...]:
        s, weight, bias, mean, rstd = ctx.saved_tensors
        dy = _dy(dy, s)
        if torch.is_grad_enabled():
            d = s.shape[-1]

            def ref(a: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
                return NF.layer_norm(a, (d,), w, b, ctx.eps, offset=ctx.off)

            gs, gw, gb = _reference_grads(ref, (s, weight, bias), (dy,))
            g = gs if ds is None else gs + ds
            return g, g, gw, gb, None, None
        need_w = weight is not None and ctx.needs_input_grad[2]
        need_b = bias is not None and ctx.needs_input_grad[3]
        dsum = None if ds is None else ds.contiguous()
        g, dw, db = call("ln_bwd", dy, s, ctx.w32, mean, rstd, dsum, need_w, need_b, ctx.off)
        return g, g, _cast(dw, weight, need_w), _cast(db, bias, need_b), None, None


class DyTFn(torch.autograd.Function):
    """``weight * tanh(alpha * x) + bias`` with a scalar ``alpha``."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, alpha: Tensor, weight: Tensor | None, bias: Tensor | None
    ) -> Tensor:
        x = x.contiguous()
        a = alpha.detach().to(torch.float32).reshape(1)
        ctx.w32 = _f32(weight)
        y = call("dyt_fwd", x, a, ctx.w32, _f32(bias))
        ctx.save_for_backward(x, alpha, weight, bias)
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, alpha, weight, bias = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _reference_grads(NF.dyt, (x, alpha, weight, bias), (dy,))
        need_w = weight is not None and ctx.needs_input_grad[2]
        need_b = bias is not None and ctx.needs_input_grad[3]
        a = alpha.detach().to(torch.float32).reshape(1)
        dx, da, dw, db = call("dyt_bwd", dy.contiguous(), x, a, ctx.w32, need_w, need_b)
        dalpha = da.to(alpha.dtype).reshape(alpha.shape) if ctx.needs_input_grad[1] else None
        return dx, dalpha, _cast(dw, weight, need_w), _cast(db, bias, need_b)


class Softmax1Fn(torch.autograd.Function):
    """``exp(x_i) / (1 + sum_j exp(x_j))`` over each row."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        y = call("softmax1_fwd", x.contiguous())
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, dy: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # the saved output keeps its graph: differentiable form
            yf, g = y.float(), dy.float()
            return (yf * (g - (g * yf).sum(-1, keepdim=True))).to(y.dtype)
        return call("softmax1_bwd", dy.contiguous(), y)
