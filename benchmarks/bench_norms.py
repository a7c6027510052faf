"""Benchmark normlab's fused kernels against torch, eager, compiled and copy bandwidth.

The same as ``normlab bench``. Run with one thread on a shared machine:

    python benchmarks/bench_norms.py [--full] [--model] [--threads N]

``--full`` adds the ``torch.compile`` peer and more repeats; ``--model`` times TinyGPT's
training step and inference with the kernels on and off. Results go to ``bench.json`` and
``bench.png``. On a GPU machine use ``benchmarks/gpu.sh``.
"""

import argparse
import sys

import torch

from normlab.bench import run_benchmarks

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true")
    p.add_argument("--model", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    sys.exit(
        run_benchmarks(
            quick=not a.full, model=a.model, device=a.device, out="bench.json", plot="bench.png"
        )
    )
