"""spike_size and curvature_peak on planted series."""

from __future__ import annotations

import math

import numpy as np

from normlab.probes.spikes import curvature_peak, spike_size


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
