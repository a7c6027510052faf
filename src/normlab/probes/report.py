"""``normlab probe PATH``: run the probes that fit a model and write an HTML + JSON report.

For a local Hugging Face model folder or a normlab checkpoint (encoder or decoder), on
built-in text (:func:`normlab.models.checkpoint.builtin_tokens`): outliers (inf-norm and
kurtosis of every block's output), attention sinks, depth metrics (variance, block
influence, angular distance, drop-one-layer damage), affine and numerical rank per layer,
and replacement/interchange swap-KL where the model has an LM head. A probe that does not
apply is skipped with the reason. Writes ``DIR/results.json`` and a self-contained
``DIR/index.html`` (figures embedded as PNG).
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from normlab._io import atomic_write_bytes, atomic_write_json

__all__ = ["probe_command", "probe_model", "render_html"]


def _attempt(name: str, fn: Callable[[], Any], results: dict, skipped: dict) -> None:
    try:
        results[name] = fn()
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as err:
        skipped[name] = f"{type(err).__name__}: {err}"


@torch.no_grad()
def probe_model(
    model: nn.Module, tokens: torch.Tensor, *, swap: bool = True, max_swap_layers: int = 24
) -> dict[str, Any]:
    """Run every probe that fits ``model`` on ``tokens`` ``(batch, n + 1)``; JSON-ready dict.

    Causal models are probed on ``tokens[:, :-1]`` with next-token targets
    ``tokens[:, 1:]``; encoders on all of ``tokens``. The model is not changed.

    Args:
        model: a model :func:`normlab.probes.adapt` understands.
        tokens: token ids.
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
    _attempt("outliers", lambda: outlier_stats(adapter.model, x).to_dict(), results, skipped)
    _attempt("sinks", lambda: sink_stats(adapter.model, x).to_dict(), results, skipped)
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
        skipped["swap"] = "disabled (--no-swap)"
    elif n > max_swap_layers:
        skipped["swap"] = f"{n} blocks > {max_swap_layers}: O(n^2) forward passes"
    else:
        _attempt("swap", lambda: swap_kl(adapter, x).to_dict(), results, skipped)
    out["probes"], out["skipped"] = results, skipped
    return out


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _figures(results: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probes = results["probes"]
    figs: list[tuple[str, str]] = []
    if "outliers" in probes:
        sites = probes["outliers"]["sites"]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2))
        a1.plot([s["inf_norm"] for s in sites], "o-")
        a1.set(xlabel="block output", ylabel="inf-norm (mean per sequence)", yscale="log")
        a2.plot([s["kurtosis"] for s in sites], "o-", color="C1")
        a2.set(xlabel="block output", ylabel="kurtosis (Gaussian = 3)", yscale="log")
        figs.append(("Outliers per layer", _png(fig)))
    if "sinks" in probes:
        alpha = probes["sinks"]["alpha"]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        im = ax.imshow(alpha, aspect="auto", vmin=0, vmax=1, cmap="magma")
        ax.set(xlabel="head", ylabel="layer", title="sink alpha (first token)")
        fig.colorbar(im, ax=ax)
        figs.append(("Attention sinks", _png(fig)))
    if "depth" in probes:
        d = probes["depth"]
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
        axes[0].plot(d["variance"], "o-")
        axes[0].set(xlabel="residual state", ylabel="output variance", yscale="log")
        axes[1].plot(d["influence"], "o-", label="1 - cos")
        axes[1].plot(d["angular"], "s-", label="angular distance")
        axes[1].set(xlabel="block", ylabel="block change")
        axes[1].legend(fontsize=8)
        axes[2].bar(range(len(d["drop_effect"])), d["drop_effect"])
        axes[2].set(xlabel="dropped block", ylabel="damage when dropped")
        figs.append(("Depth metrics", _png(fig)))
    if "rank" in probes:
        r = probes["rank"]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot([v["rank"] for v in r], "o-", label="numerical rank")
        ax.plot([v["affine_rank"] for v in r], "s-", label="affine rank")
        ax.set(xlabel="residual state", ylabel="rank (mean over sequences)")
        ax.legend(fontsize=8)
        figs.append(("Rank of token representations", _png(fig)))
    if "swap" in probes:
        s = probes["swap"]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for ax, key in zip(axes, ("replacement", "interchange"), strict=True):
            im = ax.imshow(s[key], cmap="viridis")
            ax.set(title=f"{key} swap-KL (nats)", xlabel="layer j", ylabel="layer i")
            fig.colorbar(im, ax=ax, fraction=0.046)
        figs.append(("Swap-KL", _png(fig)))
    return figs


def _summary(results: dict[str, Any]) -> list[tuple[str, str]]:
    p = results["probes"]
    rows = [
        ("family", results["family"]),
        ("blocks", str(results["n_layers"])),
        ("tokens", "x".join(map(str, results["tokens"]))),
    ]
    if "outliers" in p:
        rows += [
            ("max inf-norm", f"{p['outliers']['max_inf_norm']:.4g}"),
            ("avg kurtosis", f"{p['outliers']['avg_kurtosis']:.4g}"),
        ]
    if "sinks" in p:
        rows += [
            ("sink score", f"{p['sinks']['sink_score']:.3f}"),
            ("first-token mass", f"{p['sinks']['first_token_mass']:.3f}"),
        ]
    if "depth" in p:
        rows.append(("variance growth / block", f"{p['depth']['variance_growth']:.3f}"))
    if "swap" in p:
        rows += [
            ("pruning order (replacement)", str(p["swap"]["order_replacement"])),
            ("pruning order (interchange)", str(p["swap"]["order_interchange"])),
        ]
    return rows


def render_html(results: dict[str, Any], title: str) -> str:
    """A self-contained HTML page for :func:`probe_model`'s results."""
    esc = html.escape
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "td{padding:2px 12px}img{max-width:100%}</style></head><body>",
        f"<h1>{esc(title)}</h1><table>",
    ]
    parts += [f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in _summary(results)]
    parts.append("</table>")
    for caption, png in _figures(results):
        parts.append(f"<h2>{esc(caption)}</h2><img src='data:image/png;base64,{png}'>")
    if results["skipped"]:
        parts.append("<h2>Skipped</h2><ul>")
        parts += [f"<li>{esc(k)}: {esc(v)}</li>" for k, v in results["skipped"].items()]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def probe_command(argv: Sequence[str] | None = None) -> int:
    """Run ``normlab probe`` with command-line arguments ``argv``; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="normlab probe",
        description="Diagnose a model's normalization: outliers, sinks, depth, rank, swap-KL.",
    )
    parser.add_argument("path", help="a local Hugging Face model folder or normlab checkpoint")
    parser.add_argument("--out", default="probe", help="output folder (default: probe)")
    parser.add_argument("--batch", type=int, default=4, help="sequences of built-in text")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per sequence")
    parser.add_argument("--no-swap", action="store_true", help="skip swap-KL")
    args = parser.parse_args(argv)
    from normlab.models.checkpoint import builtin_tokens, load_model

    try:
        model, kind = load_model(args.path)
    except (FileNotFoundError, ValueError, OSError) as err:
        print(f"normlab probe: cannot load {args.path}: {err}", file=sys.stderr)
        return 2
    model = model.float()
    tokens = builtin_tokens(model, args.path, batch=args.batch, tokens=args.tokens + 1)
    try:
        results = probe_model(model, tokens, swap=not args.no_swap)
    except TypeError as err:  # adapt() does not know this architecture
        print(f"normlab probe: {err}", file=sys.stderr)
        return 2
    results = {"model": str(args.path), "kind": kind, **results}
    out = Path(args.out)
    atomic_write_json(out / "results.json", results)
    title = f"normlab probe: {Path(args.path).name}"
    atomic_write_bytes(out / "index.html", render_html(results, title).encode())
    for name, reason in results["skipped"].items():
        print(f"  skipped {name}: {reason}")
    print(f"wrote {out / 'index.html'}\nwrote {out / 'results.json'}")
    json.dumps(results)  # fail loudly here, not in a reader, if something is not JSON
    return 0
