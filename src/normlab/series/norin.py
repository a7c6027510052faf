"""NoRIN: non-linear reversible instance normalization with the Johnson S_U transform."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from normlab._registry import Method, register
from normlab.papers import paper
from normlab.series._base import State, instance_stats
from normlab.series.johnson import JohnsonFit, moment_matched, slifker_shapiro
from normlab.series.revin import RevIN

__all__ = ["DELTA_RANGE", "NoRIN", "fit_shape"]

#: delta is kept in this range: below ~0.04 ``exp(1/delta^2)`` overflows float64, and above
#: 1e8 the transform is the identity to float64 precision.
DELTA_RANGE: tuple[float, float] = (0.05, 1e8)
#: Bound on the sinh argument of the inverse, so forecasts stay finite (sinh(80) ~ 3e34).
_MAX_SINH_ARG = 80.0


class NoRIN(RevIN):
    """Non-linear reversible instance normalization: RevIN followed by a Johnson S_U map.

    The window is standardized as in RevIN, ``u = (x - mu) / sigma``, then reshaped by the
    S_U transform with shape parameters ``delta`` (tails) and ``epsilon`` (skewness):

    ``v = epsilon + delta * asinh((u - xi) / lambda)``,
    ``u = xi + lambda * sinh((v - epsilon) / delta)`` (inverse, on the forecast),

    followed by RevIN's optional affine step (NoRIN paper, seed "Reversible instance
    normalization (RevIN) and its successors").

    Parameterisation (normlab's choice among REFERENCE's options): moment-matched. ``xi`` and
    ``lambda`` are not free; they are set by :func:`~normlab.series.johnson.moment_matched` so
    that S_U(epsilon, delta, xi, lambda) has mean 0 and variance 1, the moments ``u`` has.
    Why: (1) for every ``epsilon`` the map tends to the identity as ``delta -> infinity``, so
    the linear limit is exactly RevIN (the alternative ``delta asinh(u/delta + epsilon) -
    delta asinh(epsilon)`` tends to ``u / sqrt(1 + epsilon^2)``, a rescaled RevIN); (2) a
    standardized window that is S_U(epsilon, delta) is mapped to a standard normal, so the
    backbone sees unit-scale inputs at every shape and the shapes compete fairly; (3) the
    Slifker-Shapiro fit of standardized windows gives ``(gamma, delta)`` that transfer
    directly as ``(epsilon, delta)`` (see :func:`fit_shape`).

    The map is computed in float64 (it is element-wise and cheap) so small ``delta``, where
    ``lambda`` is tiny and ``sinh`` steep, keeps its precision; ``delta`` is clamped to
    :data:`DELTA_RANGE` and the inverse's sinh argument to +-80 so outputs stay finite.

    ``delta`` is stored as ``log_delta``. With ``learn_shape=False`` (NoRIN's own setting)
    the shape is a buffer chosen outside gradient training (:func:`fit_shape`, then
    :func:`~normlab.series.search.select_shape`); with ``learn_shape=True`` both are
    parameters trained with the backbone, the setting that exhibits the paper's
    degeneration problem (delta drifts toward the linear limit).

    Args:
        channels: number of channels ``C``.
        delta: initial tail parameter (scalar or one per channel), > 0.
        epsilon: initial skewness parameter (scalar or one per channel).
        learn_shape: make ``log_delta`` and ``epsilon`` trainable parameters.
        eps: added to the variance (RevIN's eps).
        affine: RevIN's learned per-channel affine step after the S_U map.
        subtract_last: RevIN's last-value location.
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
        delta: float | Sequence[float] = 1.0,
        epsilon: float | Sequence[float] = 0.0,
        learn_shape: bool = False,
        eps: float = 1e-5,
        affine: bool = True,
        subtract_last: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            channels,
            lookback=lookback,
            eps=eps,
            affine=affine,
            subtract_last=subtract_last,
            device=device,
            dtype=dtype,
        )
        self.learn_shape = learn_shape
        self.delta_init = delta
        self.epsilon_init = epsilon
        shape = torch.empty(channels, device=device, dtype=dtype)
        if learn_shape:
            self.log_delta = nn.Parameter(shape.clone())
            self.epsilon = nn.Parameter(shape.clone())
        else:
            self.register_buffer("log_delta", shape.clone())
            self.register_buffer("epsilon", shape.clone())
        self.set_shape(delta, epsilon)

    def set_shape(self, delta: float | Sequence[float], epsilon: float | Sequence[float]) -> None:
        """Set ``(delta, epsilon)`` (scalars or one value per channel) in place."""
        d = torch.as_tensor(delta, dtype=torch.float64)
        e = torch.as_tensor(epsilon, dtype=torch.float64)
        if not torch.isfinite(d).all() or (d <= 0).any():
            raise ValueError(f"delta must be finite and positive, got {delta!r}.")
        if not torch.isfinite(e).all():
            raise ValueError(f"epsilon must be finite, got {epsilon!r}.")
        with torch.no_grad():
            self.log_delta.copy_(d.clamp(*DELTA_RANGE).log().expand(self.channels))
            self.epsilon.copy_(e.expand(self.channels))

    def reset_parameters(self) -> None:
        """RevIN's affine to identity; the shape back to its initial values."""
        super().reset_parameters()
        if hasattr(self, "log_delta"):
            self.set_shape(self.delta_init, self.epsilon_init)

    @property
    def delta(self) -> torch.Tensor:
        """The tail parameter ``exp(log_delta)``, clamped to :data:`DELTA_RANGE`."""
        low, high = DELTA_RANGE
        return self.log_delta.clamp(math.log(low), math.log(high)).exp()

    def _coefficients(self) -> tuple[torch.Tensor, ...]:
        delta = self.delta.double()
        epsilon = self.epsilon.double()
        xi, lam = moment_matched(delta, epsilon)
        return delta, epsilon, xi, lam

    def _map(self, u: torch.Tensor, state: State, offset: int) -> torch.Tensor:
        delta, epsilon, xi, lam = self._coefficients()
        v = epsilon + delta * torch.asinh((u.double() - xi) / lam)
        return v.to(u.dtype)

    def _unmap(self, v: torch.Tensor, state: State, offset: int) -> torch.Tensor:
        delta, epsilon, xi, lam = self._coefficients()
        arg = ((v.double() - epsilon) / delta).clamp(-_MAX_SINH_ARG, _MAX_SINH_ARG)
        u = xi + lam * torch.sinh(arg)
        big = torch.finfo(v.dtype).max
        return u.clamp(-big, big).to(v.dtype)

    def initialize_shape(self, x: torch.Tensor, **kwargs: float) -> JohnsonFit:
        """Set the shape from training windows ``x`` by :func:`fit_shape`; return the fit."""
        fit = fit_shape(x, eps=self.eps, **kwargs)
        self.set_shape(fit.delta, fit.gamma)
        return fit

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, learn_shape={self.learn_shape}"


def fit_shape(
    x: torch.Tensor, *, z: float = 0.524, fallback_delta: float = 30.0, eps: float = 1e-5
) -> JohnsonFit:
    """Slifker-Shapiro initialisation of NoRIN's ``(delta, epsilon = gamma)``.

    Each window of ``x`` (B, L, C) is standardized by its own mean and std (as NoRIN does
    before the S_U map); the standardized values of all windows and channels are pooled and
    fit by :func:`~normlab.series.johnson.slifker_shapiro`. Pooled standardized windows that
    are not S_U (``m n / p^2 <= 1``, e.g. electricity demand, whose daily cycle gives
    bounded, bimodal windows) get the documented fallback ``delta = fallback_delta``,
    ``gamma = 0``: the near-linear end of the search range.
    """
    if x.dim() != 3:
        raise ValueError(
            f"fit_shape needs windows (batch, length, channels), got {tuple(x.shape)}."
        )
    xf = x.double()
    mu, sigma = instance_stats(xf, eps)
    return slifker_shapiro((xf - mu) / sigma, z=z, fallback_delta=fallback_delta)


register(
    Method(
        "norin",
        "series",
        NoRIN,
        paper("norin"),
        "RevIN then a moment-matched Johnson S_U map with shape (delta, epsilon)",
        layout="series",
    )
)
