#!/usr/bin/env bash
# GPU check of normlab's fused kernels, for a machine with a CUDA device (one short command):
#   bash benchmarks/gpu.sh            # results in ./bench-gpu (or $OUT)
# Installs the GPU extra (triton) and, when it installs, Liger-Kernel as the peer; runs the
# bench on CUDA (forward and forward+backward, fp32 and bf16, the TinyGPT end-to-end step)
# and the kernel tests, which then also check every Triton kernel on the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
out=${OUT:-bench-gpu}
mkdir -p "$out"

"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
"$py" -m pip install --quiet -e ".[gpu,dev]"
"$py" -m pip install --quiet liger-kernel || echo "liger-kernel did not install: no Liger peer"

"$py" - "$out" <<'PY'
import sys

from normlab.bench import run_benchmarks

out = sys.argv[1]
run_benchmarks(quick=False, device="cuda", compile=True, model=True,
               out=f"{out}/bench_gpu.json", plot=f"{out}/bench_gpu.png")
PY
"$py" -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tee "$out/tests.txt"
