"""Loss spikes and curvature peaks in training curves, as series a rank test can compare.

The curvature-spikes paper (``paper("curvature-spikes")``) ties loss spikes to peaks in
the curvature of the normalization layers. :func:`spike_size` scores each step by how far
the loss rose above its recent minimum (in log space, so a doubling is ``log 2`` at any
loss level); :func:`curvature_peak` scores each step by how far the log-curvature stands
above its running median, widened over ``+-tau`` steps so that a peak a few steps before
or after a spike still coincides with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["curvature_peak", "spike_size"]


def spike_size(loss: Sequence[float], window: int) -> np.ndarray:
    """``a_t = max(0, log L_t - min_{t-w<=s<t} log L_s)``, ``a_0 = 0``: the rise per step.

    Args:
        loss: the loss per step (values below 1e-300 are clamped there).
        window: ``w``, how many earlier steps the recent minimum looks back.

    Examples:
        >>> import math
        >>> a = spike_size([1.0, 0.5, 0.25, 2.0, 0.1], window=2)
        >>> a.tolist()[:3], math.isclose(a[3], math.log(8)), float(a[4])
        ([0.0, 0.0, 0.0], True, 0.0)
    """
    lg = np.log(np.maximum(np.asarray(loss, dtype=float), 1e-300))
    out = np.zeros_like(lg)
    for t in range(1, len(lg)):
        out[t] = max(0.0, lg[t] - lg[max(0, t - window) : t].min())
    return out


def curvature_peak(curvature: Sequence[float], window: int, tau: int) -> np.ndarray:
    """``q_t``: log-curvature above its centred running median, max-pooled over ``+-tau``.

    The median runs over ``2 window + 1`` steps centred on ``t`` (edges padded with the end
    values), so a smooth trend scores 0 and an isolated peak scores its log-height.

    Args:
        curvature: a positive curvature per step.
        window: half-width of the running median.
        tau: half-width of the max-pooling.

    Examples:
        >>> import math
        >>> curve = [1.0] * 21
        >>> curve[10] = math.e  # a peak of log-height 1 at step 10
        >>> q = curvature_peak(curve, window=3, tau=1)
        >>> q[9:12].round(6).tolist(), float(q[5])
        ([1.0, 1.0, 1.0], 0.0)
    """
    lc = np.log(np.asarray(curvature, dtype=float))
    pad = np.pad(lc, window, mode="edge")
    med = np.median(np.lib.stride_tricks.sliding_window_view(pad, 2 * window + 1), axis=1)
    excess = np.pad(lc - med, tau, mode="edge")
    return np.lib.stride_tricks.sliding_window_view(excess, 2 * tau + 1).max(axis=1)
