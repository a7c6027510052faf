"""On a CUDA device: where the Triton kernels' time goes, and their launch settings swept.

    python benchmarks/gpu_tune.py OUT.json     # PYTHONPATH=src, as benchmarks/gpu.sh sets

1. Host cost of one call (2,000 back-to-back calls on a (64, 128) input, whose kernels take
   the GPU a few microseconds, then one synchronize): the raw Triton launch, normlab's
   forward, torch's own op and Liger-Kernel's, and the profile of normlab's forward.
2. Kernel time alone (``triton.testing.do_bench``: CUDA events, the L2 flushed before each
   call, median) of the RMSNorm and LayerNorm forward and backward kernels, float32 and
   bfloat16, at (8192, 1024) and (32768, 4096), for each ``num_warps`` and, in the backward,
   each number of programs per SM (normlab's choice: 8) and ``num_stages``, against ``copy_``
   of the same bytes.
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys
import time

import torch
import torch.nn.functional as F

from normlab import kernels as K
from normlab.kernels import triton_kernels as T

SHAPES = ((8192, 1024), (32768, 4096))
DTYPES = (torch.float32, torch.bfloat16)
WARPS = (2, 4, 8, 16)
PER_SM = (2, 4, 8)
STAGES = (1, 2, 3, 4)


def host_cost() -> dict[str, float]:
    """Microseconds of host time per call, the GPU never the bottleneck."""
    x = torch.randn(64, 128, device="cuda")
    w = torch.ones(128, device="cuda")
    calls = {
        "triton launch (T.rms_fwd)": lambda: T.rms_fwd(x, None, w, 1e-6, 0.0),
        "normlab K.rms_norm": lambda: K.rms_norm(x, (128,), w, 1e-6),
        "torch F.rms_norm": lambda: F.rms_norm(x, (128,), w, 1e-6),
        "torch.empty_like x3": lambda: [torch.empty_like(x) for _ in range(3)],
    }
    try:
        import liger_kernel.transformers as L

        m = L.LigerRMSNorm(128, in_place=False).cuda()
        calls["liger LigerRMSNorm"] = lambda: m(x)
    except ImportError:
        pass
    out = {}
    for name, fn in calls.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(2000):
            fn()
        torch.cuda.synchronize()
        out[name] = (time.perf_counter() - start) / 2000 * 1e6
    return out


def profile_forward() -> str:
    x = torch.randn(64, 128, device="cuda")
    w = torch.ones(128, device="cuda")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        K.rms_norm(x, (128,), w, 1e-6)
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
    return text.getvalue()


def _ms(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")


def _settings(kernel: str) -> list[dict]:
    """The launch settings swept: ``num_warps`` (and twice each forward, for the noise);
    in the backward also the programs per SM and ``num_stages`` (the loop over rows)."""
    if kernel.endswith("fwd"):
        return [{"num_warps": w, "rep": k} for k in (0, 1) for w in WARPS]
    return [
        {"num_warps": w, "per_sm": p, "num_stages": st}
        for w in WARPS[1:]
        for p in PER_SM
        for st in STAGES
    ]


def _kernels(r: int, d: int, dtype: torch.dtype) -> dict:
    """Each kernel on one input, with the number of row-sized tensors it moves."""
    x = torch.randn(r, d, device="cuda", dtype=dtype)
    dy = torch.randn_like(x)
    w = torch.ones(d, device="cuda")  # float32 parameters, as the layers pass them
    b = torch.zeros(d, device="cuda")
    _, _, rstd = T.rms_fwd(x, None, w, 1e-6, 0.0)
    _, _, mean, lrstd = T.ln_fwd(x, None, w, b, 1e-5, 0.0)
    return {
        "rms_fwd": (lambda: T.rms_fwd(x, None, w, 1e-6, 0.0), 2),
        "ln_fwd": (lambda: T.ln_fwd(x, None, w, b, 1e-5, 0.0), 2),
        "rms_bwd": (lambda: T.rms_bwd(dy, x, w, rstd, None, True, 0.0), 3),
        "ln_bwd": (lambda: T.ln_bwd(dy, x, w, mean, lrstd, None, True, True, 0.0), 3),
    }


def _copy_gbs(r: int, d: int, dtype: torch.dtype) -> float:
    x = torch.randn(r, d, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    return 2 * x.numel() * x.element_size() / _ms(lambda: out.copy_(x)) / 1e6


def sweep() -> list[dict]:
    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for (r, d), dtype in ((s, t) for s in SHAPES for t in DTYPES):
        copy_gbs = _copy_gbs(r, d, dtype)
        row_bytes = r * d * dtype.itemsize
        for name, (fn, tensors) in _kernels(r, d, dtype).items():
            for setting in _settings(name):
                options = {k: v for k, v in setting.items() if k.startswith("num_")}
                T._launch = lambda block, x, options=options: options
                if "per_sm" in setting:
                    n = min(setting["per_sm"] * sms, r)
                    T._programs = lambda x, n=n: (n, -(-x.shape[0] // n))
                row = {"kernel": name, "shape": [r, d], "dtype": str(dtype)[6:], **setting}
                try:
                    ms = _ms(fn)
                except Exception as err:  # a setting the compiler refuses
                    rows.append({**row, "error": repr(err)[:200]})
                    continue
                gbs = tensors * row_bytes / ms / 1e6
                rows.append({**row, "ms": ms, "gbs": gbs, "x_copy": gbs / copy_gbs})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main(path: str) -> int:
    import inspect

    defaults = {f.__name__: inspect.getsource(f) for f in (T._warps, T._programs, T._launch)}
    result = {"device": torch.cuda.get_device_name(), "defaults": defaults}
    result["host_us"] = host_cost()
    print(json.dumps(result["host_us"], indent=1), flush=True)
    result["profile"] = profile_forward()
    print(result["profile"], flush=True)
    result["sweep"] = sweep()
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
