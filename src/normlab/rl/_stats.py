"""Reward checks and overflow-free group statistics shared by the advantage methods.

Every statistic is computed on rewards divided by a power of two near their magnitude
(``x = r / s``, exact in floating point), so no sum or square overflows however large the
rewards are (``1e19`` squared already overflows float32). NaN marks an unscorable sample
(TRL: every reward function returned ``None``): it is left out of every count, mean and std.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from normlab.functional._precision import upcast

__all__ = [
    "Moments",
    "check_rewards",
    "group_index",
    "group_moments",
    "pow2_scale",
    "safe_div",
]


def check_rewards(rewards: torch.Tensor, max_dim: int = 2) -> torch.Tensor:
    """``rewards`` as a float tensor ready for statistics, or a clear error.

    Integer and bool rewards are cast to the default float dtype; float16/bfloat16 are
    computed in float32. NaN is allowed (an unscorable sample); +-inf is refused.

    Raises:
        TypeError: ``rewards`` is not a tensor, or is complex.
        ValueError: wrong rank, or an infinite reward (the message gives its index).
    """
    if not isinstance(rewards, torch.Tensor):
        raise TypeError(
            f"rewards must be a torch.Tensor of shape (N,) or (N, K), got "
            f"{type(rewards).__name__}; wrap it with torch.as_tensor(...)."
        )
    if rewards.is_complex():
        raise TypeError(f"rewards must be real, got dtype {rewards.dtype}.")
    if not 1 <= rewards.ndim <= max_dim:
        shapes = "(N,) or (N, K)" if max_dim == 2 else "(N,)"
        raise ValueError(f"rewards has shape {tuple(rewards.shape)}; expected {shapes}.")
    if rewards.ndim == 2 and rewards.shape[1] == 0:
        raise ValueError("rewards has no reward columns (shape (N, 0)); pass (N,) or (N, K >= 1).")
    r = upcast(rewards) if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())
    inf = torch.isinf(r)
    if bool(inf.any()):
        where = tuple(int(i) for i in inf.nonzero()[0])
        index = where[0] if len(where) == 1 else where
        raise ValueError(
            f"rewards[{index}] is {float(r[where]):+}; advantages need finite rewards. Clip it "
            "to a finite bound, or set it to NaN to mark the sample unscorable (advantage 0, "
            "left out of its group's statistics, as TRL does for a reward of None)."
        )
    return r


def group_index(groups: torch.Tensor | Sequence[int] | int, n: int) -> torch.Tensor:
    """Dense group ids ``0..G-1`` (int64, shape ``(n,)``) from ids or a group size.

    Args:
        groups: a group id per sample (any integers), or an int ``g``: consecutive groups of
            ``g`` samples, TRL's ``num_generations`` layout.
        n: the number of samples.
    """
    if n == 0:
        raise ValueError("advantages got no rewards; pass at least one sample per group.")
    if isinstance(groups, int) and not isinstance(groups, bool):
        if groups < 1 or n % groups:
            raise ValueError(
                f"A group size of {groups} does not divide {n} rewards; pass a size that "
                "divides the batch (TRL's num_generations) or a group id per sample."
            )
        return torch.arange(n) // groups
    ids = torch.as_tensor(groups)
    if ids.shape != (n,):
        raise ValueError(
            f"groups has shape {tuple(ids.shape)}; expected one id per reward ({n},)."
        )
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"Group ids must be integers; got dtype {ids.dtype}.")
    return torch.unique(ids.cpu(), return_inverse=True)[1].to(ids.device)


def pow2_scale(absmax: torch.Tensor) -> torch.Tensor:
    """A power of two ``s`` with ``absmax / s`` in ``[1, 2)`` (1 where ``absmax`` is 0)."""
    _, e = torch.frexp(absmax)  # absmax = m 2^e, m in [0.5, 1): s = 2^(e-1) never overflows
    s = torch.ldexp(torch.ones_like(absmax), e - 1)
    return torch.where(absmax > 0, s, torch.ones_like(s))


class Moments(NamedTuple):
    """Per-sample scaled statistics of its group: ``r = s x``, mean ``s mu``, std ``s sd``."""

    x: torch.Tensor
    mu: torch.Tensor
    sd: torch.Tensor
    s: torch.Tensor
    count: torch.Tensor


def group_moments(r: torch.Tensor, gid: torch.Tensor) -> Moments:
    """Scaled group mean and Bessel std of ``r`` over its non-NaN entries, per sample.

    A group with fewer than two scorable samples has ``sd = 0``; one with none has
    ``mu = 0``. The mean gets one correction pass, so a constant group has ``x == mu``.
    """
    g = int(gid.max()) + 1
    ok = ~torch.isnan(r)
    zeros = torch.zeros(g, dtype=r.dtype, device=r.device)
    absmax = zeros.scatter_reduce(0, gid, torch.where(ok, r.abs(), 0), "amax")
    s = pow2_scale(absmax)[gid]
    x = r / s
    xv = torch.where(ok, x, 0)
    count = zeros.index_add(0, gid, ok.to(r.dtype))
    mu = (zeros.index_add(0, gid, xv) / count.clamp_min(1))[gid]
    mu = mu + (zeros.index_add(0, gid, torch.where(ok, x - mu, 0)) / count.clamp_min(1))[gid]
    dev = torch.where(ok, x - mu, 0)
    ss = zeros.index_add(0, gid, dev * dev)
    sd = torch.where(count > 1, ss / (count - 1).clamp_min(1), 0).sqrt()
    return Moments(x, mu, sd[gid], s, count[gid])


def safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den``, 0 where ``den == 0`` (a group with no spread and ``eps = 0``)."""
    return torch.where(den > 0, num / torch.where(den > 0, den, 1), 0)
