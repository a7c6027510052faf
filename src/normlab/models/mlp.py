"""Small multilayer perceptrons: a policy/critic head and a clustering head.

:class:`MLPPolicy` gives action logits (or a value) for the RL trainers of
:mod:`normlab.training.policy`; :class:`ClusterHead` gives cluster logits for the
self-distillation trainer of :mod:`normlab.training.distill`.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ClusterHead", "MLPPolicy"]


class MLPPolicy(nn.Module):
    """A two-layer tanh MLP giving action logits: ``W2 tanh(W1 s + b1) + b2``."""

    def __init__(self, in_features: int, n_actions: int, *, hidden: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden), nn.Tanh(), nn.Linear(hidden, n_actions)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class ClusterHead(nn.Module):
    """MLP ``dim -> hidden -> hidden -> clusters`` (GELU)."""

    def __init__(self, dim: int, clusters: int, *, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, clusters),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
