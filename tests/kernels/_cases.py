"""Shared cases: each fast path with its plain reference, on the same arguments."""

from __future__ import annotations

from collections.abc import Callable

import torch

from normlab import functional as NF
from normlab import kernels as K

D = 1023

#: name -> (fast, reference, extra parameter shapes); both take (x, *params).
CASES: dict[str, tuple[Callable, Callable, tuple[tuple[int, ...], ...]]] = {
    "rms_norm": (
        lambda x, w: K.rms_norm(x, (x.shape[-1],), w, 1e-6),
        lambda x, w: NF.rms_norm(x, (x.shape[-1],), w, 1e-6),
        ((D,),),
    ),
    "add_rms_norm": (
        lambda x, r, w: K.add_rms_norm(x, r, (x.shape[-1],), w, 1e-6),
        lambda x, r, w: (NF.rms_norm(x + r, (x.shape[-1],), w, 1e-6), x + r),
        (None, (D,)),
    ),
    "add_layer_norm": (
        lambda x, r, w, b: K.add_layer_norm(x, r, (x.shape[-1],), w, b, offset=1.0),
        lambda x, r, w, b: (NF.layer_norm(x + r, (x.shape[-1],), w, b, offset=1.0), x + r),
        (None, (D,), (D,)),
    ),
    "layer_norm": (
        lambda x, w, b: K.layer_norm(x, (x.shape[-1],), w, b),
        lambda x, w, b: NF.layer_norm(x, (x.shape[-1],), w, b),
        ((D,), (D,)),
    ),
    "dyt": (
        lambda x, a, w, b: K.dyt(x, a, w, b),
        lambda x, a, w, b: NF.dyt(x, a, w, b),
        ((1,), (D,), (D,)),
    ),
    "softmax1": (lambda x: K.softmax1(x), lambda x: NF.softmax1(x), ()),
}


def make_inputs(
    name: str,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    *,
    contiguous: bool,
    device: str = "cpu",
) -> list[torch.Tensor]:
    """``x`` (non-contiguous on request, features last) and the case's parameters."""
    d = shape[-1]

    def act() -> torch.Tensor:
        if contiguous:
            return torch.randn(shape) * 2
        return (torch.randn(*shape[:-2], d, shape[-2]) * 2).transpose(-1, -2)

    x = act().to(dtype)
    params = []
    for p in CASES[name][2]:
        if p is None:  # the residual: same shape and dtype as x
            params.append(act().to(dtype))
        elif p == (1,):
            params.append(torch.tensor([0.7]))
        else:
            params.append(torch.randn(d) * 0.5 + 1)
    return [t.to(device) for t in (x, *params)]


def run(
    fn: Callable, inputs: list[torch.Tensor], grads: list[torch.Tensor] | None
) -> tuple[list[torch.Tensor], list[torch.Tensor | None], list[torch.Tensor]]:
    """Outputs and input gradients of ``fn`` on fresh leaf copies of ``inputs``."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    outs = list(out) if isinstance(out, tuple) else [out]
    if grads is None:
        grads = [torch.randn_like(o).transpose(0, -1).contiguous().transpose(0, -1) for o in outs]
    torch.autograd.backward(outs, grads)
    return [o.detach() for o in outs], [t.grad for t in leaves], grads


def assert_close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """``a`` within fp32 1e-5 / bf16 2e-2 of ``b``, relative to ``b``'s scale when above 1."""
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    scale = max(1.0, b.float().abs().max().item()) if b.numel() else 1.0
    err = (a.float() - b.float()).abs().max().item() if b.numel() else 0.0
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol * scale:.3g}"
