"""``normlab bench``: speed of the fused kernels against torch, eager, compiled and copy.

Absolute times on shared machines are noise; ratios measured in the same run are not. For
each operation, shape, dtype and mode (forward, forward+backward) every variant is timed
interleaved with the others, over several repeats, and the median kept:

- ``normlab``: :mod:`normlab.kernels` (the layers' default path),
- ``torch``: torch's own op where one exists (``F.rms_norm``, ``F.layer_norm``),
- ``eager``: the plain formula (:mod:`normlab.functional`, normlab's path before the kernels),
- ``compiled``: ``torch.compile`` of that formula,
- ``liger``: Liger-Kernel's op on CUDA when ``liger-kernel`` is installed,
- ``copy``: ``out.copy_(x)`` on the same tensor, the bandwidth bound of a memory-bound op.

GB/s counts the least traffic an op needs (each input read once, each output written
once); ``x copy`` divides it by the copy's GB/s. Inputs and gradients are preallocated;
on Linux the allocator is told not to return memory to the system (``mallopt``), so the
numbers do not measure page faults.
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from normlab import functional as NF
from normlab import kernels as K
from normlab._io import atomic_write_json

__all__ = ["OPS", "SHAPES", "bench_op", "check_targets", "run_benchmarks"]

OPS = ("rmsnorm", "layernorm", "dyt", "add_rmsnorm", "softmax1")
#: The issue's shapes plus one long-row shape (8M elements each).
SHAPES = ((8192, 1024), (2048, 4096), (128, 65536))
#: Least traffic in units of the input's size: (forward, forward+backward).
_TRAFFIC = {"add_rmsnorm": (4, 8)}
_EPS = 1e-6


def _reference(op: str) -> Callable[..., Any]:
    return {
        "rmsnorm": lambda x, w, b, r: NF.rms_norm(x, (x.shape[-1],), w, _EPS),
        "layernorm": lambda x, w, b, r: NF.layer_norm(x, (x.shape[-1],), w, b),
        "dyt": lambda x, w, b, r: NF.dyt(x, b[:1], w, b),
        "add_rmsnorm": lambda x, w, b, r: NF.rms_norm(x + r, (x.shape[-1],), w, _EPS),
        "softmax1": lambda x, w, b, r: NF.softmax1(x),
    }[op]


def _fast(op: str) -> Callable[..., Any]:
    return {
        "rmsnorm": lambda x, w, b, r: K.rms_norm(x, (x.shape[-1],), w, _EPS),
        "layernorm": lambda x, w, b, r: K.layer_norm(x, (x.shape[-1],), w, b),
        "dyt": lambda x, w, b, r: K.dyt(x, b[:1], w, b),
        "add_rmsnorm": lambda x, w, b, r: K.add_rms_norm(x, r, (x.shape[-1],), w, _EPS)[1],
        "softmax1": lambda x, w, b, r: K.softmax1(x),
    }[op]


def _torch_op(op: str) -> Callable[..., Any] | None:
    if op == "rmsnorm":
        return lambda x, w, b, r: F.rms_norm(x, (x.shape[-1],), w, _EPS)
    if op == "layernorm":
        return lambda x, w, b, r: F.layer_norm(x, (x.shape[-1],), w, b)
    if op == "add_rmsnorm":
        return lambda x, w, b, r: F.rms_norm(x + r, (x.shape[-1],), w, _EPS)
    return None


def _liger_op(op: str, d: int, device: str) -> Callable[..., Any] | None:
    if device != "cuda":
        return None
    try:
        from liger_kernel.transformers.layer_norm import LigerLayerNorm
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
    except ImportError:
        return None
    if op == "rmsnorm":
        m = LigerRMSNorm(d, eps=_EPS).to(device)
        return lambda x, w, b, r: m(x)
    if op == "layernorm":
        m = LigerLayerNorm(d).to(device)
        return lambda x, w, b, r: m(x)
    return None


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _median_times(
    fns: dict[str, Callable[[], Any]], device: str, repeats: int, min_time: float
) -> dict[str, float]:
    """Seconds per call of each function: interleaved rounds, the median of ``repeats``."""
    counts = {}
    for name, fn in fns.items():  # warm up (and compile), then size the rounds
        fn()
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        counts[name] = max(1, int(min_time / max(time.perf_counter() - start, 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for rep in range(repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            fn, n = fns[name], counts[name]
            _sync(device)
            start = time.perf_counter()
            for _ in range(n):
                fn()
            _sync(device)
            samples[name].append((time.perf_counter() - start) / n)
    return {name: statistics.median(v) for name, v in samples.items()}


def _saved_bytes(fn: Callable[[], torch.Tensor], keep: Sequence[torch.Tensor]) -> int:
    """Bytes autograd saves for the backward pass beyond tensors in ``keep``."""
    ptrs = {t.untyped_storage().data_ptr() for t in keep}
    seen: set[int] = set()
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        ptr = t.untyped_storage().data_ptr()
        if ptr not in ptrs and ptr not in seen:
            seen.add(ptr)
            total += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    ptrs.add(out.untyped_storage().data_ptr())
    return total - (
        out.untyped_storage().nbytes() if out.untyped_storage().data_ptr() in seen else 0
    )


def bench_op(
    op: str,
    shape: tuple[int, int],
    dtype: torch.dtype,
    *,
    backward: bool = False,
    device: str = "cpu",
    compile: bool = True,
    repeats: int = 5,
    min_time: float = 0.1,
) -> dict[str, Any]:
    """Time every variant of ``op`` on one ``(rows, d)`` input; return one record."""
    rows, d = shape
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    r = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    w = torch.ones(d, device=device, dtype=dtype)  # parameters in the model's dtype
    b = torch.full((d,), 0.5, device=device, dtype=dtype)
    g = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
    out = torch.empty_like(x)
    variants: dict[str, Callable[..., Any]] = {"normlab": _fast(op), "eager": _reference(op)}
    for name, fn in (("torch", _torch_op(op)), ("liger", _liger_op(op, d, device))):
        if fn is not None:
            variants[name] = fn
    if compile:
        variants["compiled"] = torch.compile(_reference(op), dynamic=False)
    leaves = [t.detach().requires_grad_(backward) for t in (x, w, b, r)]

    def call(fn: Callable[..., Any]) -> Callable[[], Any]:
        if not backward:
            return lambda: fn(*leaves)
        return lambda: torch.autograd.grad(fn(*leaves), leaves[:2], g, allow_unused=True)

    fns = {name: call(fn) for name, fn in variants.items()}
    fns["copy"] = lambda: out.copy_(x)
    with torch.set_grad_enabled(backward):
        times = _median_times(fns, device, repeats, min_time)
    traffic = _TRAFFIC.get(op, (2, 5))[int(backward)] * x.numel() * x.element_size()
    copy_gbs = 2 * x.numel() * x.element_size() / times["copy"] / 1e9
    record: dict[str, Any] = {
        "op": op,
        "shape": [rows, d],
        "dtype": str(dtype).removeprefix("torch."),
        "mode": "fwd+bwd" if backward else "fwd",
        "device": device,
        "seconds": times,
        "gbs": {k: traffic / t / 1e9 for k, t in times.items() if k != "copy"},
        "copy_gbs": copy_gbs,
    }
    record["x_copy"] = {k: v / copy_gbs for k, v in record["gbs"].items()}
    record["speedup"] = {k: t / times["normlab"] for k, t in times.items() if k != "copy"}
    if backward:
        record["saved_bytes_per_row"] = {
            name: _saved_bytes(lambda fn=fn: fn(*leaves), leaves) / rows
            for name, fn in variants.items()
            if name in ("normlab", "torch", "eager")
        }
    return record


#: The issue's CPU targets: (description, op, dtype, mode, key, against, threshold).
TARGETS = (
    ("RMSNorm fwd fp32 >= 0.75x copy", "rmsnorm", "float32", "fwd", "x_copy", "normlab", 0.75),
    ("RMSNorm fwd fp32 >= 2.5x F.rms_norm", "rmsnorm", "float32", "fwd", "speedup", "torch", 2.5),
    ("RMSNorm fwd+bwd fp32 >= 2x F.rms_norm", "rmsnorm", "float32", "fwd+bwd", "speedup",
     "torch", 2.0),
    ("RMSNorm fwd bf16 >= 4x F.rms_norm", "rmsnorm", "bfloat16", "fwd", "speedup", "torch", 4.0),
    ("LayerNorm fwd fp32 >= 1x F.layer_norm", "layernorm", "float32", "fwd", "speedup", "torch",
     1.0),
    ("LayerNorm fwd bf16 >= 2x F.layer_norm", "layernorm", "bfloat16", "fwd", "speedup",
     "torch", 2.0),
    ("DyT fwd fp32 >= 3x eager DyT", "dyt", "float32", "fwd", "speedup", "eager", 3.0),
    ("DyT fwd bf16 >= 3x eager DyT", "dyt", "bfloat16", "fwd", "speedup", "eager", 3.0),
)  # fmt: skip


#: The issue's GPU targets (copy bandwidth stands for the device's memory bandwidth).
GPU_TARGETS = (
    ("RMSNorm fwd bf16 >= 0.85x copy", "rmsnorm", "bfloat16", "fwd", "x_copy", "normlab", 0.85),
    ("RMSNorm fwd bf16 >= 1x Liger", "rmsnorm", "bfloat16", "fwd", "speedup", "liger", 1.0),
)


def check_targets(records: Sequence[dict[str, Any]], device: str = "cpu") -> list[dict[str, Any]]:
    """Each target with the worst value over the shapes measured, and whether it is met."""
    rows = []
    for text, op, dtype, mode, key, against, threshold in (
        GPU_TARGETS if device == "cuda" else TARGETS
    ):
        values = [
            r[key][against]
            for r in records
            if (r["op"], r["dtype"], r["mode"]) == (op, dtype, mode) and against in r[key]
        ]
        if values:
            worst = min(values)
            rows.append({"target": text, "value": worst, "met": worst >= threshold})
    return rows


def bench_model(
    *, device: str = "cpu", norms: Sequence[str] = ("rmsnorm", "layernorm", "dyt"),
    batch: int = 32, repeats: int = 5,
) -> list[dict[str, Any]]:  # fmt: skip
    """TinyGPT (d=128, 4 layers, T=128, softmax1 scores) with the kernels on vs off.

    Times one training step (forward, cross-entropy, backward, AdamW step) and one
    inference forward pass; ``speedup`` > 1 means the kernels are faster.
    """
    return [rec for norm in norms for rec in _model_records(norm, device, batch, repeats)]


def _model_records(norm: str, device: str, batch: int, repeats: int) -> list[dict[str, Any]]:
    from normlab.models.gpt import GPTConfig, TinyGPT

    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(norm=norm, score="softmax1")).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, 256, (batch, model.config.context), device=device)

    def train() -> None:
        logits = model(idx)
        loss = F.cross_entropy(logits.flatten(0, 1), idx.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def infer() -> None:
        with torch.no_grad():
            model(idx)

    records = []
    for mode, fn in (("train step", train), ("inference", infer)):
        times = {}
        for on in (True, False):
            with K.use_kernels(on):
                key = "kernels" if on else "plain"
                times[key] = _median_times({"m": fn}, device, repeats, 0.0)["m"]
        records.append({
            "model": f"TinyGPT {norm} + softmax1", "mode": mode, "seconds": times,
            "speedup": times["plain"] / times["kernels"],
        })  # fmt: skip
    return records


def _no_page_faults() -> None:
    """Keep freed memory in the process (glibc), so timings do not include page faults."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-4, 0)  # M_MMAP_MAX
            libc.mallopt(-1, 2**31 - 1)  # M_TRIM_THRESHOLD


def _plot(records: Sequence[dict[str, Any]], path: str | Path) -> None:
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
            labels = [f"{r['op']}\n{r['shape'][0]}x{r['shape'][1]}" for r in rs]
            width = 0.8 / len(variants)
            for k, v in enumerate(variants):
                xs = [n + k * width for n, r in enumerate(rs) if v in r["x_copy"]]
                ys = [r["x_copy"][v] for r in rs if v in r["x_copy"]]
                if ys:
                    ax.bar(xs, ys, width, label=v)
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            ax.set_xticks([n + 0.4 - width / 2 for n in range(len(rs))], labels, fontsize=6)
            ax.set_ylabel("x copy bandwidth")
            ax.set_title(f"{mode}, {dtype}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _print(records: Sequence[dict[str, Any]], targets: Sequence[dict[str, Any]],
           models: Sequence[dict[str, Any]], title: str) -> None:  # fmt: skip
    from rich.console import Console
    from rich.table import Table

    table = Table("op", "shape", "dtype", "mode", "normlab GB/s", "x copy", "x torch",
                  "x eager", "x compiled", "x liger", "saved B/row", title=title)  # fmt: skip

    def fmt(d: dict[str, float], k: str) -> str:
        return f"{d[k]:.2f}" if k in d else ""

    for r in records:
        saved = r.get("saved_bytes_per_row", {}).get("normlab")
        table.add_row(r["op"], "x".join(map(str, r["shape"])), r["dtype"], r["mode"],
                      f"{r['gbs']['normlab']:.1f}", fmt(r["x_copy"], "normlab"),
                      *(fmt(r["speedup"], k) for k in ("torch", "eager", "compiled", "liger")),
                      "" if saved is None else f"{saved:.0f}")  # fmt: skip
    console = Console(width=160)
    console.print(table)
    if targets:
        t = Table("target", "worst over shapes", "met", title="targets (issue 16)")
        for row in targets:
            t.add_row(row["target"], f"{row['value']:.2f}", "yes" if row["met"] else "NO")
        console.print(t)
    if models:
        t = Table("model", "mode", "kernels ms", "plain ms", "speedup", title="end to end")
        for m in models:
            s = m["seconds"]
            t.add_row(m["model"], m["mode"], f"{s['kernels'] * 1e3:.1f}",
                      f"{s['plain'] * 1e3:.1f}", f"{m['speedup']:.2f}")  # fmt: skip
        console.print(t)


def run_benchmarks(
    *,
    quick: bool = True,
    out: str | Path | None = None,
    shapes: Sequence[tuple[int, int]] = SHAPES,
    dtypes: Sequence[str | torch.dtype] = ("float32", "bfloat16"),
    ops: Sequence[str] = OPS,
    modes: Sequence[str] = ("fwd", "fwd+bwd"),
    device: str = "cpu",
    compile: bool | None = None,
    plot: str | Path | None = None,
    model: bool = False,
    repeats: int | None = None,
) -> int:
    """Benchmark the kernels (and, with ``model``, TinyGPT end to end); print; return 0.

    Args:
        quick: 3 repeats of ~0.05 s per variant and no ``torch.compile`` peer (unless
            ``compile=True``); otherwise 7 repeats of ~0.2 s with the compiled peer.
        out: write the records as JSON here.
        shapes, dtypes, ops, modes: what to measure (modes: "fwd", "fwd+bwd").
        device: "cpu" or "cuda" (adds Liger-Kernel's ops when installed).
        compile: time ``torch.compile`` of the eager formula (a cold compile costs seconds
            per shape and dtype; the Inductor cache makes reruns cheap).
        plot: save a PNG of the ``x copy`` ratios here.
        model: also time TinyGPT's training step and inference with the kernels on and off.
        repeats: override the number of interleaved repeats.
    """
    unknown = set(ops) - set(OPS)
    if unknown:
        raise ValueError(f"unknown ops {sorted(unknown)}; choose from {OPS}.")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is available; use device='cpu'.")
    _no_page_faults()
    compile = (not quick) if compile is None else compile
    reps = repeats or (3 if quick else 7)
    min_time = 0.05 if quick else 0.2
    K.available(device)  # build or load the CPU library before timing
    records = [
        bench_op(
            op,
            (int(s[0]), int(s[1])),
            getattr(torch, str(dt).removeprefix("torch.")),
            backward=mode == "fwd+bwd",
            device=device,
            compile=compile,
            repeats=reps,
            min_time=min_time,
        )
        for op in ops
        for s in shapes
        for dt in dtypes
        for mode in modes
    ]
    targets = check_targets(records, device)
    models = bench_model(device=device, repeats=reps) if model else []
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    title = f"normlab bench ({name}, torch {torch.__version__}, {torch.get_num_threads()} threads)"
    _print(records, targets, models, title)
    if plot is not None:
        _plot(records, plot)
        print(f"plot: {plot}")
    if out is not None:
        meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "device": name}
        payload = {"meta": meta, "ops": records, "targets": targets, "model": models}
        atomic_write_json(Path(out), payload)
        print(f"results: {out}")
    return 0
