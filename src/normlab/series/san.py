"""SAN: slice-level adaptive normalization with predicted horizon statistics."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from normlab._checks import check_positive_int
from normlab._registry import Method, register
from normlab.papers import paper
from normlab.series._base import ReversibleNorm, State, moments, shift_origin

__all__ = ["SAN"]


def _mlp(inputs: int, hidden: int, outputs: int, factory: dict) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, hidden, **factory), nn.ReLU(), nn.Linear(hidden, outputs, **factory)
    )


class SAN(ReversibleNorm):
    """Slice-level adaptive normalization: per-slice statistics in, predicted ones out.

    The window is cut into ``L / T`` slices of ``period = T`` steps; each slice is
    standardized by its own mean and ``sqrt(var + eps)``. Two small MLPs predict the mean and
    the standard deviation of each of the ``H / T`` horizon slices, and the forecast is
    restored slice by slice: ``y = y_hat * sigma_h + mu_h`` (Liu et al., 2023).

    Training is two-stage (``aux_schedule = "pretrain"``): the statistics predictor is
    first trained alone on :meth:`auxiliary_loss` (MSE of the predicted slice means and
    standard deviations against the true horizon's), then frozen while the backbone trains.

    normlab's predictor (a design choice, not the paper's code): each channel is handled by
    the same MLPs, whose inputs are the slice statistics and the window expressed in the
    window's own standardized units, ``(mu_s - m) / s``, ``sigma_s / s`` and ``(x - m) / s``
    (``m, s``: the whole window's mean and std), and whose outputs are mapped back,
    ``mu_h = m + s * f_mu(...)`` and ``sigma_h = s * softplus(f_sigma(...))``. SAN's code
    feeds raw values instead; standardizing keeps the predictor finite and shift-/scale-
    equivariant on windows with huge offsets.

    Args:
        channels: number of channels ``C``.
        lookback: input length ``L``, a multiple of ``period``.
        horizon: forecast length ``H``, a multiple of ``period``.
        periods: the data's seasonal periods; when ``period`` is not given, the slice length
            is the first of them if it divides both lengths, else ``gcd(L, H)``.
        period: slice length ``T`` (24 for hourly data in the paper); ``None`` to derive it
            from ``periods`` (default ``(24,)``) as above. An explicit ``period`` must
            divide both lengths.
        hidden: width of the predictor MLPs.
        eps: added to each slice's variance.
    """

    aux_schedule = "pretrain"

    def __init__(
        self,
        channels: int,
        *,
        lookback: int,
        horizon: int,
        periods: Sequence[int] | None = None,
        period: int | None = None,
        hidden: int = 64,
        eps: float = 1e-5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(channels, lookback=lookback, horizon=horizon)
        if period is None:
            periods = (24,) if periods is None else tuple(periods)
            period = periods[0] if periods else 24
            if not isinstance(period, int) or lookback % period or horizon % period:
                period = math.gcd(lookback, horizon)
        check_positive_int(period, "period")
        for name, length in (("lookback", lookback), ("horizon", horizon)):
            if length < period:
                raise ValueError(
                    f"SAN {name}={length} is shorter than one slice of period={period} steps; "
                    "use a longer window or a shorter period."
                )
            if length % period:
                raise ValueError(
                    f"SAN needs {name}={length} to be a multiple of the slice length "
                    f"period={period}; pick a period that divides it."
                )
        self.period = period
        self.eps = float(eps)
        n_in, n_out = lookback // period, horizon // period
        factory = {"device": device, "dtype": dtype}
        self.mean_net = _mlp(n_in + lookback, hidden, n_out, factory)
        self.std_net = _mlp(n_in + lookback, hidden, n_out, factory)

    def reset_parameters(self) -> None:
        """Re-initialise both predictor MLPs (torch's default Linear initialisation)."""
        for layer in (*self.mean_net, *self.std_net):
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def _slices(self, x: torch.Tensor) -> torch.Tensor:
        b, length, c = x.shape
        if length % self.period:
            raise ValueError(
                f"SAN got length {length}, not a multiple of its slice length {self.period}."
            )
        return x.reshape(b, length // self.period, self.period, c)

    def _slice_parts(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(slices - mean, mean, std)`` per slice, centred relative to each slice's first
        value (:func:`~normlab.series._base.shift_origin`) so large offsets cost no digits."""
        dev, origin = shift_origin(self._slices(x), dim=2)
        mean, std = moments(dev, self.eps, dim=2)
        return dev - mean, (origin + mean).squeeze(2), std.squeeze(2)

    def _slice_stats(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._slice_parts(x)[1:]

    @staticmethod
    def _predict(net: nn.Sequential, feats: torch.Tensor) -> torch.Tensor:
        """``net(feats)`` in the predictor's own dtype, returned in the input's."""
        weight = net[0].weight
        return net(feats.to(weight.dtype)).to(feats.dtype)

    def normalize(
        self, x: torch.Tensor, *, index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        xf = self._check_input(x, min_length=self.period)
        centred, mean_s, std_s = self._slice_parts(xf)
        z = centred / std_s.unsqueeze(2)
        dev, origin = shift_origin(xf)
        m, s = moments(dev, self.eps, dim=1)
        u = (dev - m) / s
        feats_mu = torch.cat([(mean_s - origin - m) / s, u], dim=1).transpose(1, 2)
        feats_sd = torch.cat([std_s / s, u], dim=1).transpose(1, 2)
        mu_h = origin + m + s * self._predict(self.mean_net, feats_mu).transpose(1, 2)
        sd_h = (
            s * F.softplus(self._predict(self.std_net, feats_sd).transpose(1, 2)) + self.eps**0.5
        )
        state: State = {
            "slice_mean": mean_s,
            "slice_std": std_s,
            "horizon_mean": mu_h,
            "horizon_std": sd_h,
            "batch": x.shape[0],
        }
        return z.reshape(xf.shape).to(x.dtype), state

    def _restore(self, y: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        yf = self._slices(y)
        if yf.shape[1] != mean.shape[1]:
            raise ValueError(
                f"SAN.denormalize got {yf.shape[1]} slices of {self.period} steps but the "
                f"state holds statistics for {mean.shape[1]}; forecast length must match."
            )
        return (yf * std.unsqueeze(2) + mean.unsqueeze(2)).reshape(y.shape)

    def denormalize(self, y: torch.Tensor, state: State) -> torch.Tensor:
        yf = self._check_output(y, state)
        out = self._restore(yf, state["horizon_mean"], state["horizon_std"])
        return out.to(y.dtype)

    def invert(self, z: torch.Tensor, state: State) -> torch.Tensor:
        """Undo :meth:`normalize` with the window's own slice statistics."""
        zf = self._check_output(z, state)
        return self._restore(zf, state["slice_mean"], state["slice_std"]).to(z.dtype)

    def auxiliary_loss(
        self, y_hat: torch.Tensor | None, state: State, target: torch.Tensor
    ) -> torch.Tensor:
        """``MSE(mu_h, mu_true) + MSE(sigma_h, sigma_true)`` over the horizon's slices."""
        mean_t, std_t = self._slice_stats(target.to(state["horizon_mean"].dtype))
        return F.mse_loss(state["horizon_mean"], mean_t) + F.mse_loss(state["horizon_std"], std_t)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, period={self.period}"


register(
    Method(
        "san",
        "series",
        SAN,
        paper("san"),
        "per-slice standardization; MLPs predict the horizon slices' mean and std",
        layout="series",
    )
)
