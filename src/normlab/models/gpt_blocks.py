"""TinyGPT's feed-forward layers (a dense GELU MLP, a top-k mixture of experts) and its
fused residual step.

nGPT's block lives in :mod:`normlab.layers.hypersphere` and the attention-residual block
in :mod:`normlab.attention.depth`; :mod:`normlab.models.gpt` composes them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _module

from normlab.layers.norms import LayerNorm, RMSNorm

__all__ = ["MLP", "MoEMLP", "add_norm"]


def _hooked(norm: nn.Module) -> bool:
    # torch keeps the global hooks in module-level dicts; no public accessor exists
    return bool(
        norm._forward_hooks
        or norm._forward_pre_hooks
        or _module._global_forward_hooks
        or _module._global_forward_pre_hooks
    )


def add_norm(
    norm: nn.Module, x: torch.Tensor, residual: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(norm(residual + x), residual + x)``: the pre-norm residual step.

    Fused (one kernel reads ``x`` and ``residual`` and writes both results) where ``norm``
    is normlab's :class:`~normlab.layers.RMSNorm` or :class:`~normlab.layers.LayerNorm` and
    no forward hook watches it; otherwise the sum, then the norm, as two calls. Hooks get
    the unfused call because probes and surgery read a norm's input as its first argument
    and its output as one tensor. The numbers are the same either way (the sum is rounded
    to the stream's dtype before it is normalized).

    Examples:
        >>> import torch
        >>> y, h = add_norm(RMSNorm(4), torch.ones(1, 4), torch.ones(1, 4))
        >>> h.tolist(), y.tolist()
        ([[2.0, 2.0, 2.0, 2.0]], [[1.0, 1.0, 1.0, 1.0]])
    """
    if isinstance(norm, (LayerNorm, RMSNorm)) and not _hooked(norm):
        return norm(x, residual=residual)
    s = residual + x
    return norm(s), s


class MLP(nn.Module):
    """Two-layer GELU feed-forward block."""

    def __init__(self, dim: int, hidden: int, *, bias: bool) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class MoEMLP(nn.Module):
    """Top-k mixture of GELU experts, each ``hidden / top_k`` wide (same active width).

    A router picks ``top_k`` experts per token and mixes them with its renormalized
    softmax weights. Every expert runs on every token and unpicked ones get weight 0: exact
    and simple at TinyGPT's size, not an efficient MoE.
    """

    def __init__(self, dim: int, hidden: int, *, experts: int, top_k: int, bias: bool) -> None:
        super().__init__()
        if not 0 < top_k <= experts:
            raise ValueError(f"moe_top_k must be in [1, moe_experts={experts}], got {top_k}.")
        self.top_k = top_k
        self.router = nn.Linear(dim, experts, bias=False)
        width = max(1, hidden // top_k)
        self.experts = nn.ModuleList(MLP(dim, width, bias=bias) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.router(x)
        top, index = logits.topk(self.top_k, dim=-1)
        gates = torch.zeros_like(logits).scatter(-1, index, torch.softmax(top, dim=-1))
        outputs = torch.stack([expert(x) for expert in self.experts], dim=-1)
        return (outputs * gates.unsqueeze(-2)).sum(-1)
