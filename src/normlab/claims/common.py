"""Small helpers shared by claim modules."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import torch

from normlab._machine import QUIET_THRESHOLD, QUIET_WHY
from normlab.claims.core import Precondition, cell

__all__ = ["QUICK_GPT", "loglog_slope", "machine_quiet", "seed_everything", "spearman"]

#: TinyGPT's shape at quick scale, shared so that claims share cached trained models.
QUICK_GPT = {"d_model": 64, "n_layers": 2, "n_heads": 4, "context": 64}


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch generator seeded the same way."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (the exponent of ``y ~ x^k``)."""
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation of two equal-length sequences (average ranks for ties).

    NaN for fewer than 3 pairs or a constant sequence.
    """
    if len(a) != len(b) or len(a) < 3:
        return float("nan")

    def ranks(v: Sequence[float]) -> np.ndarray:
        arr = np.asarray(v, dtype=float)
        order = arr.argsort(kind="stable")
        r = np.empty(len(arr))
        r[order] = np.arange(len(arr), dtype=float)
        for value in np.unique(arr):  # average ranks of ties
            r[arr == value] = r[arr == value].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def machine_quiet(sampled: str, gates: Sequence[str]) -> Precondition:
    """The precondition of a claim's timings: no runnable task waited for a core at any
    sample (``table["machine"]["tasks_waiting"]``, from
    :func:`normlab._machine.tasks_waiting_for_a_core`), else the timing measures the scheduler
    and the effects in ``gates`` are untestable. ``sampled`` says when the samples were taken.
    """
    return Precondition(
        "machine_quiet",
        "the most runnable tasks beyond the core count (/proc/loadavg, the timing process "
        f"included) sampled {sampled}",
        lambda m: cell(m, "machine", "tasks_waiting"),
        op="<=",
        threshold=QUIET_THRESHOLD,
        source=QUIET_WHY,
        gates=tuple(gates),
    )
