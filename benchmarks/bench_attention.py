"""Benchmark normlab's fused CPU attention against torch's own op, in one run.

    python benchmarks/bench_attention.py [--threads N] [--repeats R] [--out FILE.json]

Prints, per shape (batch, heads, tokens, head_dim), the median seconds of the forward and
the forward + backward of ``normlab.kernels.attention`` and of
``F.scaled_dot_product_attention`` (interleaved rounds, medians) and their ratio (torch's
time over normlab's: above 1 is faster), and the same ratio for a TinyGPT training step
(d 32, 8 layers, 4 heads, batch 16 x 64: the quick report's language model) with only the
attention switched. Quote the load the header prints: these are ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import nullcontext
from unittest import mock

import torch
import torch.nn.functional as F

import normlab.kernels as K
from normlab._machine import load_average
from normlab.cli._bench_model import train_step
from normlab.cli._bench_ops import median_times
from normlab.kernels import sdpa
from normlab.models.gpt import GPTConfig, TinyGPT

SHAPES = ((16, 4, 64, 8), (16, 4, 64, 16), (8, 4, 128, 16), (4, 8, 256, 32), (2, 8, 512, 64))


def _ops(shape: tuple[int, ...]) -> dict[str, object]:
    q, k, v, do = (torch.randn(*shape) for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]

    def backward(fn):
        def run():
            fn(*leaves, is_causal=True).backward(do)

        return run

    def ours(a, b, c, is_causal):
        return K.attention(a, b, c, causal=is_causal)

    return {
        "normlab fwd": lambda: ours(q, k, v, True),
        "torch fwd": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "normlab fwd+bwd": backward(ours),
        "torch fwd+bwd": backward(F.scaled_dot_product_attention),
    }


def _step(torch_attention: bool) -> object:
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(d_model=32, n_layers=8, n_heads=4, context=64))

    def scope():
        if torch_attention:
            return mock.patch.object(sdpa, "_fused", lambda *a: False)
        return nullcontext()

    return train_step(model, torch.randint(0, 256, (16, 64)), scope)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", default=None, help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not K.available("cpu"):
        print("normlab's CPU kernels are unavailable (no C++ compiler?)", file=sys.stderr)
        return 2
    before = load_average()
    rows = []
    for shape in SHAPES:
        times = median_times(_ops(shape), "cpu", args.repeats, 0.05)
        med = {name: statistics.median(t) for name, t in times.items()}
        rows.append(
            {
                "shape": list(shape),
                **{f"{k} ms": 1e3 * v for k, v in med.items()},
                "fwd x torch": med["torch fwd"] / med["normlab fwd"],
                "fwd+bwd x torch": med["torch fwd+bwd"] / med["normlab fwd+bwd"],
            }
        )
    steps = median_times({"normlab": _step(False), "torch": _step(True)}, "cpu", args.repeats, 0.2)
    step = {k: statistics.median(v) for k, v in steps.items()}
    after = load_average()
    print(f"attention, {args.threads} thread(s), load {before:.2f} -> {after:.2f}")
    for r in rows:
        print(
            f"{tuple(r['shape'])!s:>18}  fwd {r['normlab fwd ms']:.3f} ms "
            f"({r['fwd x torch']:.2f}x torch)  fwd+bwd {r['normlab fwd+bwd ms']:.3f} ms "
            f"({r['fwd+bwd x torch']:.2f}x torch)"
        )
    ratio = step["torch"] / step["normlab"]
    print(f"TinyGPT step: {1e3 * step['normlab']:.1f} ms against {1e3 * step['torch']:.1f} ms "
          f"with torch's attention ({ratio:.2f}x)")  # fmt: skip
    if args.out:
        record = {"load": [before, after], "threads": args.threads, "ops": rows}
        record["step_ms"] = {k: 1e3 * v for k, v in step.items()}
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
