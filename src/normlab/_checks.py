"""Input checks shared by every family, with messages that say how to fix the input."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "check_finite",
    "check_float",
    "check_min_rank",
    "check_positive_int",
    "check_trailing_shape",
]


def check_float(x: torch.Tensor, name: str = "input") -> None:
    """Raise TypeError unless ``x`` is a floating-point tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {x.dtype}; "
            f"convert it first, e.g. x.float()."
        )


def check_positive_int(value: object, name: str) -> None:
    """Raise ValueError unless ``value`` is an int >= 1 (a size, a count, a period)."""
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def check_trailing_shape(x: torch.Tensor, shape: Sequence[int], name: str = "input") -> None:
    """Raise ValueError unless the last ``len(shape)`` dimensions of ``x`` equal ``shape``."""
    shape = tuple(shape)
    if x.dim() < len(shape) or tuple(x.shape[x.dim() - len(shape) :]) != shape:
        raise ValueError(
            f"{name} of shape {tuple(x.shape)} does not end in the normalized shape {shape}; "
            f"the layer was built for {shape[-1] if shape else 0} features in the last "
            "dimension. Build it with the input's feature size or reshape the input."
        )


def check_min_rank(x: torch.Tensor, rank: int, layout: str, name: str = "input") -> None:
    """Raise ValueError when ``x`` has fewer than ``rank`` dimensions."""
    if x.dim() < rank:
        raise ValueError(
            f"{name} must have at least {rank} dimensions {layout}, got shape {tuple(x.shape)}."
        )


def check_finite(x: torch.Tensor, name: str = "input") -> None:
    """Raise ValueError when ``x`` holds NaN or infinity, saying where the first one is."""
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} holds {int(bad.sum())} NaN/inf value(s), the first at index {where}; "
            "fill or drop missing values before normalizing."
        )
