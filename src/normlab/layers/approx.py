"""Guaranteed-normalization approximations: an approximate LayerNorm module.

The approximate softmax of the same paper is a score normalizer, registered as
"approx-softmax" in :mod:`normlab.attention.scores`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from normlab import functional as NF
from normlab._registry import Method, register
from normlab.layers.norms import _AffineNorm
from normlab.papers import paper

__all__ = ["ApproxLayerNorm"]

_T = TypeVar("_T")


class ApproxLayerNorm(_AffineNorm):
    """LayerNorm with a table-plus-Newton ``1/sqrt`` and a guaranteed unit std.

    ``y = (x - mu) r (3 - u) / 2 * weight + bias`` with ``r`` an approximate
    ``1/sqrt(var + eps)`` (exponent halving, a ``2^table_bits``-entry table, ``newton_steps``
    Newton steps) and ``u = (var + eps) r^2`` measured on the output, so the output's
    standard deviation equals exact LayerNorm's to within ``3 (u - 1)^2 / 8`` (seed
    "Hardware-Efficient Softmax and LayerNorm with Guaranteed Normalization for Edge
    Devices"; the datapath is normlab's, see :func:`normlab.functional.approx_layer_norm`).

    Args:
        normalized_shape: size of the trailing dimension(s) to normalize over.
        eps: added to the variance.
        elementwise_affine: learn a per-feature weight (and bias).
        bias: learn a bias when ``elementwise_affine``.
        newton_steps: Newton steps of the inverse square root.
        table_bits: the inverse-square-root table has ``2^table_bits`` entries.
        renormalize: rescale by the measured output variance (the guarantee).

    Examples:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(4, 16)
        >>> ln = ApproxLayerNorm(16, newton_steps=0)
        >>> torch.allclose(ln(x).std(-1, correction=0), torch.ones(4), atol=1e-4)
        True
        >>> ln.approximation_error(x) < 1e-3
        True
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        *,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        newton_steps: int = 1,
        table_bits: int = 5,
        renormalize: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if not isinstance(newton_steps, int) or newton_steps < 0:
            raise ValueError(f"newton_steps must be a non-negative int, got {newton_steps!r}.")
        if not isinstance(table_bits, int) or not 0 <= table_bits <= 16:
            raise ValueError(f"table_bits must be an int in [0, 16], got {table_bits!r}.")
        self.eps = eps
        self.newton_steps = newton_steps
        self.table_bits = table_bits
        self.renormalize = renormalize
        super().__init__(normalized_shape, elementwise_affine, bias, device, dtype)

    def _call(self, fn: Callable[..., _T], x: torch.Tensor) -> _T:
        """``fn`` (the approximation or its error) on ``x`` with this layer's settings."""
        return fn(
            x,
            self.normalized_shape,
            self.weight,
            self.bias,
            self.eps,
            newton_steps=self.newton_steps,
            table_bits=self.table_bits,
            renormalize=self.renormalize,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(NF.approx_layer_norm, x)

    def approximation_error(self, x: torch.Tensor) -> float:
        """Largest ``|self(x) - LayerNorm(x)|`` with the same weight, bias and eps."""
        return self._call(NF.layer_norm_approximation_error, x)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, newton_steps={self.newton_steps}, "
            f"table_bits={self.table_bits}, renormalize={self.renormalize}"
        )


register(
    Method(
        "approx-layernorm",
        "norm",
        ApproxLayerNorm,
        paper("guaranteed-approx"),
        "LayerNorm with table + Newton rsqrt, rescaled so the output std is exactly LN's",
        aliases=("approx_ln",),
    )
)
