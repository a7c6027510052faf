"""How much arithmetic an elementwise bfloat16 kernel can afford on this CPU, in one run.

    python benchmarks/bench_roofline.py [--threads N] [--rows R] [--repeats K] [--out FILE.json]

Builds ``roofline.cpp`` (needs g++ with AVX-512 BF16, as on Zen 4 or Sapphire Rapids) and
times ``y = f(x)`` over a ``(rows, 1024)`` bfloat16 array with k = 0, 4, ..., 32 FMAs per 16
values (four independent chains) against ``copy_`` of the same array, interleaved, buffers
cycled through 8x the last-level cache, medians. Prints copy's time over each kernel's: the
largest k still near 1 is what a 16-bit kernel can spend per 16 values and stay at the
memory's speed. On the 2-core EPYC (Zen 4, one 512-bit FMA a cycle) with 8M values:
k <= 12 ran at 1.07-1.12x copy, k = 16 at 0.83-0.87, 20 at 0.67-0.71, 24 at 0.54-0.58, 32
at 0.42-0.44 (five runs, 2026-12-05). DyT's forward is 13 such operations per 16 values
(its tanh 11, alpha x and the gain's FMA) and a division, and measured 0.6-0.8x copy in
bfloat16; Softmax1's exp is 11, before its sum and second pass: the ">= 0.9x copy" targets
of their 16-bit forwards need less arithmetic than float32-accurate tanh and exp take.
Quote the load the header prints.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from normlab._machine import load_average
from normlab.cli._bench_ops import median_times, rotation
from normlab.kernels.cpu import FLAGS, _compiler

SOURCE = Path(__file__).with_name("roofline.cpp")
OPS_PER_16 = (0, 4, 8, 12, 16, 20, 24, 32)


def build(folder: Path) -> ctypes.CDLL:
    """Compile roofline.cpp into ``folder``; SystemExit with the compiler's message if it fails."""
    cxx = _compiler()
    if cxx is None:
        raise SystemExit("bench_roofline: no C++ compiler found (set $CXX or install g++).")
    lib = folder / "roofline.so"
    command = [cxx, *FLAGS, "-o", str(lib), str(SOURCE)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_roofline: building roofline.cpp failed:\n{done.stderr[-2000:]}")
    handle = ctypes.CDLL(str(lib))
    ptr = ctypes.c_void_p
    handle.roofline.argtypes = (ptr, ptr, ctypes.c_long, ctypes.c_int, ctypes.c_int)
    return handle


def measure(lib: ctypes.CDLL, rows: int, threads: int, repeats: int) -> dict[str, object]:
    """Seconds of copy_ and of each k (medians of interleaved rounds) and copy's time over k's."""
    n = rows * 1024
    sets = rotation(2 * 2 * n)
    xs = [torch.randn(n).bfloat16() for _ in range(sets)]
    ys = [torch.zeros(n, dtype=torch.bfloat16) for _ in range(sets)]
    turn = {"i": 0}

    def pair() -> tuple[torch.Tensor, torch.Tensor]:
        turn["i"] = (turn["i"] + 1) % sets
        return xs[turn["i"]], ys[(turn["i"] + 1) % sets]

    def kernel(k: int):
        def run() -> None:
            x, y = pair()
            lib.roofline(x.data_ptr(), y.data_ptr(), n, threads, k)

        return run

    def copy() -> None:
        x, y = pair()
        y.copy_(x)

    fns = {"copy": copy} | {f"k{k}": kernel(k) for k in OPS_PER_16}
    seconds = {k: statistics.median(v) for k, v in median_times(fns, "cpu", repeats, 0.05).items()}
    ratio = {k: seconds["copy"] / t for k, t in seconds.items() if k != "copy"}
    return {"values": n, "threads": threads, "seconds": seconds, "copy_over_kernel": ratio}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rows", type=int, default=8192, help="rows of 1024 values")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="also write the record as JSON")
    args = parser.parse_args(argv)
    if min(args.threads, args.rows, args.repeats) < 1:
        parser.error("--threads, --rows and --repeats must be positive")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        lib = build(Path(folder))
        before = load_average()
        record = measure(lib, args.rows, args.threads, args.repeats)
        record["load"] = [before, load_average()]
    print(f"bfloat16 elementwise, {record['values']} values, {args.threads} threads, load "
          f"{record['load'][0]:.2f} -> {record['load'][1]:.2f}; copy_ "
          f"{record['seconds']['copy'] * 1e3:.3f} ms")  # fmt: skip
    for k in OPS_PER_16:
        ratio = record["copy_over_kernel"][f"k{k}"]
        print(f"  {k:2d} FMAs per 16 values: {ratio:.2f}x copy")
    if args.out is not None:
        args.out.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
