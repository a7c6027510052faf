"""The targets of ``normlab bench`` (issue 27) and how the results are printed and plotted.

A target is a ratio measured in the run against a threshold, on every shape measured:
forward at >= 0.9x copy bandwidth and no slower than ``torch.compile`` of the formula;
forward+backward at >= 0.8x the memory limit and no slower than ``torch.compile``; the
TinyGPT training step >= 1.2x faster with the kernels than without and no slower than
``torch.compile`` of the model without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["check_targets", "plot", "print_results", "targets_for"]

_NAMES = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm", "dyt": "DyT", "softmax1": "Softmax1"}

#: (description, op, dtype, mode, key, against, threshold)
Target = tuple[str, str, str, str, str, str, float]


def targets_for(device: str) -> list[Target]:
    """The per-operation targets on ``device`` ("cpu" or "cuda")."""
    out: list[Target] = []
    ops = ("rmsnorm", "layernorm") if device == "cuda" else tuple(_NAMES)
    modes = ("fwd",) if device == "cuda" else ("fwd", "fwd+bwd")
    for op in ops:
        for dtype in ("float32", "bfloat16"):
            for mode in modes:
                bound, limit = (0.9, "copy") if mode == "fwd" else (0.8, "memory limit")
                name = f"{_NAMES[op]} {mode} {dtype}"
                out.append((f"{name} >= {bound}x {limit}", op, dtype, mode, "x_copy", "normlab",
                            bound))  # fmt: skip
                out.append((f"{name} >= torch.compile", op, dtype, mode, "speedup",
                            "compiled", 1.0))  # fmt: skip
                if device == "cuda":
                    out.append((f"{name} >= Liger-Kernel", op, dtype, mode, "speedup", "liger",
                                1.0))  # fmt: skip
    return out


def check_targets(
    records: Sequence[dict[str, Any]], model: dict[str, Any] | None, device: str = "cpu"
) -> list[dict[str, Any]]:
    """Each target with its value on every shape measured and whether all of them meet it."""
    rows = []
    for text, op, dtype, mode, key, against, threshold in targets_for(device):
        found = [
            (r["shape"], r[key][against])
            for r in records
            if (r["op"], r["dtype"], r["mode"]) == (op, dtype, mode) and against in r[key]
        ]
        rows.append({
            "target": text, "threshold": threshold,
            "values": {"x".join(map(str, s)): v for s, v in found},
            "met": bool(found) and all(v >= threshold for _, v in found),
            "measured": bool(found),
        })  # fmt: skip
    if model is not None:
        for arm, threshold, text in (
            ("plain", 1.2, "TinyGPT train step with kernels >= 1.2x without"),
            ("compiled", 1.0, "TinyGPT train step with kernels >= torch.compile without"),
        ):
            value = model["speedup"].get(arm)
            rows.append({
                "target": text, "threshold": threshold,
                "values": {} if value is None else {"step": value},
                "met": value is not None and value >= threshold, "measured": value is not None,
            })  # fmt: skip
    return rows


def _fmt(values: dict[str, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values.values())


def print_results(
    records: Sequence[dict[str, Any]],
    regimes: Sequence[dict[str, Any]],
    targets: Sequence[dict[str, Any]],
    model: dict[str, Any] | None,
    title: str,
) -> None:
    """Print the op table, the allocation regimes, the targets and the model record."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    table = Table("op", "shape", "dtype", "mode", "normlab GB/s", "x copy", "x torch",
                  "x eager", "x compiled", "x liger", title=title)  # fmt: skip
    for r in records:
        sp = r["speedup"]
        table.add_row(r["op"], "x".join(map(str, r["shape"])), r["dtype"], r["mode"],
                      f"{r['gbs']['normlab']:.1f}", f"{r['x_copy']['normlab']:.2f}",
                      *(f"{sp[k]:.2f}" if k in sp else "" for k in
                        ("torch", "eager", "compiled", "liger")))  # fmt: skip
    console.print(table)
    console.print("x copy: the op's least traffic at the copy's bandwidth (1 = memory limit); "
                  "x peer: peer time / normlab time (> 1: normlab faster).")  # fmt: skip
    if regimes:
        t = Table(
            "op",
            "shape",
            "dtype",
            "normlab x copy",
            "clone x copy",
            title="fresh outputs, default allocator (copy: into a preallocated tensor)",
        )
        for r in regimes:
            t.add_row(r["op"], "x".join(map(str, r["shape"])), r["dtype"],
                      f"{r['normlab_x_copy']:.2f}", f"{r['clone_x_copy']:.2f}")  # fmt: skip
        console.print(t)
        console.print(
            "Remedy for large outputs on CPU: MALLOC_MMAP_MAX_=0 "
            "MALLOC_TRIM_THRESHOLD_=2147483647 (glibc), or LD_PRELOAD a caching "
            "allocator (jemalloc, tcmalloc); the table above is measured so."
        )
    if model is not None:
        s = model["seconds"]
        t = Table("arm", "ms per step", "spread (ms)", title=model["model"])
        for arm, sec in s.items():
            lo, hi = model["spread"][arm]
            t.add_row(arm, f"{sec * 1e3:.1f}", f"{lo * 1e3:.1f}-{hi * 1e3:.1f}")
        console.print(t)
        share = model["norm_share"]
        console.print(f"share of the step in norms: {100 * share['kernels']:.1f}% with kernels, "
                      f"{100 * share['plain']:.1f}% without")  # fmt: skip
    if targets:
        t = Table("target", "measured (per shape)", "met", title="targets (issue 27)")
        for row in targets:
            met = ("yes" if row["met"] else "NO") if row["measured"] else "not measured"
            t.add_row(row["target"], _fmt(row["values"]), met)
        console.print(t)


def plot(records: Sequence[dict[str, Any]], path: Path) -> None:
    """Bar charts of each variant's ``x copy`` ratio, one panel per mode and dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({r["mode"] for r in records}, reverse=True)
    dtypes = sorted({r["dtype"] for r in records})
    variants = ["normlab", "torch", "eager", "compiled", "liger"]
    fig, axes = plt.subplots(len(modes), len(dtypes), figsize=(7 * len(dtypes), 3.6 * len(modes)),
                             squeeze=False)  # fmt: skip
    for i, mode in enumerate(modes):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            rs = [r for r in records if r["mode"] == mode and r["dtype"] == dtype]
            width = 0.8 / len(variants)
            for k, v in enumerate(variants):
                xs = [n + k * width for n, r in enumerate(rs) if v in r["x_copy"]]
                ys = [r["x_copy"][v] for r in rs if v in r["x_copy"]]
                if ys:
                    ax.bar(xs, ys, width, label=v)
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            labels = [f"{r['op']}\n{r['shape'][0]}x{r['shape'][1]}" for r in rs]
            ax.set_xticks([n + 0.4 - width / 2 for n in range(len(rs))], labels, fontsize=6)
            ax.set_ylabel("x copy bandwidth")
            ax.set_title(f"{mode}, {dtype}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
