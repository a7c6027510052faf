"""The kernels as ``torch.library`` custom ops, so ``torch.compile`` treats them as opaque.

Eager code calls the backend module (:mod:`normlab.kernels.cpu` or
:mod:`normlab.kernels.triton_kernels`) directly, which skips the dispatcher's overhead;
under ``torch.compile`` :func:`call` goes through ``torch.ops.normlab.*``, whose fake
implementations give the output shapes without running anything. A graph traced before
the kernels were ever loaded still holds these ops: the device's library is loaded (or
built) when the op first runs, and where it cannot be, the op runs
:mod:`normlab.kernels._fallback`, the same operation in plain torch.
"""

# no ``from __future__ import annotations``: custom_op reads the annotations at runtime
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from normlab.kernels._dispatch import device_ready

__all__ = ["backend", "call"]


def backend(x: Tensor) -> Any:
    """The kernel module for ``x``'s device (the plain-torch one where it has none)."""
    if not device_ready(x.device.type):
        from normlab.kernels import _fallback

        return _fallback
    if x.device.type == "cpu":
        from normlab.kernels import cpu

        return cpu
    from normlab.kernels import triton_kernels

    return triton_kernels


def call(name: str, *args: Any) -> Any:
    """Run kernel ``name`` on the backend of the first tensor argument."""
    if torch.compiler.is_compiling():
        return getattr(torch.ops.normlab, name)(*args)
    return getattr(backend(args[0]), name)(*args)


def _rows(x: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], dtype=torch.float32)


def _vec(x: Tensor, need: bool) -> Tensor:
    return x.new_empty(x.shape[1] if need else 0, dtype=torch.float32)


def _define(name: str, fake: Callable[..., Any]) -> None:
    def impl(*args: Any) -> Any:
        return getattr(backend(args[0]), name)(*args)

    impl.__annotations__ = fake.__annotations__
    impl.__signature__ = __import__("inspect").signature(fake)  # type: ignore[attr-defined]
    op = torch.library.custom_op(f"normlab::{name}", mutates_args=())(impl)
    op.register_fake(fake)


def _rms_fwd(
    x: Tensor, res: Tensor | None, w: Tensor | None, eps: float, off: float
) -> tuple[Tensor, Tensor, Tensor]:
    s = torch.empty_like(x) if res is not None else x.new_empty(0)
    return s, torch.empty_like(x), _rows(x)


def _rms_bwd(
    dy: Tensor,
    x: Tensor,
    w: Tensor | None,
    rstd: Tensor,
    dsum: Tensor | None,
    need_dw: bool,
    off: float,
) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), _vec(x, need_dw)


def _ln_fwd(
    x: Tensor, res: Tensor | None, w: Tensor | None, b: Tensor | None, eps: float, off: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    s = torch.empty_like(x) if res is not None else x.new_empty(0)
    return s, torch.empty_like(x), _rows(x), _rows(x)


def _ln_bwd(
    dy: Tensor,
    x: Tensor,
    w: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    dsum: Tensor | None,
    need_dw: bool,
    need_db: bool,
    off: float,
) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(x), _vec(x, need_dw), _vec(x, need_db)


def _dyt_fwd(x: Tensor, alpha: Tensor, w: Tensor | None, b: Tensor | None) -> Tensor:
    return torch.empty_like(x)


def _dyt_bwd(
    dy: Tensor, x: Tensor, alpha: Tensor, w: Tensor | None, need_dw: bool, need_db: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    da = x.new_empty(1, dtype=torch.float32)
    return torch.empty_like(x), da, _vec(x, need_dw), _vec(x, need_db)


def _softmax1_fwd(x: Tensor) -> Tensor:
    return torch.empty_like(x)


def _softmax1_bwd(dy: Tensor, y: Tensor) -> Tensor:
    return torch.empty_like(y)


for _name, _fake in {
    "rms_fwd": _rms_fwd,
    "rms_bwd": _rms_bwd,
    "ln_fwd": _ln_fwd,
    "ln_bwd": _ln_bwd,
    "dyt_fwd": _dyt_fwd,
    "dyt_bwd": _dyt_bwd,
    "softmax1_fwd": _softmax1_fwd,
    "softmax1_bwd": _softmax1_bwd,
}.items():
    _define(_name, _fake)
