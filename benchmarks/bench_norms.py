"""Benchmark normlab's fused kernels: the same as ``normlab bench`` (one code path).

Run with the threads you mean to measure, and quote the load the title prints:

    python benchmarks/bench_norms.py [--full] [--model] [--threads N] [any normlab bench option]

Writes ``bench.json`` and ``bench.png`` unless ``--out`` / ``--plot`` say otherwise. On a
GPU machine use ``benchmarks/gpu.sh``.
"""

import sys

from normlab.cli import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    argv += [] if "--out" in argv else ["--out", "bench.json"]
    argv += [] if "--plot" in argv else ["--plot", "bench.png"]
    sys.exit(main(["bench", *argv]))
