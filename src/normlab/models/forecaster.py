"""A reversible normalizer around a forecasting backbone: ``denormalize(backbone(normalize(x)))``.

:func:`build_norm` makes any registered series normalizer (:mod:`normlab.series`) for windows
of a given length; :class:`Forecaster` wraps it around a backbone of
:mod:`normlab.models.forecast`. :mod:`normlab.training.forecast` trains the pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from normlab._registry import get
from normlab.series import ReversibleNorm, State

__all__ = ["Forecaster", "build_norm"]


def build_norm(
    name: str,
    channels: int,
    *,
    lookback: int,
    horizon: int,
    periods: Sequence[int] = (24,),
    **kwargs: Any,
) -> ReversibleNorm:
    """The registered series normalizer ``name`` for windows of these lengths.

    Every series normalizer takes ``lookback``, ``horizon`` and ``periods`` and ignores what
    it does not need (see :mod:`normlab.series`); ``kwargs`` are passed on (e.g. ``delta=``
    for NoRIN).
    """
    method = get(name)
    if method.kind != "series":
        raise ValueError(f"{name!r} is a {method.kind!r} method, not a series normalizer.")
    return method.create(
        channels, lookback=lookback, horizon=horizon, periods=tuple(periods), **kwargs
    )


class Forecaster(nn.Module):
    """``y = denormalize(backbone(normalize(x)))``; with ``norm=None`` just the backbone."""

    def __init__(self, norm: ReversibleNorm | None, backbone: nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.backbone = backbone

    def forward(
        self, x: torch.Tensor, index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, State | None]:
        """Return the forecast, the backbone's normalized-space output and the state."""
        if self.norm is None:
            y_hat = self.backbone(x)
            return y_hat, y_hat, None
        z, state = self.norm.normalize(x, index=index)
        y_hat = self.backbone(z)
        return self.norm.denormalize(y_hat, state), y_hat, state
