"""Shifted vs unshifted softmax in fp16/bf16 with a sink logit (see :mod:`.numerics`).

With inputs exactly representable in the low dtype, the unshifted ``exp(x) / sum exp(x)``
only rounds exp's outputs but overflows once ``max x > log(max float)`` (11.09 in fp16). The
shifted form rounds the arguments ``z = x - max(x)``, a relative perturbation of ``z``, so
its error is governed by ``kappa_z = max_i (|z_i| + sum_j p_j |z_j|)``: a sink logit ``s``
above the rest makes every non-sink ``|z_i| ~ s``, and their error grows like ``u * s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from normlab._records import Record
from normlab.probes._lowp import pairwise_sum, round_to

__all__ = ["SoftmaxError", "lowp_softmax", "sink_sweep"]


def lowp_softmax(x: torch.Tensor, dtype: torch.dtype, *, shifted: bool) -> torch.Tensor:
    """Softmax over the last axis with every operation in ``dtype``; returned in fp64.

    Examples:
        >>> x = torch.tensor([[12.0, 0.0, -1.0]])  # exp(12) overflows fp16 (max 65504)
        >>> shifted = lowp_softmax(x, torch.float16, shifted=True)
        >>> unshifted = lowp_softmax(x, torch.float16, shifted=False)
        >>> round(shifted.sum().item(), 3), bool(unshifted.isnan().any())
        (1.0, True)
    """
    xl = x.to(dtype).double()
    z = round_to(xl - xl.amax(-1, keepdim=True), dtype) if shifted else xl
    e = round_to(torch.exp(z), dtype)
    total = pairwise_sum(e, dtype).double()
    return round_to(e / total[..., None], dtype).double()


@dataclass(frozen=True)
class SoftmaxError(Record):
    """Error of one softmax evaluation at one sink logit, averaged over rows.

    Attributes:
        dtype: "float16" or "bfloat16".
        shifted: whether ``max(x)`` was subtracted first.
        sink: the sink logit (position 0).
        error: mean over rows of the max relative error over non-sink positions.
        kappa: ``max_i (|z_i| + sum_j p_j |z_j|)`` of the rounded arguments ``z``
            (0 unshifted: exact inputs are not rounded again).
        sink_mass: mean probability of the sink.
        overflow: whether any exp overflowed.

    Examples:
        >>> r = SoftmaxError("bfloat16", True, 40.0, 0.13, 41.6, 1.0, False)
        >>> r.to_dict()["kappa"], r.overflow
        (41.6, False)
    """

    dtype: str
    shifted: bool
    sink: float
    error: float
    kappa: float
    sink_mass: float
    overflow: bool


def sink_sweep(
    sinks: Sequence[float],
    *,
    n: int = 128,
    rows: int = 32,
    spread: float = 1.0,
    dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16),
    seed: int = 0,
) -> list[SoftmaxError]:
    """Shifted vs unshifted softmax error as a sink logit at position 0 grows.

    Logits are ``N(0, spread^2)`` with position 0 set to ``sink``; inputs are rounded to
    each dtype first and the reference is the float64 softmax of those rounded inputs, so
    the measured error is the evaluation's own.

    Examples:
        >>> records = sink_sweep([0.0, 40.0], n=16, rows=4, dtypes=(torch.bfloat16,))
        >>> [(r.sink, r.shifted) for r in records]
        [(0.0, False), (0.0, True), (40.0, False), (40.0, True)]
        >>> records[2].error < 0.01 < records[3].error  # the shifted error grows with the sink
        True
    """
    generator = torch.Generator().manual_seed(seed)
    base = spread * torch.randn(rows, n, generator=generator, dtype=torch.float64)
    records = []
    for s in sinks:
        x = base.clone()
        x[:, 0] = s
        for dtype in dtypes:
            xr = x.to(dtype).double()
            ref = torch.softmax(xr, dim=-1)
            for shifted in (False, True):
                p = lowp_softmax(xr, dtype, shifted=shifted)
                rel = ((p[:, 1:] - ref[:, 1:]).abs() / ref[:, 1:]).amax(-1)
                overflow = not bool(torch.isfinite(p).all())
                err = math.inf if overflow else float(rel.mean())
                z = xr - xr.amax(-1, keepdim=True) if shifted else torch.zeros_like(xr)
                kappa = float((z.abs() + (ref * z.abs()).sum(-1, keepdim=True)).amax(-1).mean())
                name = str(dtype).removeprefix("torch.")
                mass = float(ref[:, 0].mean())
                records.append(SoftmaxError(name, shifted, float(s), err, kappa, mass, overflow))
    return records
