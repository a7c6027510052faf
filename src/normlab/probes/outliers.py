"""Activation outliers: infinity norm and kurtosis per sequence, and massive activations.

Bondarenko et al. ("Quantizable Transformers", 2023) measure outliers on each layer's
output, per sequence, flattening its ``T x d`` values: the infinity norm ``max |x|`` and the
Pearson kurtosis ``E[(x - mu)^4] / Var(x)^2`` (3 for a Gaussian, and independent of the
scale of ``x``). OASIS's code divides by ``Var^2 + 1e-6`` instead, which makes it depend on
the scale (``randn * 0.03`` gives 1.36, not 3): that form is available as
``variant="oasis"``. Each site's numbers are averaged over sequences; ``max_inf_norm`` is
the largest site mean and ``avg_kurtosis`` the mean over sites.

Massive activations (Sun et al., 2024) are single entries of a hidden state with
``|a| > 100`` that are also about 1000 times the median ``|h|`` of that hidden state (one
sequence's ``T x d`` values at one site); both thresholds are arguments. Beside that rule
the report lists the largest activations with their ratio to the median and their
(site, sequence, token, channel), so one just under a threshold stays visible.

Sites are labelled by kind: block outputs (the residual stream after each block), norm
inputs and norm outputs. Kurtosis is given per sequence (Bondarenko's: all ``T x d``
values of a sequence) and per token (each token's ``d`` values; the mean and the maximum
over tokens, since a few outlier tokens barely move the mean). Padding
(``attention_mask == 0``) is excluded from every statistic. A statistic that is not finite
(NaN weights, a constant hidden state) is kept as NaN and the site is listed in
:attr:`OutlierReport.nonfinite`; ``to_dict`` writes such values as ``None`` (strict JSON).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import nn

from normlab._records import Record
from normlab.probes.hooks import adapt

__all__ = [
    "KURTOSIS_VARIANTS",
    "MassiveActivation",
    "OutlierReport",
    "SiteOutliers",
    "inf_norm",
    "kurtosis",
    "massive_activations",
    "outlier_stats",
]

SITES = ("residual", "norm_inputs", "norm_outputs")


#: Kurtosis variants: ``pearson`` ``E[(x - mu)^4] / Var^2`` (scale invariant), ``oasis``
#: ``E[(x - mu)^4] / (Var^2 + 1e-6)`` as in the OASIS code (scale dependent).
KURTOSIS_VARIANTS = ("pearson", "oasis")
_OASIS_EPS = 1e-6


def _check_variant(variant: str) -> float:
    if variant not in KURTOSIS_VARIANTS:
        raise ValueError(f"kurtosis variant must be one of {KURTOSIS_VARIANTS}, got {variant!r}.")
    return _OASIS_EPS if variant == "oasis" else 0.0


def _kurt(c: torch.Tensor, dim: int, eps: float) -> torch.Tensor:
    """Kurtosis of centred values ``c`` along ``dim`` (float64)."""
    return c.pow(4).mean(dim=dim) / (c.pow(2).mean(dim=dim).pow(2) + eps)


def kurtosis(x: torch.Tensor, *, variant: str = "pearson") -> torch.Tensor:
    """Kurtosis of each sequence's values.

    ``pearson`` (default): ``E[(x - mu)^4] / Var(x)^2``, scale invariant, 3 for a Gaussian
    (NaN for a constant sequence). ``oasis``: ``E[(x - mu)^4] / (Var(x)^2 + 1e-6)``, the
    form in the OASIS code, which shrinks towards 0 for small-scale inputs.

    Args:
        x: ``(batch, ...)``; everything after the batch axis is one sample of values.
        variant: "pearson" or "oasis".

    Returns:
        ``(batch,)`` in float64.
    """
    eps = _check_variant(variant)
    v = x.detach().reshape(x.shape[0], -1).double()
    return _kurt(v - v.mean(dim=1, keepdim=True), 1, eps)


def inf_norm(x: torch.Tensor) -> torch.Tensor:
    """``max |x|`` of each sequence: ``(batch, ...) -> (batch,)`` in float64."""
    return x.detach().reshape(x.shape[0], -1).abs().amax(dim=1).double()


@dataclass(frozen=True)
class MassiveActivation(Record):
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
        max_token_kurtosis: the largest per-token kurtosis (one outlier token shows here).
    """

    name: str
    inf_norm: float
    kurtosis: float
    max_abs: float
    kind: str = "block_output"
    layer: int = -1
    token_kurtosis: float = float("nan")
    max_token_kurtosis: float = float("nan")

    def finite(self) -> bool:
        """Whether every statistic of the site is finite."""
        values = (self.inf_norm, self.kurtosis, self.max_abs, self.token_kurtosis)
        return all(math.isfinite(v) for v in (*values, self.max_token_kurtosis))

    def to_dict(self) -> dict[str, Any]:
        return _strict(asdict(self))


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
        by_kind: per site kind, ``max_inf_norm``, ``avg_kurtosis``, ``avg_token_kurtosis``,
            ``max_token_kurtosis``.
        avg_token_kurtosis: the mean over the headline sites of the per-token kurtosis.
        max_token_kurtosis: the largest per-token kurtosis over the headline sites.
        nonfinite: names of the sites with a non-finite statistic (NaN/inf activations).
        variant: the kurtosis variant ("pearson" or "oasis").
    """

    max_inf_norm: float
    avg_kurtosis: float
    sites: tuple[SiteOutliers, ...]
    massive: tuple[MassiveActivation, ...] = field(default=())
    sequences: int = 0
    largest: tuple[MassiveActivation, ...] = field(default=())
    by_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    avg_token_kurtosis: float = float("nan")
    max_token_kurtosis: float = float("nan")
    nonfinite: tuple[str, ...] = ()
    variant: str = "pearson"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with every non-finite number as ``None``."""
        return _strict(
            {
                "max_inf_norm": self.max_inf_norm,
                "avg_kurtosis": self.avg_kurtosis,
                "avg_token_kurtosis": self.avg_token_kurtosis,
                "max_token_kurtosis": self.max_token_kurtosis,
                "kurtosis_variant": self.variant,
                "nonfinite": list(self.nonfinite),
                "sites": [s.to_dict() for s in self.sites],
                "massive": [m.to_dict() for m in self.massive],
                "largest": [m.to_dict() for m in self.largest],
                "by_kind": self.by_kind,
                "sequences": self.sequences,
            }
        )


def _strict(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None`` (valid strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    return obj


def _batches(tokens: Any, attention_mask: Any) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    xs = [tokens] if isinstance(tokens, torch.Tensor) else list(tokens)
    if attention_mask is None:
        return [(x, None) for x in xs]
    ms = [attention_mask] if isinstance(attention_mask, torch.Tensor) else list(attention_mask)
    if len(ms) != len(xs) or any(m.shape != x.shape for m, x in zip(ms, xs, strict=True)):
        raise ValueError("attention_mask must match tokens: one (batch, tokens) mask per batch.")
    return list(zip(xs, ms, strict=True))


def _sequence_stats(h: torch.Tensor, mask: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Per sequence ``(inf-norm, kurtosis, mean token kurtosis, max token kurtosis)`` over
    its valid tokens (a NaN anywhere stays NaN)."""
    rows = []
    for b in range(h.shape[0]):
        v = h[b] if mask is None or h.dim() != 3 else h[b][mask[b].bool()]
        v = v.reshape(-1, h.shape[-1]).detach().double()
        k = _kurt((v - v.mean()).flatten(), 0, eps)
        kt = _kurt(v - v.mean(-1, keepdim=True), -1, eps)
        rows.append(torch.stack([v.abs().max(), k, kt.mean(), kt.max()]))  # max keeps NaN
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
    kurtosis: str = "pearson",
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
        kurtosis: the kurtosis variant, "pearson" (scale invariant, the default) or
            "oasis" (``Var^2 + 1e-6`` in the denominator, as in the OASIS code).
    """
    eps = _check_variant(kurtosis)
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
            per_site.setdefault(name, []).append(_sequence_stats(h, mask, eps))
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
                float(s[:, 0].max()),
                kind,
                layer,
                float(s[:, 2].mean()),
                float(s[:, 3].max()),
            )
        )
    if not rows:
        raise ValueError("No activations were captured; check the model and the sites.")
    by_kind = {}
    for kind in dict.fromkeys(r.kind for r in rows):
        group = [r for r in rows if r.kind == kind]
        by_kind[kind] = _summary(group)
    head = by_kind.get("block_output") or _summary(rows)
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
        avg_token_kurtosis=head["avg_token_kurtosis"],
        max_token_kurtosis=head["max_token_kurtosis"],
        nonfinite=tuple(r.name for r in rows if not r.finite()),
        variant=kurtosis,
    )


def _max(values: list[float]) -> float:
    """The largest value, NaN when any is NaN (``max()`` would depend on the order)."""
    return float(torch.tensor(values, dtype=torch.float64).max())


def _summary(group: list[SiteOutliers]) -> dict[str, float]:
    n = len(group)
    return {
        "max_inf_norm": _max([r.inf_norm for r in group]),
        "avg_kurtosis": sum(r.kurtosis for r in group) / n,
        "avg_token_kurtosis": sum(r.token_kurtosis for r in group) / n,
        "max_token_kurtosis": _max([r.max_token_kurtosis for r in group]),
    }
