"""score_teacher: a teacher's hard cluster usage and NMI on labelled points."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normlab.training.distill import gaussian_mixture, score_teacher


class _Fixed(nn.Module):
    """Logits that put every point in the cluster ``assign(x)``."""

    def __init__(self, assign, k: int):
        super().__init__()
        self.assign, self.k = assign, k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 50.0 * nn.functional.one_hot(self.assign(x), self.k).float()


def test_a_teacher_that_recovers_the_labels_uses_every_cluster_with_nmi_one():
    x, y = gaussian_mixture(400, clusters=4, dim=8, seed=0)
    lookup = {tuple(row.tolist()): int(label) for row, label in zip(x, y, strict=True)}
    perfect = _Fixed(lambda xb: torch.tensor([lookup[tuple(r.tolist())] for r in xb]), 4)
    row = score_teacher(perfect, x, y)
    assert row["nmi"] == pytest.approx(1.0)
    assert row["effective_clusters"] == pytest.approx(math.exp(row["usage_entropy"]))
    assert sum(row["prior"]) == pytest.approx(1.0) and len(row["prior"]) == 4
    assert row["effective_clusters"] > 3.5


def test_a_collapsed_teacher_uses_one_cluster_and_carries_no_label_information():
    x, y = gaussian_mixture(200, clusters=4, dim=8, seed=1)
    row = score_teacher(_Fixed(lambda xb: torch.zeros(len(xb), dtype=torch.long), 4), x, y)
    assert row["effective_clusters"] == pytest.approx(1.0)
    assert row["nmi"] == pytest.approx(0.0, abs=1e-9)
    assert row["prior"][0] == pytest.approx(1.0)
