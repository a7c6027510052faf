"""How fast a quadrature rule's moments converge across resolutions (the QuadNorm claim's
consistency measurement).

:func:`moment_mismatch` draws smooth non-periodic 2D fields
``sum_j A_j sin(w_j . (x, y) + p_j) + b1 x + b2 y^2``, evaluates the same functions on
endpoint-inclusive ``N x N`` grids, and compares each rule's mean and standard deviation
(:func:`~normlab.functional.quad_moments`) with their exact values: the fitted log-log
slope of the mismatch against ``h = 1 / (N - 1)`` is the rule's order of consistency
(~1 for the uniform mean InstanceNorm takes, ~2 for the trapezoid rule, ~4 for Simpson).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from normlab import functional as NF

__all__ = ["RULES", "moment_mismatch"]

#: The rules :func:`moment_mismatch` measures.
RULES = ("uniform", "trapezoid", "simpson")


def _fields(
    params: tuple[np.ndarray, np.ndarray], phase: np.ndarray, lin: np.ndarray, n: int
) -> torch.Tensor:
    """The fields on an ``n x n`` endpoint-inclusive grid, ``(count, 1, n, n)``; the same
    functions at every ``n``."""
    amp, freq = params
    t = np.linspace(0.0, 1.0, n)
    f = lin[:, 0, None, None] * t[:, None] + lin[:, 1, None, None] * t[None, :] ** 2
    for j in range(amp.shape[1]):  # sin(a + b) = sin a cos b + cos a sin b: outer products
        ax = freq[:, j, 0, None] * t + phase[:, j, None]
        by = freq[:, j, 1, None] * t
        f = f + amp[:, j, None, None] * (
            np.sin(ax)[:, :, None] * np.cos(by)[:, None, :]
            + np.cos(ax)[:, :, None] * np.sin(by)[:, None, :]
        )
    return torch.from_numpy(f)[:, None]


def moment_mismatch(
    seed: int, sizes: Sequence[int], *, fields: int = 8, reference: int = 513
) -> dict[str, dict[str, Any]]:
    """Per rule of :data:`RULES`: the mismatch ``mean |mu_N - mu| + |sd_N - sd|`` over
    ``fields`` random smooth fields at each grid size ``N`` of ``sizes``, and its fitted
    log-log slope against ``h = 1 / (N - 1)``.

    Exact moments come from Simpson's rule at ``reference`` points (error ~1e-9, far below
    the mismatches measured).

    Returns:
        rule -> ``{"slope": float, "mismatch": [per size], "h": [per size]}``.
    """
    rng = np.random.default_rng(seed)
    draws = (
        (rng.standard_normal((fields, 4)), rng.uniform(0.5, 4.0, (fields, 4, 2))),
        rng.uniform(0, 2 * np.pi, (fields, 4)),
        rng.standard_normal((fields, 2)),
    )
    mu_ref, var_ref = NF.quad_moments(_fields(*draws, reference), "simpson")
    out: dict[str, dict[str, Any]] = {}
    h = np.array([1.0 / (n - 1) for n in sizes])
    for rule in RULES:
        gaps = []
        for n in sizes:
            mu, var = NF.quad_moments(_fields(*draws, n), rule)  # type: ignore[arg-type]
            gap = (mu - mu_ref).abs() + (var.sqrt() - var_ref.sqrt()).abs()
            gaps.append(float(gap.mean()))
        slope = float(
            np.polyfit(np.log(np.asarray(h, float)), np.log(np.asarray(gaps, float)), 1)[0]
        )
        out[rule] = {"slope": slope, "mismatch": gaps, "h": h.tolist()}
    return out
