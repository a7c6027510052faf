"""Multi-head self-attention with a pluggable score normalizer and optional output gating."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab import functional as NF
from normlab import kernels as K
from normlab._checks import check_trailing_shape
from normlab.attention.scores import ScoreFn, score_norm
from normlab.layers.hypersphere import LearnedScale, NormalizedLinear

__all__ = ["MultiheadAttention"]

#: Gate bias such that sigmoid(bias) = 0.25 at initialization (Bondarenko et al., 2023).
GATE_BIAS_INIT = math.log(0.25 / 0.75)
#: Query/key normalizations: per-head RMSNorm without weight, or nGPT's unit norm times a
#: learned per-channel scale ``s_qk`` (init 1, stored at ``1/sqrt(dim)``).
QK_NORMS = ("rms", "l2")


class MultiheadAttention(nn.Module):
    """Multi-head self-attention ``softmax-like(Q K^T * scale) V`` over ``(batch, tokens, dim)``.

    The score normalizer is any registered "score" method (``"softmax"``, ``"softmax1"``,
    ``"clipped-softmax"``, ...). With plain softmax and no probabilities requested, the
    computation goes through :func:`normlab.kernels.attention` (a fused CPU kernel for
    small head dimensions, else ``F.scaled_dot_product_attention``).

    Gated attention (Bondarenko et al., 2023) multiplies each head's output by
    ``sigmoid(x_h . g_h + b_h)``, a per-head linear gate on that head's slice of the input,
    initialised so the gate starts near 0.25: a head can then switch itself off without
    the large logits a "no-op" head otherwise needs.

    Args:
        dim: model width.
        heads: number of query heads; must divide ``dim``.
        kv_heads: number of key/value heads for grouped-query attention (must divide
            ``heads``); ``None`` for one per query head.
        score: score normalizer: a registry name, a function or a module.
        score_kwargs: hyperparameters of the score normalizer.
        gated: add the per-head output gate.
        causal: mask future tokens.
        bias: bias on the input and output projections.
        scale: score scale; ``None`` for ``1/sqrt(dim / heads)`` (nGPT uses
            ``sqrt(dim / heads)`` with unit-norm queries and keys).
        qk_norm: normalize each head's queries and keys: ``None``, "rms" (unit RMS, as in
            QK-norm) or "l2" (unit norm times ``s_qk``, as in nGPT).
        normalized: bias-free projections with unit-norm weight vectors along the model
            dimension (:class:`~normlab.layers.NormalizedLinear`), as in nGPT.

    Examples:
        >>> import torch
        >>> attn = MultiheadAttention(16, 4, score="softmax1", causal=True, gated=True)
        >>> y, p = attn(torch.randn(2, 5, 16), return_probs=True)
        >>> y.shape, p.shape
        (torch.Size([2, 5, 16]), torch.Size([2, 4, 5, 5]))
        >>> bool((p.triu(1) == 0).all()), bool((p.sum(-1) < 1).all())  # causal, null mass
        (True, True)
        >>> gqa = MultiheadAttention(16, 4, kv_heads=2)  # grouped-query attention
        >>> gqa.qkv.out_features  # 16 query channels, 2 x 4 for each of keys and values
        32
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        *,
        kv_heads: int | None = None,
        score: str | ScoreFn | nn.Module = "softmax",
        score_kwargs: dict[str, Any] | None = None,
        gated: bool = False,
        causal: bool = False,
        bias: bool = True,
        scale: float | None = None,
        qk_norm: str | None = None,
        normalized: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if qk_norm not in (None, *QK_NORMS):
            raise ValueError(f"qk_norm must be None or one of {QK_NORMS}, got {qk_norm!r}.")
        if heads <= 0 or dim % heads:
            raise ValueError(f"heads must be a positive divisor of dim={dim}, got {heads}.")
        kv_heads = heads if kv_heads is None else kv_heads
        if kv_heads <= 0 or heads % kv_heads:
            raise ValueError(
                f"kv_heads must be a positive divisor of heads={heads}, got {kv_heads}."
            )
        factory = {"device": device, "dtype": dtype}
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.kv_heads = kv_heads
        self.causal, self.gated = causal, gated
        self.scale = 1.0 / math.sqrt(self.head_dim) if scale is None else float(scale)
        self.score_name = score if isinstance(score, str) else None
        self.score = score_norm(score, **(score_kwargs or {}))
        self.qk_norm, self.normalized = qk_norm, normalized
        width = dim + 2 * kv_heads * self.head_dim
        if normalized:
            self.qkv = NormalizedLinear(dim, width, norm_dim="in", **factory)
            self.out = NormalizedLinear(dim, dim, norm_dim="out", **factory)
        else:
            self.qkv = nn.Linear(dim, width, bias=bias, **factory)
            self.out = nn.Linear(dim, dim, bias=bias, **factory)
        if qk_norm == "l2":
            self.s_qk = LearnedScale(dim, init=1.0, scale=1.0 / math.sqrt(dim), **factory)
        if gated:
            self.gate_weight = nn.Parameter(torch.empty(heads, self.head_dim, **factory))
            self.gate_bias = nn.Parameter(torch.empty(heads, **factory))
        self.reset_gate()

    def reset_gate(self) -> None:
        """Gate weights to small random values and the bias to ``logit(0.25)``."""
        if self.gated:
            nn.init.normal_(self.gate_weight, std=0.02)
            nn.init.constant_(self.gate_bias, GATE_BIAS_INIT)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, width = t.shape
        return t.view(b, n, width // self.head_dim, self.head_dim).transpose(1, 2)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-head queries, keys and values of ``x``, as the attention uses them.

        Keys and values of grouped-query attention are repeated to one per query head, and
        ``qk_norm`` is applied, so ``attend(*project(x))`` is the attention over ``x``. Read
        or replace the keys and values between the two (a quantized KV cache, a probe).

        Args:
            x: input of shape ``(batch, tokens, dim)``.

        Returns:
            ``(q, k, v)``, each ``(batch, heads, tokens, head_dim)``.

        Examples:
            >>> import torch
            >>> attn = MultiheadAttention(16, 4, kv_heads=2)
            >>> q, k, v = attn.project(torch.randn(2, 5, 16))
            >>> q.shape, bool((k[:, 0] == k[:, 1]).all())  # two query heads per key head
            (torch.Size([2, 4, 5, 4]), True)
        """
        kv = self.kv_heads * self.head_dim
        q, k, v = (self._split(t) for t in self.qkv(x).split([self.dim, kv, kv], dim=-1))
        if self.kv_heads != self.heads:
            repeat = self.heads // self.kv_heads
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        if self.qk_norm == "rms":
            q = NF.rms_norm(q, (self.head_dim,), eps=1e-6)
            k = NF.rms_norm(k, (self.head_dim,), eps=1e-6)
        elif self.qk_norm == "l2":
            s = self.s_qk().view(self.heads, 1, self.head_dim).to(q.dtype)
            q, k = NF.l2_normalize(q) * s, NF.l2_normalize(k) * s
        return q, k, v

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        return_probs: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Each head's output ``score(q k^T * scale) v``, before gating and projection.

        The queries are the last ``q.shape[-2]`` of the ``k.shape[-2]`` positions, as when
        new tokens attend over a KV cache: with ``causal``, query ``i`` sees keys up to
        position ``k.shape[-2] - q.shape[-2] + i``. The scores are computed explicitly
        (no fused kernel), so any score normalizer and substituted keys and values work.

        Args:
            q: queries ``(batch, heads, queries, head_dim)``.
            k: keys ``(batch, heads, keys, head_dim)``, ``keys >= queries`` when causal.
            v: values, the shape of ``k``.
            attn_mask: boolean, ``True`` where a query may attend to a key, broadcastable
                to ``(batch, heads, queries, keys)``; combined with the causal mask.
            return_probs: also return the normalized scores ``(batch, heads, queries, keys)``.

        Returns:
            The heads' outputs ``(batch, heads, queries, head_dim)``, and the probabilities
            if asked.

        Examples:
            >>> import torch
            >>> attn = MultiheadAttention(16, 4, causal=True)
            >>> x = torch.randn(1, 6, 16)
            >>> q, k, v = attn.project(x)
            >>> tail = attn.attend(q[..., 4:, :], k, v)  # the last two tokens over all six
            >>> torch.allclose(attn.output(tail, x[:, 4:]), attn(x)[:, 4:], atol=1e-6)
            True
        """
        if k.shape != v.shape or q.shape[:-2] != k.shape[:-2]:
            raise ValueError(
                "q, k and v must be (batch, heads, tokens, head_dim) with k and v of one "
                f"shape; got {tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}."
            )
        nq, nk = q.shape[-2], k.shape[-2]
        if self.causal and nq > nk:
            raise ValueError(f"causal attention needs keys >= queries, got {nk} < {nq}.")
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if self.causal or attn_mask is not None:
            scores = scores.masked_fill(~self._mask(nq, nk, attn_mask, q.device), float("-inf"))
        probs = self.score(scores)
        y = probs @ v
        return (y, probs) if return_probs else y

    def output(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The attention's output from the heads' outputs ``y``: gating, then projection.

        Args:
            y: the heads' outputs ``(batch, heads, queries, head_dim)`` (:meth:`attend`).
            x: the queries' inputs ``(batch, queries, dim)`` (the gate reads them).

        Returns:
            ``(batch, queries, dim)``.

        Examples:
            >>> import torch
            >>> attn = MultiheadAttention(16, 4, gated=True)
            >>> x = torch.randn(2, 3, 16)
            >>> torch.allclose(attn.output(attn.attend(*attn.project(x)), x), attn(x), atol=1e-6)
            True
        """
        if self.gated:
            xh = self._split(x)
            logits = torch.einsum("bhnd,hd->bhn", xh, self.gate_weight)
            gate = torch.sigmoid(logits + self.gate_bias[:, None])
            y = y * gate.unsqueeze(-1)
        return self.out(y.transpose(1, 2).reshape(x.shape))

    def _mask(
        self, nq: int, nk: int, attn_mask: torch.Tensor | None, device: torch.device
    ) -> torch.Tensor:
        keep = torch.ones(nq, nk, dtype=torch.bool, device=device)
        if self.causal:
            keep = keep.tril(nk - nq)
        return keep if attn_mask is None else keep & attn_mask.bool()

    def forward(
        self,
        x: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        return_probs: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend over the tokens of ``x``: ``output(attend(*project(x)), x)``.

        Args:
            x: input of shape ``(batch, tokens, dim)``.
            attn_mask: boolean, ``True`` where a query may attend to a key, broadcastable
                to ``(batch, heads, tokens, tokens)``; combined with the causal mask.
            return_probs: also return the normalized scores ``(batch, heads, tokens, tokens)``.

        Returns:
            The output ``(batch, tokens, dim)``, and the probabilities if asked.
        """
        if x.dim() != 3:
            raise ValueError(
                f"MultiheadAttention expects (batch, tokens, dim), got {tuple(x.shape)}."
            )
        check_trailing_shape(x, (self.dim,))
        n = x.shape[1]
        q, k, v = self.project(x)
        probs = None
        if self.score_name == "softmax" and not return_probs:
            if attn_mask is None:  # normlab's fused CPU kernel where it applies
                y = K.attention(q, k, v, causal=self.causal, scale=self.scale)
            else:
                mask = self._mask(n, n, attn_mask, x.device)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        else:
            y, probs = self.attend(q, k, v, attn_mask=attn_mask, return_probs=True)
        y = self.output(y, x)
        return (y, probs) if return_probs else y

    def extra_repr(self) -> str:
        extra = f", qk_norm={self.qk_norm!r}" if self.qk_norm else ""
        extra += ", normalized=True" if self.normalized else ""
        return (
            f"dim={self.dim}, heads={self.heads}, kv_heads={self.kv_heads}, "
            f"causal={self.causal}, gated={self.gated}, scale={self.scale:.4g}{extra}"
        )
