"""TinyGPT: a small byte-level decoder whose normalization is a configuration choice.

The norm is any registered norm, the attention score normalizer any registered score
method, and the residual scheme one of: pre-LN, post-LN, depth-wise attention residuals
("attnres"), OASIS ("oasis": attention residuals with the inter-layer null signal), or nGPT
("ngpt": hidden states and weights on the unit sphere, no norm layers). Claims train it on
the standard-library corpus (:mod:`normlab.data.corpus`) with
:func:`normlab.training.lm.train_lm`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn

# TinyGPT looks its norms and score normalizers up by name in the registry; importing the
# families that register them also puts their code in the cache keys of trained models.
import normlab.attention
import normlab.layers  # noqa: F401
from normlab import functional as NF
from normlab._registry import get
from normlab.attention.depth import AttnResidual, DepthBlock
from normlab.attention.mha import MultiheadAttention
from normlab.data.corpus import VOCAB
from normlab.layers.hypersphere import (
    LearnedScale,
    NGPTBlock,
    NormalizedLinear,
    renormalize_weights_,
    unit_rows_,
)
from normlab.models.gpt_adapter import TinyGPTAdapter
from normlab.models.gpt_blocks import MLP, MoEMLP, add_norm
from normlab.probes.hooks import register_adapter

__all__ = ["RESIDUALS", "Block", "GPTConfig", "TinyGPT", "ln_scaling", "make_block"]

#: Residual schemes: "pre" (x + f(norm(x))), "post" (norm(x + f(x))), "attnres" (each
#: sublayer reads a learned softmax mix over all earlier outputs, see
#: :mod:`normlab.attention.depth`), "oasis" (attnres plus the null signal of the attention
#: in the depth routing; pair it with ``score="softmax1"``) and "ngpt" (nGPT).
RESIDUALS = ("pre", "post", "attnres", "oasis", "ngpt")
DEPTH_RESIDUALS = ("attnres", "oasis")


@dataclass(frozen=True)
class GPTConfig:
    """Architecture of a :class:`TinyGPT`.

    Attributes:
        d_model: width.
        n_layers: number of blocks.
        n_heads: attention heads per block.
        context: maximum sequence length.
        mlp_ratio: hidden width of the MLP over ``d_model``.
        norm: registered norm used in every block (and before the head, unless
            ``final_norm`` says otherwise).
        norm_kwargs: extra arguments of the norm.
        final_norm: registered norm before the head (no ``norm_kwargs``); ``None`` for
            ``norm``.
        score: registered attention score normalizer.
        score_kwargs: extra arguments of the score normalizer.
        residual: one of :data:`RESIDUALS`.
        gated_attention: per-head sigmoid output gates (Bondarenko et al., 2023).
        kv_heads: key/value heads (grouped-query attention); ``None`` for ``n_heads``.
        moe_experts: replace each MLP by a top-k mixture of this many experts (0: dense).
        moe_top_k: experts active per token.
        ln_scaling: scale each block norm's output by ``1/sqrt(layer + 1)`` (LayerNorm
            Scaling against the curse of depth).
        qk_norm: RMS-normalize each head's queries and keys (nGPT blocks always use their
            own unit-norm version).
        null_beta_init: with ``residual="oasis"``, the initial raw null coupling ``b`` of
            every depth router (``beta = softplus(b)``; -5 gives beta = 0.007).
        bias: biases in linear layers.
        vocab: vocabulary size (bytes plus BOS).
        loops: run the stack of ``n_layers`` shared blocks this many times (a Looped
            Transformer; 1 is an ordinary model). Every loop after the first starts with
            input injection, ``h <- h + e`` (``e`` the embedding output). Pre/post only.
        loop_signal: Fully Looped Architecture (normlab's reading of the paper, which is
            not public): the inter-loop signal reaches every layer, not only the loop's
            entry: in loop ``k >= 1`` block ``l`` reads ``(h + h_l^(k-1)) / 2``, the mean of
            the running stream and the stream that entered block ``l`` in the previous
            loop (parameter-free; a convex mix does not grow the residual across loops).
        attention_injection: Attention Injection (normlab's reading; the paper says only
            that it "reuses the existing attention block" and is parameter-free): the
            standard input injection is kept and the embedding is also injected through the
            first block's existing attention, ``h <- h + e + attn_0(norm1_0(e))`` at every
            loop after the first. (An earlier reading replaced the injection by the
            attention term, dropping ``h + e``.)
    """

    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    context: int = 128
    mlp_ratio: int = 4
    norm: str = "layernorm"
    norm_kwargs: dict[str, Any] = field(default_factory=dict)
    final_norm: str | None = None
    score: str = "softmax"
    score_kwargs: dict[str, Any] = field(default_factory=dict)
    residual: str = "pre"
    gated_attention: bool = False
    kv_heads: int | None = None
    moe_experts: int = 0
    moe_top_k: int = 2
    ln_scaling: bool = False
    qk_norm: bool = False
    null_beta_init: float = -5.0
    bias: bool = True
    vocab: int = VOCAB
    loops: int = 1
    loop_signal: bool = False
    attention_injection: bool = False

    def __post_init__(self) -> None:
        if self.loops < 1:
            raise ValueError(f"loops must be >= 1, got {self.loops}.")
        if self.loops > 1 and self.residual not in ("pre", "post"):
            raise ValueError(f"loops > 1 needs residual 'pre' or 'post', got {self.residual!r}.")
        if self.residual not in RESIDUALS:
            raise ValueError(f"residual must be one of {RESIDUALS}, got {self.residual!r}.")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model}; change one of them."
            )
        for name in (self.norm, self.final_norm or self.norm):
            if get(name).kind != "norm":
                raise ValueError(f"{name!r} is not a registered norm method.")
        if get(self.score).kind != "score":
            raise ValueError(f"score={self.score!r} is not a registered score method.")
        if self.residual == "ngpt" and self.moe_experts:
            raise ValueError("residual='ngpt' has no MoE variant; set moe_experts=0.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _attention(config: GPTConfig, **options: Any) -> MultiheadAttention:
    """The causal attention of a block of ``config``; ``options`` are the block kind's own."""
    return MultiheadAttention(
        config.d_model,
        config.n_heads,
        kv_heads=config.kv_heads,
        score=config.score,
        score_kwargs=config.score_kwargs,
        gated=config.gated_attention,
        causal=True,
        **options,
    )


class Block(nn.Module):
    """One transformer block: attention then MLP, each with a norm and a residual."""

    def __init__(self, config: GPTConfig, index: int) -> None:
        super().__init__()
        d = config.d_model
        self.residual = config.residual
        self.norm_scale = 1.0 / math.sqrt(index + 1) if config.ln_scaling else 1.0
        self.norm1 = get(config.norm).create(d, **config.norm_kwargs)
        self.attn = _attention(config, bias=config.bias, qk_norm="rms" if config.qk_norm else None)
        self.norm2 = get(config.norm).create(d, **config.norm_kwargs)
        hidden = config.mlp_ratio * d
        self.mlp = (
            MoEMLP(d, hidden, experts=config.moe_experts, top_k=config.moe_top_k, bias=config.bias)
            if config.moe_experts
            else MLP(d, hidden, bias=config.bias)
        )

    def forward(
        self, h: torch.Tensor, *, return_probs: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.residual == "pre":
            out = self.attn(self.norm1(h) * self.norm_scale, return_probs=return_probs)
            a, probs = out if return_probs else (out, None)
            y, h = add_norm(self.norm2, a, h)  # h + a and norm2 of it, fused
            h = h + self.mlp(y * self.norm_scale)
        else:
            out = self.attn(h, return_probs=return_probs)
            a, probs = out if return_probs else (out, None)
            h = self.norm1(h + a) * self.norm_scale
            h = self.norm2(h + self.mlp(h)) * self.norm_scale
        return h, probs


def make_block(config: GPTConfig, index: int) -> nn.Module:
    """The block at depth ``index`` for ``config.residual``."""
    d = config.d_model
    if config.residual == "ngpt":
        attn = _attention(
            config, scale=math.sqrt(d // config.n_heads), qk_norm="l2", normalized=True
        )
        # u and v share the width so the MLP has the parameters of a 2-matrix one
        return NGPTBlock(d, attn=attn, hidden=max(1, 2 * config.mlp_ratio * d // 3))
    block = Block(config, index)
    if config.residual in DEPTH_RESIDUALS:
        return DepthBlock(
            d,
            norm1=block.norm1,
            attn=block.attn,
            norm2=block.norm2,
            mlp=block.mlp,
            null_coupling=config.residual == "oasis",
            beta_init=config.null_beta_init,
            norm_scale=block.norm_scale,
        )
    return block


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
        self.blocks = nn.ModuleList(make_block(config, i) for i in range(config.n_layers))
        self.ngpt = config.residual == "ngpt"
        self.depth = config.residual in DEPTH_RESIDUALS
        if self.ngpt:  # no norm layers; logits s_z * (E h) with unit-norm rows of E
            self.head = NormalizedLinear(d, config.vocab, norm_dim="in")
            self.s_z = LearnedScale(config.vocab, init=1.0, scale=1.0 / math.sqrt(d))
        else:
            self.norm_f = (
                get(config.norm).create(d, **config.norm_kwargs)
                if config.final_norm is None
                else get(config.final_norm).create(d)
            )
            self.head = nn.Linear(d, config.vocab, bias=False)
        if self.depth:  # the head reads a depth mix over every sublayer output too
            self.route_final = AttnResidual(
                d, null_coupling=config.residual == "oasis", beta_init=config.null_beta_init
            )
        self.apply(self._init)
        self.after_step()

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
        states, probs = self.trunk(idx, layers=layers, return_probs=return_probs)
        logits = self.readout(states[-1])
        return (logits, probs) if return_probs else logits

    def trunk(
        self,
        idx: torch.Tensor,
        *,
        layers: Sequence[int] | None = None,
        return_probs: bool = False,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The hidden states entering each run block, then the one the head reads.

        ``states[i]`` is the input of the ``i``-th run block (``states[0]`` the embedding
        output) and ``states[-1]`` the final hidden state, so ``readout(states[-1])`` gives the
        logits. Probes (:mod:`normlab.probes.hooks`) read the residual stream from here.

        Returns:
            ``(states, probs)``: ``len(run blocks) + 1`` tensors ``(batch, tokens, d_model)``,
            and each run block's attention probabilities (empty unless asked).
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must be (batch, tokens), got shape {tuple(idx.shape)}.")
        n = idx.shape[1]
        if n > self.config.context:
            raise ValueError(f"Sequence of {n} tokens exceeds context {self.config.context}.")
        h = self.embed(idx) + self.pos(torch.arange(n, device=idx.device))
        order = range(len(self.blocks)) if layers is None else layers
        if self.ngpt:
            h = NF.l2_normalize(h)
        if self.depth:
            values, nulls = [h], [torch.zeros_like(h[..., 0])]
            states, all_probs = [], []
            for i in order:
                state, probs = self.blocks[i](values, nulls, return_probs=return_probs)
                states.append(state)
                if probs is not None:
                    all_probs.append(probs)
            states.append(self.route_final(values, nulls))
            return states, all_probs
        states, all_probs = [h], []
        if self.config.loops > 1:
            return self._looped(h, list(order), return_probs)
        for i in order:
            h, probs = self.blocks[i](h, return_probs=return_probs)
            states.append(h)
            if probs is not None:
                all_probs.append(probs)
        return states, all_probs

    def _looped(
        self, e: torch.Tensor, order: list[int], return_probs: bool
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The looped trunk (see ``GPTConfig.loops``): ``loops x len(order)`` block runs."""
        cfg, h = self.config, e
        states, all_probs = [e], []
        previous: list[torch.Tensor] = []
        for k in range(cfg.loops):
            if k > 0:
                h = h + e
                if cfg.attention_injection:
                    first = self.blocks[order[0]]
                    h = h + first.attn(first.norm1(e))
            inputs = []
            for pos, i in enumerate(order):
                if cfg.loop_signal and previous:
                    h = 0.5 * (h + previous[pos])
                inputs.append(h)
                h, probs = self.blocks[i](h, return_probs=return_probs)
                states.append(h)
                if probs is not None:
                    all_probs.append(probs)
            previous = inputs
        return states, all_probs

    @torch.no_grad()
    def keys_values(
        self, idx: torch.Tensor, *, layers: Sequence[int] | None = None
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The keys and values each run block's attention computes on ``idx``.

        A forward pre-hook on every block's attention reads its input, which
        :meth:`MultiheadAttention.project <normlab.attention.MultiheadAttention.project>`
        turns into what the attention attends over (hooks removed afterwards). To run
        attention over substituted keys and values (a quantized cache), pass them to the
        block's ``attn.attend``.

        Args:
            idx: token ids ``(batch, tokens)``.
            layers: run these blocks in this order (as in :meth:`forward`).

        Returns:
            One ``(k, v)`` per attention call, in run order, each
            ``(batch, heads, tokens, head_dim)``.

        Examples:
            >>> import torch
            >>> model = TinyGPT(GPTConfig(d_model=16, n_layers=2, n_heads=2, context=8))
            >>> kv = model.keys_values(torch.randint(0, 256, (3, 8)))
            >>> len(kv), kv[0][0].shape
            (2, torch.Size([3, 2, 8, 8]))
        """
        calls: list[tuple[MultiheadAttention, torch.Tensor]] = []
        handles = [
            block.attn.register_forward_pre_hook(lambda attn, args: calls.append((attn, args[0])))
            for block in self.blocks
        ]
        try:
            self.trunk(idx, layers=layers)
        finally:
            for handle in handles:
                handle.remove()
        return [attn.project(x)[1:] for attn, x in calls]

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """Logits from a final hidden state: ``head(norm_f(h))``, or ``s_z * head(h)`` (nGPT)."""
        if self.ngpt:
            return self.head(h) * self.s_z()
        return self.head(self.norm_f(h))

    def after_step(self) -> None:
        """Hook the trainer calls after every optimizer step (constraint projections).

        nGPT puts every weight vector and embedding row back on the unit sphere.
        """
        if self.ngpt:
            renormalize_weights_(self)
            unit_rows_(self.embed.weight)
            unit_rows_(self.pos.weight)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def ln_scaling(config: GPTConfig) -> GPTConfig:
    """The same config with LayerNorm-Scaling on (``1/sqrt(l + 1)`` on each block norm).

    LayerNorm-Scaling is the curse-of-depth paper's remedy (``paper("curse-of-depth")``).

    Raises:
        TypeError: when ``config`` is not a :class:`GPTConfig`.
    """
    if not isinstance(config, GPTConfig):
        raise TypeError(f"ln_scaling takes a GPTConfig, got {type(config).__name__}.")
    return replace(config, ln_scaling=True)


# Probes learn TinyGPT's layout from this adapter (they never import the model).
register_adapter(TinyGPT, TinyGPTAdapter)
