"""Dish-TS: learned input and horizon levels for distribution-shift-aware normalization."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from normlab._registry import Method, register
from normlab.papers import paper
from normlab.series._base import ReversibleNorm, State, window_scale

__all__ = ["DishTS"]


class DishTS(ReversibleNorm):
    """Dish-TS: normalize with a learned input level, denormalize with a learned horizon one.

    A per-channel weight ``W`` of shape (C, L, 2) maps the window to two levels,
    ``theta = GELU(sum_t x_t W_t)``: the input level ``phi_l`` and the horizon level
    ``phi_h``. Their spreads are the window's squared deviations from each level,
    ``xi = sum_t (x_t - phi)^2 / (L - 1)``. Then

    ``z = gamma * (x - phi_l) / sqrt(xi_l + 1e-8) + beta`` and
    ``y = (y_hat - beta) / gamma * sqrt(xi_h + 1e-8) + phi_h`` (Fan et al., 2023).

    ``W`` is initialised uniform in [0, 1/L) (the "standard" initialisation of the paper's
    code), ``gamma`` to 1 and ``beta`` to 0. The levels are learned functions of the window,
    so Dish-TS is trained with the backbone by the forecast loss alone.

    Args:
        channels: number of channels ``C``.
        lookback: input length ``L``.
        activate: apply GELU to the levels (the paper's default).
        horizon: accepted and ignored (the horizon level fits any forecast length).
        periods: accepted and ignored.
    """

    def __init__(
        self,
        channels: int,
        *,
        lookback: int,
        horizon: int | None = None,
        periods: Sequence[int] | None = None,
        activate: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(channels, lookback=lookback)
        factory = {"device": device, "dtype": dtype}
        self.activate = activate
        self.reduce = nn.Parameter(torch.empty(channels, lookback, 2, **factory))
        self.gamma = nn.Parameter(torch.empty(channels, **factory))
        self.beta = nn.Parameter(torch.empty(channels, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``W`` uniform in [0, 1/L); ``gamma`` to ones, ``beta`` to zeros."""
        with torch.no_grad():
            self.reduce.uniform_(0.0, 1.0 / self.reduce.shape[1])
        nn.init.ones_(self.gamma)
        nn.init.zeros_(self.beta)

    def _levels(self, xf: torch.Tensor) -> tuple[torch.Tensor, ...]:
        theta = torch.einsum("blc,clk->bkc", xf, self.reduce.to(xf.dtype))
        if self.activate:
            theta = F.gelu(theta)
        phi_l, phi_h = theta[:, :1], theta[:, 1:]
        return phi_l, self._spread(xf, phi_l), phi_h, self._spread(xf, phi_h)

    @staticmethod
    def _spread(xf: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        """``sqrt(xi + 1e-8)``, ``xi = sum_t (x_t - phi)^2 / (L - 1)``, computed on ``x / s``
        (:func:`~normlab.series._base.window_scale`) so it cannot overflow; exact otherwise."""
        s = window_scale(xf)
        denom = max(xf.shape[1] - 1, 1)
        xi = (xf / s - phi / s).pow(2).sum(dim=1, keepdim=True) / denom
        return (s * torch.sqrt(xi + 1e-8 / s / s)).clamp_min(1e-4)

    def normalize(
        self, x: torch.Tensor, *, index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        xf = self._check_input(x)
        phi_l, scale_l, phi_h, scale_h = self._levels(xf)
        z = (xf - phi_l) / scale_l * self.gamma.to(xf.dtype) + self.beta.to(xf.dtype)
        state: State = {
            "loc": phi_l,
            "scale": scale_l,
            "horizon_loc": phi_h,
            "horizon_scale": scale_h,
            "batch": x.shape[0],
        }
        return z.to(x.dtype), state

    def denormalize(self, y: torch.Tensor, state: State) -> torch.Tensor:
        return self._restore(y, state["horizon_loc"], state["horizon_scale"], state)

    def invert(self, z: torch.Tensor, state: State) -> torch.Tensor:
        """Undo :meth:`normalize` with the input level and spread instead of the horizon's."""
        return self._restore(z, state["loc"], state["scale"], state)

    def _restore(
        self, y: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor, state: State
    ) -> torch.Tensor:
        yf = self._check_output(y, state)
        u = (yf - self.beta.to(yf.dtype)) / self.gamma.to(yf.dtype)
        return (u * scale + loc).to(y.dtype)

    def extra_repr(self) -> str:
        return f"{self.channels}, lookback={self.lookback}, activate={self.activate}"


register(
    Method(
        "dish-ts",
        "series",
        DishTS,
        paper("dish-ts"),
        "learned input/horizon levels GELU(sum_t x_t W_t) and spreads around them",
        layout="series",
    )
)
