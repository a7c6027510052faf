"""Attention sinks: Gu et al.'s sink score and the attention mass on the first token.

For a layer's attention ``A`` (queries x keys) and a key position ``k``, Gu et al. (2025)
average the attention that later queries give to ``k``:
``alpha_k = mean_{i >= k} A[i, k]``; a (layer, head) pair has a sink at ``k`` when
``alpha_k > eps`` (eps = 0.3), and the sink score is the fraction of pairs that have one,
with ``k`` the first token. The plain first-token mass, ``mean_i A[i, 0]`` over queries,
layers and heads, is reported beside it (with ``k = 0`` it equals the mean ``alpha_0``).
Rows of a Softmax1 head may sum to less than 1; the numbers are taken as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab.probes.hooks import adapt

__all__ = ["SinkReport", "sink_alpha", "sink_stats"]


def sink_alpha(probs: torch.Tensor, key: int = 0) -> torch.Tensor:
    """``alpha_k = mean_{i >= k} A[i, k]`` per head, averaged over the batch.

    Args:
        probs: attention probabilities ``(batch, heads, queries, keys)``.
        key: the key position ``k``.

    Returns:
        ``(heads,)`` in float64.
    """
    if probs.dim() != 4:
        raise ValueError(
            f"sink_alpha expects (batch, heads, queries, keys), got {tuple(probs.shape)}."
        )
    if not 0 <= key < min(probs.shape[-2:]):
        raise ValueError(f"key {key} is outside the {probs.shape[-1]} key positions.")
    column = probs.detach()[:, :, key:, key].double()
    return column.mean(dim=(0, 2))


@dataclass(frozen=True)
class SinkReport:
    """Attention-sink statistics of a model.

    Attributes:
        sink_score: fraction of (layer, head) pairs with ``alpha_k > threshold``.
        first_token_mass: mean attention on the first token over layers, heads, queries.
        alpha: per layer, per head ``alpha_k``.
        threshold: the ``eps`` used.
        key: the key position ``k``.
    """

    sink_score: float
    first_token_mass: float
    alpha: tuple[tuple[float, ...], ...]
    threshold: float
    key: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "sink_score": self.sink_score,
            "first_token_mass": self.first_token_mass,
            "alpha": [list(a) for a in self.alpha],
            "threshold": self.threshold,
            "key": self.key,
        }


def sink_stats(
    model: nn.Module,
    tokens: torch.Tensor | Iterable[torch.Tensor],
    *,
    threshold: float = 0.3,
    key: int = 0,
) -> SinkReport:
    """Sink score and first-token attention mass of ``model``; the model is unchanged.

    Args:
        model: any model :func:`~normlab.probes.hooks.adapt` understands (Hugging Face
            models built with ``attn_implementation="eager"``).
        tokens: a ``(batch, tokens)`` id tensor or an iterable of them.
        threshold: ``eps`` in ``alpha_k > eps`` (0.3 in Gu et al.).
        key: the key position ``k`` (0: the first token).
    """
    adapter = adapt(model)
    batches = [tokens] if isinstance(tokens, torch.Tensor) else list(tokens)
    alphas: list[torch.Tensor] = []  # per batch: (layers, heads)
    first: list[torch.Tensor] = []
    weights: list[int] = []
    for batch in batches:
        trace = adapter.trace(batch, attention=True)
        alphas.append(torch.stack([sink_alpha(p, key) for p in trace.attention]))
        first.append(torch.stack([p.detach()[..., 0].double().mean() for p in trace.attention]))
        weights.append(batch.shape[0])
    w = torch.tensor(weights, dtype=torch.float64)
    alpha = (torch.stack(alphas) * w[:, None, None]).sum(0) / w.sum()
    mass = (torch.stack(first) * w[:, None]).sum(0) / w.sum()
    return SinkReport(
        sink_score=float((alpha > threshold).double().mean()),
        first_token_mass=float(mass.mean()),
        alpha=tuple(tuple(float(v) for v in row) for row in alpha),
        threshold=threshold,
        key=key,
    )
