#!/usr/bin/env bash
# GPU check of normlab's fused kernels, for the day a CUDA device is lent (one short command):
#   bash benchmarks/gpu.sh            # results in ./bench-gpu (or $OUT)
# Installs the GPU extra (triton) and Liger-Kernel (the peer) from the registry, then runs
# the same table as `normlab bench` on CUDA: normlab's Triton kernels against torch's own op,
# the eager formula, torch.compile and Liger-Kernel, float32 and bfloat16, forward and
# forward+backward, for the ops Liger-Kernel also has, on the targets' two shapes and the
# QK-norm shape, plus the TinyGPT training step (about 10 minutes, most of it compiling).
# Writes one JSON and one PNG, then runs the kernel tests (which check every Triton kernel on
# the GPU; elsewhere they run in Triton's interpreter). SWEEP=1 adds the width sweep
# (N 64-65536) without the compiled peer, into a second JSON/PNG pair.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
out=${OUT:-bench-gpu}
mkdir -p "$out"

"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')"
# torch is already the machine's CUDA build: install the rest without touching it
"$py" -m pip install --quiet --no-deps -e . && "$py" -m pip install --quiet triton pytest
"$py" -m pip install --quiet --no-deps liger-kernel || echo "liger-kernel did not install: no Liger column"
nvidia-smi --query-gpu=name,memory.total,utilization.gpu --format=csv | tee "$out/gpu.txt"

"$py" -m normlab bench --device cuda --compile --model \
  --ops rmsnorm,layernorm,add_rmsnorm,rmsnorm_offset --shapes 8192x1024,2048x4096,364800x128 \
  --dtypes float32,bfloat16 --modes fwd,fwd+bwd \
  --out "$out/bench_gpu.json" --plot "$out/bench_gpu.png" 2>&1 | tee "$out/bench.txt"
if [[ "${SWEEP:-0}" == 1 ]]; then
  "$py" -m normlab bench --device cuda --no-compile --shapes sweep \
    --out "$out/sweep_gpu.json" --plot "$out/sweep_gpu.png" 2>&1 | tee "$out/sweep.txt"
fi
"$py" -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tee "$out/tests.txt"
