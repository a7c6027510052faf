"""The contract shared by normlab's reversible normalizers for forecasting.

Every normalizer maps an input window ``x`` of shape (batch, length, channels) to
``normalize(x) -> (z, state)``; a forecasting backbone maps ``z`` to a forecast ``y_hat`` in
the normalized space, and ``denormalize(y_hat, state)`` returns it to the data's scale.
``invert(z, state)`` undoes ``normalize`` on the input window itself (the round trip);
normalizers that predict the horizon's statistics (Dish-TS, SAN, FAN) denormalize with
those predictions instead, so for them ``denormalize`` differs from ``invert``.

Extra training signals are exposed so that one generic trainer serves every normalizer:
``auxiliary_loss(y_hat, state, target)`` and the class attribute ``aux_schedule`` saying
how to use it ("none"; "joint": add it to the forecast loss, FAN; "pretrain": train the
normalizer alone on it first, then freeze it and train the backbone, SAN).

Every registered normalizer takes the same window arguments, ``lookback`` (L), ``horizon``
(H) and ``periods`` (the data's seasonal periods), as keywords, and accepts and ignores
those it does not need, so one call builds any of them::

    normlab.create(name, channels, lookback=96, horizon=24, periods=(24,))

Instance-statistics normalizers (RevIN, NoRIN, PAMod) work on any length from ``lookback``
up (any length when it is None) and ignore ``horizon``; Dish-TS, SAN and FAN are built for
their lengths; only PAMod and SAN read ``periods``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from normlab._checks import check_finite, check_float, check_positive_int
from normlab.functional._precision import upcast

__all__ = [
    "ReversibleNorm",
    "State",
    "instance_stats",
    "moments",
    "shift_origin",
    "window_scale",
]

#: What ``normalize`` hands to ``denormalize``: named tensors (statistics, predictions).
State = dict[str, Any]


def window_scale(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """A power of two ``s >= 1`` with ``max |x| / 2 < s <= max |x|`` along ``dim`` (detached).

    Statistics of ``x / s`` cannot overflow (``(x - mu)^2`` does in float32 from about 1e19),
    and dividing or multiplying by a power of two is exact, so moments computed through it
    equal the direct ones bit for bit wherever those do not overflow. ``s = 1`` for windows
    with ``max |x| < 2``, so small values are computed exactly as before too.
    """
    amax = x.detach().abs().amax(dim=dim, keepdim=True)
    _, exponent = torch.frexp(amax)
    return torch.ldexp(torch.ones_like(amax), exponent - 1).clamp_min(1.0)


def moments(
    x: torch.Tensor, eps: float, *, dim: int = 1, denominator: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``mu = mean x`` and ``sigma = sqrt(var x + eps)`` along ``dim``, safe from overflow.

    Computed on ``x / s`` with :func:`window_scale`'s ``s``: ``mu = s mean(x / s)`` and
    ``sigma = max(s sqrt(var(x / s) + eps / s^2), sqrt(eps))``; the floor only matters
    where ``eps / s^2`` underflows (a constant window near 1e20 or above), where the direct
    ``sqrt(eps)`` is the exact answer. ``var`` is biased, or ``sum / denominator``.
    Gradients flow through both (see :func:`instance_stats` for the detached ones).
    """
    s = window_scale(x, dim)
    u = x / s
    mu_u = u.mean(dim=dim, keepdim=True)
    dev2 = (u - mu_u).pow(2)
    if denominator is None:
        var_u = dev2.mean(dim=dim, keepdim=True)
    else:
        var_u = dev2.sum(dim=dim, keepdim=True) / denominator
    sigma = s * torch.sqrt(var_u + eps / s / s)
    return mu_u * s, sigma.clamp_min(math.sqrt(eps))


def shift_origin(x: torch.Tensor, dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x - x_0, x_0)`` with ``x_0`` the first value along ``dim`` (detached).

    Centring in this shifted form keeps the digits a large offset would cost: at a 1e6
    offset the float32 mean of a window is off by up to a few ulp of 1e6 (0.0625 each),
    which moved ``z`` by 1-3% of a unit-variance window, while ``x - x_0`` is exact for
    values within a factor of two of each other (Sterbenz) and its mean is accurate to
    the window's own spread. Normalizers compute ``z = ((x - x_0) - mean(x - x_0)) / sigma``
    and keep ``loc = x_0 + mean(x - x_0)`` for the way back.
    """
    origin = x.detach().narrow(dim, 0, min(1, x.shape[dim]))
    return x - origin, origin


def instance_stats(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-window, per-channel ``mu = mean_t x`` and ``sigma = sqrt(var_t(x) + eps)``.

    The variance is the biased one and both are detached, as in RevIN (Kim et al., 2022):
    the statistics are treated as constants of the window, not learned functions of it.
    They are computed by :func:`moments`, so windows of values up to float's range (e.g.
    1e25 in float32) keep finite statistics and round-trip.
    """
    mu, sigma = moments(x.detach(), eps, dim=1)
    return mu, sigma


class ReversibleNorm(nn.Module):
    """Base of the reversible normalizers: input checks and the shared contract.

    Args:
        channels: number of channels ``C`` of the series (the last dimension).
        lookback: input length ``L`` the normalizer is built for, or None when it accepts
            any length (instance-statistics normalizers).
        horizon: forecast length ``H`` it is built for, or None for any.
        shortest: the shortest window accepted, for normalizers that take any length from
            there up (instance statistics: their ``lookback``), or None.
    """

    #: How a trainer uses :meth:`auxiliary_loss`: "none", "joint" or "pretrain".
    aux_schedule: ClassVar[str] = "none"

    def __init__(
        self,
        channels: int,
        *,
        lookback: int | None = None,
        horizon: int | None = None,
        shortest: int | None = None,
    ) -> None:
        super().__init__()
        sizes = {"channels": channels, "lookback": lookback or shortest, "horizon": horizon}
        for name, value in sizes.items():
            if value is not None:
                check_positive_int(value, name)
        self.channels = channels
        self.lookback = lookback
        self.horizon = horizon
        self.shortest = shortest

    # -- the contract ------------------------------------------------------------------
    def normalize(
        self, x: torch.Tensor, *, index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        """Normalize the window ``x`` (B, L, C); return ``(z, state)``.

        ``index`` (B,) holds each window's absolute time step; only normalizers that use the
        calendar (PAMod) read it.
        """
        raise NotImplementedError

    def denormalize(self, y: torch.Tensor, state: State) -> torch.Tensor:
        """Return the normalized-space forecast ``y`` (B, H, C) to the data's scale."""
        raise NotImplementedError

    def invert(self, z: torch.Tensor, state: State) -> torch.Tensor:
        """Undo :meth:`normalize` on the input window: ``invert(*normalize(x)) == x``."""
        return self.denormalize(z, state)

    def auxiliary_loss(
        self, y_hat: torch.Tensor, state: State, target: torch.Tensor
    ) -> torch.Tensor | None:
        """An extra training loss given the backbone output and the true horizon, or None."""
        return None

    def forward(
        self, x: torch.Tensor, *, index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        return self.normalize(x, index=index)

    def extra_repr(self) -> str:
        parts = [str(self.channels)]
        if self.lookback is not None:
            parts.append(f"lookback={self.lookback}")
        if self.horizon is not None:
            parts.append(f"horizon={self.horizon}")
        return ", ".join(parts)

    # -- checks ------------------------------------------------------------------------
    def _check_input(self, x: torch.Tensor, *, min_length: int = 1) -> torch.Tensor:
        """Validate an input window and return it in its compute dtype."""
        name = f"{type(self).__name__} input"
        check_float(x, name)
        if x.dim() != 3:
            raise ValueError(
                f"{name} must have shape (batch, length, channels), got {tuple(x.shape)} "
                f"(rank {x.dim()}); add a batch dimension with x.unsqueeze(0) or a channel "
                "dimension with x.unsqueeze(-1)."
            )
        if x.shape[-1] != self.channels:
            raise ValueError(
                f"{name} has {x.shape[-1]} channels but the normalizer was built for "
                f"{self.channels}; build it with {type(self).__name__}({x.shape[-1]}, ...)."
            )
        if self.lookback is not None and x.shape[1] != self.lookback:
            raise ValueError(
                f"{name} has length {x.shape[1]} but the normalizer was built for "
                f"lookback={self.lookback}; pass windows of that length or rebuild it."
            )
        if self.shortest is not None and x.shape[1] < self.shortest:
            raise ValueError(
                f"{name} has length {x.shape[1]}, shorter than the lookback={self.shortest} "
                f"the normalizer was built with; pass windows of at least {self.shortest} "
                "steps, or build it with a smaller lookback (None accepts any length)."
            )
        if x.shape[1] < min_length:
            raise ValueError(
                f"{name} has length {x.shape[1]}, shorter than the {min_length} steps "
                f"{type(self).__name__} needs; use longer windows."
            )
        check_finite(x, name)
        return upcast(x)

    def _check_output(self, y: torch.Tensor, state: State) -> torch.Tensor:
        """Validate a normalized-space forecast and return it in its compute dtype."""
        name = f"{type(self).__name__}.denormalize input"
        check_float(y, name)
        if y.dim() != 3 or y.shape[-1] != self.channels:
            raise ValueError(
                f"{name} must have shape (batch, horizon, {self.channels}), got {tuple(y.shape)}."
            )
        batch = state.get("batch")
        if batch is not None and y.shape[0] != batch:
            raise ValueError(
                f"{name} has batch {y.shape[0]} but the state came from a batch of {batch}; "
                "denormalize with the state of the same windows."
            )
        return upcast(y)
