"""How generalized-entropy score normalizers differ from softmax, measured in float64 on random
score rows (``paper("kappa")``: Kaniadakis kappa-softmax and Abe softmax,
:func:`normlab.functional.kappa_softmax`, :func:`normlab.functional.abe_softmax`).

- :func:`softmax_limit`: kappa-softmax's largest deviation from softmax as ``kappa -> 0``,
  and the order of that deviation in ``kappa``.
- :func:`tail_exponent`: the fitted log-log slope of kappa-softmax's probability of scores
  far below the row maximum (an algebraic tail ``p ~ d^(-1/kappa)``), per kappa.
- :func:`abe_deviation`: Abe softmax's deviation from softmax in ``eps = ln q`` and its
  ``q <-> 1/q`` symmetry.
- :func:`tail_probability`: ``log10`` of the probability softmax and kappa-softmax give one
  score a fixed distance below the row maximum.
- :func:`attention_log_range`: how far below its row maximum a trained softmax attention
  puts its lowest key, ``log p_max - log p_min`` (= the score range, for softmax): the
  distance at which the operators' tails differ in a real model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from normlab.functional import abe_softmax, kappa_softmax

__all__ = [
    "abe_deviation",
    "attention_log_range",
    "random_scores",
    "softmax_limit",
    "tail_exponent",
    "tail_probability",
]

_F64 = torch.float64


def _loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def random_scores(rows: int, keys: int, scale: float, generator: torch.Generator) -> torch.Tensor:
    """``(rows, keys)`` float64 scores drawn ``N(0, scale^2)`` from ``generator``."""
    return torch.randn((rows, keys), generator=generator, dtype=_F64) * scale


def softmax_limit(scores: torch.Tensor, kappas: Sequence[float]) -> dict[str, float]:
    """``max |kappa_softmax(scores, kappa) - softmax(scores)|`` per kappa
    (``max_err_kappa_<k>``), the first one as ``max_err``, and the fitted order of the
    deviation in kappa (``order_in_kappa``; NaN with one kappa)."""
    reference = torch.softmax(scores, -1)
    kappas = list(kappas)
    errors = [float((kappa_softmax(scores, kappa=k) - reference).abs().max()) for k in kappas]
    row = {f"max_err_kappa_{k:g}": e for k, e in zip(kappas, errors, strict=True)}
    row["max_err"] = errors[0]
    row["order_in_kappa"] = _loglog_slope(kappas, errors) if len(kappas) > 1 else math.nan
    return row


def tail_exponent(
    head: torch.Tensor, kappas: Sequence[float], points: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """Fitted tail slope of kappa-softmax per kappa and the worst relative error against
    ``-1/kappa``.

    Each row of ``head`` gets ``points`` extra scores at log-spaced distances ``d`` in
    ``[1e2, 1e4]`` below its maximum; the slope of ``log p`` against ``log d`` is fitted per
    row over those scores and averaged over rows.

    Returns:
        ``(row, curve)``: ``slope_kappa_<k>``, ``expected_kappa_<k>`` and
        ``max_rel_error``; the distances and the first row's tail probabilities per kappa.
    """
    d = torch.logspace(2, 4, points, dtype=_F64)
    s = torch.cat([head, head.amax(-1, keepdim=True) - d], dim=-1)
    row: dict[str, float] = {}
    curve: dict[str, Any] = {"distance": d.tolist()}
    worst = 0.0
    for k in kappas:
        p = kappa_softmax(s, kappa=k)[:, head.shape[1] :]
        slope = float(np.mean([_loglog_slope(d.tolist(), r.tolist()) for r in p]))
        worst = max(worst, abs(slope * k + 1.0))  # |slope - (-1/k)| / (1/k)
        row[f"slope_kappa_{k:g}"] = slope
        row[f"expected_kappa_{k:g}"] = -1.0 / k
        curve[f"kappa_{k:g}"] = p[0].tolist()
    row["max_rel_error"] = worst
    return row, curve


def abe_deviation(
    scores: torch.Tensor, eps: Sequence[float]
) -> tuple[dict[str, float], dict[str, Any]]:
    """``||abe_softmax(q = e^eps) - softmax||`` (Frobenius, over every row) per ``eps``
    (``dev_eps_<e>``), its fitted order in eps (``order_in_eps``), and
    ``reciprocal_gap = max |abe(e^eps) - abe(e^-eps)|`` at the largest eps (the odd part)."""
    reference = torch.softmax(scores, -1)
    eps = list(eps)
    dev = [float(torch.linalg.norm(abe_softmax(scores, q=math.exp(e)) - reference)) for e in eps]
    row = {f"dev_eps_{e:g}": v for e, v in zip(eps, dev, strict=True)}
    row["order_in_eps"] = _loglog_slope(eps, dev)
    top = eps[-1]
    gap = abe_softmax(scores, q=math.exp(top)) - abe_softmax(scores, q=math.exp(-top))
    row["reciprocal_gap"] = float(gap.abs().max())
    return row, {"eps": eps, "deviation": dev}


def tail_probability(head: torch.Tensor, distance: float, kappa: float) -> dict[str, float]:
    """``log10`` of the probability softmax and kappa-softmax (``kappa``) give one extra
    score ``distance`` below each row's maximum, mean over the rows of ``head``.

    Examples:
        >>> import torch
        >>> p = tail_probability(torch.zeros(2, 4, dtype=torch.float64), 30.0, 0.2)
        >>> p["kappa-softmax"] > -6 > p["softmax"]
        True
    """
    s = torch.cat([head, head.amax(-1, keepdim=True) - float(distance)], -1)
    probs = {
        "softmax": torch.softmax(s, -1)[:, -1],
        "kappa-softmax": kappa_softmax(s, kappa=kappa)[:, -1],
    }
    return {name: float(p.log10().mean()) for name, p in probs.items()}


def attention_log_range(probs: Sequence[torch.Tensor], min_keys: int = 16) -> float:
    """Median over attention rows of ``ln p_max - ln p_min``, rows of at least ``min_keys``
    keys (causal rows: query index >= ``min_keys - 1``), over every layer's probabilities
    ``(batch, heads, queries, keys)``. For softmax this is the row's score range
    ``s_max - s_min``: the distance below the maximum that the tail of the operator
    (exponential for softmax, algebraic ``d^(-1/kappa)`` for kappa-softmax) acts on.
    A probability that underflows counts as the smallest normal float."""
    ranges = []
    for p in probs:
        p = p.detach().double()
        rows = p[..., min_keys - 1 :, :]
        keys = torch.arange(p.shape[-1])
        queries = torch.arange(min_keys - 1, p.shape[-2]).unsqueeze(-1)
        visible = keys <= queries  # causal: query q sees keys 0..q
        tiny = torch.finfo(torch.float32).tiny
        logs = rows.clamp_min(tiny).log()
        hi = logs.masked_fill(~visible, -math.inf).amax(-1)
        lo = logs.masked_fill(~visible, math.inf).amin(-1)
        ranges.append((hi - lo).flatten())
    return float(torch.cat(ranges).median())
