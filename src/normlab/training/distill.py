"""A teacher-student deep-clustering toy: self-distillation on a Gaussian mixture.

Data: ``clusters`` isotropic Gaussians in ``dim`` dimensions with means drawn at distance
``separation`` scale, equal weights, known labels. Model: a small MLP mapping a point to
``clusters`` logits. Training is DINO-style self-distillation: two noisy views of each point,
the student (softmax at ``student_temp``) is trained to match the teacher's assignment of the
other view, the teacher is an EMA of the student, and the teacher's assignment comes from a
:class:`normlab.ssl.TeacherNorm` (no normalization, EMA centering or prior division).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from normlab.models.mlp import ClusterHead
from normlab.ssl import TeacherNorm, cluster_usage, nmi
from normlab.training.fit import FitResult, fit

__all__ = ["gaussian_mixture", "score_teacher", "self_distill"]


def gaussian_mixture(
    n: int, *, clusters: int = 8, dim: int = 16, separation: float = 3.0, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points of a mixture of ``clusters`` unit Gaussians and their labels.

    The means are fixed by ``seed`` alone (so train and test sets drawn with the same seed
    and different ``n`` share them only if drawn in one call); draw one set and split it.
    """
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(clusters, dim, generator=g) * separation / 2**0.5
    labels = torch.randint(clusters, (n,), generator=g)
    return means[labels] + torch.randn(n, dim, generator=g), labels


def self_distill(
    x: torch.Tensor,
    *,
    clusters: int,
    mode: str,
    steps: int = 300,
    batch: int = 128,
    lr: float = 1e-3,
    teacher_temp: float = 0.04,
    student_temp: float = 0.1,
    teacher_momentum: float = 0.99,
    center_momentum: float = 0.9,
    noise: float = 0.3,
    seed: int = 0,
) -> tuple[nn.Module, FitResult]:
    """Train a student/teacher pair on points ``x``; the teacher network (in eval mode) and
    the loop's :class:`~normlab.training.fit.FitResult`: the student's distillation loss per
    step (``losses``, the cross-entropy to the teacher's assignment of the other view) and
    ``diverged``, if that loss turned non-finite (training ended there, the teacher keeping
    its last weights)."""
    torch.manual_seed(seed)
    student = ClusterHead(x.shape[1], clusters)
    teacher = copy.deepcopy(student).requires_grad_(False)
    norm = TeacherNorm(clusters, mode=mode, temperature=teacher_temp, momentum=center_momentum)
    g = torch.Generator().manual_seed(seed)

    def views(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        xb = x[torch.randint(len(x), (batch,), generator=g)]
        return (
            xb + noise * torch.randn(xb.shape, generator=g),
            xb + noise * torch.randn(xb.shape, generator=g),
        )

    def loss_fn(m: nn.Module, v: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            q1, q2 = norm(teacher(torch.cat(v))).chunk(2)
        s1, s2 = (torch.log_softmax(m(view) / student_temp, -1) for view in v)
        return -((q1 * s2).sum(-1).mean() + (q2 * s1).sum(-1).mean()) / 2

    @torch.no_grad()
    def ema(step: int, loss: torch.Tensor) -> None:
        for pt, ps in zip(teacher.parameters(), student.parameters(), strict=True):
            pt.mul_(teacher_momentum).add_(ps, alpha=1 - teacher_momentum)

    opt = torch.optim.Adam(student.parameters(), lr=lr)
    result = fit(student, loss_fn, views, steps, opt, after_step=ema)
    return teacher.eval(), result


def score_teacher(teacher: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
    """A teacher's hard cluster assignment of points ``x`` with true labels ``y``.

    Returns:
        ``"effective_clusters"`` (the exponential of the usage entropy) and
        ``"usage_entropy"`` of :func:`normlab.ssl.cluster_usage` (hard assignments),
        ``"nmi"`` with the labels, and ``"prior"`` (each cluster's share of the points).
    """
    with torch.no_grad():
        p = torch.softmax(teacher(x), -1)
    u = cluster_usage(p, hard=True)
    row = {"effective_clusters": u.effective_clusters, "usage_entropy": u.entropy}
    return {**row, "nmi": nmi(y, p.argmax(-1)), "prior": list(u.prior)}
