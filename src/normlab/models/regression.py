"""Residual MLPs for controlled polynomial regression, with layers that can be skipped.

Used by the "tale" claim: a pre-LN residual MLP ``h <- h + alpha_l * W2 gelu(W1 LN(h))`` is
trained on inputs from an in-distribution (ID) range and evaluated on a shifted
out-of-distribution (OOD) range; task-aware pruning runs it with a subset of its blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PolynomialTask", "ResidualMLP", "polynomial_task"]


class _Block(nn.Module):
    def __init__(self, width: int, hidden: int, norm: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width) if norm else nn.Identity()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(self.norm(h))))


class ResidualMLP(nn.Module):
    """A pre-LN residual MLP regressor whose blocks can be skipped, reordered or scaled.

    Args:
        in_features: input size.
        width: residual width.
        depth: number of residual blocks.
        out_features: output size.
        mlp_ratio: block hidden width over ``width``.
        norm: LayerNorm before each block and before the head (pre-LN); without it the
            blocks read the raw residual stream.
    """

    def __init__(
        self,
        in_features: int = 1,
        width: int = 64,
        depth: int = 8,
        *,
        out_features: int = 1,
        mlp_ratio: int = 2,
        norm: bool = True,
    ) -> None:
        super().__init__()
        self.embed = nn.Linear(in_features, width)
        self.blocks = nn.ModuleList(_Block(width, mlp_ratio * width, norm) for _ in range(depth))
        self.norm_f = nn.LayerNorm(width) if norm else nn.Identity()
        self.head = nn.Linear(width, out_features)

    def hidden_states(
        self,
        x: torch.Tensor,
        *,
        layers: Sequence[int] | None = None,
        scales: Mapping[int, float] | None = None,
    ) -> list[torch.Tensor]:
        """The residual stream: the embedding, then the output of every run block.

        Args:
            x: inputs ``(batch, in_features)``.
            layers: run these blocks in this order (default: all in sequence).
            scales: residual scaling ``h + alpha * block(h)`` per block index (default 1).
        """
        h = self.embed(x)
        states = [h]
        order = range(len(self.blocks)) if layers is None else layers
        for i in order:
            alpha = 1.0 if scales is None else float(scales.get(i, 1.0))
            h = h + alpha * self.blocks[i](h)
            states.append(h)
        return states

    def forward(
        self,
        x: torch.Tensor,
        *,
        layers: Sequence[int] | None = None,
        scales: Mapping[int, float] | None = None,
    ) -> torch.Tensor:
        """Predictions ``(batch, out_features)``; ``layers``/``scales`` as in
        :meth:`hidden_states` (the model itself is not changed)."""
        h = self.hidden_states(x, layers=layers, scales=scales)[-1]
        return self.head(self.norm_f(h))


@dataclass(frozen=True)
class PolynomialTask:
    """A random polynomial target on ``in_features`` inputs with ID and OOD input ranges.

    ``y = sum_k c_k . x^k`` elementwise powers summed over features, ``k = 1..degree``.

    Attributes:
        coefficients: ``(degree, in_features)``.
        id_range: ``(low, high)`` of the ID inputs (uniform per feature).
        ood_range: ``(low, high)`` of ``|x|`` for OOD inputs (random sign per feature).
    """

    coefficients: torch.Tensor
    id_range: tuple[float, float] = (-1.0, 1.0)
    ood_range: tuple[float, float] = (1.0, 1.5)

    def target(self, x: torch.Tensor) -> torch.Tensor:
        """``y`` for inputs ``x`` ``(batch, in_features)``, shape ``(batch, 1)``."""
        powers = torch.stack([x ** (k + 1) for k in range(len(self.coefficients))])
        return (powers * self.coefficients[:, None, :]).sum(dim=(0, 2))[:, None]

    def sample(
        self, n: int, generator: torch.Generator, *, ood: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` inputs and targets from the ID range, or from the OOD range if ``ood``."""
        features = self.coefficients.shape[1]
        low, high = self.ood_range if ood else self.id_range
        x = low + (high - low) * torch.rand(n, features, generator=generator)
        if ood:
            sign = torch.randint(0, 2, (n, features), generator=generator) * 2 - 1
            x = x * sign
        return x, self.target(x)


def polynomial_task(
    seed: int,
    *,
    in_features: int = 2,
    degree: int = 3,
    id_range: tuple[float, float] = (-1.0, 1.0),
    ood_range: tuple[float, float] = (1.0, 1.5),
) -> PolynomialTask:
    """A :class:`PolynomialTask` with ``N(0, 1)`` coefficients drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    coefficients = torch.randn(degree, in_features, generator=generator)
    return PolynomialTask(coefficients, id_range, ood_range)
