"""The CPU kernels at extreme magnitudes, with a corrupt cache, and compiled before use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from normlab import kernels as K
from normlab.kernels import cpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def library() -> None:
    if cpu.library() is None:
        pytest.skip("no C++ compiler: the CPU kernels are unavailable here")


def _rms64(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * w.double()


def _ln64(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt(c.square().mean(-1, keepdim=True) + eps) * w.double() + b.double()


@pytest.mark.parametrize("scale", [1e19, 1e30, 1e-30], ids=str)
@pytest.mark.parametrize("eps", [1e-6, 0.0], ids=["eps", "no-eps"])
def test_extreme_rows_match_float64(scale: float, eps: float) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 1024, generator=gen) * scale
    x[0] = 0.0  # an all-zero row stays finite (eps > 0) and does not disturb the others
    x[1] = torch.randn(1024, generator=gen)  # an ordinary row beside the extreme ones
    w, b = torch.rand(1024, generator=gen) + 0.5, torch.randn(1024, generator=gen)
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    y = K.rms_norm(xr, (1024,), wr, eps)
    ref = _rms64(x, w, eps)
    rows = slice(0 if eps else 1, None)
    torch.testing.assert_close(y[rows].double(), ref[rows], atol=1e-5, rtol=1e-5)
    z = K.layer_norm(x, (1024,), w, b, eps)
    torch.testing.assert_close(z[rows].double(), _ln64(x, w, b, eps)[rows], atol=1e-4, rtol=1e-4)
    g = torch.randn(6, 1024, generator=gen)
    (y[1:] * g[1:]).sum().backward()
    x64 = x[1:].double().requires_grad_(True)
    (_rms64(x64, w, eps) * g[1:].double()).sum().backward()
    rel = (xr.grad[1:].double() - x64.grad).abs().max() / x64.grad.abs().max()
    assert rel < 1e-4
    assert torch.isfinite(wr.grad).all() or not eps


@pytest.mark.slow
def test_corrupt_cached_library_is_rebuilt(tmp_path: Path) -> None:
    """A truncated .so must not SIGBUS, an empty one must not leave a silent fallback."""
    env = {**os.environ, "NORMLAB_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    code = (
        "import torch, normlab.kernels as K\n"
        "from normlab.kernels import cpu\n"
        "from normlab.layers import RMSNorm\n"
        "y = RMSNorm(64)(torch.randn(4, 64))\n"
        "assert cpu.library() is not None, 'fell back to the plain path'\n"
        "print(cpu.build())\n"
    )

    def run() -> Path:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        return Path(done.stdout.strip().splitlines()[-1])

    so = run()
    size = so.stat().st_size
    assert cpu.intact(so)
    for cut in (size // 2, 0):  # truncated, then zero-length
        with open(so, "r+b") as f:
            f.truncate(cut)
        assert not cpu.intact(so)
        assert run() == so and so.stat().st_size == size and cpu.intact(so)


@pytest.mark.slow
def test_compiled_before_any_eager_call_uses_the_kernels() -> None:
    """The first call of the process is inside torch.compile: the graph holds normlab's op,
    the op runs the CPU library, and the outputs equal the plain path."""
    code = (
        "import torch, normlab.kernels as K\n"
        "from normlab.kernels import cpu\n"
        "from normlab.layers import RMSNorm\n"
        "calls = []\n"
        "real = cpu.rms_fwd\n"
        "cpu.rms_fwd = lambda *a: calls.append(1) or real(*a)\n"
        "ops = []\n"
        "def backend(gm, inputs):\n"
        "    ops.extend(str(n.target) for n in gm.graph.nodes)\n"
        "    return gm.forward\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(16, 16), RMSNorm(16))\n"
        "x = torch.randn(3, 16)\n"
        "with torch.no_grad():\n"
        "    y = torch.compile(m, backend=backend, fullgraph=True)(x)\n"
        "    with K.disabled():\n"
        "        ref = m(x)\n"
        "assert any('normlab.rms_fwd' in o for o in ops), ops\n"
        "assert calls, 'the CPU kernel did not run'\n"
        "torch.testing.assert_close(y, ref)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_plain_fallback_of_the_compiled_ops_equals_the_library(dtype: torch.dtype) -> None:
    """What a compiled graph's normlab op runs where the device has no library."""
    from normlab.kernels import _fallback as P

    gen = torch.Generator().manual_seed(0)
    x, r, g = (torch.randn(7, 96, generator=gen).to(dtype) for _ in range(3))
    w, b = torch.rand(96, generator=gen) + 0.5, torch.randn(96, generator=gen)
    a = torch.tensor([0.7])
    _, _, rstd = cpu.rms_fwd(x, None, w, 1e-6, 0.0)
    _, _, mean, ln_rstd = cpu.ln_fwd(x, None, w, b, 1e-5, 0.0)
    y = cpu.softmax1_fwd(x)
    calls = {
        "rms_fwd": (x, r, w, 1e-6, 1.0),
        "rms_bwd": (g, x, w, rstd, r, True, 1.0),
        "ln_fwd": (x, r, w, b, 1e-5, 1.0),
        "ln_bwd": (g, x, w, mean, ln_rstd, r, True, True, 1.0),
        "dyt_fwd": (x, a, w, b),
        "dyt_bwd": (g, x, a, w, True, True),
        "softmax1_fwd": (x,),
        "softmax1_bwd": (g, y),
    }
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    for name, args in calls.items():
        got, want = getattr(P, name)(*args), getattr(cpu, name)(*args)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for i, (u, v) in enumerate(zip(got, want, strict=True)):
            assert u.dtype == v.dtype and u.shape == v.shape, (name, i)
            torch.testing.assert_close(u.float(), v.float(), **tol, msg=f"{name} output {i}")
