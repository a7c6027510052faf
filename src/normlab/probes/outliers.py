"""Activation outliers: infinity norm and kurtosis per sequence, and massive activations.

Bondarenko et al. ("Quantizable Transformers", 2023) measure outliers on each layer's
output, per sequence, flattening its ``T x d`` values: the infinity norm ``max |x|`` and the
Pearson kurtosis ``E[(x - mu)^4] / sigma^4`` (3 for a Gaussian; OASIS's code adds 1e-6 to
the denominator, as here). Each site's numbers are averaged over sequences;
``max_inf_norm`` is the largest site mean and ``avg_kurtosis`` the mean over sites.

Massive activations (Sun et al., 2024) are single entries of a hidden state with
``|a| > 100`` that are also about 1000 times the median ``|h|`` of that hidden state (one
sequence's ``T x d`` values at one site); both thresholds are arguments. Beside that rule
the report lists the largest activations with their ratio to the median and their
(site, sequence, token, channel), so one just under a threshold stays visible.

Sites are labelled by kind: block outputs (the residual stream after each block), norm
inputs and norm outputs. Kurtosis is given per sequence (Bondarenko's: all ``T x d``
values of a sequence) and per token (each token's ``d`` values, averaged over tokens).
Padding (``attention_mask == 0``) is excluded from every statistic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
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
    """Outlier statistics of one site, averaged over sequences (padding excluded).

    Attributes:
        name: the site (``residual.<i>`` for block outputs, or a norm's module name).
        inf_norm: mean per-sequence ``max |x|``.
        kurtosis: mean *per-sequence* Pearson kurtosis (each sequence's ``T x d`` values).
        max_abs: largest ``|x|`` over all sequences.
        kind: "block_output", "norm_input" or "norm_output".
        layer: block index (-1 for a norm outside the blocks).
        token_kurtosis: mean *per-token* kurtosis (each token's ``d`` values), which
            stays large when a few channels carry outliers in every token.
    """

    name: str
    inf_norm: float
    kurtosis: float
    max_abs: float
    kind: str = "block_output"
    layer: int = -1
    token_kurtosis: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OutlierReport:
    """Outliers of a model over some batches (Bondarenko et al.; Sun et al.).

    Attributes:
        max_inf_norm: the largest block-output site's mean infinity norm (Bondarenko's
            layer outputs; every site when no block output was measured).
        avg_kurtosis: the mean over those sites of the per-sequence kurtosis.
        sites: per-site statistics, each labelled with its kind.
        massive: massive activations (``|a| > threshold`` and ``> ratio x median``).
        sequences: how many sequences were measured.
        largest: the top activations over all sites with their ratio to the median, kept
            whatever the thresholds (a 500x activation shows even below a 1000x rule).
        by_kind: per site kind, ``max_inf_norm``, ``avg_kurtosis``, ``avg_token_kurtosis``.
    """

    max_inf_norm: float
    avg_kurtosis: float
    sites: tuple[SiteOutliers, ...]
    massive: tuple[MassiveActivation, ...] = field(default=())
    sequences: int = 0
    largest: tuple[MassiveActivation, ...] = field(default=())
    by_kind: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_inf_norm": self.max_inf_norm,
            "avg_kurtosis": self.avg_kurtosis,
            "sites": [s.to_dict() for s in self.sites],
            "massive": [m.to_dict() for m in self.massive],
            "largest": [m.to_dict() for m in self.largest],
            "by_kind": self.by_kind,
            "sequences": self.sequences,
        }


def _batches(tokens: Any, attention_mask: Any) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    xs = [tokens] if isinstance(tokens, torch.Tensor) else list(tokens)
    if attention_mask is None:
        return [(x, None) for x in xs]
    ms = [attention_mask] if isinstance(attention_mask, torch.Tensor) else list(attention_mask)
    if len(ms) != len(xs) or any(m.shape != x.shape for m, x in zip(ms, xs, strict=True)):
        raise ValueError("attention_mask must match tokens: one (batch, tokens) mask per batch.")
    return list(zip(xs, ms, strict=True))


def _sequence_stats(h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Per sequence ``(inf-norm, kurtosis, token kurtosis, max)`` over its valid tokens."""
    rows = []
    for b in range(h.shape[0]):
        v = h[b] if mask is None or h.dim() != 3 else h[b][mask[b].bool()]
        v = v.reshape(-1, h.shape[-1]).detach().double()
        c = v - v.mean()
        k = c.pow(4).mean() / (c.pow(2).mean().pow(2) + 1e-6)
        ct = v - v.mean(-1, keepdim=True)
        kt = ct.pow(4).mean(-1) / (ct.pow(2).mean(-1).pow(2) + 1e-6)
        inf = v.abs().max()
        rows.append(torch.stack([inf, k, kt.mean(), inf]))
    return torch.stack(rows)


def _largest(
    h: torch.Tensor, mask: torch.Tensor | None, k: int, site: int, name: str
) -> list[MassiveActivation]:
    a = h.detach().abs().double()
    valid = torch.ones(a.shape[:2], dtype=torch.bool) if mask is None else mask.bool()
    found = []
    for b in range(a.shape[0]):
        rows = a[b][valid[b]]
        if rows.numel() == 0:
            continue
        median = float(rows.median().clamp_min(1e-30))
        tok = valid[b].nonzero().squeeze(1)
        top = rows.flatten().topk(min(k, rows.numel()))
        for value, idx in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            t, c = int(tok[idx // a.shape[-1]]), idx % a.shape[-1]
            found.append(MassiveActivation(site, name, b, t, c, float(h[b, t, c]), value / median))
    return found


def _massive(
    h: torch.Tensor,
    mask: torch.Tensor | None,
    threshold: float,
    ratio: float,
    site: int,
    name: str,
    offset: int,
) -> list[MassiveActivation]:
    """:func:`massive_activations` per sequence over its valid tokens only."""
    found = []
    for b in range(h.shape[0]):
        tok = torch.arange(h.shape[1]) if mask is None else mask[b].bool().nonzero().squeeze(1)
        if tok.numel() == 0:
            continue
        hits = massive_activations(
            h[b, tok][None], threshold=threshold, ratio=ratio, site=site, name=name
        )
        found += [replace(m, sequence=b + offset, token=int(tok[m.token])) for m in hits]
    return found


_KINDS = {"residual": "block_output", "norm_inputs": "norm_input", "norm_outputs": "norm_output"}


def outlier_stats(
    model: nn.Module,
    tokens: torch.Tensor | Iterable[torch.Tensor],
    *,
    attention_mask: torch.Tensor | Iterable[torch.Tensor] | None = None,
    sites: str = "all",
    threshold: float = 100.0,
    ratio: float = 1000.0,
    max_massive: int = 20,
    top_k: int = 10,
) -> OutlierReport:
    """Measure outliers of ``model`` on token batches; the model is left unchanged.

    Every statistic reads only the tokens ``attention_mask`` marks valid, so a padded
    batch gives the same numbers as its unpadded sequences. A massive activation is an
    entry with ``|a| > threshold`` and ``|a| > ratio * median |h|``, the median taken over
    the valid ``T x d`` values of its own sequence at its own site (Sun et al., 2024);
    ``largest`` lists the ``top_k`` largest ``|a|`` over all sites with that same ratio,
    whatever the thresholds.

    Args:
        model: any model :func:`~normlab.probes.hooks.adapt` understands.
        tokens: a ``(batch, tokens)`` id tensor or an iterable of them.
        attention_mask: 1 for real tokens, 0 for padding, shaped like ``tokens``.
        sites: "all" (default: block outputs, every norm's input and output; in post-LN
            models such as BERT the massive activations live in the sums entering each
            LayerNorm, which block outputs never show), or one kind: "residual" (block
            outputs, Bondarenko's layer outputs), "norm_inputs", "norm_outputs".
        threshold: massive-activation magnitude threshold.
        ratio: massive-activation ratio to the median ``|h|``.
        max_massive: keep at most this many massive activations in the report.
        top_k: how many of the largest activations to list.
    """
    if sites not in (*SITES, "all"):
        raise ValueError(f"sites must be 'all' or one of {SITES}, got {sites!r}.")
    adapter = adapt(model)
    layer_of = {s.name: s.layer for s in adapter.norm_sites()}
    per_site: dict[str, list[torch.Tensor]] = {}
    kinds: dict[str, tuple[str, int]] = {}
    massive: list[MassiveActivation] = []
    largest: list[MassiveActivation] = []
    count = 0
    wanted = SITES if sites == "all" else (sites,)
    for batch, mask in _batches(tokens, attention_mask):
        trace = adapter.trace(batch, norms=wanted != ("residual",), attention_mask=mask)
        named: dict[str, torch.Tensor] = {}
        if "residual" in wanted:
            for i, h in enumerate(trace.residual[1:]):
                named[f"residual.{i + 1}"] = h
                kinds[f"residual.{i + 1}"] = ("block_output", i)
        for kind in ("norm_inputs", "norm_outputs"):
            if kind in wanted:
                for name, h in getattr(trace, kind).items():
                    key = name if sites != "all" else f"{name}:{_KINDS[kind].split('_')[1]}"
                    named[key] = h
                    kinds[key] = (_KINDS[kind], layer_of.get(name, -1))
        for i, (name, h) in enumerate(named.items()):
            per_site.setdefault(name, []).append(_sequence_stats(h, mask))
            if h.dim() == 3:
                massive += _massive(h, mask, threshold, ratio, i, name, count)
                largest += [
                    replace(m, sequence=m.sequence + count)
                    for m in _largest(h, mask, top_k, i, name)
                ]
        count += batch.shape[0]
    rows = []
    for name, chunks in per_site.items():
        s = torch.cat(chunks)
        kind, layer = kinds[name]
        rows.append(
            SiteOutliers(
                name,
                float(s[:, 0].mean()),
                float(s[:, 1].mean()),
                float(s[:, 3].max()),
                kind,
                layer,
                float(s[:, 2].mean()),
            )
        )
    if not rows:
        raise ValueError("No activations were captured; check the model and the sites.")
    by_kind = {}
    for kind in dict.fromkeys(r.kind for r in rows):
        group = [r for r in rows if r.kind == kind]
        by_kind[kind] = {
            "max_inf_norm": max(r.inf_norm for r in group),
            "avg_kurtosis": sum(r.kurtosis for r in group) / len(group),
            "avg_token_kurtosis": sum(r.token_kurtosis for r in group) / len(group),
        }
    head = by_kind.get("block_output") or {
        "max_inf_norm": max(r.inf_norm for r in rows),
        "avg_kurtosis": sum(r.kurtosis for r in rows) / len(rows),
    }
    massive.sort(key=lambda m: -abs(m.value))
    largest.sort(key=lambda m: -abs(m.value))
    return OutlierReport(
        max_inf_norm=head["max_inf_norm"],
        avg_kurtosis=head["avg_kurtosis"],
        sites=tuple(rows),
        massive=tuple(massive[:max_massive]),
        sequences=count,
        largest=tuple(largest[:top_k]),
        by_kind=by_kind,
    )
