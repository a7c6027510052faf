"""Every probe that fits a model, as one JSON-ready record (:func:`probe_model`).

Outliers (inf-norm and kurtosis of every block's output), attention sinks, depth metrics
(variance, block influence, angular distance, drop-one-layer damage), affine and numerical
rank per layer, and replacement/interchange swap-KL where the model has an LM head. A probe
that does not apply is skipped with the reason. ``normlab probe`` (:mod:`normlab.cli.probe`)
writes the record as ``results.json`` with an HTML page.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from normlab._progress import report_progress
from normlab.probes.outliers import _strict

__all__ = ["PROBES", "REFERENCE", "format_value", "headline", "nonfinite_summary", "probe_model"]

#: What a healthy model shows, for the terminal summary (sources in the docstrings of
#: :mod:`normlab.probes.outliers` and :mod:`normlab.probes.sinks`).
REFERENCE = {
    "max inf-norm (block outputs)": "< ~20 without outliers; BERT-base 735 (Bondarenko)",
    "avg kurtosis (per sequence)": "3 for Gaussian; BERT-base 3076 (Bondarenko)",
    "max inf-norm (norm inputs)": "massive: > 100 and ~1000x median (Sun et al.)",
    "top activation / median": "~1000x marks a massive activation (Sun et al.)",
    "sink score": "0 = no sinks; > 0.3 alpha per head is a sink (Gu et al.)",
    "first-token mass": "1/T for uniform attention; near 1 in sink-heavy LLMs",
}


NONFINITE = "non-finite"


def format_value(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec``, or "non-finite" for ``None`` / NaN / inf."""
    if value is None or not math.isfinite(value):
        return NONFINITE
    return format(value, spec)


def headline(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(metric, value, reference)`` rows of a :func:`probe_model` record, for terminals.

    A non-finite value reads "non-finite" and gets no reference (nothing about it is
    healthy); a first row "non-finite statistics" says in how many sites.
    """
    p = results.get("probes", {})
    rows: list[tuple[str, str, str]] = []
    bad = results.get("nonfinite", {})
    if bad:
        rows.append(("non-finite statistics", nonfinite_summary(bad), ""))
    if "outliers" in p:
        o = p["outliers"]
        rows.append(("max inf-norm (block outputs)", format_value(o["max_inf_norm"], ".4g"), ""))
        rows.append(("avg kurtosis (per sequence)", format_value(o["avg_kurtosis"], ".4g"), ""))
        token = o.get("avg_token_kurtosis"), o.get("max_token_kurtosis")
        if "max_token_kurtosis" in o:
            text = f"{format_value(token[0], '.4g')} mean, {format_value(token[1], '.4g')} max"
            rows.append(("kurtosis per token", text, ""))
        if "norm_input" in o.get("by_kind", {}):
            value = format_value(o["by_kind"]["norm_input"]["max_inf_norm"], ".4g")
            rows.append(("max inf-norm (norm inputs)", value, ""))
        if o.get("largest"):
            t = o["largest"][0]
            where = f"{t['name']} seq {t['sequence']} token {t['token']} channel {t['channel']}"
            rows.append(
                ("top activation / median", f"{format_value(t['ratio'], '.4g')}x ({where})", "")
            )
    if "sinks" in p:
        s = p["sinks"]
        rows.append(("sink score", format_value(s["sink_score"], ".3f"), ""))
        n = results.get("tokens", [0, 0])[-1] or 1
        mass = f"{format_value(s['first_token_mass'], '.3f')} (1/T = {1 / n:.3f})"
        rows.append(("first-token mass", mass, ""))
        for name, value in s.get("special_mass", {}).items():
            rows.append(
                (
                    f"mass on {name}",
                    format_value(value, ".3f"),
                    "special tokens often act as sinks",
                )
            )
    out = []
    for k, v, r in rows:
        out.append((k, v, "" if NONFINITE in v else r or REFERENCE.get(k, "")))
    return out


def nonfinite_summary(bad: dict[str, list[str]]) -> str:
    """ "non-finite in N sites (outliers: 3, sinks: 2)" for a record's ``nonfinite``."""
    n = sum(len(v) for v in bad.values())
    parts = ", ".join(f"{k}: {len(v)}" for k, v in bad.items())
    return f"non-finite in {n} sites ({parts})"


def _nan_paths(obj: Any, path: str) -> list[str]:
    """Where ``obj`` holds a non-finite float (``depth.variance[3]``, ...)."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [path]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _nan_paths(v, f"{path}.{k}")]
    if isinstance(obj, list | tuple):
        return [p for i, v in enumerate(obj) for p in _nan_paths(v, f"{path}[{i}]")]
    return []


def _nonfinite(results: dict[str, Any]) -> dict[str, list[str]]:
    """Per probe, the sites (outlier sites, sink layers, other values) that are not finite."""
    bad: dict[str, list[str]] = {}
    for name, record in results.items():
        if name == "outliers":
            sites = list(record["nonfinite"])
        elif name == "sinks":
            sites = [f"layer {i}" for i in record["nonfinite_layers"]]
        else:
            sites = _nan_paths(record, name)
        if sites:
            bad[name] = sites
    return bad


#: The probes :func:`probe_model` runs, in order.
PROBES: tuple[str, ...] = ("outliers", "sinks", "depth", "rank", "swap")


def _attempt(name: str, fn: Callable[[], Any], results: dict, skipped: dict) -> None:
    try:
        results[name] = fn()
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as err:
        skipped[name] = f"{type(err).__name__}: {err}"
    report_progress("probes", PROBES.index(name) + 1, len(PROBES))


@torch.no_grad()
def probe_model(
    model: nn.Module,
    tokens: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    special_tokens: dict[str, int] | None = None,
    swap: bool = True,
    max_swap_layers: int = 24,
) -> dict[str, Any]:
    """Run every probe that fits ``model`` on ``tokens`` ``(batch, n + 1)``; JSON-ready dict.

    Causal models are probed on ``tokens[:, :-1]`` with next-token targets
    ``tokens[:, 1:]``; encoders on all of ``tokens``. The model is not changed. Progress
    (probes done of :data:`PROBES`) goes to :func:`normlab._progress.report_progress`.
    The record is strict JSON: every non-finite number is ``None``, and ``"nonfinite"``
    lists per probe the sites where one was (empty for a healthy model; see
    :func:`nonfinite_summary`).

    Args:
        model: a model :func:`normlab.probes.adapt` understands.
        tokens: token ids.
        attention_mask: 1 for real tokens, 0 for padding (``tokens``' shape); outliers and
            sinks exclude padding; depth, rank and swap-KL need an unpadded batch.
        special_tokens: name -> id of the tokenizer's special tokens; the sink record
            gives the attention mass on each (e.g. [CLS], [SEP]).
        swap: run swap-KL (``n (n - 1) + n (n - 1) / 2`` forward passes) when it fits.
        max_swap_layers: skip swap-KL above this many blocks.
    """
    from normlab.probes.depth import depth_profile
    from normlab.probes.hooks import adapt
    from normlab.probes.outliers import outlier_stats
    from normlab.probes.rank import layer_ranks
    from normlab.probes.sinks import sink_stats
    from normlab.probes.swap import swap_kl

    adapter = adapt(model)
    x, targets = (tokens[:, :-1], tokens[:, 1:]) if adapter.causal else (tokens, None)
    mask = None
    if attention_mask is not None:
        mask = attention_mask[:, : x.shape[1]]
        if bool(mask.bool().all()):
            mask = None
    if not adapter.has_lm_head:
        targets = None
    n = len(adapter.blocks())
    out: dict[str, Any] = {
        "family": adapter.family,
        "n_layers": n,
        "has_lm_head": adapter.has_lm_head,
        "causal": adapter.causal,
        "tokens": list(x.shape),
    }
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    _attempt(
        "outliers",
        lambda: outlier_stats(adapter.model, x, attention_mask=mask).to_dict(),
        results,
        skipped,
    )
    _attempt(
        "sinks",
        lambda: sink_stats(
            adapter.model, x, attention_mask=mask, special_tokens=special_tokens
        ).to_dict(),
        results,
        skipped,
    )
    _attempt(
        "depth", lambda: depth_profile(adapter, x, targets=targets).to_dict(), results, skipped
    )
    _attempt(
        "rank",
        lambda: [
            r.to_dict() | {"singular_values": []} for r in layer_ranks(adapter.trace(x).residual)
        ],
        results,
        skipped,
    )
    if not adapter.has_lm_head:
        skipped["swap"] = "no LM head: swap-KL compares next-token distributions"
    elif not swap:
        skipped["swap"] = "disabled (swap=False)"
    elif n > max_swap_layers:
        skipped["swap"] = f"{n} blocks > {max_swap_layers}: O(n^2) forward passes"
    else:
        _attempt("swap", lambda: swap_kl(adapter, x).to_dict(), results, skipped)
    if "swap" in skipped:
        report_progress("probes", len(PROBES), len(PROBES))
    out["nonfinite"] = _nonfinite(results)
    out["probes"], out["skipped"] = _strict(results), skipped
    return out
