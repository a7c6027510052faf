"""``normlab probe PATH``: run the probes that fit a model; write HTML and JSON.

For a local Hugging Face model folder or a normlab checkpoint, on built-in text
(:func:`normlab.models.checkpoint.builtin_tokens`), runs :func:`normlab.probes.report.
probe_model` and writes ``OUT/results.json`` and a self-contained ``OUT/index.html``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from normlab._html import esc, figure_html, figure_png, page, table
from normlab._io import atomic_write_bytes, atomic_write_json
from normlab.cli._common import CliError, Formatter, check_output, fail, positive_int

__all__ = ["add_parser", "figures", "render_html"]


def figures(results: dict[str, Any]) -> list[tuple[str, bytes]]:
    """``(caption, PNG)`` per probe that ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probes = results["probes"]
    out: list[tuple[str, bytes]] = []
    if "outliers" in probes:
        sites = [
            s
            for s in probes["outliers"]["sites"]
            if s.get("kind", "block_output") == "block_output"
        ]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2))
        a1.plot([s["inf_norm"] for s in sites], "o-")
        a1.set(xlabel="block output", ylabel="inf-norm (mean per sequence)", yscale="log")
        a2.plot([s["kurtosis"] for s in sites], "o-", color="C1")
        a2.set(xlabel="block output", ylabel="kurtosis (Gaussian = 3)", yscale="log")
        out.append(
            (
                "Outliers per layer: a jump marks a layer that writes massive activations",
                figure_png(fig),
            )
        )
    if "sinks" in probes:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        im = ax.imshow(probes["sinks"]["alpha"], aspect="auto", vmin=0, vmax=1, cmap="magma")
        ax.set(xlabel="head", ylabel="layer", title="sink alpha (first token)")
        fig.colorbar(im, ax=ax)
        out.append(
            (
                "Attention sinks: bright cells are heads that park attention on the first token",
                figure_png(fig),
            )
        )
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
        out.append(
            (
                "Depth metrics: blocks that change little and cost little when dropped "
                "are candidates for pruning",
                figure_png(fig),
            )
        )
    if "rank" in probes:
        r = probes["rank"]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot([v["rank"] for v in r], "o-", label="numerical rank")
        ax.plot([v["affine_rank"] for v in r], "s-", label="affine rank")
        ax.set(xlabel="residual state", ylabel="rank (mean over sequences)")
        ax.legend(fontsize=8)
        out.append(
            ("Rank of token representations: a drop towards 1 is rank collapse", figure_png(fig))
        )
    if "swap" in probes:
        s = probes["swap"]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for ax, key in zip(axes, ("replacement", "interchange"), strict=True):
            im = ax.imshow(s[key], cmap="viridis")
            ax.set(title=f"{key} swap-KL (nats)", xlabel="layer j", ylabel="layer i")
            fig.colorbar(im, ax=ax, fraction=0.046)
        out.append(
            (
                "Swap-KL: dark cells are layer pairs that can be swapped or replaced cheaply",
                figure_png(fig),
            )
        )
    return out


def _summary(results: dict[str, Any]) -> list[tuple[str, str]]:
    p = results["probes"]
    rows = [
        ("family", str(results["family"])),
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
    """A self-contained HTML page for :func:`~normlab.probes.report.probe_model`'s record."""
    parts = [f"<h1>{esc(title)}</h1>"]
    parts.append(table(["", ""], [(esc(k), esc(v)) for k, v in _summary(results)]))
    for caption, png in figures(results):
        parts.append(figure_html(png, alt=caption, caption=caption))
    if results["skipped"]:
        parts.append("<h2>Skipped</h2><ul>")
        parts += [f"<li>{esc(k)}: {esc(v)}</li>" for k, v in results["skipped"].items()]
        parts.append("</ul>")
    return page(title, "\n".join(parts))


def _probe(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from normlab._progress import progress_callback
    from normlab.cli._load import load_checked
    from normlab.models.checkpoint import builtin_tokens, special_tokens
    from normlab.probes.report import headline, probe_model

    try:
        out = check_output(args.out)
        model, kind = load_checked(args.path)
    except CliError as err:
        return fail("probe", str(err))
    model = model.to(args.device)
    tokens = builtin_tokens(model, args.path, batch=args.batch, tokens=args.tokens + 1)
    tokens = tokens.to(args.device)
    specials = special_tokens(args.path)
    if specials is None:
        print("  no tokenizer in the model folder: probing on byte tokens (ids = bytes mod vocab)")
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        disable=args.no_progress,
        transient=True,
    )
    bars: dict[str, Any] = {}

    def on_step(what: str, done: int, total: int) -> None:
        if what not in bars:
            bars[what] = progress.add_task(what, total=total)
        progress.update(bars[what], completed=done, total=total)

    try:
        with progress, progress_callback(on_step):
            results = probe_model(
                model, tokens, special_tokens=specials or None, swap=not args.no_swap
            )
    except TypeError as err:  # adapt() does not know this architecture
        return fail("probe", str(err))
    results = {"model": str(args.path), "kind": kind, **results}
    json.dumps(results)  # fail here, not in a reader, if something is not JSON
    atomic_write_json(out / "results.json", results)
    atomic_write_bytes(
        out / "index.html", render_html(results, f"normlab probe: {Path(args.path).name}").encode()
    )
    for metric, value, reference in headline(results):
        print(f"  {metric}: {value}" + (f"   [healthy: {reference}]" if reference else ""))
    for name, reason in results["skipped"].items():
        print(f"  skipped {name}: {reason}")
    print(f"wrote {out / 'index.html'}\nwrote {out / 'results.json'}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "probe",
        help="diagnose a model: outliers, sinks, depth, rank, swap-KL",
        description="Diagnose a model's normalization on built-in text: outliers, attention "
        "sinks, depth metrics, rank and swap-KL. Writes OUT/index.html and OUT/results.json.",
        formatter_class=Formatter,
    )
    p.add_argument("path", help="a local Hugging Face model folder or a normlab checkpoint")
    p.add_argument("--out", default="probe", help="output folder")
    p.add_argument("--batch", type=positive_int, default=4, help="sequences of built-in text")
    p.add_argument("--tokens", type=positive_int, default=64, help="tokens per sequence")
    p.add_argument("--no-swap", action="store_true", help="skip swap-KL")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--device", default="cpu", help="torch device to run on (cpu, cuda, ...)")
    p.set_defaults(func=_probe)
