"""Per-operation timing for ``normlab bench``: the kernels against torch, eager, compiled, copy.

Absolute times on shared machines are noise; ratios measured in the same run are not. For
each operation, shape, dtype and mode (forward, forward+backward) every variant is timed
interleaved with the others (ABC ABC ...), over several repeats, and the median kept:

- ``normlab``: :mod:`normlab.kernels` (the layers' default path),
- ``torch``: torch's own op where one exists (``F.rms_norm``, ``F.layer_norm``),
- ``eager``: normlab's plain path (:mod:`normlab.functional`, the layers'
  ``backend="torch"``, with its overflow guard),
- ``compiled``: ``torch.compile`` of the textbook formula in float32 (no overflow guard,
  whose data-dependent branch would break the graph): the strongest compiled peer,
- ``liger``: Liger-Kernel's module on CUDA when ``liger-kernel`` is installed (RMSNorm, its
  Gemma offset, LayerNorm, fused add + RMSNorm), its parameters in the input's dtype and
  ``in_place=False`` (its default overwrites the incoming gradient, which the other variants
  share),
- ``copy``: ``dst.copy_(src)`` into a preallocated tensor, the bandwidth bound.

Baseline: memory, not cache (the CPU's last-level cache, a CUDA device's L2: 60 MB on an
H200). Every variant, the copy included, cycles through distinct
buffer sets (the copy: source and destination; the ops: x, the residual and the incoming
gradient) whose total exceeds :data:`CACHE_MULTIPLE` times the last-level cache
(:func:`rotation`), so each call reads data the previous calls have evicted: the copy's
bandwidth is the memory's, for every dtype. (Without it a 16 MB bfloat16 tensor largely
stayed in a 32 MB L3 and its copy ran at 118-194 GB/s where float32's ran at 58-62 GB/s.
On the 2-core EPYC with a 32 MB L3, a 2-thread bfloat16 8192x1024 copy cycling through 32,
64, 128, 256, 512 MB and 1-2 GB of buffers ran at 95, 61, 50, 46, 44, 45 GB/s: from 8x
the cache on it is the memory's.)
Parameters are shared, and outputs come from the allocator as in use. At most
:data:`MAX_SETS` sets: shapes whose set is below ``CACHE_MULTIPLE * LLC / MAX_SETS`` run
partly in cache for every variant alike.

``x copy`` (printed as the memory-limit fraction) is the bytes the op must move over its
time, divided by the copy's bandwidth: 1.0 means the op runs at the memory limit. The bytes
are counted per op (:func:`traffic`): every tensor read or written once, the parameters and
their gradients, and the saved per-row statistics (written by the forward, read by the
backward). The load average is read before and after each record: a record whose 1-minute
load exceeded the thread count is marked ``loaded`` (other processes shared the cores, and
the copy baseline suffers more than the kernels, so its ratios are not the kernel's).

Clock: on the CPU with one thread (``--threads 1``) every variant runs on the calling
thread, so each is timed in that thread's CPU time (:func:`time.thread_time`, page faults
included): time the scheduler gives to other processes is not counted, and the ratios stay
close to the idle machine's under load (other processes still share the memory bus). With
more threads, or on CUDA, the wall clock.

Allocation regimes: an op returns a fresh output. glibc serves blocks above its mmap
ceiling (at most 32 MB) with fresh pages from the kernel, and faulting them in costs more
than the arithmetic. :func:`fresh_output_regime` measures the default allocator (run it
before :func:`keep_freed_memory`); the main table is measured after it, with freed memory
kept in the process, as a caching allocator (jemalloc, tcmalloc, ``MALLOC_MMAP_MAX_=0``)
does. :func:`small_input_regime` then times small inputs that stay in cache against torch's
own op, where a call's fixed cost in Python counts.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from normlab import functional as NF
from normlab import kernels as K
from normlab._machine import load_average

__all__ = [
    "CACHE_MULTIPLE",
    "MAX_SETS",
    "OPS",
    "SHAPES",
    "SMALL",
    "SWEEP",
    "bench_op",
    "cache_bytes",
    "clock",
    "fresh_output_regime",
    "keep_freed_memory",
    "last_level_cache",
    "median_times",
    "rotating_copy",
    "rotation",
    "small_input_regime",
    "traffic",
]

OPS = (
    "rmsnorm",
    "layernorm",
    "dyt",
    "softmax1",
    "add_rmsnorm",
    "add_layernorm",
    "rmsnorm_offset",
)
#: Small inputs timed in cache (:func:`small_input_regime`): 16K to 1M elements, a small
#: model's activations (the bench's TinyGPT, 8 sequences x 128 tokens x d 256: 1024 x 256).
SMALL = ((64, 256), (1024, 256), (4096, 256), (1024, 1024))
#: The targets' two shapes (8M elements each).
SHAPES = ((8192, 1024), (2048, 4096))
#: Widths 64 to 65536 with non-powers of two (8M elements each where the row count allows)
#: and the per-head QK-norm shape of ROCm/aiter PR #1350.
SWEEP = (
    (131072, 64),
    (87381, 96),
    (8192, 1000),
    (8192, 1024),
    (2048, 4096),
    (1638, 5120),
    (682, 12288),
    (128, 65536),
    (364800, 128),
)
#: Row-sized tensors each op reads or writes: (forward, backward).
_ROWS = {
    "add_rmsnorm": (4, 4),  # x, r -> s, y; dy, ds, s -> dx (also dr: the same tensor)
    "add_layernorm": (4, 4),
    "softmax1": (2, 3),  # x -> y; dy, y -> dx
}
#: Per-row float32 statistics saved by the forward pass (written once, read once).
_STATS = {"rmsnorm": 1, "rmsnorm_offset": 1, "add_rmsnorm": 1, "layernorm": 2, "add_layernorm": 2}
_EPS = 1e-6
#: The buffers a timed loop cycles through total at least this many last-level caches.
CACHE_MULTIPLE = 8
#: At most this many distinct buffer sets per timed function.
MAX_SETS = 64
#: Assumed when the cache size cannot be read.
_DEFAULT_LLC = 32 * 2**20


def _cache_size(text: str) -> int:
    """``"32768K"`` -> bytes (sysfs's cache ``size`` file)."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@functools.cache
def last_level_cache() -> int:
    """Bytes of the largest-level cache of CPU 0 (sysfs; else sysconf; else 32 MiB), read
    once per process."""
    best: tuple[int, int] = (0, 0)
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        with contextlib.suppress(OSError, ValueError):
            with open(os.path.join(index, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(os.path.join(index, "level")) as f, open(os.path.join(index, "size")) as g:
                best = max(best, (int(f.read()), _cache_size(g.read())))
    if best[1] > 0:
        return best[1]
    with contextlib.suppress(ValueError, OSError, AttributeError):
        size = os.sysconf("SC_LEVEL3_CACHE_SIZE")
        if size > 0:
            return size
    return _DEFAULT_LLC


def cache_bytes(device: str) -> int:
    """The cache a timed loop's buffers must overflow on ``device``: the CPU's last level
    (:func:`last_level_cache`) or the current CUDA device's L2."""
    if device == "cuda":
        return torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return last_level_cache()


def rotation(set_bytes: int, llc: int | None = None) -> int:
    """How many distinct sets of ``set_bytes`` a timed function cycles through so that
    together they exceed :data:`CACHE_MULTIPLE` last-level caches (1 to :data:`MAX_SETS`)."""
    llc = last_level_cache() if llc is None else llc
    need = -(-CACHE_MULTIPLE * llc // max(set_bytes, 1))
    return max(1, min(MAX_SETS, need))


def rotating_copy(x: torch.Tensor, llc: int | None = None) -> Callable[[], torch.Tensor]:
    """The copy baseline: ``dst.copy_(src)``, each call on the next of :func:`rotation`'s
    distinct (source, destination) pairs, so the copy reads and writes memory, not cache."""
    sets = rotation(2 * x.numel() * x.element_size(), llc)
    # destinations written once here: a first touch would time the page faults
    pairs = itertools.cycle([(x.clone(), torch.zeros_like(x)) for _ in range(sets)])

    def copy() -> torch.Tensor:
        src, dst = next(pairs)
        return dst.copy_(src)

    copy.sets = sets  # type: ignore[attr-defined]
    return copy


def traffic(op: str, shape: tuple[int, int], dtype: torch.dtype, backward: bool) -> int:
    """Bytes ``op`` must move on a ``(rows, d)`` input: forward, or forward plus backward.

    Row-sized tensors at the input's width; weight and bias (float32 in the kernels) read
    once per pass and their gradients written once; saved statistics written by the forward
    and read by the backward.
    """
    rows, d = shape
    fwd, bwd = _ROWS.get(op, (2, 3))  # x -> y; dy, x -> dx
    params = {"softmax1": 0, "layernorm": 2, "add_layernorm": 2, "dyt": 2}.get(op, 1)
    stats = _STATS.get(op, 0) * rows * 4
    total = fwd * rows * d * dtype.itemsize + params * d * 4 + stats
    if backward:
        total += bwd * rows * d * dtype.itemsize + 2 * params * d * 4 + stats
    return total


Fn = Callable[..., Any]


def _reference(op: str) -> Fn:
    return {
        "rmsnorm": lambda x, w, b, r: NF.rms_norm(x, (x.shape[-1],), w, _EPS),
        "layernorm": lambda x, w, b, r: NF.layer_norm(x, (x.shape[-1],), w, b),
        "dyt": lambda x, w, b, r: NF.dyt(x, b[:1], w, b),
        "add_rmsnorm": lambda x, w, b, r: NF.add_rms_norm(x, r, (x.shape[-1],), w, _EPS),
        "add_layernorm": lambda x, w, b, r: NF.add_layer_norm(x, r, (x.shape[-1],), w, b),
        "rmsnorm_offset": lambda x, w, b, r: NF.rms_norm(x, (x.shape[-1],), w, _EPS, offset=1.0),
        "softmax1": lambda x, w, b, r: NF.softmax1(x),
    }[op]


def _textbook(op: str) -> Fn:
    """The formula as a user would write it for ``torch.compile``: float32, no guards."""

    def rms(x: torch.Tensor, w: torch.Tensor, off: float = 0.0) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + _EPS) * (w.float() + off)
        return y.to(x.dtype)

    def ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float()).to(x.dtype)

    def softmax1(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        m = xf.amax(-1, keepdim=True).clamp_min(0.0)
        e = torch.exp(xf - m)
        return (e / (torch.exp(-m) + e.sum(-1, keepdim=True))).to(x.dtype)

    return {
        "rmsnorm": lambda x, w, b, r: rms(x, w),
        "layernorm": lambda x, w, b, r: ln(x, w, b),
        "dyt": lambda x, w, b, r: (
            torch.tanh(b[:1].float() * x.float()) * w.float() + b.float()
        ).to(x.dtype),
        "add_rmsnorm": lambda x, w, b, r: (rms(x + r, w), x + r),
        "add_layernorm": lambda x, w, b, r: (ln(x + r, w, b), x + r),
        "rmsnorm_offset": lambda x, w, b, r: rms(x, w, 1.0),
        "softmax1": lambda x, w, b, r: softmax1(x),
    }[op]


def _fast(op: str) -> Fn:
    return {
        "rmsnorm": lambda x, w, b, r: K.rms_norm(x, (x.shape[-1],), w, _EPS),
        "layernorm": lambda x, w, b, r: K.layer_norm(x, (x.shape[-1],), w, b),
        "dyt": lambda x, w, b, r: K.dyt(x, b[:1], w, b),
        "add_rmsnorm": lambda x, w, b, r: K.add_rms_norm(x, r, (x.shape[-1],), w, _EPS),
        "add_layernorm": lambda x, w, b, r: K.add_layer_norm(x, r, (x.shape[-1],), w, b),
        "rmsnorm_offset": lambda x, w, b, r: K.rms_norm(x, (x.shape[-1],), w, _EPS, offset=1.0),
        "softmax1": lambda x, w, b, r: K.softmax1(x),
    }[op]


def _torch_op(op: str) -> Fn | None:
    if op == "rmsnorm":
        return lambda x, w, b, r: F.rms_norm(x, (x.shape[-1],), w, _EPS)
    if op == "layernorm":
        return lambda x, w, b, r: F.layer_norm(x, (x.shape[-1],), w, b)
    if op == "add_rmsnorm":
        return lambda x, w, b, r: (F.rms_norm(x + r, (x.shape[-1],), w, _EPS), x + r)
    if op == "add_layernorm":
        return lambda x, w, b, r: (F.layer_norm(x + r, (x.shape[-1],), w, b), x + r)
    if op == "rmsnorm_offset":  # the gain formed in the weight's dtype, as a user would
        return lambda x, w, b, r: F.rms_norm(x, (x.shape[-1],), w + 1.0, _EPS)
    return None


def _liger_op(op: str, d: int, device: str, wdtype: torch.dtype) -> Fn | None:
    """Liger-Kernel's module for ``op`` on CUDA where it is installed (else None)."""
    if device != "cuda":
        return None
    try:
        import liger_kernel.transformers as L
    except ImportError:
        return None
    builders = {
        "rmsnorm": lambda: L.LigerRMSNorm(d, eps=_EPS, in_place=False),
        "rmsnorm_offset": lambda: L.LigerRMSNorm(
            d, eps=_EPS, offset=1.0, casting_mode="gemma", in_place=False
        ),
        "layernorm": lambda: L.LigerLayerNorm(d, bias=True),
        "add_rmsnorm": lambda: L.LigerFusedAddRMSNorm(d, eps=_EPS, in_place=False),
    }
    if op not in builders:
        return None
    try:
        m = builders[op]().to(device=device, dtype=wdtype)
    except (AttributeError, TypeError):  # an older Liger-Kernel without this module
        return None
    if op == "add_rmsnorm":
        return lambda x, w, b, r: m(x, r)
    return lambda x, w, b, r: m(x)


def clock(device: str) -> Callable[[], float]:
    """The timer: this thread's CPU time where every variant runs on it (CPU, one thread),
    else the wall clock."""
    if device == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time
    return time.perf_counter


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def median_times(
    fns: dict[str, Callable[[], Any]], device: str, repeats: int, min_time: float
) -> dict[str, list[float]]:
    """Seconds per call of each function in each of ``repeats`` interleaved rounds.

    Each function is called twice first (warm-up, compilation), then every round times
    each function for about ``min_time`` seconds, in a rotating order. A round's sample is,
    on the CPU, the median of its calls, each timed alone: on this shared VM one call in a
    round could take 20x the others (a page fault, a descheduled thread; 2.4 against 56 ms
    for add + RMSNorm's forward in one run), which moved a round's mean and, with three
    rounds, the ratio (0.87x torch.compile in that run, 1.17-1.24x in two runs of 15 rounds).
    On CUDA it is the round's mean: kernels queue, and one synchronisation ends the round.
    """
    now = clock(device)
    counts = {}
    for name, fn in fns.items():
        fn()
        _sync(device)
        start = now()
        fn()
        _sync(device)
        counts[name] = max(1, int(min_time / max(now() - start, 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for rep in range(repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            fn, n = fns[name], counts[name]
            if device != "cuda":
                calls = []
                for _ in range(n):
                    start = now()
                    fn()
                    calls.append(now() - start)
                samples[name].append(statistics.median(calls))
                continue
            _sync(device)
            start = now()
            for _ in range(n):
                fn()
            _sync(device)
            samples[name].append((now() - start) / n)
    return samples


def _inputs(
    shape: tuple[int, int], dtype: torch.dtype, device: str, op: str = ""
) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x, r, g = (torch.randn(shape, generator=gen).to(device=device, dtype=dtype) for _ in range(3))
    # parameters in the model's dtype; Gemma's (1 + w) keeps a float32 weight
    wdtype = torch.float32 if op == "rmsnorm_offset" else dtype
    w = torch.ones(shape[1], device=device, dtype=wdtype)
    b = torch.full((shape[1],), 0.5, device=device, dtype=wdtype)
    return [x, w, b, r, g]


LeafSet = tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]


def _leaf_sets(op: str, inputs: list[torch.Tensor], sets: int, backward: bool) -> list[LeafSet]:
    """``sets`` sets of (the op's arguments, the tensors to differentiate, the incoming
    gradient): distinct x, residual and gradient per set (the first set the inputs
    themselves), shared parameters."""
    x, w, b, r, g = inputs
    fused = op.startswith("add_")
    w, b = (t.detach().requires_grad_(backward) for t in (w, b))
    out = []
    for k in range(sets):
        fresh: Callable[[torch.Tensor], torch.Tensor] = torch.clone if k else lambda t: t
        xk = fresh(x).detach().requires_grad_(backward)
        rk = (fresh(r) if fused else r).detach().requires_grad_(backward)
        gk = fresh(g) if backward else g
        leaves = [xk, w, b, rk]
        # the fused ops return (normed, sum): both get a gradient, as in a residual stream
        wrt = leaves[:3] if op in ("layernorm", "add_layernorm", "dyt") else leaves[:2]
        out.append((leaves, [*wrt, rk] if fused else wrt, gk))
    return out


def _caller(fn: Fn, leaf_sets: list[LeafSet], backward: bool) -> Callable[[], Any]:
    """A call of ``fn`` on the next leaf set: the forward, or forward and backward."""
    cycle = itertools.cycle(leaf_sets)
    if not backward:
        return lambda: fn(*next(cycle)[0])

    def step() -> Any:
        leaves, wrt, gk = next(cycle)
        outs = fn(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return torch.autograd.grad(outs, wrt, (gk,) * len(outs), allow_unused=True)

    return step


def _timed(
    fns: dict[str, Callable[[], Any]], device: str, repeats: int, min_time: float, grad: bool
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """:func:`median_times` with autograd on or off, and a record's load fields: the 1-minute
    load average before and after, and ``loaded`` when it exceeded the thread count (the
    CPU's load slows a CPU measurement only)."""
    before = load_average()
    with torch.set_grad_enabled(grad):
        samples = median_times(fns, device, repeats, min_time)
    after = load_average()
    loaded = device == "cpu" and max(before, after) > torch.get_num_threads()
    return samples, {"load": [before, after], "loaded": loaded}


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
    x, w, b, r, g = _inputs(shape, dtype, device, op)
    llc = cache_bytes(device)
    copy = rotating_copy(x, llc)
    variants: dict[str, Fn] = {"normlab": _fast(op), "eager": _reference(op)}
    for name, fn in (
        ("torch", _torch_op(op)),
        ("liger", _liger_op(op, shape[1], device, w.dtype)),
    ):
        if fn is not None:
            variants[name] = fn
    if compile:
        variants["compiled"] = torch.compile(_textbook(op), dynamic=False)
    # distinct x (and residual, incoming gradient) per set; the parameters are shared
    per_set = x.numel() * x.element_size() * (1 + op.startswith("add_") + backward)
    sets = rotation(per_set, llc)
    leaf_sets = _leaf_sets(op, [x, w, b, r, g], sets, backward)
    fns = {name: _caller(fn, leaf_sets, backward) for name, fn in variants.items()}
    fns["copy"] = copy
    samples, load = _timed(fns, device, repeats, min_time, backward)
    times = {k: statistics.median(v) for k, v in samples.items()}
    moved = traffic(op, shape, dtype, backward)
    copy_gbs = 2 * x.numel() * x.element_size() / times["copy"] / 1e9
    gbs = {k: moved / t / 1e9 for k, t in times.items() if k != "copy"}
    return {
        "op": op,
        "shape": list(shape),
        "dtype": str(dtype).removeprefix("torch."),
        "mode": "fwd+bwd" if backward else "fwd",
        "device": device,
        "seconds": times,
        "spread": {k: [min(v), max(v)] for k, v in samples.items()},
        "gbs": gbs,
        "copy_gbs": copy_gbs,
        "x_copy": {k: v / copy_gbs for k, v in gbs.items()},
        "speedup": {k: t / times["normlab"] for k, t in times.items() if k != "copy"},
        "bytes": moved,
        # the distinct buffer sets each timed function cycled through (memory, not cache)
        "rotation": {"llc": llc, "sets": sets, "copy_sets": getattr(copy, "sets", 1)},
        "clock": clock(device).__name__,
        **load,
    }


def _fresh_fns(op: str, *args: torch.Tensor) -> dict[str, Callable[[], Any]]:
    x, w, b, r = args
    fast, own = _fast(op), _torch_op(op)
    fns = {"normlab": lambda: fast(x, w, b, r), "clone": x.clone, "copy": rotating_copy(x)}
    if own is not None:
        fns["torch"] = lambda: own(x, w, b, r)
    return fns


def fresh_output_regime(
    ops: Sequence[str],
    shapes: Sequence[tuple[int, int]],
    dtypes: Sequence[torch.dtype],
    *,
    repeats: int,
    min_time: float,
) -> list[dict[str, Any]]:
    """Forward time of each op, of torch's own op where one exists and of ``x.clone()``, all
    returning fresh outputs, against :func:`rotating_copy` (preallocated, from memory), with
    whatever allocator runs now. ``speedup`` is torch's time over normlab's; a record whose
    1-minute load exceeded the thread count is ``loaded``, as in :func:`bench_op`."""
    records = []
    for op in ops:
        for shape in shapes:
            for dtype in dtypes:
                x, w, b, r, _ = _inputs(shape, dtype, "cpu", op)
                fns = _fresh_fns(op, x, w, b, r)
                samples, load = _timed(fns, "cpu", repeats, min_time, grad=False)
                t = {k: statistics.median(v) for k, v in samples.items()}
                units = traffic(op, shape, dtype, False) / (2 * x.numel() * x.element_size())
                records.append({
                    "op": op, "shape": list(shape), "dtype": str(dtype).removeprefix("torch."),
                    "seconds": t, "normlab_x_copy": units * t["copy"] / t["normlab"],
                    "clone_x_copy": t["copy"] / t["clone"],
                    "speedup": {"torch": t["torch"] / t["normlab"]} if "torch" in t else {},
                    **load,
                })  # fmt: skip
    return records


def small_input_regime(
    ops: Sequence[str],
    dtypes: Sequence[torch.dtype],
    *,
    repeats: int,
    min_time: float,
    shapes: Sequence[tuple[int, int]] = SMALL,
    modes: Sequence[str] = ("fwd", "fwd+bwd"),
) -> list[dict[str, Any]]:
    """Time of each op that torch has its own op for, against that op, in each mode, on
    small inputs called again and again (in cache, as a small model's activations are):
    the regime where a call's fixed cost, not memory, sets the time. ``speedup`` is torch's
    time over normlab's; ``loaded`` as in :func:`bench_op`."""
    records = []
    for op in ops:
        own = _torch_op(op)
        if own is None:
            continue
        for shape in shapes:
            for dtype in dtypes:
                for backward in (mode == "fwd+bwd" for mode in modes):
                    leaf_sets = _leaf_sets(op, _inputs(shape, dtype, "cpu", op), 1, backward)
                    fns = {name: _caller(fn, leaf_sets, backward)
                           for name, fn in (("normlab", _fast(op)), ("torch", own))}  # fmt: skip
                    samples, load = _timed(fns, "cpu", repeats, min_time, backward)
                    t = {k: statistics.median(v) for k, v in samples.items()}
                    records.append({
                        "op": op, "shape": list(shape), "mode": "fwd+bwd" if backward else "fwd",
                        "dtype": str(dtype).removeprefix("torch."), "seconds": t,
                        "speedup": {"torch": t["torch"] / t["normlab"]}, **load,
                    })  # fmt: skip
    return records


def keep_freed_memory() -> bool:
    """Tell glibc to serve every block from the heap and never return freed memory, as a
    caching allocator does (``mallopt``; the same as ``MALLOC_MMAP_MAX_=0`` and a large
    ``MALLOC_TRIM_THRESHOLD_``). Returns whether it took effect (glibc on Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-4, 0)) and bool(libc.mallopt(-1, 2**31 - 1))
    return False
