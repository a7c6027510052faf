"""Loss spikes and curvature peaks in training curves, as series a rank test can compare.

The curvature-spikes paper (``paper("curvature-spikes")``) ties loss spikes to peaks in
the curvature of the normalization layers. :func:`spike_size` scores each step by how far
the loss rose above its recent minimum (in log space, so a doubling is ``log 2`` at any
loss level); :func:`curvature_peak` scores each step by how far the log-curvature stands
above its running median, widened over ``+-tau`` steps so that a peak a few steps before
or after a spike still coincides with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["coincidence", "curvature_peak", "spike_size"]


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


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); NaN for a constant series."""

    def ranks(v: np.ndarray) -> np.ndarray:
        r = np.empty(len(v))
        r[v.argsort(kind="stable")] = np.arange(len(v), dtype=float)
        for value in np.unique(v):
            r[v == value] = r[v == value].mean()
        return r

    if len(a) < 3:
        return math.nan
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def coincidence(
    loss: Sequence[float],
    curvature: Sequence[float],
    *,
    window: int,
    tau: int,
    burn: int,
    shifts: int,
    spike_abs: float,
) -> dict[str, float]:
    """Do loss spikes and curvature peaks coincide in time, beyond chance?

    Spike steps are those whose loss is at least twice its minimum over the previous
    ``window`` steps and at least ``spike_abs`` above it; ``a_t`` is the log-rise
    (:func:`spike_size`) at spike steps, else 0; ``q_t`` is :func:`curvature_peak`. After
    the first ``burn`` steps, ``rho`` is the Spearman correlation of ``a`` and ``q`` and
    ``rho_placebo`` its mean over ``shifts`` circular shifts of ``q`` by at least
    ``window + tau`` steps (the shifts keep both series' autocorrelation and marginals and
    destroy only their alignment). A run without a spike has a constant ``a`` and scores
    ``rho = 0`` (no coincidence).

    Returns:
        ``rho``, ``rho_placebo``, ``rho_placebo_sd``, ``spikes`` (onsets after the burn-in:
        spike steps whose predecessor is not one), ``spiked`` (1.0 if any) and
        ``max_spike`` (the largest ``a_t``).

    Examples:
        >>> import math
        >>> loss, curvature = [1.0] * 60, [1.0] * 60
        >>> for t in (20, 40):  # two loss spikes (x3), each on a curvature peak
        ...     loss[t], curvature[t] = 3.0, math.e
        >>> r = coincidence(loss, curvature, window=3, tau=1, burn=5, shifts=8, spike_abs=0.5)
        >>> r["spikes"], round(r["max_spike"], 3), r["rho"] > 0.5 > r["rho_placebo"]
        (2.0, 1.099, True)
    """
    rise = spike_size(loss, window)
    lossv = np.asarray(loss, dtype=float)
    recent_min = lossv * np.exp(-rise)
    spiking = (rise >= math.log(2)) & (lossv - recent_min >= spike_abs)
    a = np.where(spiking, rise, 0.0)[burn:]
    spiking = spiking[burn:]
    onsets = int(np.sum(spiking[1:] & ~spiking[:-1]) + spiking[0]) if len(a) else 0
    q = curvature_peak(curvature, window, tau)[burn:]
    lo = window + tau
    lags = np.unique(np.linspace(lo, len(a) - lo, shifts).astype(int))
    placebo = [_spearman(a, np.roll(q, int(j))) for j in lags]
    observed = _spearman(a, q)
    finite = [p for p in placebo if math.isfinite(p)]
    return {
        "rho": observed if math.isfinite(observed) else 0.0,
        "rho_placebo": float(np.mean(finite)) if finite else 0.0,
        "rho_placebo_sd": float(np.std(finite)) if finite else 0.0,
        "spikes": float(onsets),
        "spiked": float(onsets >= 1),
        "max_spike": float(a.max()) if len(a) else 0.0,
    }
