"""spike_size and curvature_peak on planted series."""

from __future__ import annotations

import math

import numpy as np

from normlab.probes.spikes import coincidence, curvature_peak, spike_size


def test_spike_size_and_curvature_peak_on_planted_series():
    loss = [1.0, 0.5, 0.25, 0.2, 1.6, 0.8, 0.1]
    a = spike_size(loss, window=3)
    assert np.allclose(a[:4], 0) and math.isclose(a[4], math.log(8.0))
    assert a[6] == 0  # below every recent value
    trend = np.exp(np.linspace(0, 1, 50))
    assert np.abs(curvature_peak(trend, 5, 0)[5:-5]).max() < 1e-12  # 0 on a smooth trend
    bump = trend.copy()
    bump[25] *= 3
    q = curvature_peak(bump, 5, 2)
    # the median moves by one trend step (1/49) when the bump leaves it
    assert abs(q[23] - math.log(3)) < 0.03 and q[20] < 1e-12


def test_coincidence_detects_aligned_peaks_and_not_misaligned_ones():
    rng = np.random.default_rng(0)
    t = 400
    loss = np.exp(-np.linspace(0, 8, t)) * (1 + 0.01 * rng.random(t))
    curv = 10 + 0.01 * rng.random(t)
    cfg = {"window": 20, "tau": 3, "burn": 20, "shifts": 100, "spike_abs": 0.1}
    for s in (120, 260):
        loss[s : s + 5] = 1.0
    aligned = curv.copy()
    aligned[[119, 259]] = 20.0
    apart = curv.copy()
    apart[[60, 330]] = 20.0
    good, bad = coincidence(loss, aligned, **cfg), coincidence(loss, apart, **cfg)
    assert good["spikes"] == 2 and bad["spikes"] == 2
    assert good["rho"] - good["rho_placebo"] > 0.1
    assert bad["rho"] - bad["rho_placebo"] < 0.05
    smooth = coincidence(np.exp(-np.linspace(0, 8, t)), aligned, **cfg)
    assert smooth["spikes"] == 0 and smooth["rho"] == 0.0  # no spike: no coincidence
