"""Learned data scaling (the TESS W-Net's Adaptive Normalization) and fixed input scalings.

High-dynamic-range inputs (sky frames with bright stars and faint moving objects) need a
scaling before a network sees them; the usual fixed ones are z-score, min-max and asinh.
Adaptive Normalization (``paper("adaptive-scaling")``) lets the network learn the range and
the curve instead. Per feature, with learnable clip bounds ``lo < hi`` and curve strength
``a = exp(log_a) > 0``:

``t = (clamp(x, lo, hi) - lo) / (hi - lo)``,  ``y = asinh(a t) / asinh(a)``

with ``lo`` and ``hi`` stored in robust units of the data (``x = offset + unit * value``,
``offset`` the median and ``unit`` the MAD standard deviation from :meth:`fit`), so their
gradient steps are commensurate with the noise level whatever the data's dynamic range.

so ``y`` lies in ``[0, 1]``; ``a -> 0`` is min-max scaling inside the learned range and a
large ``a`` a log-like stretch that lifts faint values. The fixed scalings share the module
(``mode``) so that experiments swap them by an argument:

- "zscore": ``(x - mean) / std``; "minmax": ``(x - min) / (max - min)``;
- "asinh": ``asinh((x - median) / scale)`` with ``scale`` the standard deviation (fixed
  softening), all from statistics set by :meth:`AdaptiveScaling.fit`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from normlab._checks import check_float, check_trailing_shape
from normlab._registry import Method, register
from normlab.functional._precision import upcast
from normlab.papers import paper

__all__ = ["SCALING_MODES", "AdaptiveScaling"]

SCALING_MODES = ("learned", "zscore", "minmax", "asinh")


class AdaptiveScaling(nn.Module):
    """Per-feature input scaling along the last axis: learned (Adaptive Normalization) or fixed.

    Args:
        features: size of the last axis (use 1 and ``x[..., None]`` for images).
        mode: "learned" (trainable ``lo``, ``hi``, ``log_a``; see the module docstring),
            "zscore", "minmax" or "asinh" (fixed, from :meth:`fit`).
        lo: initial lower clip bound (learned mode).
        hi: initial upper clip bound (learned mode).
        curve: initial curve strength ``a`` (learned mode).
    """

    def __init__(
        self,
        features: int,
        *,
        mode: str = "learned",
        lo: float = -3.0,
        hi: float = 3.0,
        curve: float = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if mode not in SCALING_MODES:
            raise ValueError(f"mode must be one of {SCALING_MODES}, got {mode!r}.")
        if not lo < hi or curve <= 0:
            raise ValueError(f"need lo < hi and curve > 0; got lo={lo}, hi={hi}, curve={curve}.")
        factory = {"device": device, "dtype": dtype}
        self.features, self.mode = features, mode
        self.init = (float(lo), float(hi), float(curve))
        if mode == "learned":
            self.lo = nn.Parameter(torch.empty(features, **factory))
            self.hi = nn.Parameter(torch.empty(features, **factory))
            self.log_a = nn.Parameter(torch.empty(features, **factory))
            self.register_buffer("offset", torch.zeros(features, **factory))
            self.register_buffer("unit", torch.ones(features, **factory))
        else:  # fixed statistics: (center, spread) per feature
            self.register_buffer("center", torch.zeros(features, **factory))
            self.register_buffer("spread", torch.ones(features, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        lo, hi, curve = self.init
        with torch.no_grad():
            if self.mode == "learned":
                self.lo.fill_(lo)
                self.hi.fill_(hi)
                self.log_a.fill_(math.log(curve))
                self.offset.zero_()
                self.unit.fill_(1.0)
            else:
                self.center.zero_()
                self.spread.fill_(1.0 if self.mode != "minmax" else hi - lo)
                if self.mode == "minmax":
                    self.center.fill_(lo)

    @torch.no_grad()
    def fit(self, x: torch.Tensor, *, low_q: float = 0.0, high_q: float = 1.0) -> AdaptiveScaling:
        """Set the statistics (fixed modes) or the initial bounds (learned) from data ``x``.

        Learned mode sets ``offset``/``unit`` (median, MAD standard deviation) and starts the
        bounds at the ``low_q`` / ``high_q`` quantiles (default min and max).
        """
        check_trailing_shape(x, (self.features,))
        flat = upcast(x).reshape(-1, self.features)
        if len(flat) > 1_000_000:  # quantiles of a subsample are plenty
            flat = flat[torch.linspace(0, len(flat) - 1, 1_000_000).long()]
        if self.mode == "learned":
            med = flat.median(0).values
            unit = ((flat - med).abs().median(0).values * 1.4826).clamp_min(1e-12)
            self.offset.copy_(med)
            self.unit.copy_(unit)
            lo = (torch.quantile(flat, low_q, dim=0) - med) / unit
            hi = (torch.quantile(flat, high_q, dim=0) - med) / unit
            self.lo.copy_(lo)
            self.hi.copy_(torch.maximum(hi, lo + 1e-6))
        elif self.mode == "zscore":
            self.center.copy_(flat.mean(0))
            self.spread.copy_(flat.std(0).clamp_min(1e-12))
        elif self.mode == "minmax":
            self.center.copy_(flat.amin(0))
            self.spread.copy_((flat.amax(0) - flat.amin(0)).clamp_min(1e-12))
        else:
            self.center.copy_(flat.median(0).values)
            self.spread.copy_(flat.std(0).clamp_min(1e-12))
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x)
        check_trailing_shape(x, (self.features,))
        xf = upcast(x)
        if self.mode == "learned":
            lo, hi = self.lo.to(xf.dtype), self.hi.to(xf.dtype)
            a = self.log_a.to(xf.dtype).exp()
            width = (hi - lo).abs().clamp_min(1e-6)  # a crossed pair still scales finitely
            u = (xf - self.offset.to(xf.dtype)) / self.unit.to(xf.dtype)
            t = (torch.minimum(torch.maximum(u, lo), hi) - lo) / width
            y = torch.asinh(a * t) / torch.asinh(a)
        else:
            z = (xf - self.center.to(xf.dtype)) / self.spread.to(xf.dtype)
            y = torch.asinh(z) if self.mode == "asinh" else z
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.features}, mode={self.mode!r}"


register(
    Method(
        "adaptive-scaling",
        "norm",
        AdaptiveScaling,
        paper("adaptive-scaling"),
        "learned input scaling: clip to learned [lo, hi], asinh(a t) / asinh(a) curve",
        aliases=("adaptive-normalization",),
    )
)
