"""Wall-clock cost of the circulant-diagonal log-det and inverse against dense linear algebra.

:func:`cd_operation_times` times :func:`~normlab.flows.circulant.cd_logabsdet` and
:func:`~normlab.flows.circulant.cd_inverse` of one ``n x n`` CD layer against
``torch.linalg.slogdet`` and ``torch.linalg.solve`` on the same materialised matrix, each
the best of a few repeats (:func:`best_time`), so their growth with ``n`` can be fitted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from normlab.flows.circulant import CirculantDiagonalLinear, cd_inverse, cd_logabsdet

__all__ = ["OPERATIONS", "best_time", "cd_operation_times"]

#: The timed operations, in the order :func:`cd_operation_times` reports them.
OPERATIONS = ("cd_logdet", "dense_logdet", "cd_inverse", "dense_inverse")


def best_time(fn: Callable[[], Any], min_total: float = 2e-3, repeats: int = 3) -> float:
    """Seconds per call of ``fn``: the best of ``repeats`` timings of enough calls to last
    ``min_total`` seconds (after one warm-up call and one call that sizes the loop)."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    calls = max(1, int(min_total / once))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


@torch.no_grad()
def cd_operation_times(n: int, seed: int, m: int = 2) -> dict[str, float]:
    """Seconds per call of the CD and dense log-det and inverse of one ``n x n`` layer with
    ``m`` diagonals (float64, random weights from ``seed``), keyed by :data:`OPERATIONS`."""
    torch.manual_seed(seed)
    layer = CirculantDiagonalLinear(n, m=m, init_std=0.1, dtype=torch.float64)
    d, c = layer.diagonals.detach(), layer.columns.detach()
    dense = layer.matrix()
    y = torch.randn(1, n, dtype=torch.float64)
    return {
        "cd_logdet": best_time(lambda: cd_logabsdet(d, c)),
        "dense_logdet": best_time(lambda: torch.linalg.slogdet(dense)),
        "cd_inverse": best_time(lambda: cd_inverse(y, d, c)),
        "dense_inverse": best_time(lambda: torch.linalg.solve(dense, y.T)),
    }
