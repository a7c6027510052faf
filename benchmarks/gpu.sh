#!/usr/bin/env bash
# GPU check of normlab's fused kernels, for a machine with a CUDA device (one short command):
#   bash benchmarks/gpu.sh            # results in ./bench-gpu (or $OUT)
# Installs the GPU extra (triton) and, when it installs, Liger-Kernel as the peer; runs
# `normlab bench --device cuda` (Triton kernels vs torch, torch.compile and Liger-Kernel,
# fraction of copy bandwidth ~ HBM bandwidth, fp32 and bf16, forward and forward+backward,
# the TinyGPT training step) and the kernel tests, which then also run every Triton kernel
# on the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
out=${OUT:-bench-gpu}
mkdir -p "$out"

"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
"$py" -m pip install --quiet -e ".[gpu,dev]"
"$py" -m pip install --quiet liger-kernel || echo "liger-kernel did not install: no Liger peer"
nvidia-smi --query-gpu=name,memory.total,utilization.gpu --format=csv | tee "$out/gpu.txt"

"$py" -m normlab bench --device cuda --full --compile --model --shapes 8192x1024,2048x4096,32768x4096 \
  --out "$out/bench_gpu.json" --plot "$out/bench_gpu.png" 2>&1 | tee "$out/bench.txt"
"$py" -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tee "$out/tests.txt"
