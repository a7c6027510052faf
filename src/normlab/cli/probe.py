"""``normlab probe PATH``: run the probes that fit a model; write HTML and JSON.

For a local Hugging Face model folder or a normlab checkpoint, on built-in text
(:func:`normlab.models.checkpoint.builtin_tokens`), runs :func:`normlab.probes.report.
probe_model` and writes ``OUT/results.json`` (strict JSON) and a self-contained
``OUT/index.html``.

Exit codes: 0 probed; 1 some statistics are not finite (written as ``null``; the message
says in how many sites, and whether the model's weights are non-finite); 2 bad input or
output: an unusable ``--device``, an ``--out`` that cannot be written or lies inside the
model folder (checked with a real write before any work), ``--tokens`` above the model's
positions, a model folder that does not load.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from normlab._html import esc, figure_html, figure_png, page, table
from normlab._io import atomic_write_bytes
from normlab.cli._common import CliError, Formatter, check_output, fail, positive_int

__all__ = ["DEFAULT_TOKENS", "add_parser", "figures", "render_html"]

#: Token positions per sequence when ``--tokens`` is not given (capped by the model's).
DEFAULT_TOKENS = 64


def _plottable(obj: Any) -> Any:
    """A copy of a record with ``None`` (a non-finite value in strict JSON) as NaN, which
    matplotlib leaves out of a plot."""
    if obj is None:
        return float("nan")
    if isinstance(obj, dict):
        return {k: _plottable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plottable(v) for v in obj]
    return obj


def _heatmap(fig: Any, ax: Any, data: Any, **style: Any) -> None:
    """``data`` as an image on ``ax`` with whole-number ticks (its rows and columns are
    layers and heads) and a colourbar beside it; the figure's constrained layout keeps the
    colourbar clear of the next panel."""
    from matplotlib.ticker import MaxNLocator

    image = ax.imshow(data, **style)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(image, ax=ax, fraction=0.046)


def figures(results: dict[str, Any]) -> list[tuple[str, bytes]]:
    """``(caption, PNG)`` per probe that ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probes = _plottable(results["probes"])
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
        fig, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
        _heatmap(fig, ax, probes["sinks"]["alpha"], aspect="auto", vmin=0, vmax=1, cmap="magma")
        ax.set(xlabel="head", ylabel="layer", title="sink alpha (first token)")
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
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
        for ax, key in zip(axes, ("replacement", "interchange"), strict=True):
            _heatmap(fig, ax, s[key], cmap="viridis")
            ax.set(title=f"{key} swap-KL (nats)", xlabel="layer j", ylabel="layer i")
        out.append(
            (
                "Swap-KL: dark cells are layer pairs that can be swapped or replaced cheaply",
                figure_png(fig),
            )
        )
    return out


def _summary(results: dict[str, Any]) -> list[tuple[str, str]]:
    from normlab.probes.report import format_value as _fmt

    p = results["probes"]
    rows = [
        ("family", str(results["family"])),
        ("blocks", str(results["n_layers"])),
        ("tokens", "x".join(map(str, results["tokens"]))),
    ]
    if "outliers" in p:
        rows += [
            ("max inf-norm", _fmt(p["outliers"]["max_inf_norm"], ".4g")),
            ("avg kurtosis", _fmt(p["outliers"]["avg_kurtosis"], ".4g")),
        ]
    if "sinks" in p:
        rows += [
            ("sink score", _fmt(p["sinks"]["sink_score"], ".3f")),
            ("first-token mass", _fmt(p["sinks"]["first_token_mass"], ".3f")),
        ]
    if "depth" in p:
        rows.append(("variance growth / block", _fmt(p["depth"]["variance_growth"], ".3f")))
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


def _device(name: str) -> Any:
    """The torch device ``name``, checked by allocating on it; :class:`CliError` if unusable."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as err:
        raise CliError(
            f"--device {name!r} is not a torch device ({err}); use cpu or cuda"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CliError(f"--device {name}: no CUDA GPU is available here; use --device cpu")
    try:
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CliError(f"--device {name} cannot be used: {reason}; use --device cpu") from None
    return device


def _writable(out: Path, model_dir: Path) -> Path:
    """Refuse an output inside the model folder, then write a file in ``out`` (creating
    it) and remove both again, so an unwritable place fails now, not after the probe."""
    model_dir = model_dir.resolve()
    if out.resolve() == model_dir or out.resolve().is_relative_to(model_dir):
        raise CliError(
            f"the output {out} is inside the model folder {model_dir}; the probe would write "
            "its files among the model's. Choose another --out"
        )
    created = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".normlab-write-check-") as f:
            f.write(b"ok")
            f.flush()
    except OSError as err:
        message = f"cannot write to {out}: {err.strerror or err}; choose another --out"
        raise CliError(message) from None
    finally:
        for folder in created:  # innermost first; nothing is left behind by the check
            if folder.is_dir():
                folder.rmdir()
    return out


def _probe(args: argparse.Namespace) -> int:
    from normlab._progress import StepBars
    from normlab.cli._load import load_checked, nonfinite_weights
    from normlab.models.checkpoint import builtin_batch, position_limit, special_tokens
    from normlab.probes.hooks import adapt
    from normlab.probes.report import headline, nonfinite_summary, probe_model

    try:
        device = _device(args.device)
        out = _writable(check_output(args.out), Path(args.path))
        model, kind = load_checked(args.path)
        causal = adapt(model).causal
    except CliError as err:
        return fail("probe", str(err))
    except TypeError as err:  # adapt() does not know this architecture
        return fail("probe", str(err))
    limit = position_limit(model)
    if args.tokens is None:
        positions = min(DEFAULT_TOKENS, limit or DEFAULT_TOKENS)
    elif limit is not None and args.tokens > limit:
        return fail(
            "probe",
            f"--tokens {args.tokens} is more than the {limit} positions {args.path} reads; "
            f"use --tokens {limit} or fewer",
        )
    else:
        positions = args.tokens
    model = model.to(device)
    n = positions + 1 if causal else positions  # a causal probe predicts one more
    batch = builtin_batch(model, args.path, batch=args.batch, tokens=n, positions=positions)
    specials = special_tokens(args.path)
    if kind == "hf" and batch.source != "tokenizer":  # TinyGPT reads bytes by design
        print(f"  probing on {batch.source}: ids = bytes mod vocabulary")
    mask = None if batch.mask is None else batch.mask.to(device)
    try:
        with StepBars(enabled=not args.no_progress, eta=False):
            results = probe_model(
                model,
                batch.ids.to(device),
                attention_mask=mask,
                special_tokens=specials or None,
                swap=not args.no_swap,
            )
    except TypeError as err:  # adapt() does not know this architecture
        return fail("probe", str(err))
    results = {"model": str(args.path), "kind": kind, "tokens_from": batch.source, **results}
    text = json.dumps(results, indent=1, allow_nan=False)  # strict JSON: no bare NaN
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "results.json", text.encode())
    atomic_write_bytes(
        out / "index.html", render_html(results, f"normlab probe: {Path(args.path).name}").encode()
    )
    for metric, value, reference in headline(results):
        print(f"  {metric}: {value}" + (f"   [healthy: {reference}]" if reference else ""))
    for name, reason in results["skipped"].items():
        print(f"  skipped {name}: {reason}")
    print(f"wrote {out / 'index.html'}\nwrote {out / 'results.json'}")
    if results["nonfinite"]:
        bad = nonfinite_weights(model)
        cause = (
            f"the input model has non-finite weights ({bad})"
            if bad
            else ("the input model's activations overflow or turn NaN on built-in text")
        )
        fail("probe", f"{nonfinite_summary(results['nonfinite'])}: {cause}")
        return 1  # the files are written; the model is not healthy
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
    p.add_argument(
        "--tokens",
        type=positive_int,
        default=None,
        help=f"token positions per sequence (default {DEFAULT_TOKENS}, or the model's "
        "positions if fewer; more than the model's positions is refused)",
    )
    p.add_argument("--no-swap", action="store_true", help="skip swap-KL")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--device", default="cpu", help="torch device to run on (cpu, cuda, ...)")
    p.set_defaults(func=_probe)
