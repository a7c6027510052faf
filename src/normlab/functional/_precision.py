"""Low-precision inputs are computed in float32 and cast back, as torch's norms do."""

from __future__ import annotations

import torch

__all__ = ["compute_dtype", "upcast"]

_LOW = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision dtypes, else ``dtype`` itself."""
    return torch.float32 if dtype in _LOW else dtype


def upcast(x: torch.Tensor) -> torch.Tensor:
    """``x`` in its compute dtype (a no-op unless ``x`` is float16 or bfloat16)."""
    return x.to(compute_dtype(x.dtype))
