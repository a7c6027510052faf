"""FAN: frequency adaptive normalization (remove and forecast the dominant frequencies)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from normlab._registry import Method, register
from normlab.papers import paper
from normlab.series._base import ReversibleNorm, State, shift_origin

__all__ = ["FAN", "top_k_frequencies"]


def _split(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(main, x - main)`` for :func:`top_k_frequencies`, the residual without rounding.

    Computed relative to each window's first value ``x_0``: with ``d = x - x_0`` the
    spectrum of ``x`` is that of ``d`` plus ``L x_0`` at bin 0, so the bins are chosen from
    it, and the residual is ``d - main(d)`` (plus ``x_0`` when the mean is not kept). A
    large offset (1e6) then costs the residual no digits.
    """
    if x.numel() == 0:  # an empty batch (or no channels): nothing to transform
        return torch.zeros_like(x), x.clone()
    dev, origin = shift_origin(x)
    spectrum = torch.fft.rfft(dev, dim=1)
    full = spectrum.clone()
    full[:, :1] = full[:, :1] + x.shape[1] * origin
    k = min(k, spectrum.shape[1])
    top = full.abs().topk(k, dim=1).indices
    mask = torch.zeros_like(spectrum, dtype=torch.bool).scatter_(1, top, True)
    main_dev = torch.fft.irfft(spectrum * mask, n=x.shape[1], dim=1)
    keeps_mean = mask[:, :1].to(x.dtype)
    main = main_dev + origin * keeps_mean
    return main, dev - main_dev + origin * (1.0 - keeps_mean)


def top_k_frequencies(x: torch.Tensor, k: int) -> torch.Tensor:
    """The part of ``x`` (B, L, C) made of its ``k`` largest-amplitude rFFT components.

    Per window and channel, ``X = rfft(x)`` along time; the ``k`` bins of largest ``|X|``
    are kept and the rest zeroed; the result is ``irfft`` of what is kept, with length
    ``L``. The mean (bin 0) is one of the candidates, so a level shift is removed too.
    """
    return _split(x, k)[0]


class FAN(ReversibleNorm):
    """Frequency adaptive normalization: forecast the dominant frequencies separately.

    The window's top-``k`` rFFT components ``x_main`` (see :func:`top_k_frequencies`) are
    removed, ``z = x - x_main``, and the backbone forecasts the residual. An MLP predicts
    the horizon's dominant part from ``x_main`` and ``x``:
    ``h = ReLU(W_1 x_main)``, ``y_main = W_3 ReLU(W_2 [h, x])`` (applied per channel), and the
    forecast is ``y = y_hat + y_main`` (Ye et al., 2024).

    The extra loss (``aux_schedule = "joint"``, added to the forecast loss every step) filters
    the true horizon the same way, ``y_true = y_main_true + y_res_true``, and is
    ``MSE(y_main, y_main_true) + MSE(y_hat, y_res_true)``.

    Args:
        channels: number of channels ``C``.
        lookback: input length ``L``.
        horizon: forecast length ``H``.
        k: number of rFFT components kept (4 to 20 in the paper).
        hidden: width of the first predictor layer (the second is twice as wide).
        periods: accepted and ignored (FAN finds the dominant frequencies itself).
    """

    aux_schedule = "joint"

    def __init__(
        self,
        channels: int,
        *,
        lookback: int,
        horizon: int,
        periods: Sequence[int] | None = None,
        k: int = 4,
        hidden: int = 64,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(channels, lookback=lookback, horizon=horizon)
        if not isinstance(k, int) or not 1 <= k <= lookback // 2 + 1:
            raise ValueError(
                f"FAN keeps k rFFT components of a length-{lookback} window, so k must be in "
                f"[1, {lookback // 2 + 1}]; got k={k!r}."
            )
        self.k = k
        factory = {"device": device, "dtype": dtype}
        self.freq_in = nn.Linear(lookback, hidden, **factory)
        self.mix = nn.Linear(hidden + lookback, 2 * hidden, **factory)
        self.out = nn.Linear(2 * hidden, horizon, **factory)

    def reset_parameters(self) -> None:
        """Re-initialise the predictor (torch's default Linear initialisation)."""
        for layer in (self.freq_in, self.mix, self.out):
            layer.reset_parameters()

    def normalize(
        self, x: torch.Tensor, *, index: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        xf = self._check_input(x)
        main, residual = _split(xf, self.k)
        # the predictor runs in its own dtype (e.g. float32 weights on a float64 window)
        wd = self.freq_in.weight.dtype
        h = F.relu(self.freq_in(main.transpose(1, 2).to(wd)))
        pred = self.out(F.relu(self.mix(torch.cat([h, xf.transpose(1, 2).to(wd)], dim=-1))))
        pred = pred.to(xf.dtype).transpose(1, 2)
        state: State = {"main": main, "horizon_main": pred, "batch": x.shape[0]}
        return residual.to(x.dtype), state

    def denormalize(self, y: torch.Tensor, state: State) -> torch.Tensor:
        yf = self._check_output(y, state)
        main = state["horizon_main"]
        if yf.shape[1] != main.shape[1]:
            raise ValueError(
                f"FAN.denormalize got a forecast of length {yf.shape[1]} but FAN predicts the "
                f"dominant part of {main.shape[1]} steps; build it with horizon={yf.shape[1]}."
            )
        return (yf + main).to(y.dtype)

    def invert(self, z: torch.Tensor, state: State) -> torch.Tensor:
        """Undo :meth:`normalize`: add back the window's own dominant part."""
        zf = self._check_output(z, state)
        return (zf + state["main"]).to(z.dtype)

    def auxiliary_loss(
        self, y_hat: torch.Tensor, state: State, target: torch.Tensor
    ) -> torch.Tensor:
        """``MSE(y_main, main(y_true)) + MSE(y_hat, y_true - main(y_true))``."""
        target = target.to(state["horizon_main"].dtype)
        main_true = top_k_frequencies(target, self.k)
        return F.mse_loss(state["horizon_main"], main_true) + F.mse_loss(
            y_hat.to(target.dtype), target - main_true
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, k={self.k}"


register(
    Method(
        "fan",
        "series",
        FAN,
        paper("fan"),
        "removes the top-k rFFT components; an MLP forecasts them for the horizon",
        layout="series",
    )
)
