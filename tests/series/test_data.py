"""Forecasting data: the Time-Series-Library protocol, real and synthetic series."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normlab.data.series import (
    Series,
    cyclic_series,
    heavy_tailed_series,
    load_series,
    named_series,
    split_windows,
)


def _ramp(n: int = 1000, channels: int = 2) -> Series:
    values = np.arange(n * channels, dtype=np.float32).reshape(n, channels)
    values[:, 1] = np.sin(np.arange(n) / 5.0) * 3 + 1
    return Series("ramp", values, ("a", "b"), (24,))


def test_split_follows_the_tslib_protocol():
    series = _ramp(1000)
    splits = split_windows(series, lookback=20, horizon=10)
    n_train, n_val = 700, 100
    assert len(splits.train) == n_train - 20 - 10 + 1
    assert len(splits.val) == n_val - 10 + 1
    assert len(splits.test) == 1000 - n_train - n_val - 10 + 1
    raw = series.values.astype(np.float64)
    np.testing.assert_allclose(splits.mean, raw[:n_train].mean(0))
    np.testing.assert_allclose(splits.std, raw[:n_train].std(0))
    train = splits.train.data.numpy()
    np.testing.assert_allclose(train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(train.std(0), 1, atol=1e-5)
    # the first validation target is the first validation row; windows are stride 1
    x, y, index = splits.val.get(torch.tensor([0, 1]))
    scaled = (raw - splits.mean) / splits.std
    np.testing.assert_allclose(y[0, 0].numpy(), scaled[n_train], rtol=1e-5)
    np.testing.assert_allclose(x[1].numpy(), scaled[n_train - 20 + 1 : n_train + 1], rtol=1e-5)
    assert index.tolist() == [n_train - 20, n_train - 19]
    x, y, index = splits.test.get(torch.tensor([len(splits.test) - 1]))
    np.testing.assert_allclose(y[0, -1].numpy(), scaled[-1], rtol=1e-5)


def test_spread_picks_evenly_spaced_windows():
    windows = split_windows(_ramp(1000), lookback=20, horizon=10).train
    ids = windows.spread(5)
    assert ids[0] == 0 and ids[-1] == len(windows) - 1 and len(ids) == 5
    assert len(windows.spread(None)) == len(windows)


def test_bad_series_are_clear_errors():
    flat = _ramp(200)
    flat.values[:, 1] = 4.0
    with pytest.raises(ValueError, match=r"constant.*'b'|'b'.*constant"):
        split_windows(flat, lookback=20, horizon=10)
    holes = _ramp(200)
    holes.values[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        split_windows(holes, lookback=20, horizon=10)
    with pytest.raises(ValueError, match="too short"):
        split_windows(_ramp(200), lookback=96, horizon=96)
    with pytest.raises(ValueError, match="Unknown series"):
        named_series("ettm1")


def test_synthetic_series_are_seeded_and_shaped():
    a = heavy_tailed_series(500, 3, seed=4)
    b = heavy_tailed_series(500, 3, seed=4)
    c = heavy_tailed_series(500, 3, seed=5)
    assert a.values.shape == (500, 3) and a.values.dtype == np.float32
    np.testing.assert_array_equal(a.values, b.values)
    assert not np.array_equal(a.values, c.values)
    kurt = ((a.values - a.values.mean(0)) ** 4).mean(0) / a.values.var(0) ** 2
    assert (kurt > 4).all()  # heavy tails


def test_cyclic_series_shift_with_the_phase_and_the_control_does_not():
    week = 168
    n = 40 * week
    cyc = cyclic_series(n, 1, seed=0).values[:, 0]
    ctl = cyclic_series(n, 1, seed=0, mean_shift=0, var_shift=0).values[:, 0]

    def phase_share(x):  # share of the variance explained by the weekly position
        x = x - np.convolve(x, np.ones(week) / week, mode="same")  # drop the slow level
        x = x[week:-week]
        phase = np.arange(week, n - week) % week
        means = np.array([x[phase == k].mean() for k in range(week)])
        return means.var() / x.var()

    assert phase_share(cyc) > 0.3
    assert phase_share(ctl) < 0.1


def test_real_series_ship_in_the_wheel():
    vic = load_series("vic_elec", every=2)
    assert vic.values.shape == (26304, 2) and vic.periods == (24, 168)
    assert np.isfinite(vic.values).all()
    prices = named_series("epf_prices", length=1000)
    assert prices.values.shape == (1000, 2) and prices.columns == ("FR price", "BE price")
    full = load_series("epf_fr_be")
    assert full.values.shape == (16080, 4) and full.periods == (24, 168)
    with pytest.raises(ValueError, match="no column"):
        load_series("epf_fr_be", columns=("price",))
