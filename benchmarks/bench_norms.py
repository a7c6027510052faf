"""Benchmark normlab's norms against torch and copy bandwidth (same as `normlab bench`).

Run with allocator settings that keep page faults out of the numbers:

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 python benchmarks/bench_norms.py
"""

import sys

from normlab.bench import run_benchmarks

if __name__ == "__main__":
    sys.exit(run_benchmarks(quick="--full" not in sys.argv))
