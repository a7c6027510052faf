"""PG-OP: a position-gated output projection for multi-head attention.

After multi-head attention, the output projection sums the heads' outputs, ``y_t = sum_h
W_O^h o_{t,h}``, so a head's contribution cannot be attributed from the mixed signal (the
seed "affine-rank" calls this head-channel non-identifiability). PG-OP multiplies each
head's output at each position by a learned gain before the projection,

    y_t = W_O [g_{t,1} o_{t,1}; ...; g_{t,H} o_{t,H}] + b,   g_{t,h} = 1 + G_{t,h},

with ``G`` initialised to 0 (so PG-OP starts as the plain projection). Its extra parameters
are ``max_positions x heads``, below 1.6% of the projection's ``d^2 + d`` for the seed's
settings (BERT-base: 512 x 12 / (768^2 + 768) = 1.04%). The gate profiles ``g_{:,h}`` give
each head a position signature, which is what can break the symmetry between heads; how
far they do is measured by :func:`gate_identifiability`. The parameterisation ``1 + G`` is
normlab's reading of the abstract (which gives only the name and the overhead bound).
"""

from __future__ import annotations

import torch
from torch import nn

from normlab._checks import check_trailing_shape

__all__ = ["PositionGatedOutput", "gate_identifiability"]


class PositionGatedOutput(nn.Module):
    """Output projection with a per-position, per-head gain ``1 + G[t, h]`` (PG-OP).

    Takes the heads' concatenated outputs ``(batch, tokens, dim)`` (head ``h`` in channels
    ``h * dim / heads`` to ``(h + 1) * dim / heads``), as :class:`MultiheadAttention`'s
    ``out`` projection does, and returns ``(batch, tokens, dim)``.

    Args:
        dim: model width ``d``.
        heads: number of heads ``H`` (divides ``dim``).
        max_positions: longest sequence; one gate row per position.
        bias: bias of the projection.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        max_positions: int,
        *,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if heads <= 0 or dim % heads:
            raise ValueError(f"heads must be a positive divisor of dim={dim}, got {heads}.")
        if max_positions <= 0:
            raise ValueError(f"max_positions must be positive, got {max_positions}.")
        factory = {"device": device, "dtype": dtype}
        self.dim, self.heads, self.max_positions = dim, heads, max_positions
        self.proj = nn.Linear(dim, dim, bias=bias, **factory)
        self.gate = nn.Parameter(torch.zeros(max_positions, heads, **factory))

    def reset_parameters(self) -> None:
        """The projection to torch's default and the gate offsets ``G`` to 0."""
        self.proj.reset_parameters()
        nn.init.zeros_(self.gate)

    @property
    def overhead(self) -> float:
        """Gate parameters over the projection's parameters."""
        return self.gate.numel() / sum(p.numel() for p in self.proj.parameters())

    def gains(self, tokens: int) -> torch.Tensor:
        """``g = 1 + G`` for the first ``tokens`` positions, shape ``(tokens, heads)``."""
        if tokens > self.max_positions:
            raise ValueError(
                f"{tokens} tokens exceed max_positions={self.max_positions}; build PG-OP "
                "with a larger max_positions."
            )
        return 1.0 + self.gate[:tokens]

    def forward(self, heads_out: torch.Tensor) -> torch.Tensor:
        if heads_out.dim() != 3:
            raise ValueError(
                f"PositionGatedOutput expects (batch, tokens, dim), got {tuple(heads_out.shape)}."
            )
        check_trailing_shape(heads_out, (self.dim,))
        b, n, _ = heads_out.shape
        split = heads_out.view(b, n, self.heads, self.dim // self.heads)
        gated = split * self.gains(n).to(split.dtype)[None, :, :, None]
        return self.proj(gated.reshape(b, n, self.dim))

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, heads={self.heads}, max_positions={self.max_positions}, "
            f"overhead={self.overhead:.2%}"
        )


def gate_identifiability(gains: torch.Tensor) -> float:
    """``sigma_min / sigma_max`` of the ``(tokens, heads)`` gain matrix.

    If each head's contribution were the same vector at every position, the mixed output
    would be ``Y = g V`` with ``V`` the heads' contributions: they are recoverable from ``Y``
    exactly when ``g`` has full column rank, and stably in proportion to this ratio. The
    plain projection (``g = 1``) gives 0: only the sum of the heads is identifiable.
    """
    s = torch.linalg.svdvals(gains.detach().double())
    return float(s[-1] / s[0]) if s[0] > 0 else 0.0
