"""RevIN: reversible instance normalization, the base every other series normalizer extends."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from normlab._registry import Method, register
from normlab.papers import paper
from normlab.series._base import ReversibleNorm, State, instance_stats, shift_origin

__all__ = ["RevIN"]


class RevIN(ReversibleNorm):
    """Reversible instance normalization: standardize each window, restore the forecast.

    Per window and channel, ``mu = mean_t x`` and ``sigma = sqrt(var_t x + eps)`` (biased
    variance, both detached); ``z = gamma * (x - loc) / sigma + beta`` with ``loc = mu``, or
    the window's last value when ``subtract_last`` (the centring is computed relative to
    the window's first value, :func:`~normlab.series._base.shift_origin`, so a 1e6 offset
    costs no digits); the forecast is restored by
    ``y = (y_hat - beta) / (gamma + eps^2) * sigma + loc`` (Kim et al., 2022).

    With ``subtract_last`` the last value is *not* detached: gradients flow through it into
    the input, as in the authors' code and neuralforecast's RevIN (only the mean and the
    standard deviation are detached there). Detaching it too would change input gradients
    (by up to 34x at a window's last step in a measured case) for no stated benefit.

    Subclasses (NoRIN, PAMod) insert a reversible map between the standardization and the
    affine step by overriding :meth:`_map` and :meth:`_unmap`.

    Args:
        channels: number of channels ``C``.
        eps: added to the variance; 1e-5 as in RevIN.
        affine: learn the per-channel ``gamma`` (init 1) and ``beta`` (init 0).
        subtract_last: use the window's last value as the location instead of its mean.
        lookback: the shortest window accepted (None: any length); longer ones work too.
        horizon: accepted and ignored (any forecast length works).
        periods: accepted and ignored.
    """

    def __init__(
        self,
        channels: int,
        *,
        lookback: int | None = None,
        horizon: int | None = None,
        periods: Sequence[int] | None = None,
        eps: float = 1e-5,
        affine: bool = True,
        subtract_last: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(channels, shortest=lookback)
        if not eps > 0:
            raise ValueError(f"eps must be positive, got {eps}.")
        self.eps = float(eps)
        self.affine = affine
        self.subtract_last = subtract_last
        factory = {"device": device, "dtype": dtype}
        if affine:
            self.gamma = nn.Parameter(torch.empty(channels, **factory))
            self.beta = nn.Parameter(torch.empty(channels, **factory))
        else:
            self.register_parameter("gamma", None)
            self.register_parameter("beta", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``gamma`` to ones and ``beta`` to zeros."""
        if self.gamma is not None:
            nn.init.ones_(self.gamma)
            nn.init.zeros_(self.beta)

    def normalize(
        self, x: torch.Tensor, *, index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        xf = self._check_input(x)
        dev, origin = shift_origin(xf)  # centred in a shifted form: exact at large offsets
        mu, sigma = instance_stats(dev, self.eps)
        if self.subtract_last:
            loc = xf[:, -1:, :]  # kept in the graph, as upstream
            u = (xf - loc) / sigma
        else:
            loc = origin + mu
            u = (dev - mu) / sigma
        state: State = {"loc": loc, "scale": sigma, "length": x.shape[1], "batch": x.shape[0]}
        if index is not None:
            state["index"] = index
        z = self._map(u, state, offset=0)
        if self.gamma is not None:
            z = z * self.gamma.to(z.dtype) + self.beta.to(z.dtype)
        return z.to(x.dtype), state

    def denormalize(self, y: torch.Tensor, state: State) -> torch.Tensor:
        return self._restore(y, state, offset=int(state["length"]))

    def invert(self, z: torch.Tensor, state: State) -> torch.Tensor:
        return self._restore(z, state, offset=0)

    def _restore(self, y: torch.Tensor, state: State, offset: int) -> torch.Tensor:
        yf = self._check_output(y, state)
        if self.gamma is not None:
            yf = (yf - self.beta.to(yf.dtype)) / (self.gamma.to(yf.dtype) + self.eps**2)
        u = self._unmap(yf, state, offset=offset)
        return (u * state["scale"] + state["loc"]).to(y.dtype)

    def _map(self, u: torch.Tensor, state: State, offset: int) -> torch.Tensor:
        """The reversible map applied to the standardized window (identity for RevIN)."""
        return u

    def _unmap(self, v: torch.Tensor, state: State, offset: int) -> torch.Tensor:
        """Inverse of :meth:`_map`; ``offset`` is the first step's position after the
        window's start (0 for the window itself, its length for the horizon)."""
        return v

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, eps={self.eps}, affine={self.affine}, "
            f"subtract_last={self.subtract_last}"
        )


register(
    Method(
        "revin",
        "series",
        RevIN,
        paper("revin"),
        "per-window standardization (mean or last value, std) restored on the forecast",
        layout="series",
    )
)
