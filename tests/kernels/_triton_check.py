"""Run as a script with TRITON_INTERPRET=1: the Triton kernels against the plain formulas.

Prints one JSON line: a list of failures (empty when every kernel matches).
"""

from __future__ import annotations

import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch

from normlab.kernels import triton_kernels as T
from tests.kernels._cases import CASES, assert_close, make_inputs


def main() -> int:
    from normlab.kernels import _ops

    _ops.backend = lambda x: T  # every kernel call goes to Triton (interpreted on the CPU)
    from normlab.kernels import _dispatch

    _dispatch._READY["cpu"] = True
    failures = []
    torch.manual_seed(0)
    for name, (fast, ref, _) in CASES.items():
        for dtype in (torch.float32, torch.bfloat16):
            for shape, contiguous in (((3, 5, 37), False), ((9, 130), True), ((0, 16), True)):
                inputs = make_inputs(name, shape, dtype, contiguous=contiguous)
                try:
                    results = []
                    grads = None
                    for fn in (fast, ref):
                        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
                        out = fn(*leaves)
                        outs = list(out) if isinstance(out, tuple) else [out]
                        grads = grads or [torch.randn_like(o) for o in outs]
                        torch.autograd.backward(outs, grads)
                        results.append([*outs, *(t.grad for t in leaves)])
                    for a, b in zip(*results, strict=True):  # bf16 inputs: bf16 tolerance
                        assert_close(a.detach(), b.detach(), dtype, f"{name} {shape}")
                except Exception as err:
                    failures.append(f"{name} {dtype} {shape}: {err!r}"[:400])
    print(json.dumps(failures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
