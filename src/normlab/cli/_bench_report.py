"""The targets of ``normlab bench`` and how the results are printed and plotted.

A target is a ratio measured in the run against a threshold, on every shape it names:

- normlab's LayerNorm and RMSNorm no slower than torch's own op (``F.layer_norm``,
  ``F.rms_norm``), forward and forward+backward, every shape and dtype, and with
  ``--regimes`` also the forward with fresh outputs from the default allocator, and both
  passes on small inputs in cache;
- forward at >= 0.9x copy bandwidth (RMSNorm, LayerNorm, DyT, Softmax1) and forward+backward
  at >= 0.8x the memory limit (RMSNorm, LayerNorm and the fused add forms) on the two 8M
  element shapes (8192 x 1024 and 2048 x 4096), float32 and bfloat16;
- every op no slower than ``torch.compile`` of its formula;
- the TinyGPT training step: the fused add + norm no slower than the unfused kernels,
  the kernels >= 1.2x the plain model and no slower than ``torch.compile`` of it.

Ratios from records measured while the 1-minute load average exceeded the thread count are
withheld (printed as "loaded") unless ``allow_load`` is set, and then marked: on a shared
machine the copy baseline slows down more than the kernels, so such a ratio describes the
machine, not the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["check_targets", "plot", "print_results", "targets_for"]

_NAMES = {
    "rmsnorm": "RMSNorm",
    "layernorm": "LayerNorm",
    "dyt": "DyT",
    "softmax1": "Softmax1",
    "add_rmsnorm": "add + RMSNorm",
    "add_layernorm": "add + LayerNorm",
    "rmsnorm_offset": "RMSNorm (1 + w)",
}
_TARGET_SHAPES = ((8192, 1024), (2048, 4096))
_PEERS = ("torch", "eager", "compiled", "liger")

#: (description, op, dtype, mode, key, against, threshold, shapes or None for every shape)
Target = tuple[str, str, str, str, str, str, float, tuple[tuple[int, int], ...] | None]


def _wanted(op: str, mode: str) -> list[tuple[str, str, str, float, Any]]:
    """(text, key, against, threshold, shapes) of the CPU targets of one op and mode."""
    out: list[tuple[str, str, str, float, Any]] = []
    if mode == "fwd" and op in ("rmsnorm", "layernorm", "dyt", "softmax1"):
        out.append((">= 0.9x copy", "x_copy", "normlab", 0.9, _TARGET_SHAPES))
    if mode == "fwd+bwd" and op in ("rmsnorm", "layernorm", "add_rmsnorm", "add_layernorm"):
        out.append((">= 0.8x memory limit", "x_copy", "normlab", 0.8, _TARGET_SHAPES))
    if op in ("rmsnorm", "layernorm"):
        out.append((">= torch's own op", "speedup", "torch", 1.0, None))
    out.append((">= torch.compile", "speedup", "compiled", 1.0, None))
    return out


def targets_for(device: str) -> list[Target]:
    """The per-operation targets on ``device`` ("cpu" or "cuda")."""
    out: list[Target] = []
    for op in _NAMES:
        for dtype in ("float32", "bfloat16"):
            for mode in ("fwd", "fwd+bwd"):
                wanted = _wanted(op, mode)
                if device == "cuda":
                    wanted.append((">= Liger-Kernel", "speedup", "liger", 1.0, None))
                for text, key, against, bound, shapes in wanted:
                    name = f"{_NAMES[op]} {mode} {dtype} {text}"
                    out.append((name, op, dtype, mode, key, against, bound, shapes))
    return out


def _label(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def check_targets(
    records: Sequence[dict[str, Any]],
    model: dict[str, Any] | None,
    device: str = "cpu",
    *,
    allow_load: bool = False,
    fresh: Sequence[dict[str, Any]] = (),
    small: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Each target of the ops, dtypes and modes measured, with its value on every shape it
    names and whether all of them meet it; with ``fresh`` (the default allocator's records,
    :func:`~normlab.cli._bench_ops.fresh_output_regime`) also RMSNorm's and LayerNorm's
    forward against torch's own op in that regime, and with ``small``
    (:func:`~normlab.cli._bench_ops.small_input_regime`) their forward and forward+backward
    against it on small inputs in cache.

    Records measured under load count only with ``allow_load`` (the row is then marked).
    """
    rows = []
    for op in ("rmsnorm", "layernorm"):
        for dtype in sorted({r["dtype"] for r in fresh if r["op"] == op}):
            found = [r for r in fresh if (r["op"], r["dtype"]) == (op, dtype)]
            rows.append(_row(f"{_NAMES[op]} fwd {dtype} >= torch's own op, fresh outputs",
                             1.0, found, "speedup", "torch", allow_load))  # fmt: skip
        for dtype in sorted({r["dtype"] for r in small if r["op"] == op}):
            for mode in ("fwd", "fwd+bwd"):
                found = [r for r in small if (r["op"], r["dtype"], r["mode"]) == (op, dtype, mode)]
                text = f"{_NAMES[op]} {mode} {dtype} >= torch's own op, small inputs in cache"
                rows.append(_row(text, 1.0, found, "speedup", "torch", allow_load))
    measured = {(r["op"], r["dtype"], r["mode"]) for r in records}
    for text, op, dtype, mode, key, against, threshold, shapes in targets_for(device):
        if (op, dtype, mode) not in measured:  # not asked for in this run
            continue
        found = [
            r
            for r in records
            if (r["op"], r["dtype"], r["mode"]) == (op, dtype, mode)
            and against in r[key]
            and (shapes is None or tuple(r["shape"]) in shapes)
        ]
        rows.append(_row(text, threshold, found, key, against, allow_load))
    if model is not None:
        usable = allow_load or not model.get("loaded")
        for arm, threshold, text in (
            ("unfused", 1.0, "TinyGPT train step, fused add + norm >= unfused kernels"),
            ("plain", 1.2, "TinyGPT train step with kernels >= 1.2x without"),
            ("compiled", 1.0, "TinyGPT train step with kernels >= torch.compile without"),
        ):
            value = model["speedup"].get(arm) if usable else None
            rows.append({
                "target": text, "threshold": threshold,
                "values": {} if value is None else {"step": value},
                "met": value is not None and value >= threshold, "measured": value is not None,
                "loaded": bool(model.get("loaded")),
            })  # fmt: skip
    return rows


def _row(
    text: str,
    threshold: float,
    found: Sequence[dict[str, Any]],
    key: str,
    against: str,
    allow_load: bool,
) -> dict[str, Any]:
    """One target's row: ``r[key][against]`` of each record found, per shape."""
    usable = [r for r in found if allow_load or not r.get("loaded")]
    values = {_label(r["shape"]): r[key][against] for r in usable}
    return {
        "target": text, "threshold": threshold, "values": values,
        "met": bool(usable) and all(v >= threshold for v in values.values()),
        "measured": bool(usable), "loaded": any(r.get("loaded") for r in found),
    }  # fmt: skip


def _fmt(values: dict[str, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values.values())


def _verdict(row: dict[str, Any]) -> str:
    if not row["measured"]:
        return "withheld (load)" if row.get("loaded") else "not measured"
    verdict = "yes" if row["met"] else "NO"
    return f"{verdict} (under load)" if row.get("loaded") else verdict


def print_results(
    records: Sequence[dict[str, Any]],
    regimes: Sequence[dict[str, Any]],
    targets: Sequence[dict[str, Any]],
    model: dict[str, Any] | None,
    title: str,
    *,
    allow_load: bool = False,
    threads: int = 1,
    small: Sequence[dict[str, Any]] = (),
) -> None:
    """Print the op table, the allocation regimes, small inputs, the targets and the model
    record.

    A peer column with no measurement in any row is left out (with a line saying why
    for Liger-Kernel); ratios of records measured under load are withheld unless
    ``allow_load``, and marked with ``*`` when shown.
    """
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    peers = [k for k in _PEERS if any(k in r["speedup"] for r in records)]
    table = Table("op", "shape", "dtype", "mode", "load", "copy GB/s", "normlab GB/s",
                  "x mem limit", *(f"x {k}" for k in peers), title=title)  # fmt: skip
    for r in records:
        sp, loaded = r["speedup"], r.get("loaded", False)
        hide = loaded and not allow_load
        load = "{:.1f}-{:.1f}".format(*r["load"]) + ("*" if loaded else "") if "load" in r else ""
        ratios = ["loaded" if hide else f"{r['x_copy']['normlab']:.2f}"]
        ratios += ["" if k not in sp else ("-" if hide else f"{sp[k]:.2f}") for k in peers]
        copy = f"{r['copy_gbs']:.1f}" if "copy_gbs" in r else ""
        table.add_row(r["op"], _label(r["shape"]), r["dtype"], r["mode"], load, copy,
                      f"{r['gbs']['normlab']:.1f}", *ratios)  # fmt: skip
    console.print(table)
    withheld = "." if allow_load else " and are withheld (--allow-load prints them)."
    console.print(
        "x mem limit: the bytes the op must move (inputs, outputs, parameters, saved "
        "statistics) at the bandwidth of a copy from memory (each variant, the copy "
        "included, cycles through distinct buffers totalling >= 8x the last-level cache, "
        "so no dtype's baseline is the cache's; 1 = memory limit); x peer: peer time / normlab "
        "time (> 1: normlab faster); copy GB/s: that baseline's bandwidth in the row (where "
        "it moves between runs, a compute-bound kernel's x mem limit moves with it). load: "
        "1-minute load average before-after the row; * "
        f"marks rows measured above {threads} (the thread count), whose ratios describe the "
        "machine's other work as much as the kernels" + withheld
    )
    if "liger" not in peers:
        console.print("No Liger-Kernel column: Liger-Kernel runs on CUDA only (--device cuda "
                      "with liger-kernel installed).")  # fmt: skip
    if regimes:
        t = Table(
            "op",
            "shape",
            "dtype",
            "normlab x copy",
            "clone x copy",
            "x torch",
            title="fresh outputs, default allocator (copy: preallocated, from memory)",
        )
        for r in regimes:
            own = r.get("speedup", {}).get("torch")
            own_text = "-" if own is None else f"{own:.2f}"
            t.add_row(r["op"], _label(r["shape"]), r["dtype"], f"{r['normlab_x_copy']:.2f}",
                      f"{r['clone_x_copy']:.2f}", own_text)  # fmt: skip
        console.print(t)
        console.print(
            "Remedy for large outputs on CPU: MALLOC_MMAP_MAX_=0 "
            "MALLOC_TRIM_THRESHOLD_=2147483647 (glibc), or LD_PRELOAD a caching "
            "allocator (jemalloc, tcmalloc); the table above is measured so."
        )
    if small:
        t = Table("op", "shape", "dtype", "mode", "normlab us", "torch us", "x torch",
                  title="small inputs in cache (the same tensors every call)")  # fmt: skip
        for r in small:
            hide = r.get("loaded") and not allow_load
            sec = r["seconds"]
            t.add_row(r["op"], _label(r["shape"]), r["dtype"], r["mode"],
                      f"{sec['normlab'] * 1e6:.0f}", f"{sec['torch'] * 1e6:.0f}",
                      "loaded" if hide else f"{r['speedup']['torch']:.2f}")  # fmt: skip
        console.print(t)
        console.print(
            "In cache a call's fixed cost sets the time: normlab's path (checks, the autograd "
            "function, a ctypes call) costs ~20 us more than torch's op forward and ~50 us more "
            "forward+backward; the kernels win from where the arithmetic outweighs that."
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
                      f"{100 * share['plain']:.1f}% without; load {model['load'][0]:.1f} -> "
                      f"{model['load'][1]:.1f}")  # fmt: skip
    if targets:
        t = Table("target", "measured (per shape)", "met",
                  title="targets: ratios in this run against each threshold")  # fmt: skip
        for row in targets:
            t.add_row(row["target"], _fmt(row["values"]), _verdict(row))
        console.print(t)


def plot(records: Sequence[dict[str, Any]], path: Path) -> None:
    """Bar charts of each variant's ``x copy`` ratio, one panel per mode and dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({r["mode"] for r in records}, reverse=True)
    dtypes = sorted({r["dtype"] for r in records})
    variants = ["normlab", *_PEERS]
    per_panel = max(len([r for r in records if (r["mode"], r["dtype"]) == key])
                    for key in {(r["mode"], r["dtype"]) for r in records})  # fmt: skip
    wide = max(7.0, 0.45 * per_panel)  # a panel grows with its records; labels stay legible
    fig, axes = plt.subplots(len(modes), len(dtypes), figsize=(wide * len(dtypes),
                             4.2 * len(modes)), squeeze=False)  # fmt: skip
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
            ax.set_xticks([n + 0.4 - width / 2 for n in range(len(rs))], labels, fontsize=6,
                          rotation=90)  # fmt: skip
            ax.set_ylabel("x copy bandwidth")
            ax.set_title(f"{mode}, {dtype}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
