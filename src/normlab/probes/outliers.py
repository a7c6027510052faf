"""Activation outliers: infinity norm and kurtosis per sequence, and massive activations.

Bondarenko et al. ("Quantizable Transformers", 2023) measure outliers on each layer's
output, per sequence, flattening its ``T x d`` values: the infinity norm ``max |x|`` and the
Pearson kurtosis ``E[(x - mu)^4] / sigma^4`` (3 for a Gaussian; OASIS's code adds 1e-6 to
the denominator, as here). Each site's numbers are averaged over sequences;
``max_inf_norm`` is the largest site mean and ``avg_kurtosis`` the mean over sites.

Massive activations (Sun et al., 2024) are single entries of a hidden state with
``|a| > 100`` that are also about 1000 times the median ``|h|`` of that hidden state (one
sequence's ``T x d`` values at one layer); both thresholds are arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from normlab.probes.hooks import adapt

__all__ = [
    "MassiveActivation",
    "OutlierReport",
    "SiteOutliers",
    "inf_norm",
    "kurtosis",
    "massive_activations",
    "outlier_stats",
]

SITES = ("residual", "norm_inputs", "norm_outputs")


def kurtosis(x: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """Pearson kurtosis of each sequence's values: ``E[(x - mu)^4] / (sigma^4 + eps)``.

    Args:
        x: ``(batch, ...)``; everything after the batch axis is one sample of values.

    Returns:
        ``(batch,)`` in float64 (a Gaussian gives 3).
    """
    v = x.detach().reshape(x.shape[0], -1).double()
    c = v - v.mean(dim=1, keepdim=True)
    var = c.pow(2).mean(dim=1)
    return c.pow(4).mean(dim=1) / (var.pow(2) + eps)


def inf_norm(x: torch.Tensor) -> torch.Tensor:
    """``max |x|`` of each sequence: ``(batch, ...) -> (batch,)`` in float64."""
    return x.detach().reshape(x.shape[0], -1).abs().amax(dim=1).double()


@dataclass(frozen=True)
class MassiveActivation:
    """One massive activation.

    Attributes:
        site: the site index (layer position in the residual list, or norm site order).
        name: the site's name.
        sequence: batch index.
        token: token position.
        channel: feature index.
        value: the activation.
        ratio: ``|value| / median |h|`` of its hidden state.
    """

    site: int
    name: str
    sequence: int
    token: int
    channel: int
    value: float
    ratio: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def massive_activations(
    h: torch.Tensor,
    *,
    threshold: float = 100.0,
    ratio: float = 1000.0,
    site: int = 0,
    name: str = "",
) -> list[MassiveActivation]:
    """Entries of ``h`` (``(batch, tokens, d)``) with ``|a| > threshold`` and
    ``|a| > ratio * median |h|`` of their own sequence, largest first."""
    if h.dim() != 3:
        raise ValueError(f"massive_activations expects (batch, tokens, d), got {tuple(h.shape)}.")
    a = h.detach().abs().double()
    median = a.reshape(a.shape[0], -1).median(dim=1).values.clamp_min(1e-30)
    rel = a / median[:, None, None]
    hits = ((a > threshold) & (rel > ratio)).nonzero().tolist()
    found = [
        MassiveActivation(site, name, b, t, c, float(h[b, t, c]), float(rel[b, t, c]))
        for b, t, c in hits
    ]
    return sorted(found, key=lambda m: -abs(m.value))


@dataclass(frozen=True)
class SiteOutliers:
    """Outlier statistics of one site, averaged over sequences.

    Attributes:
        name: the site (``residual.<i>``, or a norm's module name).
        inf_norm: mean per-sequence ``max |x|``.
        kurtosis: mean per-sequence Pearson kurtosis.
        max_abs: largest ``|x|`` over all sequences.
    """

    name: str
    inf_norm: float
    kurtosis: float
    max_abs: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OutlierReport:
    """Outliers of a model over some batches (Bondarenko et al.; Sun et al.).

    Attributes:
        max_inf_norm: the largest site's mean infinity norm.
        avg_kurtosis: the mean over sites of the mean kurtosis.
        sites: per-site statistics.
        massive: massive activations found, largest first.
        sequences: how many sequences were measured.
    """

    max_inf_norm: float
    avg_kurtosis: float
    sites: tuple[SiteOutliers, ...]
    massive: tuple[MassiveActivation, ...] = field(default=())
    sequences: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_inf_norm": self.max_inf_norm,
            "avg_kurtosis": self.avg_kurtosis,
            "sites": [s.to_dict() for s in self.sites],
            "massive": [m.to_dict() for m in self.massive],
            "sequences": self.sequences,
        }


def _batches(tokens: torch.Tensor | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    return [tokens] if isinstance(tokens, torch.Tensor) else list(tokens)


def outlier_stats(
    model: nn.Module,
    tokens: torch.Tensor | Iterable[torch.Tensor],
    *,
    sites: str = "residual",
    threshold: float = 100.0,
    ratio: float = 1000.0,
    max_massive: int = 20,
) -> OutlierReport:
    """Measure outliers of ``model`` on token batches; the model is left unchanged.

    Args:
        model: any model :func:`~normlab.probes.hooks.adapt` understands.
        tokens: a ``(batch, tokens)`` id tensor or an iterable of them.
        sites: "residual" (each block's output, Bondarenko's layer outputs),
            "norm_inputs" or "norm_outputs" (every norm site).
        threshold: massive-activation magnitude threshold.
        ratio: massive-activation ratio to the median ``|h|``.
        max_massive: keep at most this many massive activations in the report.
    """
    if sites not in SITES:
        raise ValueError(f"sites must be one of {SITES}, got {sites!r}.")
    adapter = adapt(model)
    per_site: dict[str, list[torch.Tensor]] = {}
    massive: list[MassiveActivation] = []
    count = 0
    for batch in _batches(tokens):
        trace = adapter.trace(batch, norms=sites != "residual")
        if sites == "residual":
            named = {f"residual.{i}": h for i, h in enumerate(trace.residual) if i > 0}
        else:
            named = trace.norm_inputs if sites == "norm_inputs" else trace.norm_outputs
        for i, (name, h) in enumerate(named.items()):
            stats = torch.stack([inf_norm(h), kurtosis(h)], dim=1)
            per_site.setdefault(name, []).append(stats)
            if h.dim() == 3:
                massive += massive_activations(
                    h, threshold=threshold, ratio=ratio, site=i, name=name
                )
        count += batch.shape[0]
    rows = []
    for name, chunks in per_site.items():
        s = torch.cat(chunks)
        inf, kurt = float(s[:, 0].mean()), float(s[:, 1].mean())
        rows.append(SiteOutliers(name, inf, kurt, float(s[:, 0].max())))
    if not rows:
        raise ValueError("No activations were captured; check the model and the sites.")
    massive.sort(key=lambda m: -abs(m.value))
    return OutlierReport(
        max_inf_norm=max(r.inf_norm for r in rows),
        avg_kurtosis=sum(r.kurtosis for r in rows) / len(rows),
        sites=tuple(rows),
        massive=tuple(massive[:max_massive]),
        sequences=count,
    )
