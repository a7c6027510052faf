"""Dispatch state of the fast paths: whether they are on, and where they apply.

Holds what :mod:`normlab.kernels` and :mod:`normlab.kernels._ops` both read (the
``NORMLAB_KERNELS`` switch, the ``disabled()`` depth, each device's readiness), so neither
module imports the other to reach it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["BACKENDS", "available", "check_backend", "device_ready", "disabled", "enabled"]

#: The layers' ``backend`` argument: "kernel" (the fast path where it applies) or "torch".
BACKENDS = ("kernel", "torch")
_ENV_ON = os.environ.get("NORMLAB_KERNELS", "1").strip().lower() not in ("0", "off", "false")
_DISABLED = {"depth": 0}  # open ``disabled()`` blocks; a dict so torch.compile guards on it
_PLAIN = (torch.Tensor, nn.Parameter)
_READY: dict[str, bool] = {}
_MAX_CUDA_D = 65536  # triton_kernels.MAX_D: one row per program
_CUDA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Inside the ``with`` block every call takes the plain torch path.

    Example:
        >>> import torch, normlab.kernels as K
        >>> with K.disabled():
        ...     K.enabled()
        False
    """
    _DISABLED["depth"] += 1
    try:
        yield
    finally:
        _DISABLED["depth"] -= 1


def enabled() -> bool:
    """Whether the fast paths may run here (not in ``disabled()``, ``NORMLAB_KERNELS`` unset)."""
    return _ENV_ON and _DISABLED["depth"] == 0


def check_backend(backend: str) -> str:
    """``backend`` if it is one of :data:`BACKENDS`, else a ValueError saying the choices."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}.")
    return backend


def device_ready(kind: str) -> bool:
    """Whether device type ``kind`` has a kernel library, decided once per process."""
    ready = _READY.get(kind)
    if ready is None:
        if torch.compiler.is_compiling():  # the op decides when it runs (_ops.backend)
            return kind in ("cpu", "cuda")
        if kind == "cpu":
            from normlab.kernels import cpu

            ready = cpu.library() is not None
        else:
            ready = kind == "cuda" and importlib.util.find_spec("triton") is not None
            ready = ready and torch.cuda.is_available()
        _READY[kind] = ready
    return ready


def available(device: str | torch.device = "cpu") -> bool:
    """Whether a fast path exists on ``device`` (builds the CPU library if needed).

    The answer is decided once per process, by the first call of a kernel or of this
    function. A model compiled before that holds normlab's custom ops all the same; they
    load the library when they first run (and compute in plain torch where it is missing).
    """
    return device_ready(torch.device(device).type)


def _applies(x: torch.Tensor, *params: torch.Tensor | None, d: int | None = None) -> bool:
    if not enabled() or type(x) not in _PLAIN or x.dim() == 0:
        return False
    if x.device.type == "cuda" and (d if d is not None else x.shape[-1]) > _MAX_CUDA_D:
        return False
    if torch._C._are_functorch_transforms_active():
        return False
    kind = x.device.type
    if kind == "cpu":
        from normlab.kernels.cpu import DTYPES

        ok = x.dtype in DTYPES
    else:
        ok = kind == "cuda" and x.dtype in _CUDA_DTYPES
    for p in params:
        if p is not None and (type(p) not in _PLAIN or p.device != x.device):
            return False
    return ok and device_ready(kind)


def _grad(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd will record this call (else the kernels run without a graph)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _f32(p: torch.Tensor | None) -> torch.Tensor | None:
    """A parameter as the kernels read it: detached, flat, contiguous float32."""
    if p is None:
        return None
    if p.dtype == torch.float32 and p.dim() == 1 and p.is_contiguous():
        return p.detach()  # as it is (the general form costs ~4 us in three calls)
    return p.detach().reshape(-1).to(torch.float32).contiguous()
