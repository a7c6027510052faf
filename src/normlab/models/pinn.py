"""A deep tanh MLP for physics-informed training on a 1D Poisson problem, and a BN-free
residual CNN: the two testbeds of the StableGrad claim.

Poisson problem: ``-u''(x) = f(x)`` on ``[0, 1]`` with ``u(0) = u(1) = 0`` and the exact
solution ``u*(x) = sin(pi x) + 0.3 sin(4 pi x)``, so ``f = pi^2 sin(pi x) + 4.8 pi^2
sin(4 pi x)``. The PINN loss is the mean squared residual at collocation points plus the
squared boundary values; its accuracy is the relative L2 error against ``u*`` on a grid.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

__all__ = ["PINN", "ResidualCNN", "poisson_exact", "poisson_loss", "relative_l2"]


class PINN(nn.Module):
    """``depth`` tanh layers of ``width`` units and a linear output (Xavier init, zero bias)."""

    def __init__(self, depth: int, width: int, *, in_features: int = 1) -> None:
        super().__init__()
        if depth < 1 or width < 1:
            raise ValueError(f"depth and width must be positive, got {depth} and {width}.")
        dims = [in_features] + [width] * depth
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.out = nn.Linear(width, 1)
        for layer in [*self.hidden, self.out]:
            nn.init.xavier_normal_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            x = torch.tanh(layer(x))
        return self.out(x)


def poisson_exact(x: torch.Tensor) -> torch.Tensor:
    """The exact solution ``sin(pi x) + 0.3 sin(4 pi x)``."""
    return torch.sin(math.pi * x) + 0.3 * torch.sin(4 * math.pi * x)


def _source(x: torch.Tensor) -> torch.Tensor:
    return math.pi**2 * torch.sin(math.pi * x) + 4.8 * math.pi**2 * torch.sin(4 * math.pi * x)


def poisson_loss(model: nn.Module, x: torch.Tensor, *, boundary_weight: float = 10.0):
    """PINN loss ``mean (u'' + f)^2 + w (u(0)^2 + u(1)^2)`` at collocation points ``x``
    ``(n, 1)``, and the network output ``(n + 2, 1)`` at ``x`` then at the boundary points
    0 and 1 (one forward pass, so StableGrad's ``watch`` sees every gradient that reaches
    the output: only the boundary term's, since the residual reaches the output only
    through its input derivatives)."""
    pts = torch.cat([x.detach(), torch.tensor([[0.0], [1.0]], dtype=x.dtype)]).requires_grad_()
    u = model(pts)
    (du,) = torch.autograd.grad(u.sum(), pts, create_graph=True)
    (d2u,) = torch.autograd.grad(du.sum(), pts, create_graph=True)
    n = len(x)
    residual = (d2u[:n] + _source(pts[:n])).square().mean()
    return residual + boundary_weight * u[n:].square().mean(), u


@torch.no_grad()
def relative_l2(model: nn.Module, points: int = 256) -> float:
    """``||u - u*|| / ||u*||`` on a uniform grid of ``[0, 1]``."""
    x = torch.linspace(0, 1, points)[:, None]
    exact = poisson_exact(x)
    return float((model(x) - exact).norm() / exact.norm())


class ResidualCNN(nn.Module):
    """A BatchNorm-free residual CNN: ``h <- h + conv(relu(conv(relu(h))))`` per block.

    A stem conv, ``blocks`` residual blocks of ``width`` channels, global average pooling and
    a linear head; He-initialised convs and no normalization anywhere, so the residual
    stream's variance grows with depth (the setting where BN-free ResNets collapse).
    """

    def __init__(self, blocks: int, width: int, *, in_channels: int = 1, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(in_channels, width, 3, padding=1)
        self.convs = nn.ModuleList(
            nn.Conv2d(width, width, 3, padding=1) for _ in range(2 * blocks)
        )
        self.head = nn.Linear(width, classes)
        for conv in [self.stem, *self.convs]:
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
            nn.init.zeros_(conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for a, b in zip(self.convs[::2], self.convs[1::2], strict=True):
            h = h + b(torch.relu(a(torch.relu(h))))
        return self.head(h.mean(dim=(2, 3)))
