"""TinyGPT's feed-forward layers: the dense GELU MLP and a top-k mixture of experts.

nGPT's block lives in :mod:`normlab.layers.hypersphere` and the attention-residual block
in :mod:`normlab.attention.depth`; :mod:`normlab.models.gpt` composes them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MLP", "MoEMLP"]


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
