"""Teacher normalization against collapse in self-distillation, and a collapse diagnostic.

Deep-clustering self-distillation trains a student ``p_s(k|x)`` towards a teacher ``p_t(k|x)``
over ``K`` clusters; without a constraint the teacher collapses to one cluster. Two
normalizations of the teacher's logits ``z`` (batch ``(n, K)``):

- **Inverse cluster prior** (the seed's exact form): divide the teacher's assignment by the
  batch cluster prior ``pi(k) = E_x p(k|x)`` and renormalise::

      q(k|x) = (p(k|x) / pi(k)) / sum_j p(j|x) / pi(j),   p = softmax(z / tau_t)

- **Centering** (DINO): ``q = softmax((z - c) / tau_t)`` with an EMA center
  ``c <- m c + (1 - m) mean_x z`` (m = 0.9, tau_t = 0.04, student tau 0.1 in DINO). By
  Jensen, ``log pi(k) >= E_x log p(k|x) = E_x z_k / tau_t - const``, so dividing by
  ``exp(E log p)`` instead of ``pi`` is exactly subtracting the batch-mean logit: centering is
  the Jensen bound of prior division (the seed's result).

Papers: {ssl}; {dino}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from normlab._records import Record
from normlab.papers import paper

__all__ = [
    "MODES",
    "ClusterUsage",
    "TeacherNorm",
    "center_update",
    "centered_teacher",
    "cluster_usage",
    "nmi",
    "prior_normalize",
]

#: Teacher normalizations :class:`TeacherNorm` offers.
MODES: tuple[str, ...] = ("none", "center", "prior")

__doc__ = __doc__.format(ssl=paper("ssl"), dino=paper("dino"))


def _check_logits(z: torch.Tensor) -> None:
    if z.dim() < 2:
        raise ValueError(f"Teacher logits must be (batch, clusters), got shape {tuple(z.shape)}.")


def center_update(
    center: torch.Tensor, logits: torch.Tensor, *, momentum: float = 0.9
) -> torch.Tensor:
    """DINO's EMA center: ``m c + (1 - m) mean_batch z`` (a new tensor)."""
    _check_logits(logits)
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}.")
    batch = logits.detach().reshape(-1, logits.shape[-1]).mean(dim=0)
    return center * momentum + batch * (1.0 - momentum)


def centered_teacher(
    logits: torch.Tensor, center: torch.Tensor, *, temperature: float = 0.04
) -> torch.Tensor:
    """DINO's teacher assignment ``softmax((z - c) / tau_t)`` over the last dim."""
    _check_logits(logits)
    return torch.softmax((logits - center) / temperature, dim=-1)


def prior_normalize(probs: torch.Tensor, *, eps: float = 1e-12) -> torch.Tensor:
    """Divide assignments ``p(k|x)`` (batch ``(n, K)``) by the batch prior ``pi(k) = E p(k|x)``
    and renormalise over ``k`` (the seed's inverse-cluster-prior normalization).

    ``eps`` guards clusters with ``pi(k) = 0`` (their ``p(k|x)`` are all 0, so they stay 0).
    """
    _check_logits(probs)
    flat = probs.reshape(-1, probs.shape[-1])
    prior = flat.mean(dim=0).clamp_min(eps)
    q = probs / prior
    return q / q.sum(dim=-1, keepdim=True)


class TeacherNorm(nn.Module):
    """Teacher assignment from logits with no normalization, EMA centering or prior division.

    ``forward(z)`` returns ``q(k|x)``: ``softmax(z / tau_t)`` (``"none"``), DINO's
    ``softmax((z - c) / tau_t)`` with the center updated after use in training mode
    (``"center"``), or :func:`prior_normalize` of ``softmax(z / tau_t)`` (``"prior"``).

    Args:
        clusters: number of clusters ``K`` (the last dim of the logits).
        mode: one of :data:`MODES`.
        temperature: teacher temperature ``tau_t``.
        momentum: EMA momentum of the center.
    """

    center: torch.Tensor

    def __init__(
        self,
        clusters: int,
        *,
        mode: str = "center",
        temperature: float = 0.04,
        momentum: float = 0.9,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        self.clusters, self.mode = clusters, mode
        self.temperature, self.momentum = temperature, momentum
        self.register_buffer("center", torch.zeros(clusters, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        self.center.zero_()

    def extra_repr(self) -> str:
        return (
            f"{self.clusters}, mode={self.mode!r}, temperature={self.temperature:g}, "
            f"momentum={self.momentum:g}"
        )

    @torch.no_grad()
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        _check_logits(logits)
        if logits.shape[-1] != self.clusters:
            raise ValueError(
                f"Expected {self.clusters} clusters in the last dim, got {logits.shape[-1]}."
            )
        if self.mode == "center":
            q = centered_teacher(logits, self.center, temperature=self.temperature)
            if self.training:
                self.center.copy_(center_update(self.center, logits, momentum=self.momentum))
            return q
        p = torch.softmax(logits / self.temperature, dim=-1)
        return prior_normalize(p) if self.mode == "prior" else p


@dataclass(frozen=True)
class ClusterUsage(Record):
    """How many clusters a batch of assignments uses.

    Attributes:
        prior: ``pi(k) = E_x p(k|x)``.
        entropy: ``H(pi)`` in nats (0 when collapsed, ``log K`` when uniform).
        effective_clusters: ``exp(H(pi))`` (1 when collapsed, ``K`` when uniform).
    """

    prior: tuple[float, ...]
    entropy: float
    effective_clusters: float


@torch.no_grad()
def cluster_usage(probs: torch.Tensor, *, hard: bool = False) -> ClusterUsage:
    """Cluster-usage entropy and effective number of clusters of assignments ``(n, K)``.

    With ``hard=True`` each row counts for its argmax cluster only.
    """
    _check_logits(probs)
    flat = probs.reshape(-1, probs.shape[-1]).double()
    if hard:
        flat = torch.nn.functional.one_hot(flat.argmax(-1), flat.shape[-1]).double()
    prior = flat.mean(dim=0)
    prior = prior / prior.sum()
    entropy = float(-(prior * prior.clamp_min(1e-300).log()).sum())
    return ClusterUsage(tuple(prior.tolist()), entropy, math.exp(entropy))


def nmi(labels: torch.Tensor, assigned: torch.Tensor) -> float:
    """Normalized mutual information between two labelings of the same samples.

    ``NMI = I(a; b) / ((H(a) + H(b)) / 2)`` (the arithmetic normalization, scikit-learn's
    default): 1 when the cluster assignment determines the labels up to renaming, 0 when it
    is independent of them; 1 when both labelings have a single class (zero entropy).

    Args:
        labels: integer labels ``(n,)``, the ground truth.
        assigned: integer cluster assignments ``(n,)`` (e.g. ``probs.argmax(-1)``).

    Examples:
        >>> import torch
        >>> labels = torch.tensor([0, 0, 1, 1, 2, 2])
        >>> nmi(labels, torch.tensor([2, 2, 0, 0, 1, 1]))  # the same partition, renamed
        1.0
        >>> round(nmi(labels, torch.tensor([0, 1, 0, 1, 0, 1])), 6)  # independent of it
        0.0
    """
    a, b = labels.long(), assigned.long()
    joint = torch.zeros(int(a.max()) + 1, int(b.max()) + 1, dtype=torch.float64)
    joint.index_put_((a, b), torch.ones(len(a), dtype=torch.float64), accumulate=True)
    joint /= joint.sum()
    pa, pb = joint.sum(1), joint.sum(0)

    def h(p: torch.Tensor) -> float:
        p = p[p > 0]
        return float(-(p * p.log()).sum())

    nz = joint > 0
    mi = float((joint[nz] * (joint[nz] / (pa[:, None] * pb[None, :])[nz]).log()).sum())
    denom = (h(pa) + h(pb)) / 2
    return mi / denom if denom > 0 else 1.0
