"""Softmax attention with a fused CPU kernel for small head dimensions.

:func:`attention` is ``F.scaled_dot_product_attention(q, k, v, is_causal=causal,
scale=scale)`` with no mask and no dropout: ``softmax(q k^T * scale) v`` (Vaswani et al.,
2017), each query's softmax over its keys (the keys up to its own position when
``causal``). On the CPU, for float32 self-attention with a head dimension of
:data:`~normlab.kernels.cpu.ATTENTION_HEAD_DIMS`, it runs csrc/attention.cpp: one pass per
query row with the slice's keys and values held in L1, saving each query's log-sum-exp for
the backward (which recomputes the probabilities, as FlashAttention does), where it measured
faster than torch's op (:func:`_fused`). torch's CPU flash attention is blocked for large
head dimensions; at TinyGPT's (d 32, 4 heads: head dimension 8, 64 tokens) the fused forward
+ backward is 2.2x faster and a training step 1.3x (benchmarks/bench_attention.py, one
thread, idle machine).
Anything else (other dtypes or devices, cross-attention lengths, other head dimensions, a
functorch transform, a torch-function mode such as the fold tracer, ``torch.compile``,
``normlab.kernels.disabled()``) takes torch's own op, so the numbers agree within float32
rounding either way. A double backward differentiates the formula spelled out in torch ops
(:func:`explicit_attention`) on the saved inputs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from normlab.kernels._dispatch import _PLAIN, device_ready, enabled

__all__ = ["attention", "explicit_attention"]


#: The most tokens the fused kernel takes: one query row's scores and the slice's keys and
#: values stay in L1 up to here; at 512 tokens and head dimension 64 torch's blocked kernel
#: was faster (0.71x forward, 0.82x forward + backward; benchmarks/bench_attention.py).
MAX_TOKENS = 256


def _fused(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether the CPU kernel computes this call (else torch's op does): float32 CPU
    self-attention of at most :data:`MAX_TOKENS` tokens with a head dimension of
    :data:`~normlab.kernels.cpu.ATTENTION_HEAD_DIMS`, where it measured faster than torch's
    op forward + backward at the sizes measured (1.0-2.2x). The forward alone is faster at
    head dimension 8 (1.3x) and 32 (1.1x) but not at 16 (0.9-1.0x); the kernel takes it all
    the same, so a model computes the same numbers with and without autograd."""
    from normlab.kernels.cpu import ATTENTION_HEAD_DIMS

    if not enabled() or torch.compiler.is_compiling():
        return False
    if any(type(t) not in _PLAIN for t in (q, k, v)):
        return False
    if torch._C._are_functorch_transforms_active() or torch._C._is_torch_function_mode_enabled():
        return False
    d = q.shape[-1]
    return (
        q.dim() in (3, 4)
        and q.shape == k.shape == v.shape
        and d in ATTENTION_HEAD_DIMS
        and q.shape[-2] <= MAX_TOKENS
        and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in (q, k, v))
        and device_ready("cpu")
    )


class _AttentionFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> Tensor:
        from normlab.kernels import cpu

        o, lse = cpu.attention_fwd(q, k, v, scale, causal)
        ctx.save_for_backward(q, k, v, o, lse)  # the inputs themselves: a double backward
        # differentiates through them
        ctx.scale, ctx.causal = scale, causal
        return o

    @staticmethod
    def backward(ctx: Any, do: Tensor) -> tuple[Tensor | None, ...]:
        from normlab.kernels import cpu

        q, k, v, o, lse = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: differentiate the spelled-out formula
            wanted = [t for t in (q, k, v) if t.requires_grad]
            out = explicit_attention(q, k, v, causal=ctx.causal, scale=ctx.scale)
            got = iter(torch.autograd.grad(out, wanted, do, create_graph=True))
            return (*(next(got) if t.requires_grad else None for t in (q, k, v)), None, None)
        dq, dk, dv = cpu.attention_bwd(q, k, v, o, do, lse, ctx.scale, ctx.causal)
        return dq, dk, dv, None, None


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float) -> Tensor:
    """``softmax(q k^T * scale) v`` spelled out in differentiable ops (torch's CPU flash
    attention has no double backward)."""
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        n = q.shape[-2]
        keep = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores.softmax(-1) @ v


def attention(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, scale: float | None = None
) -> Tensor:
    """``softmax(q k^T * scale) v`` over the last two dimensions (``(..., tokens, head_dim)``).

    Args:
        q: queries ``(..., tokens, head_dim)``.
        k: keys, the shape of ``q`` for the fused path (torch's op takes other lengths).
        v: values, the shape of ``k``.
        causal: query ``i`` sees keys ``0..i`` only.
        scale: the score scale; ``head_dim ** -0.5`` when None.

    Returns:
        ``(..., tokens, head_dim)``, as ``F.scaled_dot_product_attention`` returns it.

    Examples:
        >>> import torch, torch.nn.functional as F
        >>> q, k, v = torch.randn(3, 2, 4, 10, 8).unbind(0)
        >>> y = attention(q, k, v, causal=True)
        >>> torch.allclose(y, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
        True
    """
    if _fused(q, k, v):
        factor = q.shape[-1] ** -0.5 if scale is None else float(scale)
        return _AttentionFn.apply(q, k, v, factor, bool(causal))
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
