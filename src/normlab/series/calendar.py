"""RevIN with calendar features: a learned additive Fourier term of the time of day and week.

The covariate model a forecaster would try first for cyclical shifts, and the time-aware
baseline of the pamod claim: PAMod's tables are its one-hot, multiplicative-and-additive
generalisation.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from normlab._checks import check_positive_int
from normlab._registry import Method, register
from normlab.papers import paper
from normlab.series.pamod import PAMod

__all__ = ["CalendarRevIN"]


class CalendarRevIN(PAMod):
    """RevIN given calendar features: in normalized space,
    ``v_t = u_t - sum_P sum_k (a_Pk sin(2 pi k t / P) + b_Pk cos(2 pi k t / P))`` per
    channel, for each period ``P`` and ``k = 1..harmonics``, with no amplitude table; the
    forecast is restored with the same term at the horizon's time steps.

    It shares PAMod's contract (absolute time ``index``, ``periods``) and replaces its
    per-position tables by a smooth Fourier phase with ``2 * harmonics`` coefficients per
    period and channel (init 0, where it is RevIN).

    Args:
        channels: number of series channels.
        harmonics: Fourier harmonics per period.
        **kwargs: PAMod's (``lookback``, ``horizon``, ``periods``, ``eps``, ``affine``,
            ``subtract_last``, ``device``, ``dtype``).
    """

    def __init__(self, channels: int, *, harmonics: int = 3, **kwargs: Any) -> None:
        check_positive_int(harmonics, "harmonics")
        super().__init__(channels, **kwargs)
        del self.amplitude, self.phase  # PAMod's tables: replaced by the Fourier term
        self.harmonics = harmonics
        factory = {"device": kwargs.get("device"), "dtype": kwargs.get("dtype")}
        self.coef = nn.Parameter(
            torch.zeros(len(self.periods), 2 * harmonics, channels, **factory)
        )

    def reset_parameters(self) -> None:
        """RevIN's affine to identity and the Fourier coefficients to zero (RevIN)."""
        super().reset_parameters()
        if hasattr(self, "coef"):
            nn.init.zeros_(self.coef)

    def modulation(self, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(amplitude, phase)`` at absolute time ``steps``: amplitude 1, Fourier phase."""
        phi = torch.zeros((), dtype=self.coef.dtype, device=self.coef.device)
        k = torch.arange(1, self.harmonics + 1, dtype=self.coef.dtype, device=self.coef.device)
        for i, period in enumerate(self.periods):
            pos = steps.remainder(period).to(self.coef.dtype)[..., None] * k
            angle = 2 * math.pi * pos / period
            feats = torch.cat([angle.sin(), angle.cos()], -1)  # (B, T, 2K)
            phi = phi + feats @ self.coef[i]
        return torch.ones_like(phi), phi

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, harmonics={self.harmonics}"


register(
    Method(
        "revin-calendar",
        "series",
        CalendarRevIN,
        paper("pamod"),
        "RevIN plus a learned additive Fourier term of the time of day and week",
        aliases=("calendar-revin", "calendarrevin"),
        layout="series",
    )
)
