"""Layerwise representation geometry for ID vs OOD inputs, and task-aware layer pruning.

Seed paper "tale": task-aware layer pruning (TALE) improves out-of-distribution (OOD)
accuracy but not in-distribution (ID) accuracy, because OOD inputs distort the layerwise
norm and pairwise-distance profiles a task induces, and pruning moves them back. The
follow-up's profile definitions are not public; normlab's (documented as its own):

- norm profile ``N_l = mean_i ||h_l^i||`` (per sample; per token for ``(B, T, d)`` states);
- pairwise-distance profile ``D_l = mean_{a<b} ||h_l^a - h_l^b||`` over (sub-sampled) samples;
- distortion ``|P_OOD - P_ID| / P_ID`` per layer, for ``P`` in ``{N, D}``.

TALE (greedy, as in its public code): start from the baseline validation score ``a0``; each
round remove the one remaining layer whose removal gives the best score; stop when that
best falls below ``a0 - tolerance`` (or nothing is left to remove). The selected model is
the best-scoring configuration on the path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from normlab._records import Record

__all__ = [
    "GeometryProfile",
    "TaleResult",
    "TaleStep",
    "distortion",
    "layer_profile",
    "tale_prune",
]


@dataclass(frozen=True)
class GeometryProfile(Record):
    """Per-layer mean norm and mean pairwise distance of representations.

    Attributes:
        norms: ``N_l`` for each layer.
        distances: ``D_l`` for each layer.
    """

    norms: tuple[float, ...]
    distances: tuple[float, ...]


def _points(h: torch.Tensor) -> torch.Tensor:
    return h.reshape(-1, h.shape[-1]).double()


@torch.no_grad()
def layer_profile(
    states: Sequence[torch.Tensor], *, max_points: int = 256, seed: int = 0
) -> GeometryProfile:
    """Norm and pairwise-distance profiles of per-layer states (``(N, d)`` or ``(B, T, d)``).

    Args:
        states: one tensor per layer (e.g. ``Trace.residual`` or
            :meth:`ResidualMLP.hidden_states`).
        max_points: pairwise distances use at most this many points per layer (the same
            random subset for every layer).
        seed: seeds that subset.
    """
    if not states:
        raise ValueError("layer_profile needs at least one layer's states.")
    n = _points(states[0]).shape[0]
    generator = torch.Generator().manual_seed(seed)
    pick = torch.randperm(n, generator=generator)[:max_points]
    norms, dists = [], []
    for h in states:
        p = _points(h)
        norms.append(float(p.norm(dim=-1).mean()))
        q = p[pick]
        d = torch.cdist(q, q)
        m = q.shape[0]
        dists.append(float(d.sum() / max(1, m * (m - 1))))
    return GeometryProfile(tuple(norms), tuple(dists))


def distortion(
    id_profile: GeometryProfile, ood_profile: GeometryProfile
) -> dict[str, list[float]]:
    """Per-layer ``|P_OOD - P_ID| / P_ID`` for the norm and the distance profiles."""
    if len(id_profile.norms) != len(ood_profile.norms):
        raise ValueError("The two profiles must cover the same layers.")

    def rel(a: Sequence[float], b: Sequence[float]) -> list[float]:
        return [abs(y - x) / max(abs(x), 1e-30) for x, y in zip(a, b, strict=True)]

    return {
        "norms": rel(id_profile.norms, ood_profile.norms),
        "distances": rel(id_profile.distances, ood_profile.distances),
    }


@dataclass(frozen=True)
class TaleStep:
    """One TALE round: the layer removed and the validation score without it.

    Attributes:
        removed: the layer index removed this round.
        kept: the layers kept afterwards, in order.
        score: the validation score of ``kept``.
    """

    removed: int
    kept: tuple[int, ...]
    score: float


@dataclass(frozen=True)
class TaleResult(Record):
    """The greedy TALE path and its best configuration.

    Attributes:
        baseline: the score with all layers.
        steps: the rounds taken, in order.
        best_kept: the best-scoring configuration on the path (all layers if none beat it).
        best_score: its score.
        evaluations: how many configurations were scored.
    """

    baseline: float
    steps: tuple[TaleStep, ...]
    best_kept: tuple[int, ...]
    best_score: float
    evaluations: int

    @property
    def removed(self) -> tuple[int, ...]:
        """Layers absent from :attr:`best_kept`, in the order TALE removed them."""
        return tuple(s.removed for s in self.steps if s.removed not in self.best_kept)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "removed": list(self.removed)}


def tale_prune(
    score: Callable[[Sequence[int]], float],
    n_layers: int,
    *,
    tolerance: float = 0.08,
    min_layers: int = 1,
) -> TaleResult:
    """Greedy task-aware layer pruning (TALE) driven by a validation score (higher is better).

    Args:
        score: ``score(kept_layers) -> float`` on the validation task, e.g. accuracy, or
            ``-log10(MSE)`` for regression; it must not change the model.
        n_layers: layers of the full model.
        tolerance: stop once the best removal scores below ``baseline - tolerance``.
        min_layers: never go below this many layers.

    Returns:
        A :class:`TaleResult`.
    """
    kept = list(range(n_layers))
    baseline = float(score(kept))
    best_kept, best_score, evaluations = tuple(kept), baseline, 1
    steps = []
    while len(kept) > min_layers:
        trials = []
        for layer in kept:
            candidate = [i for i in kept if i != layer]
            trials.append((float(score(candidate)), layer, candidate))
            evaluations += 1
        value, layer, candidate = max(trials, key=lambda t: t[0])
        if value < baseline - tolerance:
            break
        kept = candidate
        steps.append(TaleStep(layer, tuple(kept), value))
        if value > best_score:
            best_kept, best_score = tuple(kept), value
    return TaleResult(baseline, tuple(steps), best_kept, best_score, evaluations)
