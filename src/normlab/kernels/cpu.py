"""CPU fast paths: a small C++ library built with the system compiler on first use, cached.

Mechanism, chosen by measurement on the project machine (2-core AMD EPYC with AVX-512,
torch 2.13 CPU; ratios in one run, medians of repeats, see ``normlab bench``):

- ``torch.utils.cpp_extension.load_inline`` compiles torch's headers: a cold build of a
  one-line function took 125 s wall (35 s CPU) here, too much for CI's fresh venv each run.
- ``torch.compile`` reaches ~1.0x copy bandwidth on fp32 RMSNorm but only ~0.34x on bf16,
  and a cold compile costs 12-40 s per graph (shape and dtype specialised).
- A plain C++ file with no torch headers (``csrc/norms.cpp``: one pass over each row held
  in cache, float32 arithmetic, OpenMP over rows, ``-O3 -march=native`` so the loops
  vectorise to AVX-512), compiled with ``g++`` into a shared library and called through
  ``ctypes`` on the tensors' data pointers, builds in ~1.5 s of CPU time and runs near copy
  bandwidth for fp32 *and* bf16. That is the mechanism.

Latency a user pays: the first call on a machine builds the library (measured 1.8 s wall,
~1.5 s CPU; up to ~6 s on a heavily loaded machine) into ``$NORMLAB_CACHE/kernels/<hash>/``
(the hash covers the source, compiler flags, compiler version and CPU flags, so another
machine or a new version rebuilds); later processes load the cached library in ~3 ms. The
library is written atomically with a manifest of its size and SHA-256 beside it; before
loading, the file is checked against the manifest, and a truncated, empty or altered file
(or a missing manifest) is rebuilt rather than loaded (a truncated shared object would
crash the process with SIGBUS when mapped). A
call adds ~15-60 us of Python and ctypes overhead to the kernel (measured on a loaded
2-core machine; the dispatch through ``torch.autograd.Function`` is most of it). When no
compiler is present, :func:`library` returns ``None`` and the layers take the plain torch
path; where a compiler is present but the build fails, it also warns once.

Memory: the kernels' scratch buffers (the weight-gradient partials, softmax1's row
buffers) are kept per thread and reused across calls. Outputs are fresh tensors; glibc
serves blocks above its mmap ceiling (32 MB at most) with fresh pages, and the page faults
then cost more than the arithmetic (~0.17x copy bandwidth for a 32 MB output measured
here). Large fresh outputs are therefore advised onto huge pages before the kernel writes
them (:mod:`normlab.kernels._pages`: one fault per 2 MB; 0.35-0.52x copy, 2.6-8x torch's own
op in that regime, except where the host is slow to give the pages back: see its caveat).
The full remedy for a CPU process is an allocator setting, ``MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=<large>`` (or ``LD_PRELOAD`` of jemalloc / tcmalloc); ``normlab
bench`` shows both regimes.

Outputs of at least half the last-level cache are written with streaming stores (no read
for ownership; csrc/norms.cpp ``streams``): RMSNorm forward, 8192 x 1024 fp32, one thread,
1.58 -> 1.46 ms against 1.69 ms for ``copy_`` (interleaved, min of 80, load 12.6). On a
machine whose ``sysconf`` reports the socket's cache (384 MB here, while one core shares a
32 MB L3) that threshold (192 MB) is never reached, so rows of at least 4096 elements also
stream from 16 MB of output: at 2048 x 4096 (one thread, thread CPU time, load 2.3,
interleaved, medians of 21) fp32 RMSNorm forward 2.37 -> 2.09 ms, LayerNorm forward 3.11 ->
2.80, RMSNorm backward 4.83 -> 3.22, LayerNorm backward 5.74 -> 3.82, bf16 backward 2.77 /
3.64 -> 2.18 / 2.71 (bf16 RMSNorm forward 1.15 -> 1.19). Rows of 1024 stay cached: streaming
them was slower (fp32 forward 2.0-2.2 -> 2.4-2.9 ms, bf16 forward 0.94 -> 1.8). At 2048 x
4096 (load 1.1, medians of 21) Softmax1's backward went 3.09 -> 2.65 ms (fp32), its bf16
forward 2.08 -> 2.27 (compute-bound, exp); DyT's forward, which fences once a row rather
than once a 256-column chunk (a fence a chunk made it 1.5-3.4x slower), 2.04 -> 1.65 ms
fp32 (``copy_`` 1.73) and 1.58 -> 1.55 bf16 (since 2026-12-05 DyT's and Softmax1's forward
stream as the norms do and fence once a thread: 8192 x 1024 fp32 1.2-1.3x faster, two
threads). ``normlab bench --threads 1`` afterwards (load
1.0; (8192, 1024) / (2048, 4096)): RMSNorm fp32 forward 0.70 / 0.71 copy, forward+backward
0.81 / 0.65 memory limit; LayerNorm fp32 forward 0.73 / 0.68 (1.14 / 1.64x ``F.layer_norm``),
forward+backward 0.67 / 0.50 (1.30 / 1.33x); DyT fp32 forward 0.90 / 0.87; one bench run
moves these by +-0.1 (LayerNorm forward+backward at 2048 x 4096 read 0.78 in another).
bfloat16 outputs are rounded with AVX512-BF16's ``vcvtneps2bf16`` where the CPU has it (a
third of the scalar rounding's time); it flushes subnormal values to zero, so a 64-value chunk
holding one is rounded again in integers, as torch rounds (the check costs 3-13% on one
thread). float16 travels as its raw bits and converts with vectorised integer arithmetic
(loads) and F16C's ``vcvtps2ph`` (stores): gcc 12's ``_Float16`` converted one element at a
time and left every float16 kernel 5-8x slower than now (8192 x 1024 RMSNorm forward 9.95 ->
1.78 ms, DyT backward 62.6 -> 7.7). Both conversions equal torch's on all 65,536 patterns.

Measured. An earlier version of this paragraph gave RMSNorm forward at 1.00 / 0.98 of the
memory limit (fp32) from a 2-thread run at load 1.1-1.8; a 2-thread run on an idle machine
(load 0.15 -> 1.5) of the same forward code gave 0.71 / 0.66 (bf16 0.49 / 0.47). The kernels
did not regress (the forward kernels and the bench were unchanged since; the kernels from
before LayerNorm saved its mean, timed interleaved with these in one process, one thread,
min of 60, load 6: RMSNorm 1.74 vs 1.64 ms, LayerNorm 1.82 vs 1.67 ms, ``copy_`` 1.53 ms at
8192 x 1024 fp32): a 2-thread ratio taken while other processes hold the cores measures the
scheduler (at load 19-26 the same bench printed 0.01 to 43x). With one thread ``normlab
bench`` times in the thread's CPU time, which holds under load. ``normlab bench --threads 1``
at load 24-27 (other processes on the memory bus; (8192, 1024) / (2048, 4096), fractions of
the memory limit, then x ``F.rms_norm`` / ``F.layer_norm``):

- RMSNorm fp32 forward 0.91 / 0.70, forward+backward 0.79 / 0.57 (3.1 / 2.8x and 5.4 / 4.0x
  torch); bf16 forward 0.57 / 0.50, forward+backward 0.54 / 0.36 (7.8 / 7.6x torch).
- LayerNorm fp32 forward 0.81 / 0.60 (1.02 / 1.15x torch), forward+backward 0.85 / 0.47
  (1.12 / 0.99x torch); bf16 forward 0.46 / 0.28, forward+backward 0.42 / 0.29 (1.1-2.3x).
- DyT fp32 forward 0.85 / 0.52, bf16 0.36 / 0.25; Softmax1 fp32 forward 0.79 / 0.65, bf16
  0.27 / 0.29; add + RMSNorm fp32 forward+backward 0.86 / 0.71, bf16 0.57 / 0.44.

After the 16-bit round (vectorised float16 conversions, bfloat16 subnormals kept, 16-bit row
sums in four accumulators), ``normlab bench --threads 1 --no-regimes --compile`` with
``MALLOC_MMAP_MAX_=0``, load 1.75 -> 1.94 (another process on the other core), medians of 5:

- RMSNorm fp32 forward 0.62 / 0.89 copy (2.3 / 3.2x torch, 0.95 / 1.41x compiled),
  forward+backward 0.79 / 0.79 memory limit (5.9 / 7.4x torch); bf16 forward 0.60 / 0.58,
  forward+backward 0.47 / 0.38 (1.6-2.2x compiled).
- LayerNorm fp32 forward 0.83 / 0.85 (1.20 / 1.70x torch), forward+backward 0.68 / 0.69
  (1.05 / 1.42x torch); bf16 forward 0.41 / 0.33, forward+backward 0.43 / 0.28 (1.5-2.7x).
- DyT forward fp32 0.86 / 1.04, bf16 0.28 / 0.28; Softmax1 forward fp32 0.76 / 0.70, bf16
  0.23 / 0.32; add + RMSNorm forward+backward fp32 0.85 / 0.84, bf16 0.60 / 0.46; add +
  LayerNorm fp32 0.71 / 0.72. Every op >= torch.compile except RMSNorm fp32 forward at
  8192 x 1024 (0.95) and RMSNorm (1 + w) fp32 forward there (1.00).

The same on 2 threads (``--threads 2 --no-regimes --compile --model``, ``MALLOC_MMAP_MAX_=0``,
load 0.35 -> 1.65, the machine otherwise idle; a second run with the default allocator and
the fresh-output table, load 0.23 -> 1.59, in brackets):

- RMSNorm fp32 forward 0.76 / 0.87 copy [0.90 / 0.89], 2.9 / 3.7x torch, 0.93 / 1.17x
  compiled [0.96 / 1.23]; forward+backward 0.70 / 0.75 memory limit [0.75 / 0.79], 5.9 / 6.5x
  torch; bf16 forward 0.59 / 0.49 [0.58 / 0.53], forward+backward 0.42 / 0.26 [0.39 / 0.33].
- LayerNorm fp32 forward 0.56 / 0.71 [0.85 / 0.86], 1.20 / 2.21x torch [0.95 / 1.22];
  forward+backward 0.54 / 0.45 [0.74 / 0.64], 1.56 / 1.59x ``F.layer_norm`` [1.05 / 1.09];
  bf16 forward 0.24 / 0.31 [0.39 / 0.44], forward+backward 0.23 / 0.16 (1.9-2.6x torch).
- DyT forward fp32 0.69 / 0.76 [0.83 / 0.98], bf16 0.29 / 0.18 [0.29 / 0.31]; Softmax1
  forward fp32 0.51 / 0.75 [0.85 / 0.73], bf16 0.23 / 0.26 [0.27 / 0.29].
- add + RMSNorm forward+backward fp32 0.59 / 0.63 [0.85 / 0.79], bf16 0.34 / 0.27; add +
  LayerNorm fp32 0.54 / 0.57 [0.75 / 0.80], bf16 0.40 / 0.22.
- Slower than torch.compile: RMSNorm fp32 forward at 8192 x 1024 (0.93 [0.96]) and add +
  RMSNorm fp32 forward there (0.95 [0.99]); every other op 1.04-5.5x.
- TinyGPT (d 256, 4 layers, RMSNorm + softmax1, batch 8 x 128) training step, medians of 5
  interleaved: fused kernels 138.5 ms, unfused 141.1 (fusion 1.02x), plain torch 145.8
  (1.05x), torch.compile of the plain model 140.8 (1.02x); the norms are 4.1% of the step
  with the kernels (no norms: 132.8 ms) and 3.5% on the plain path. A second run (medians
  of 15, load 0.09 -> 0.67): fused 147.3 ms, unfused 154.4 (1.05x), plain 163.5 (1.11x),
  compiled 156.0 (1.06x), but the model without norms read 153.7 ms, above the fused one:
  with steps spread over 141-192 ms, the norms' share (4-6%) is below one run's resolution.

The bf16 ratios are against a ``copy_`` that ran at 118-194 GB/s, its 16 MB input and
output largely held in the 32 MB L3, where fp32's ran at 58-62 GB/s from memory; the bf16
RMSNorm kernels themselves moved 51-70 GB/s, above fp32's memory rate, so a bf16 ratio at
these shapes is against the cache, not the memory limit. The bench's copy now cycles through
buffers totalling 8x the last-level cache, as do the ops' inputs (``_bench_ops.rotation``): a
2-thread bf16 8192 x 1024 copy through 32 / 64 / 128 / 256 / 512 MB / 1-2 GB of buffers ran
95 / 61 / 50 / 46 / 44 / 45 GB/s (load 0.47 -> 0.59), so even fp32's old 64 MB baseline was
partly cache.

After RMSNorm's and LayerNorm's float32 outputs of 16 MB stream at any width, fenced once a
thread (csrc/norms.cpp ``streams_norm``; 8192 x 1024 fp32 kernels 6-19% faster, 2048 x 4096
unchanged, outputs bit-identical), with that baseline, ``normlab bench --threads 2 --no-regimes
--repeats 11``, ``MALLOC_MMAP_MAX_=0`` ((8192, 1024) / (2048, 4096), fractions of the memory
limit; the load is the bench's own two threads after it starts): load 0.86 -> 1.42: RMSNorm
fp32 forward 0.90 / 0.96, forward+backward 0.88 / 0.94 (5.7 / 5.9x torch); bf16 0.97 / 1.06,
0.80 / 0.84; LayerNorm fp32 forward 1.00 / 0.94 (0.93 / 1.52x torch), forward+backward 0.93 /
0.60 (1.14 / 1.31x); bf16 forward 1.07 / 0.55, forward+backward 0.82 / 0.38. The VM's memory
bandwidth is bimodal and switches within a run: the 2-thread copy read 35-40 GB/s in 12 of the
first 13 records (61 in one) and 53-67 GB/s in the last 4 (and 34 -> 58 GB/s midway in a run
before it, load 0.86 -> 1.68, where LayerNorm 2048 x 4096 fp32 forward+backward read 0.70, bf16
0.45, add + RMSNorm fp32 0.99 / 0.92, add + LayerNorm fp32 1.14 / 0.89). Against the fast
regime the LayerNorm kernels at rows of 4096 and the bf16 ones are compute-bound; against the
slow one nearly every row is at 0.8-1.07, so a ratio here states the regime as much as the
kernel. On one thread (thread CPU time, inputs from memory, medians of 21, load 0.86-0.97) the
kernels alone, forward plus backward against 2.5 ``copy_`` (the bench's bytes): RMSNorm 4.15 ms
vs 4.43 at 8192 x 1024 (above 1: copy_'s ordinary stores read the destination in first,
streamed outputs do not), 4.94 vs 4.38 at 2048 x 4096 (0.89); LayerNorm 4.76 vs 4.43 (0.93),
5.61 vs 4.38 (0.78). What the 2-thread forward+backward loses beyond that is outside the
kernels (autograd, fresh outputs, the weight-gradient reduction).

Run to run, a 2-thread ratio moved by up to 0.3 here (LayerNorm fp32 forward 0.56 vs 0.85
copy), the 1-thread ones (thread CPU time) by about 0.1 in earlier rounds.

Rows of 4096 cost 1.3-2x more per element than rows of 1024 (8M fp32 on one thread, load
1.2-1.4, medians of 15, ms by row length 512 / 1024 / 2048 / 2560 / 3072 / 4096 / 8192:
DyT 1.57 / 1.52 / 1.61 / 1.81 / 2.61 / 3.06 / 3.03, LayerNorm 1.82 / 1.73 / 2.16 / 2.56 /
2.74 / 2.75 / 2.90, RMSNorm 1.64 / 1.36 / 1.53 / 1.66 / 1.84 / 1.97 / 2.20, ``copy_``
1.3-1.6 at every width). The step falls where a row's working set passes the 48 KB L1: DyT
reads x, w, b and writes y, 16 D bytes a row, and jumps between 2560 (40 KB) and 3072
(48 KB); LayerNorm's 16 D bytes likewise, RMSNorm's 12 D bytes more gradually. Two
remedies were measured: streaming stores of y (above) keep the row in L1 for the
re-reading kernels; for DyT, software prefetch of x 2048 elements ahead (3.4-3.5 -> 2.2-2.8
ms at rows of 4096-8192, unchanged at 1024). The same prefetch in the first pass of RMSNorm
and LayerNorm forward was within the run's noise (+-10%: 2.40 -> 2.26 ms at 4096, bf16 at
1024 0.93 -> 1.04) and was left out, as were column tiles of 8 rows x 1024 that keep w and
b in L1 (DyT 3.1 -> 4.5 ms: eight 4 KB streams defeat the hardware prefetcher) and four
independent accumulators in RMSNorm's sum of squares, the pass that reads x from memory
(2.12 vs 2.08 ms at 1024, 2.33 vs 2.19 at 4096, within noise). LayerNorm's second pass,
which re-reads a 4096-float row from L2, does gain from four accumulators (2.56-2.68 ->
2.05-2.25 ms at 2048 x 4096; 4-11% slower at rows of 1024, which keep one). bfloat16
halves the bytes but not the arithmetic, so on one thread LayerNorm (three passes), DyT
(tanh's division) and Softmax1 (exp) are compute-bound: with the rows cache-resident (1024 x
1024, one thread) a bf16 forward costs 0.096 (RMSNorm), 0.146 (LayerNorm), 0.208 (DyT) and
0.269 (Softmax1) ns an element against 0.11 ns for ``copy_`` from memory, so only RMSNorm
can reach 0.9x copy in bf16 on one core, and only if its memory traffic overlaps fully. Fresh
fp32 outputs under glibc's default allocator cost page faults (~0.1x copy, as
``x.clone()``).

``tanh`` in DyT's forward is Eigen's rational approximation (one division, no exp), which
vectorises at the memory limit; ATen's ``Vectorized<float>::tanh`` (SLEEF, in torch's build)
was measured ~9x slower here, so the library keeps no torch headers. The backward, whose
``d alpha`` sums ``1 - tanh^2`` over every element, uses a more precise exp-based form. Both
stay within 1e-6 of ``torch.tanh`` in float32. Into a bfloat16 or float16 output, whose
rounding hides that accuracy, the forward uses a shorter degree-5/4 rational (relative error
at most 5.3e-5, outputs within 0.6 ulp of float64; 8 multiply-class operations where Eigen's
has 11): DyT's 16-bit forward went from 0.58-0.77x to 0.79-0.97x copy. Softmax1's exp is a
Cody-Waite reduction with a degree-7 polynomial (within 10% of SLEEF's ``expf16_u10`` speed,
measured), vectorised 16 lanes wide, within 0.92 ulp of float64 over [-87.33, 88.37] (0
below); into 16-bit outputs of degree 5 (3.4e-6 relative), 10-22% faster.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shutil
import subprocess
import threading
import warnings
from pathlib import Path

import torch

from normlab.kernels._pages import fresh_output

__all__ = [
    "ATTENTION_HEAD_DIMS",
    "DTYPES",
    "FLAGS",
    "attention_bwd",
    "attention_fwd",
    "build",
    "dyt_bwd",
    "dyt_fwd",
    "intact",
    "library",
    "ln_bwd",
    "ln_fwd",
    "reset",
    "rms_bwd",
    "rms_fwd",
    "softmax1_bwd",
    "softmax1_fwd",
]

#: Input dtypes the CPU library handles (bfloat16 and float16 are passed as their 16 raw bits).
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Compiler flags of the build.
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")

_CSRC = Path(__file__).with_name("csrc")
#: The library's sources (compiled together) and the header they share.
_SOURCES = (_CSRC / "norms.cpp", _CSRC / "attention.cpp")
_HEADERS = (_CSRC / "fast_exp.h",)
_P = ctypes.c_void_p
_L = ctypes.c_long
_F = ctypes.c_float
_I = ctypes.c_int
_SIGNATURES: dict[str, tuple[type, ...]] = {
    "nl_rms_fwd": (_I, _P, _P, _P, _F, _P, _P, _P, _L, _L, _F, _I),
    "nl_rms_bwd": (_I, _P, _P, _P, _F, _P, _P, _P, _P, _P, _L, _L, _I),
    "nl_ln_fwd": (_I, _P, _P, _P, _P, _F, _P, _P, _P, _P, _L, _L, _F, _I),
    "nl_ln_bwd": (_I, _P, _P, _P, _F, _P, _P, _P, _P, _P, _P, _P, _P, _L, _L, _I),
    "nl_dyt_fwd": (_I, _P, _F, _P, _P, _P, _L, _L, _I),
    "nl_dyt_bwd": (_I, _P, _P, _F, _P, _P, _P, _P, _P, _P, _P, _P, _P, _L, _L, _I),
    "nl_softmax1_fwd": (_I, _P, _P, _P, _L, _L, _I),
    "nl_softmax1_bwd": (_I, _P, _P, _P, _L, _L, _I),
    "nl_exp": (_P, _P, _L, _I, _I),
    "nl_tanh_precise": (_P, _P, _L, _I),
    "nl_attn_fwd": (_P, _P, _P, _P, _P, *(_L,) * 7, _F, _I, _I),
    "nl_attn_bwd": (*(_P,) * 9, *(_L,) * 10, _F, _I, _I),
}
_VERSION = 6  # nl_version() of csrc/norms.cpp
_lock = threading.Lock()
_state: dict[str, ctypes.CDLL | None] = {}
_scratch = threading.local()  # per-thread reusable float32 workspace


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def _cache_root() -> Path:
    from normlab._io import cache_dir

    return cache_dir() / "kernels"


def _manifest(target: Path) -> Path:
    return target.with_suffix(".json")


def _digest(data: bytes) -> dict[str, object]:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def intact(target: Path) -> bool:
    """Whether ``target`` is the complete file its manifest (written at build time) records."""
    try:
        recorded = json.loads(_manifest(target).read_text())
        data = target.read_bytes()
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded == _digest(data)


def build(compiler: str | None = None) -> Path:
    """Compile ``csrc/*.cpp`` into the cache (once per machine and source) and return it.

    A cached library is used only when it matches the size and SHA-256 recorded when it
    was written; otherwise it is rebuilt.

    Raises:
        RuntimeError: no C++ compiler was found, or it failed (with its message).
    """
    from normlab._io import atomic_write_bytes, atomic_write_json, file_lock

    cxx = compiler or _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set $CXX or install g++).")
    source = b"\0".join(p.read_bytes() for p in (*_SOURCES, *_HEADERS))
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    key = hashlib.sha256(
        b"\0".join(
            [source, " ".join(FLAGS).encode(), version.stdout.encode(), _cpu_flags().encode()]
        )
    ).hexdigest()[:16]
    folder = _cache_root() / key
    target = folder / "libnormlab_kernels.so"
    if intact(target):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / "build.lock"):
        if intact(target):  # another process built it while we waited
            return target
        tmp = folder / f"tmp-{os.getpid()}.so"
        try:
            done = subprocess.run(
                [cxx, *FLAGS, "-o", str(tmp), *map(str, _SOURCES)], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise RuntimeError(f"building the CPU kernels failed:\n{done.stderr[-2000:]}")
            data = tmp.read_bytes()
        finally:
            tmp.unlink(missing_ok=True)
        _manifest(target).unlink(missing_ok=True)  # no window where an old manifest vouches
        atomic_write_bytes(target, data)
        atomic_write_json(_manifest(target), _digest(data))
    return target


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = list(args)
        fn.restype = None
    if lib.nl_version() != _VERSION:
        raise RuntimeError("stale CPU kernel library")
    return lib


def library() -> ctypes.CDLL | None:
    """The loaded kernel library, building it on first use; ``None`` where that fails."""
    if "lib" in _state:
        return _state["lib"]
    with _lock:
        if "lib" not in _state:
            try:
                _state["lib"] = _load(build())
            except Exception as err:  # no compiler, a failed build, an unloadable file
                _state["lib"] = None
                if _compiler() is not None:
                    warnings.warn(
                        f"normlab's CPU kernels are unavailable ({err}); the layers take the "
                        "plain torch path. Check the C++ compiler ($CXX) or set "
                        "NORMLAB_KERNELS=0 to silence this.",
                        RuntimeWarning,
                        stacklevel=2,
                    )
    return _state["lib"]


def reset() -> None:
    """Forget the loaded library (the next :func:`library` call builds or loads again)."""
    with _lock:
        _state.clear()


# --- tensor-level calls: x is a contiguous (R, D) float32/bfloat16/float16 CPU tensor; weight,
# bias and statistics are contiguous float32. Each returns new tensors (never writes its inputs).


def _lib() -> ctypes.CDLL:
    lib = library()
    if lib is None:
        raise RuntimeError("the CPU kernel library is not available (no compiler?).")
    return lib


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _dt(x: torch.Tensor) -> int:
    """The library's dtype code of ``x``: 0 float32, 1 bfloat16, 2 float16."""
    return DTYPES.index(x.dtype)


def _threads() -> int:
    return torch.get_num_threads()


def _empty() -> torch.Tensor:
    return torch.empty(0)


def _work(*sizes: int) -> list[int]:
    """Addresses of float32 scratch blocks of ``sizes`` elements, carved from this thread's
    reused buffer (addresses, not tensor slices: a slice costs ~2 us, and small calls are
    overhead-bound). Valid until the next call on this thread; the kernels write them
    before reading."""
    need = sum(sizes)
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.numel() < need:
        buf = _scratch.buf = torch.empty(max(need, 1), dtype=torch.float32)
    out, at = [], buf.data_ptr()
    for n in sizes:
        out.append(at)
        at += 4 * n
    return out


def _filled(value: float, d: int) -> torch.Tensor:
    """A read-only float32 vector of ``d`` copies of ``value`` (kept per thread)."""
    cache = getattr(_scratch, "filled", None)
    if cache is None:
        cache = _scratch.filled = {}
    t = cache.get((value, d))
    if t is None:
        t = cache[(value, d)] = torch.full((d,), value)
    return t


def _ones(w: torch.Tensor | None, d: int) -> torch.Tensor:
    return _filled(1.0, d) if w is None else w


def _zeros(b: torch.Tensor | None, d: int) -> torch.Tensor:
    return _filled(0.0, d) if b is None else b


def rms_fwd(
    x: torch.Tensor, res: torch.Tensor | None, w: torch.Tensor | None, eps: float, off: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sum or empty, y, rstd)`` of (residual-add +) RMSNorm with gain ``w + off``."""
    rows, d = x.shape
    w1 = _ones(w, d)  # kept alive until the call returns
    off = off if w is not None else 0.0  # no weight: the gain is 1
    y = fresh_output(x)
    s = fresh_output(x) if res is not None else None
    rstd = torch.empty(rows, dtype=torch.float32)
    _lib().nl_rms_fwd(
        _dt(x), _ptr(x), _ptr(res), _ptr(w1), off, _ptr(s), _ptr(y), _ptr(rstd), rows, d, eps,
        _threads(),
    )  # fmt: skip
    return (x.new_empty(0) if s is None else s), y, rstd


def _grad_vec(d: int, need: bool) -> torch.Tensor | None:
    return torch.empty(d) if need else None


def rms_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor | None,
    rstd: torch.Tensor,
    dsum: torch.Tensor | None,
    need_dw: bool,
    off: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx, dw or empty)``; ``dsum`` (the sum's own gradient) is added to ``dx``."""
    rows, d = x.shape
    w1 = _ones(w, d)  # kept alive until the call returns
    off = off if w is not None else 0.0
    dx = fresh_output(x)
    (part,) = _work(_lib().nl_blocks() * d)  # the partial buffer is always written
    dw = _grad_vec(d, need_dw)
    _lib().nl_rms_bwd(
        _dt(x), _ptr(dy), _ptr(x), _ptr(w1), off, _ptr(rstd), _ptr(dsum), _ptr(dx), part,
        _ptr(dw), rows, d, _threads(),
    )  # fmt: skip
    return dx, (_empty() if dw is None else dw)


def ln_fwd(
    x: torch.Tensor,
    res: torch.Tensor | None,
    w: torch.Tensor | None,
    b: torch.Tensor | None,
    eps: float,
    off: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sum or empty, y, mean, rstd)`` of (residual-add +) LayerNorm with gain ``w + off``."""
    rows, d = x.shape
    w1 = _ones(w, d)  # kept alive until the call returns
    off = off if w is not None else 0.0
    b0 = _zeros(b, d)
    y = fresh_output(x)
    s = fresh_output(x) if res is not None else None
    mean = torch.empty(rows, dtype=torch.float32)
    rstd = torch.empty(rows, dtype=torch.float32)
    _lib().nl_ln_fwd(
        _dt(x), _ptr(x), _ptr(res), _ptr(w1), _ptr(b0), off, _ptr(s), _ptr(y), _ptr(mean),
        _ptr(rstd), rows, d, eps, _threads(),
    )  # fmt: skip
    return (x.new_empty(0) if s is None else s), y, mean, rstd


def ln_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    dsum: torch.Tensor | None,
    need_dw: bool,
    need_db: bool,
    off: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dw or empty, db or empty)`` of (residual-add +) LayerNorm from its saved
    statistics; ``dsum`` is added to ``dx``."""
    rows, d = x.shape
    w1 = _ones(w, d)  # kept alive until the call returns
    off = off if w is not None else 0.0
    dx = fresh_output(x)
    nb = _lib().nl_blocks() * d
    pw, pb = _work(nb, nb)  # both partials are always written (one pass for dx, dw, db)
    dw, db = _grad_vec(d, need_dw), _grad_vec(d, need_db)
    _lib().nl_ln_bwd(
        _dt(x), _ptr(dy), _ptr(x), _ptr(w1), off, _ptr(mean), _ptr(rstd), _ptr(dsum), _ptr(dx),
        pw, pb, _ptr(dw), _ptr(db), rows, d, _threads(),
    )  # fmt: skip
    return dx, (_empty() if dw is None else dw), (_empty() if db is None else db)


def dyt_fwd(
    x: torch.Tensor, alpha: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None
) -> torch.Tensor:
    """``weight * tanh(alpha * x) + bias``."""
    rows, d = x.shape
    w1 = _ones(w, d)  # kept alive until the call returns
    b0 = _zeros(b, d)
    y = fresh_output(x)
    _lib().nl_dyt_fwd(
        _dt(x),
        _ptr(x),
        float(alpha),
        _ptr(w1),
        _ptr(b0),
        _ptr(y),
        rows,
        d,
        _threads(),
    )
    return y


def dyt_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    alpha: torch.Tensor,
    w: torch.Tensor | None,
    need_dw: bool,
    need_db: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dalpha (1 element), dw or empty, db or empty)`` of DyT (tanh recomputed)."""
    rows, d = x.shape
    w1 = _ones(w, d)  # kept alive until the call returns
    dx = fresh_output(x)
    nb, nt = _lib().nl_blocks(), _threads()
    # the partial buffers (always written) and one row of tanh per thread
    pw, pb, pa, tanh_rows = _work(nb * d, nb * d, nb, nt * d)
    dw, db = _grad_vec(d, need_dw), _grad_vec(d, need_db)
    da = torch.empty(1)
    _lib().nl_dyt_bwd(
        _dt(x), _ptr(dy), _ptr(x), float(alpha), _ptr(w1), _ptr(dx), pw, pb,
        pa, _ptr(dw), _ptr(db), _ptr(da), tanh_rows, rows, d, nt,
    )  # fmt: skip
    return dx, da, (_empty() if dw is None else dw), (_empty() if db is None else db)


def softmax1_fwd(x: torch.Tensor) -> torch.Tensor:
    """Off-by-one softmax over the rows of ``x``."""
    rows, d = x.shape
    y = fresh_output(x)
    nt = _threads()
    (work,) = _work(nt * d)  # one row buffer per thread
    _lib().nl_softmax1_fwd(_dt(x), _ptr(x), _ptr(y), work, rows, d, nt)
    return y


def softmax1_bwd(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y * (dy - sum(dy * y))`` over the rows."""
    rows, d = y.shape
    dx = fresh_output(y)
    _lib().nl_softmax1_bwd(_dt(y), _ptr(dy), _ptr(y), _ptr(dx), rows, d, _threads())
    return dx


#: Head dimensions :func:`attention_fwd` is compiled for (csrc/attention.cpp's cases).
ATTENTION_HEAD_DIMS = (8, 16, 32)


def _heads(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a ``(B, H, T, D)`` view (a 3-d ``(S, T, D)`` gets one head)."""
    return t.unsqueeze(1) if t.dim() == 3 else t


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    """``(batch, head, row)`` strides of a ``(B, H, T, D)`` view whose rows are contiguous."""
    sb, sh, st, _ = t.stride()
    return sb, sh, st


def _head_rows(*ts: torch.Tensor) -> list[torch.Tensor]:
    """The ``(B, H, T, D)`` views, copied only where the kernel cannot read them in place:
    rows of D contiguous floats, one set of strides for all of them."""
    views = [_heads(t) for t in ts]
    if all(v.stride(-1) == 1 for v in views) and len({v.stride() for v in views}) == 1:
        return views
    return [v.contiguous() for v in views]


def _output_strides(shape: torch.Size) -> tuple[int, int, int, int]:
    """Strides of a ``(B, H, T, D)`` tensor laid out ``(B, T, H, D)`` (the kernel's outputs)."""
    _, h, t, d = shape
    return t * h * d, d, h * d, 1


def _like_output(q: torch.Tensor) -> torch.Tensor:
    """An empty tensor of ``q``'s ``(B, H, T, D)`` shape with :func:`_output_strides`."""
    return torch.empty_strided(q.shape, _output_strides(q.shape))


def attention_fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(o, lse)`` of softmax attention over float32 ``(B, H, T, D)`` (or ``(S, T, D)``)
    queries, keys and values, read in place where their rows are contiguous and their
    strides agree (the heads of one projection): the output (shape of ``q``, laid out
    ``(B, T, H, D)``) and each query's log-sum-exp of its scaled scores (float32)."""
    qh, kh, vh = _head_rows(q, k, v)
    b, h, t, d = qh.shape
    o = _like_output(qh)
    lse = torch.empty(b * h, t, dtype=torch.float32)
    _lib().nl_attn_fwd(
        _ptr(qh), _ptr(kh), _ptr(vh), _ptr(o), _ptr(lse), b, h, t, d, *_strides(qh), scale,
        int(causal), _threads(),
    )  # fmt: skip
    return o.reshape(q.shape), lse


def attention_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of :func:`attention_fwd` from its saved output and log-sum-exp."""
    qh, kh, vh = _head_rows(q, k, v)
    oh = _heads(o)
    if oh.stride() != _output_strides(qh.shape):
        oh = oh.transpose(1, 2).contiguous().transpose(1, 2)
    (gh,) = _head_rows(do)
    b, h, t, d = qh.shape
    dq, dk, dv = _like_output(qh), _like_output(qh), _like_output(qh)
    _lib().nl_attn_bwd(
        _ptr(qh), _ptr(kh), _ptr(vh), _ptr(oh), _ptr(gh), _ptr(lse), _ptr(dq), _ptr(dk),
        _ptr(dv), b, h, t, d, *_strides(qh), *_strides(gh), scale, int(causal), _threads(),
    )  # fmt: skip
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
