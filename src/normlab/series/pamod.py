"""PAMod: phase-amplitude modulation of the normalized series by learned periodic tables."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from normlab._registry import Method, register
from normlab.papers import paper
from normlab.series._base import State
from normlab.series.revin import RevIN

__all__ = ["PAMod"]


class PAMod(RevIN):
    """RevIN with learned periodic amplitude and phase tables for cyclical shifts.

    For each period ``P`` (e.g. 24 and 168 steps for a day and a week of hourly data) PAMod
    learns two tables of shape (P, C), amplitude ``A_P`` and phase ``Phi_P`` (init 0),
    indexed by the position within the period of each absolute time step,
    ``k_P(t) = t mod P``. Over all periods,

    ``a_t = exp(sum_P A_P[k_P(t)])`` and ``phi_t = sum_P Phi_P[k_P(t)]``.

    With ``u = (x - mu) / sigma`` RevIN's standardized window, the input is demodulated at
    its own phases, ``v_t = (u_t - phi_t) / a_t``, and the backbone's forecast is modulated
    at the horizon's phases and restored, ``y_t = mu + sigma (a_t y_hat_t + phi_t)``, i.e. a
    denormalization with cyclic statistics ``sigma a_t`` and ``mu + sigma phi_t`` (PAMod
    paper: phase modulation captures cyclic mean shifts, amplitude modulation cyclic
    variance shifts; modulating in normalized space equals dynamic denormalization).
    RevIN's optional affine step follows the demodulation.

    Form (normlab's choice, the paper's exact form is not public): the amplitude is
    ``exp(A)`` rather than ``1 + A`` (equal to first order at the zero initialisation) so it
    is always positive and the map always invertible; and the input is demodulated with the
    same tables, so ``invert(*normalize(x))`` is exactly ``x`` and the backbone sees the
    window with its known cyclic profile removed (as CycleNet removes learned cycles).

    Indexing follows CycleNet: ``normalize(x, index=i)`` with ``i`` (B,) the absolute step
    of each window's first value; window steps are ``i + t`` and horizon steps
    ``i + L + t``.

    Args:
        channels: number of channels ``C``.
        periods: the cycle lengths ``P`` in steps, one table pair each; ``None`` for 24.
        eps: RevIN's variance floor.
        affine: RevIN's learned per-channel affine step.
        subtract_last: RevIN's last-value location.
        lookback: the shortest window accepted (None: any length); longer ones work too.
        horizon: accepted and ignored (any forecast length works).
    """

    def __init__(
        self,
        channels: int,
        *,
        lookback: int | None = None,
        horizon: int | None = None,
        periods: Sequence[int] | None = (24,),
        eps: float = 1e-5,
        affine: bool = True,
        subtract_last: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        periods = (24,) if periods is None else tuple(periods)
        if not periods or any(not isinstance(p, int) or p < 1 for p in periods):
            raise ValueError(f"periods must be positive ints, got {periods!r}.")
        super().__init__(
            channels,
            lookback=lookback,
            eps=eps,
            affine=affine,
            subtract_last=subtract_last,
            device=device,
            dtype=dtype,
        )
        self.periods = periods
        factory = {"device": device, "dtype": dtype}
        self.amplitude = nn.ParameterList(
            [nn.Parameter(torch.zeros(p, channels, **factory)) for p in periods]
        )
        self.phase = nn.ParameterList(
            [nn.Parameter(torch.zeros(p, channels, **factory)) for p in periods]
        )

    def reset_parameters(self) -> None:
        """RevIN's affine to identity and every table to zero (no modulation)."""
        super().reset_parameters()
        if hasattr(self, "amplitude"):
            for table in (*self.amplitude, *self.phase):
                nn.init.zeros_(table)

    def modulation(self, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, phi)`` of shape (B, T, C) at the absolute time steps ``steps`` (B, T)."""
        log_a = 0.0
        phi = 0.0
        for period, amp, pha in zip(self.periods, self.amplitude, self.phase, strict=True):
            k = torch.remainder(steps, period)
            log_a = log_a + amp[k]
            phi = phi + pha[k]
        return torch.exp(log_a), phi

    def _steps(self, state: State, length: int, offset: int, device: torch.device) -> torch.Tensor:
        index = state.get("index")
        if index is None:
            raise ValueError(
                "PAMod needs each window's absolute time step to look up its phase: call "
                "normalize(x, index=i) with i the step of each window's first value."
            )
        index = torch.as_tensor(index, device=device)
        if index.is_floating_point() or index.dim() > 1:
            raise ValueError(
                f"PAMod index must be an integer tensor of shape (batch,), got dtype "
                f"{index.dtype} and shape {tuple(index.shape)}."
            )
        batch = int(state["batch"])
        if index.numel() not in (1, batch):
            raise ValueError(
                f"PAMod index has {index.numel()} entries for a batch of {batch} windows; "
                "pass one start step per window."
            )
        index = index.reshape(-1, 1).expand(batch, 1)
        return index + offset + torch.arange(length, device=device)

    def _map(self, u: torch.Tensor, state: State, offset: int) -> torch.Tensor:
        a, phi = self.modulation(self._steps(state, u.shape[1], offset, u.device))
        return (u - phi.to(u.dtype)) / a.to(u.dtype)

    def _unmap(self, v: torch.Tensor, state: State, offset: int) -> torch.Tensor:
        a, phi = self.modulation(self._steps(state, v.shape[1], offset, v.device))
        return v * a.to(v.dtype) + phi.to(v.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, periods={self.periods}"


register(
    Method(
        "pamod",
        "series",
        PAMod,
        paper("pamod"),
        "RevIN plus learned periodic amplitude/phase tables that modulate normalized values",
        layout="series",
    )
)
