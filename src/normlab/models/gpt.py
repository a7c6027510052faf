"""TinyGPT: a small byte-level decoder whose normalization is a configuration choice.

The norm is any registered norm, the attention score normalizer any registered score
method, and the residual scheme pre-LN or post-LN. Claims train it on the standard-library
corpus (:mod:`normlab.data.corpus`) with :func:`normlab.models.train.train_lm`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab._registry import get
from normlab.attention.mha import MultiheadAttention
from normlab.data.corpus import VOCAB

__all__ = ["RESIDUALS", "Block", "GPTConfig", "TinyGPT"]

#: Residual schemes: "pre" (x + f(norm(x))) and "post" (norm(x + f(x))).
RESIDUALS = ("pre", "post")


@dataclass(frozen=True)
class GPTConfig:
    """Architecture of a :class:`TinyGPT`.

    Attributes:
        d_model: width.
        n_layers: number of blocks.
        n_heads: attention heads per block.
        context: maximum sequence length.
        mlp_ratio: hidden width of the MLP over ``d_model``.
        norm: registered norm used in every block and before the head.
        norm_kwargs: extra arguments of the norm.
        score: registered attention score normalizer.
        score_kwargs: extra arguments of the score normalizer.
        residual: one of :data:`RESIDUALS`.
        gated_attention: per-head sigmoid output gates (Bondarenko et al., 2023).
        kv_heads: key/value heads (grouped-query attention); ``None`` for ``n_heads``.
        moe_experts: replace each MLP by a top-k mixture of this many experts (0: dense).
        moe_top_k: experts active per token.
        ln_scaling: scale each block norm's output by ``1/sqrt(layer + 1)`` (LayerNorm
            Scaling against the curse of depth).
        bias: biases in linear layers.
        vocab: vocabulary size (bytes plus BOS).
    """

    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    context: int = 128
    mlp_ratio: int = 4
    norm: str = "layernorm"
    norm_kwargs: dict[str, Any] = field(default_factory=dict)
    score: str = "softmax"
    score_kwargs: dict[str, Any] = field(default_factory=dict)
    residual: str = "pre"
    gated_attention: bool = False
    kv_heads: int | None = None
    moe_experts: int = 0
    moe_top_k: int = 2
    ln_scaling: bool = False
    bias: bool = True
    vocab: int = VOCAB

    def __post_init__(self) -> None:
        if self.residual not in RESIDUALS:
            raise ValueError(f"residual must be one of {RESIDUALS}, got {self.residual!r}.")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model}; "
                "change one of them."
            )
        if get(self.norm).kind != "norm":
            raise ValueError(f"norm={self.norm!r} is not a registered norm method.")
        if get(self.score).kind != "score":
            raise ValueError(f"score={self.score!r} is not a registered score method.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


class Block(nn.Module):
    """One transformer block: attention then MLP, each with a norm and a residual."""

    def __init__(self, config: GPTConfig, index: int) -> None:
        super().__init__()
        d = config.d_model
        self.residual = config.residual
        self.norm_scale = 1.0 / math.sqrt(index + 1) if config.ln_scaling else 1.0
        self.norm1 = get(config.norm).create(d, **config.norm_kwargs)
        self.attn = MultiheadAttention(
            d,
            config.n_heads,
            kv_heads=config.kv_heads,
            score=config.score,
            score_kwargs=config.score_kwargs,
            gated=config.gated_attention,
            causal=True,
            bias=config.bias,
        )
        self.norm2 = get(config.norm).create(d, **config.norm_kwargs)
        hidden = config.mlp_ratio * d
        self.mlp = (
            MoEMLP(
                d, hidden, experts=config.moe_experts, top_k=config.moe_top_k, bias=config.bias
            )
            if config.moe_experts
            else MLP(d, hidden, bias=config.bias)
        )

    def forward(
        self, h: torch.Tensor, *, return_probs: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.residual == "pre":
            out = self.attn(self.norm1(h) * self.norm_scale, return_probs=return_probs)
            a, probs = out if return_probs else (out, None)
            h = h + a
            h = h + self.mlp(self.norm2(h) * self.norm_scale)
        else:
            out = self.attn(h, return_probs=return_probs)
            a, probs = out if return_probs else (out, None)
            h = self.norm1(h + a) * self.norm_scale
            h = self.norm2(h + self.mlp(h)) * self.norm_scale
        return h, probs


class TinyGPT(nn.Module):
    """A byte-level causal language model with configurable normalization.

    Args:
        config: the architecture.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed = nn.Embedding(config.vocab, d)
        self.pos = nn.Embedding(config.context, d)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        self.norm_f = get(config.norm).create(d, **config.norm_kwargs)
        self.head = nn.Linear(d, config.vocab, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def forward(
        self,
        idx: torch.Tensor,
        *,
        layers: Sequence[int] | None = None,
        return_probs: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Next-token logits for token ids ``idx`` of shape ``(batch, tokens)``.

        Args:
            idx: token ids in ``[0, vocab)``.
            layers: run these blocks in this order instead of all in sequence (for layer
                dropping and swapping probes; the model itself is not changed).
            return_probs: also return each run block's attention probabilities.

        Returns:
            Logits ``(batch, tokens, vocab)``, and the list of probabilities if asked.
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must be (batch, tokens), got shape {tuple(idx.shape)}.")
        n = idx.shape[1]
        if n > self.config.context:
            raise ValueError(f"Sequence of {n} tokens exceeds context {self.config.context}.")
        h = self.embed(idx) + self.pos(torch.arange(n, device=idx.device))
        order = range(len(self.blocks)) if layers is None else layers
        all_probs = []
        for i in order:
            h, probs = self.blocks[i](h, return_probs=return_probs)
            if probs is not None:
                all_probs.append(probs)
        logits = self.head(self.norm_f(h))
        return (logits, all_probs) if return_probs else logits

    def after_step(self) -> None:
        """Hook the trainer calls after every optimizer step (constraint projections)."""

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def __getattr__(name: str) -> Any:
    # Training lives in normlab.models.lm (it imports this module); re-export lazily so
    # ``from normlab.models.gpt import train_lm`` works without an import cycle.
    if name in ("TrainConfig", "evaluate_bpb", "load_snapshot", "train_lm"):
        from normlab.models import lm

        return getattr(lm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
