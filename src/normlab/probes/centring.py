"""How centred an activation's output is on standard-normal input, by Monte Carlo.

A zero-centred activation (Zero-Centered Swish, ``paper("zc-swish")``) subtracts its mean
under ``N(0, 1)`` input; :func:`gaussian_output_mean` measures that mean per channel on
fresh draws, with the standard error that says whether a residual is noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["GaussianMean", "gaussian_output_mean"]


@dataclass(frozen=True)
class GaussianMean:
    """The output mean of a module on ``N(0, 1)`` input.

    Attributes:
        worst: the largest ``|mean|`` over channels.
        se: the largest standard error of a channel's mean (``std / sqrt(draws)``).
    """

    worst: float
    se: float


@torch.no_grad()
def gaussian_output_mean(
    module: nn.Module, channels: int, draws: int = 2**18, seed: int = 0
) -> GaussianMean:
    """Run ``module`` on a ``(1, channels, draws)`` float64 standard-normal tensor and report
    its per-channel output means (the module must accept float64 and channels on dim 1).

    Examples:
        >>> import torch
        >>> g = gaussian_output_mean(torch.nn.Identity(), 2, draws=4096)
        >>> g.worst < 4 * g.se
        True
    """
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(1, channels, draws, generator=gen, dtype=torch.float64)
    y = module(z)
    worst = float(y.mean(-1).abs().max())
    return GaussianMean(worst, float(y.std(-1).max() / draws**0.5))
