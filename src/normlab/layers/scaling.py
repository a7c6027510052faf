"""Learned data scaling (the TESS W-Net's Adaptive Normalization) and fixed input scalings.

High-dynamic-range inputs (sky frames with bright stars and faint moving objects) need a
scaling before a network sees them; the usual fixed ones are z-score, min-max and asinh.
Adaptive Normalization (``paper("adaptive-scaling")``) lets the network learn the range and
the curve instead. Per feature, in robust units ``u = (x - offset) / unit`` (``offset`` the
median, ``unit`` the MAD standard deviation, both set by :meth:`AdaptiveScaling.fit`):

``y = asinh(clamp(u, lo, hi) / s)``,  ``lo = -exp(log_lo)``, ``hi = exp(log_hi)``,
``s = exp(log_soft)``

with the clip bounds ``lo < 0 < hi`` (either side of the median) and the softening ``s``
trainable through their logs, so an optimizer step changes each by a relative amount
(Adam at lr 1e-2: ~1% a step) whatever the data's dynamic range. ``|u| << s`` is linear
(noise keeps unit scale when ``s`` is one robust sigma), ``|u| >> s`` logarithmic (bright
stars are compressed to a few units), and the bounds cut the range outright. The output is
not divided by the range's asinh: that would shrink the noise-level contrast that faint
objects live in by ``asinh(hi / s)`` (~8x for four decades) and slow the network's first
layer by as much. After :meth:`fit` with the default quantiles (data min and max) and
``softening=1``, the learned scaling equals the fixed "asinh" mode on the fitted data.
A bound moves only through the pixels it clips (the clamp passes no gradient to it
otherwise), so one that ends up beyond all the data stays there; starting the bounds at
the data's extremes keeps the extreme pixels on them.

The fixed scalings share the module (``mode``) so that experiments swap them by an argument:

- "zscore": ``(x - mean) / std``; "minmax": ``(x - min) / (max - min)``;
- "asinh": ``asinh((x - median) / sigma)`` with ``sigma`` the MAD standard deviation
  (``1.4826 * median|x - median|``, the usual astronomical stretch; a std softening would be
  inflated by the bright tail), all from statistics set by :meth:`AdaptiveScaling.fit`.
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

_MAD_TO_SIGMA = 1.4826  # a normal's standard deviation per median absolute deviation


def _robust(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column median and MAD standard deviation of ``flat`` ``(n, features)``."""
    med = flat.median(0).values
    sigma = ((flat - med).abs().median(0).values * _MAD_TO_SIGMA).clamp_min(1e-12)
    return med, sigma


class AdaptiveScaling(nn.Module):
    """Per-feature input scaling along the last axis: learned (Adaptive Normalization) or fixed.

    Learned mode computes ``asinh(clamp(u, lo, hi) / s)`` on robust units ``u`` with trainable
    ``log_lo``, ``log_hi``, ``log_soft`` (formula in the module docstring).

    Args:
        features: size of the last axis (use 1 and ``x[..., None]`` for images).
        mode: "learned", "zscore", "minmax" or "asinh" (fixed, from :meth:`fit`).
        lo: initial lower clip bound in robust units, ``< 0`` (learned mode; :meth:`fit`
            replaces it by a data quantile).
        hi: initial upper clip bound in robust units, ``> 0`` (as ``lo``).
        softening: initial asinh softening ``s`` in robust units, ``> 0`` (learned mode; the
            fixed "asinh" mode's softening until :meth:`fit`).

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> x = 10 * torch.randn(1000, 2) + 3
        >>> y = AdaptiveScaling(2, mode="zscore").fit(x)(x)
        >>> torch.allclose(y.mean(0), torch.zeros(2), atol=1e-5)
        True
        >>> torch.allclose(y.std(0), torch.ones(2))
        True
        >>> learned = AdaptiveScaling(2).fit(x)  # bounds at the data's min and max
        >>> fixed = AdaptiveScaling(2, mode="asinh").fit(x)
        >>> torch.allclose(learned(x), fixed(x), atol=1e-5)  # equal on the fitted data
        True
    """

    def __init__(
        self,
        features: int,
        *,
        mode: str = "learned",
        lo: float = -3.0,
        hi: float = 3.0,
        softening: float = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if mode not in SCALING_MODES:
            raise ValueError(f"mode must be one of {SCALING_MODES}, got {mode!r}.")
        if not (lo < 0 < hi) or softening <= 0:
            raise ValueError(
                "need lo < 0 < hi (robust units around the median) and softening > 0; "
                f"got lo={lo}, hi={hi}, softening={softening}."
            )
        factory = {"device": device, "dtype": dtype}
        self.features, self.mode = features, mode
        self.init = (float(lo), float(hi), float(softening))
        if mode == "learned":
            self.log_lo = nn.Parameter(torch.empty(features, **factory))
            self.log_hi = nn.Parameter(torch.empty(features, **factory))
            self.log_soft = nn.Parameter(torch.empty(features, **factory))
            self.register_buffer("offset", torch.zeros(features, **factory))
            self.register_buffer("unit", torch.ones(features, **factory))
        else:  # fixed statistics: (center, spread) per feature
            self.register_buffer("center", torch.zeros(features, **factory))
            self.register_buffer("spread", torch.ones(features, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        lo, hi, soft = self.init
        with torch.no_grad():
            if self.mode == "learned":
                self.log_lo.fill_(math.log(-lo))
                self.log_hi.fill_(math.log(hi))
                self.log_soft.fill_(math.log(soft))
                self.offset.zero_()
                self.unit.fill_(1.0)
            elif self.mode == "minmax":
                self.center.fill_(lo)
                self.spread.fill_(hi - lo)
            else:
                self.center.zero_()
                self.spread.fill_(soft if self.mode == "asinh" else 1.0)

    @torch.no_grad()
    def fit(self, x: torch.Tensor, *, low_q: float = 0.0, high_q: float = 1.0) -> AdaptiveScaling:
        """Set the statistics (fixed modes) or the robust units and initial bounds (learned).

        Learned mode sets ``offset``/``unit`` (median, MAD standard deviation), starts the
        bounds at the ``low_q`` / ``high_q`` quantiles (default min and max; a quantile on
        the wrong side of the median gives a bound 1e-6 units from it) and leaves the
        softening as constructed.
        """
        check_trailing_shape(x, (self.features,))
        if not 0.0 <= low_q < 0.5 < high_q <= 1.0:
            raise ValueError(f"need 0 <= low_q < 0.5 < high_q <= 1; got {low_q}, {high_q}.")
        flat = upcast(x).reshape(-1, self.features)
        if len(flat) > 1_000_000:  # statistics of a subsample are plenty
            flat = flat[torch.linspace(0, len(flat) - 1, 1_000_000).long()]
        if self.mode == "learned":
            med, unit = _robust(flat)
            self.offset.copy_(med)
            self.unit.copy_(unit)
            below = (med - torch.quantile(flat, low_q, dim=0)) / unit
            above = (torch.quantile(flat, high_q, dim=0) - med) / unit
            self.log_lo.copy_(below.clamp_min(1e-6).log())
            self.log_hi.copy_(above.clamp_min(1e-6).log())
        elif self.mode == "zscore":
            self.center.copy_(flat.mean(0))
            self.spread.copy_(flat.std(0).clamp_min(1e-12))
        elif self.mode == "minmax":
            self.center.copy_(flat.amin(0))
            self.spread.copy_((flat.amax(0) - flat.amin(0)).clamp_min(1e-12))
        else:
            self.center.copy_(_robust(flat)[0])
            self.spread.copy_(_robust(flat)[1])
        return self

    def curve(self) -> dict[str, torch.Tensor]:
        """Learned mode: the current ``lo``, ``hi`` and softening ``s`` in data units."""
        if self.mode != "learned":
            raise ValueError(f"curve() needs mode='learned'; this module is {self.mode!r}.")
        with torch.no_grad():
            return {
                "lo": self.offset - self.unit * self.log_lo.exp(),
                "hi": self.offset + self.unit * self.log_hi.exp(),
                "softening": self.unit * self.log_soft.exp(),
            }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x)
        check_trailing_shape(x, (self.features,))
        xf = upcast(x)
        if self.mode == "learned":
            lo = -self.log_lo.to(xf.dtype).exp()
            hi = self.log_hi.to(xf.dtype).exp()
            u = (xf - self.offset.to(xf.dtype)) / self.unit.to(xf.dtype)
            clipped = torch.minimum(torch.maximum(u, lo), hi)
            y = torch.asinh(clipped / self.log_soft.to(xf.dtype).exp())
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
        "learned input scaling: asinh(clamp(u, lo, hi) / s) with learned log-bounds and "
        "log-softening on robust units",
        aliases=("adaptive-normalization",),
    )
)
