"""Attention sinks: Gu et al.'s sink score and the attention mass on the first token.

For a layer's attention ``A`` (queries x keys) and a key position ``k``, Gu et al. (2025)
average the attention that later queries give to ``k``:
``alpha_k = mean_{i >= k} A[i, k]``; a (layer, head) pair has a sink at ``k`` when
``alpha_k > eps`` (eps = 0.3), and the sink score is the fraction of pairs that have one,
with ``k`` the first token. The plain first-token mass, ``mean_i A[i, 0]`` over queries,
layers and heads, is reported beside it (with ``k = 0`` it equals the mean ``alpha_0``).
Rows of a Softmax1 head may sum to less than 1; the numbers are taken as they are.
Non-finite attention (a model with NaN weights) makes the sink score NaN, never 0.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from normlab.probes.hooks import adapt
from normlab.probes.outliers import _strict

__all__ = ["SinkReport", "eager_attention", "sink_alpha", "sink_stats"]


def sink_alpha(probs: torch.Tensor, key: int = 0) -> torch.Tensor:
    """``alpha_k = mean_{i >= k} A[i, k]`` per head, averaged over the batch.

    Args:
        probs: attention probabilities ``(batch, heads, queries, keys)``.
        key: the key position ``k``; negative counts from the end (-1: the last token,
            e.g. BERT's [SEP] in an unpadded batch).

    Returns:
        ``(heads,)`` in float64.
    """
    if probs.dim() != 4:
        raise ValueError(
            f"sink_alpha expects (batch, heads, queries, keys), got {tuple(probs.shape)}."
        )
    n = min(probs.shape[-2:])
    if not -n <= key < n:
        raise ValueError(f"key {key} is outside the {probs.shape[-1]} key positions.")
    key = key % n
    column = probs.detach()[:, :, key:, key].double()
    return column.mean(dim=(0, 2))


@dataclass(frozen=True)
class SinkReport:
    """Attention-sink statistics of a model (padding excluded).

    Attributes:
        sink_score: fraction of (layer, head) pairs with ``alpha_k > threshold``.
        first_token_mass: attention on each sequence's first real token, averaged over its
            real queries, then over sequences, heads and layers.
        alpha: per layer, per head ``alpha_k``.
        threshold: the ``eps`` used.
        key: the key position ``k`` (counted among real tokens; negative from the end).
        special_mass: per special token (name), the mean attention mass that real queries
            put on the positions holding it; empty unless ``special_tokens`` was given.
    """

    sink_score: float
    first_token_mass: float
    alpha: tuple[tuple[float, ...], ...]
    threshold: float
    key: int
    special_mass: dict[str, float] = field(default_factory=dict)

    def nonfinite_layers(self) -> list[int]:
        """Layers with a non-finite ``alpha`` (NaN attention, e.g. from NaN weights)."""
        return [i for i, row in enumerate(self.alpha) if not all(math.isfinite(a) for a in row)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with every non-finite number as ``None`` (strict JSON)."""
        return _strict(
            {
                "sink_score": self.sink_score,
                "first_token_mass": self.first_token_mass,
                "alpha": [list(a) for a in self.alpha],
                "threshold": self.threshold,
                "key": self.key,
                "special_mass": dict(self.special_mass),
                "nonfinite_layers": self.nonfinite_layers(),
            }
        )


@contextlib.contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Switch a Hugging Face model to eager attention (the only kernel that returns
    probabilities) for the block, and restore its own implementation afterwards."""
    config = getattr(model, "config", None)
    old = getattr(config, "_attn_implementation", None)
    switch = callable(getattr(model, "set_attn_implementation", None)) and old not in (
        None,
        "eager",
    )
    if switch:
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if switch:
            model.set_attn_implementation(old)


def _layer_stats(
    p: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor, key: int, special: Mapping
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per head, averaged over sequences: ``alpha_k``, the first-token mass and the mass on
    each special token, each a mean over the sequence's real queries."""
    p = p.detach().double()
    heads = p.shape[1]
    alpha, first = torch.zeros(heads, dtype=torch.float64), torch.zeros(heads, dtype=torch.float64)
    spec = torch.zeros(len(special), heads, dtype=torch.float64)
    seqs = 0
    for b in range(p.shape[0]):
        real = mask[b].nonzero().squeeze(1)
        if real.numel() == 0:
            continue
        if not -len(real) <= key < len(real):
            raise ValueError(f"key {key} is outside the {len(real)} real tokens of a sequence.")
        k = int(real[key])
        a = p[b][:, real][:, :, real]  # (heads, real queries, real keys)
        kk = int((real == k).nonzero())
        alpha += a[:, kk:, kk].mean(-1)
        first += a[:, :, 0].mean(-1)
        for j, ids in enumerate(special.values()):
            on = torch.isin(tokens[b, real], torch.as_tensor(ids))
            spec[j] += a[:, :, on].sum(-1).mean(-1)
        seqs += 1
    n = max(seqs, 1)
    return alpha / n, first / n, spec / n


def sink_stats(
    model: nn.Module,
    tokens: torch.Tensor | Iterable[torch.Tensor],
    *,
    attention_mask: torch.Tensor | Iterable[torch.Tensor] | None = None,
    threshold: float = 0.3,
    key: int = 0,
    special_tokens: Mapping[str, int | Sequence[int]] | None = None,
) -> SinkReport:
    """Sink score and first-token attention mass of ``model``; the model is unchanged.

    A Hugging Face model with another attention kernel (SDPA, the default) is switched to
    eager attention for the probe's forward passes and switched back afterwards. Padding
    is excluded: ``alpha_k`` and the masses average over real queries of each sequence,
    and key positions count real tokens (``key=0`` is the first real token even with left
    padding, ``key=-1`` the last, e.g. [SEP]).

    Args:
        model: any model :func:`~normlab.probes.hooks.adapt` understands.
        tokens: a ``(batch, tokens)`` id tensor or an iterable of them.
        attention_mask: 1 for real tokens, 0 for padding, shaped like ``tokens``.
        threshold: ``eps`` in ``alpha_k > eps`` (0.3 in Gu et al.).
        key: the key position ``k`` (0: the first token).
        special_tokens: name -> token id(s) (e.g. ``{"[CLS]": 101, "[SEP]": 102}``); the
            report gives the attention mass on each.
    """
    adapter = adapt(model)
    xs = [tokens] if isinstance(tokens, torch.Tensor) else list(tokens)
    if attention_mask is None:
        ms = [None] * len(xs)
    else:
        ms = [attention_mask] if isinstance(attention_mask, torch.Tensor) else list(attention_mask)
        if len(ms) != len(xs) or any(m.shape != x.shape for m, x in zip(ms, xs, strict=True)):
            raise ValueError("attention_mask must match tokens: one mask per batch, same shape.")
    special = {
        k: [v] if isinstance(v, int) else list(v) for k, v in (special_tokens or {}).items()
    }
    parts = []
    weights = []
    with eager_attention(adapter.model):
        for batch, mask in zip(xs, ms, strict=True):
            trace = adapter.trace(batch, attention=True, attention_mask=mask)
            real = torch.ones_like(batch, dtype=torch.bool) if mask is None else mask.bool()
            parts.append([_layer_stats(p, batch, real, key, special) for p in trace.attention])
            weights.append(float(real.any(1).sum()))
    w = torch.tensor(weights, dtype=torch.float64)
    w = w / w.sum()
    alpha = sum(wi * torch.stack([s[0] for s in ps]) for wi, ps in zip(w, parts, strict=True))
    first = sum(wi * torch.stack([s[1] for s in ps]) for wi, ps in zip(w, parts, strict=True))
    spec = sum(wi * torch.stack([s[2] for s in ps]) for wi, ps in zip(w, parts, strict=True))
    score = float((alpha > threshold).double().mean())  # NaN > eps is False: say NaN instead
    return SinkReport(
        sink_score=score if bool(alpha.isfinite().all()) else float("nan"),
        first_token_mass=float(first.mean()),
        alpha=tuple(tuple(float(v) for v in row) for row in alpha),
        threshold=threshold,
        key=key,
        special_mass={name: float(spec[:, j].mean()) for j, name in enumerate(special)},
    )
