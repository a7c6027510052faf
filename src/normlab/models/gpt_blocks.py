"""TinyGPT's feed-forward layers and its non-standard blocks: nGPT and attention residuals.

:class:`NGPTBlock` keeps the hidden state on the unit sphere (Loshchilov et al., 2024):
``h <- norm(h + alpha_A (norm(Attn(h)) - h))``, ``h <- norm(h + alpha_M (norm(MLP(h)) - h))``
with unit-norm queries/keys scaled by ``s_qk`` and a softmax scale ``sqrt(d_head)``, the
gated MLP ``W_o (u * silu(v))`` with ``u = s_u W_u h``, ``v = s_v sqrt(d) W_v h``, and every
weight matrix unit-norm along the model dimension (renormalized after each step).

:class:`DepthBlock` reads each sublayer's input from :class:`~normlab.attention.depth.
AttnResidual` over all earlier sublayer outputs instead of a residual sum; with
``null_coupling`` (OASIS) it also emits the layer's null signal from its attention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from normlab import functional as NF
from normlab.attention.depth import AttnResidual, null_signal
from normlab.attention.mha import MultiheadAttention
from normlab.layers.hypersphere import HypersphereResidual, LearnedScale, NormalizedLinear

__all__ = ["MLP", "NGPTMLP", "DepthBlock", "MoEMLP", "NGPTBlock", "unit_rows_"]


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


class NGPTMLP(nn.Module):
    """nGPT's gated MLP ``W_o (u * silu(v))``, ``u = s_u W_u h``, ``v = s_v sqrt(d) W_v h``.

    Args:
        dim: model width.
        hidden: width of ``u`` and ``v``.
    """

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.dim = dim
        self.up = NormalizedLinear(dim, 2 * hidden, norm_dim="in")
        self.down = NormalizedLinear(hidden, dim, norm_dim="out")
        self.s_uv = LearnedScale(2 * hidden, init=1.0, scale=1.0)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        uv = self.up(h) * self.s_uv()
        u, v = uv.chunk(2, dim=-1)
        return self.down(u * F.silu(v * math.sqrt(self.dim)))


class NGPTBlock(nn.Module):
    """One nGPT block on the unit sphere; ``forward(h) -> (h, probs)`` like TinyGPT's Block.

    Args:
        dim: model width.
        attn: the attention (built with ``normalized=True, qk_norm="l2"``).
        hidden: MLP width.
    """

    def __init__(self, dim: int, *, attn: MultiheadAttention, hidden: int) -> None:
        super().__init__()
        self.attn = attn
        self.mlp = NGPTMLP(dim, hidden)
        self.res_attn = HypersphereResidual(dim)
        self.res_mlp = HypersphereResidual(dim)

    def forward(
        self, h: torch.Tensor, *, return_probs: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.attn(h, return_probs=return_probs)
        a, probs = out if return_probs else (out, None)
        h = self.res_attn(h, a)
        h = self.res_mlp(h, self.mlp(h))
        return h, probs


class DepthBlock(nn.Module):
    """A pre-norm block whose sublayers read :class:`AttnResidual` mixes over depth.

    ``forward(values, nulls)`` appends the attention and MLP outputs to ``values`` (and the
    layer's null signal, twice, to ``nulls``) and returns the attention sublayer's input
    state, the analogue of the residual stream entering the block.

    Args:
        dim: model width.
        norm1: norm before attention.
        attn: the attention.
        norm2: norm before the MLP.
        mlp: the MLP.
        null_coupling: OASIS's null signal in the depth routing.
        norm_scale: factor on both norms' outputs (LayerNorm Scaling).
    """

    def __init__(
        self,
        dim: int,
        *,
        norm1: nn.Module,
        attn: MultiheadAttention,
        norm2: nn.Module,
        mlp: nn.Module,
        null_coupling: bool = False,
        norm_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.norm1, self.attn, self.norm2, self.mlp = norm1, attn, norm2, mlp
        self.route_attn = AttnResidual(dim, null_coupling=null_coupling)
        self.route_mlp = AttnResidual(dim, null_coupling=null_coupling)
        self.null_coupling, self.norm_scale = null_coupling, norm_scale

    def forward(
        self,
        values: list[torch.Tensor],
        nulls: list[torch.Tensor],
        *,
        return_probs: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.route_attn(values, nulls)
        need = return_probs or self.null_coupling
        out = self.attn(self.norm1(h) * self.norm_scale, return_probs=need)
        a, probs = out if need else (out, None)
        psi = null_signal(probs) if self.null_coupling else torch.zeros_like(h[..., 0])
        values.append(a)
        nulls.append(psi)
        m = self.mlp(self.norm2(self.route_mlp(values, nulls)) * self.norm_scale)
        values.append(m)
        nulls.append(psi)
        return h, probs if return_probs else None


def unit_rows_(weight: torch.Tensor) -> None:
    """Normalize the rows of an embedding table in place (nGPT's embedding constraint)."""
    with torch.no_grad():
        weight.copy_(NF.l2_normalize(weight, dim=-1))
