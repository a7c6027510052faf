"""On a CUDA device (benchmarks/gpu.sh): the Triton kernels equal the plain formulas."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from normlab import kernels as K
from tests.kernels._cases import CASES, assert_close, make_inputs, run

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("triton") is None,
    reason="needs a CUDA device and triton",
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(5, 123, 1023), (3, 4096), (0, 64), (2, 65536)], ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_triton_equals_reference_on_cuda(
    name: str, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    assert K.available("cuda")
    fast, ref, _ = CASES[name]
    inputs = make_inputs(name, shape, dtype, contiguous=False, device="cuda")
    outs, grads, g = run(fast, inputs, None)
    ref_outs, ref_grads, _ = run(ref, inputs, g)
    tol = torch.float32 if dtype == torch.float32 else torch.bfloat16
    for a, b in zip([*outs, *grads], [*ref_outs, *ref_grads], strict=True):
        assert_close(a, b, tol, f"{name} {shape} {dtype}")
