"""Rounding helpers for emulating low-precision arithmetic on the CPU."""

from __future__ import annotations

import torch

__all__ = ["pairwise_sum", "round_to", "unit_roundoff"]


def unit_roundoff(dtype: torch.dtype) -> float:
    """``u = eps / 2`` of a floating dtype (2^-11 for fp16, 2^-8 for bf16).

    Examples:
        >>> unit_roundoff(torch.float16) == 2**-11, unit_roundoff(torch.bfloat16) == 2**-8
        (True, True)
    """
    return torch.finfo(dtype).eps / 2


def pairwise_sum(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum over the last axis in ``dtype``, rounding after every pairwise level.

    Each addition is done exactly in float64 and rounded once to ``dtype``, i.e. IEEE
    arithmetic in ``dtype`` (a tree reduction, as on GPUs).
    """
    x = x.to(dtype)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = torch.cat([x, torch.zeros_like(x[..., :1])], dim=-1)
        x = (x[..., 0::2].double() + x[..., 1::2].double()).to(dtype)
    return x[..., 0]


def round_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` rounded to ``dtype`` and held in float64 for the next exact operation."""
    return x.to(dtype).double()
