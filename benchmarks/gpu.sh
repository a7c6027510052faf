#!/usr/bin/env bash
# GPU check of normlab's kernels, as one short command for the day a CUDA device is lent:
#   bash benchmarks/gpu.sh            # results in $OUT, else ./bench-gpu
# It needs no network (a lent machine reaches no registry): normlab runs from src/ on the
# machine's own torch, triton and pytest, and Liger-Kernel (the peer) installs from a wheel
# in .whl/ when one is there; fetch it beforehand where the registry is reachable:
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl liger-kernel
# Stages, each under its own time limit, so a hang or a failure in one leaves the others'
# results (about 8 minutes on an H200; 9 at most):
#   1. tests/kernels/test_cuda.py: every Triton kernel against the plain formulas on the GPU
#      (forward and backward, float32/bfloat16/float16, four shapes);
#   2. the op table, one `normlab bench` per op: normlab's Triton kernels against torch's own
#      op, the eager formula and Liger-Kernel, float32 and bfloat16, forward and
#      forward+backward, at the targets' two shapes, a large one (32768x4096, where a kernel's
#      time is not its launch's) and, for RMSNorm, the QK-norm shape 364800x128;
#   3. the torch.compile peer for RMSNorm and LayerNorm, and the TinyGPT training step;
#   4. one JSON (bench_gpu.json: every record, the targets) and one PNG of the ratios;
#   5. with TUNE=1, benchmarks/gpu_tune.py (host cost of a call, kernel time alone, launch
#      settings swept; about 1 minute) into tune.json.
# The H200's results of 2026-12-04 are in benchmarks/results/h200/.
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
out=${OUT:-bench-gpu}
parts=$(mktemp -d)
mkdir -p "$out"
log="$out/log.txt"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NORMLAB_CACHE="$parts/cache"
say() { echo "== $(date -u +%T) $*" | tee -a "$log"; }

"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')" || exit 2
if compgen -G ".whl/liger_kernel-*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --target "$parts/site" .whl/liger_kernel-*.whl \
    && export PYTHONPATH="$PYTHONPATH:$parts/site"
fi
{
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
  "$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  "$py" -c "import liger_kernel.transformers as L; print('liger-kernel', L.__file__)" 2>&1 | tail -1
  nproc; uptime
} 2>&1 | tee -a "$log"

say "1. kernel tests on the GPU"
timeout 60 "$py" -m pytest -q -p no:cacheprovider -n 8 tests/kernels/test_cuda.py 2>&1 \
  | tail -25 | tee -a "$log"

say "2. op table (280 s in all, at most 45 s an op)"
deadline=$((SECONDS + 280))
for op in rmsnorm layernorm add_rmsnorm rmsnorm_offset add_layernorm dyt softmax1; do
  shapes=8192x1024,2048x4096,32768x4096
  [[ $op == rmsnorm ]] && shapes="$shapes,364800x128"
  left=$((deadline - SECONDS)); ((left > 45)) && left=45
  ((left < 10)) && { say "   $op: skipped, out of time"; continue; }
  say "   $op"
  timeout "$left" "$py" -m normlab bench --device cuda --no-compile --ops "$op" --shapes "$shapes" \
    --dtypes float32,bfloat16 --modes fwd,fwd+bwd --out "$parts/2-$op.json" 2>&1 \
    | tail -60 | tee -a "$log"
done

say "3. torch.compile peer and the TinyGPT step"
timeout 90 "$py" -m normlab bench --device cuda --compile --ops rmsnorm,layernorm \
  --shapes 8192x1024,32768x4096 --dtypes float32,bfloat16 --modes fwd,fwd+bwd \
  --out "$parts/3-compiled.json" 2>&1 | tail -60 | tee -a "$log"
timeout 80 "$py" -m normlab bench --device cuda --compile --model --ops rmsnorm \
  --shapes 8192x1024 --dtypes bfloat16 --modes fwd --out "$parts/4-model.json" 2>&1 \
  | tail -30 | tee -a "$log"

say "4. one JSON and one PNG"
"$py" - "$parts" "$out" <<'EOF' 2>&1 | tee -a "$log"
import glob, json, sys
from pathlib import Path
from normlab._io import atomic_write_json
from normlab.cli import _bench_report as R

parts, out = Path(sys.argv[1]), Path(sys.argv[2])
runs = [json.loads(p.read_text()) for p in sorted(parts.glob("*.json"))]
by_key = {}  # a later stage's record (with the compiled peer) replaces an earlier one
for run in runs:
    for r in run["ops"]:
        by_key[(r["op"], tuple(r["shape"]), r["dtype"], r["mode"])] = r
records = list(by_key.values())
model = next((run["model"] for run in runs if run.get("model")), None)
targets = R.check_targets(records, model, "cuda")
payload = {"meta": runs[0]["meta"] if runs else {}, "ops": records, "model": model,
           "targets": targets, "parts": [p.name for p in sorted(parts.glob("*.json"))]}
atomic_write_json(out / "bench_gpu.json", payload)
if records:
    R.plot(records, out / "bench_gpu.png")
met = sum(1 for t in targets if t.get("met") is True)
print(f"{len(records)} records from {len(runs)} runs; targets met {met} of {len(targets)}")
EOF
if [[ "${TUNE:-0}" == 1 ]]; then
  say "5. launch settings"
  timeout 150 "$py" benchmarks/gpu_tune.py "$out/tune.json" > "$parts/tune.txt" 2>&1
  tail -3 "$parts/tune.txt" | tee -a "$log"
fi
tar czf "$out/parts.tgz" -C "$parts" --exclude=cache --exclude=site . 2>/dev/null
say "done"
