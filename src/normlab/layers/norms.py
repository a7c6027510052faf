"""LayerNorm and RMSNorm with torch's signatures, as thin modules over ``functional``."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from normlab import functional as NF
from normlab import kernels as K
from normlab._registry import Method, register
from normlab.papers import paper

__all__ = ["LayerNorm", "RMSNorm", "as_shape"]


def as_shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    """``normalized_shape`` as a tuple of positive ints, with a clear error otherwise.

    Examples:
        >>> as_shape(8), as_shape([4, 2])
        ((8,), (4, 2))
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or any(not isinstance(s, int) or s <= 0 for s in shape):
        raise ValueError(
            f"normalized_shape must be a positive int or a sequence of them, got "
            f"{normalized_shape!r}."
        )
    return shape


def _affine_parameters(
    module: nn.Module,
    shape: tuple[int, ...],
    affine: bool,
    bias: bool,
    device: torch.device | str | None,
    dtype: torch.dtype | None,
) -> None:
    """Give ``module`` a ``weight`` (and, with ``bias``, a ``bias``) of ``shape`` when
    ``affine``, uninitialised (see :func:`_reset_affine`); the absent ones are None."""
    factory = {"device": device, "dtype": dtype}
    if affine:
        module.weight = nn.Parameter(torch.empty(shape, **factory))
        module.bias = nn.Parameter(torch.empty(shape, **factory)) if bias else None
    else:
        module.register_parameter("weight", None)
        module.register_parameter("bias", None)


def _reset_affine(module: nn.Module) -> None:
    """``module.weight`` to ones and ``module.bias`` to zeros, those that exist."""
    if module.weight is not None:
        nn.init.ones_(module.weight)
    if module.bias is not None:
        nn.init.zeros_(module.bias)


class _AffineNorm(nn.Module):
    """Shared parameter handling of the affine per-feature norms."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        elementwise_affine: bool,
        bias: bool,
        device: torch.device | str | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.normalized_shape = as_shape(normalized_shape)
        self.elementwise_affine = elementwise_affine
        _affine_parameters(self, self.normalized_shape, elementwise_affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weight to ones and bias to zeros."""
        _reset_affine(self)

    def extra_repr(self) -> str:
        backend = "" if self.backend == "kernel" else f", backend={self.backend!r}"
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}{backend}"
        )


class LayerNorm(_AffineNorm):
    """Layer normalization: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    Same signature, defaults and numbers as ``torch.nn.LayerNorm`` (Ba et al., 2016);
    half-precision inputs are normalized in float32 and cast back.

    Args:
        normalized_shape: size of the trailing dimension(s) to normalize over.
        eps: added to the variance.
        elementwise_affine: learn a per-feature weight (and bias).
        bias: learn a bias when ``elementwise_affine``.
        backend: ``"kernel"`` runs normlab's fused kernel where it applies
            (:mod:`normlab.kernels`), ``"torch"`` always the plain torch formula.

    Example:
        >>> import torch
        >>> ln = LayerNorm(8, backend="torch")
        >>> y = ln(torch.randn(2, 8))
        >>> bool(y.mean(-1).abs().max() < 1e-5)
        True
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        backend: str = "kernel",
    ) -> None:
        self.eps, self.backend = eps, K.check_backend(backend)
        super().__init__(normalized_shape, elementwise_affine, bias, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fn = K.layer_norm if self.backend == "kernel" else NF.layer_norm
        return fn(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(_AffineNorm):
    """Root-mean-square normalization: ``x / sqrt(mean(x^2) + eps) * weight``.

    Same signature, defaults and numbers as ``torch.nn.RMSNorm`` (Zhang & Sennrich, 2019):
    ``eps=None`` means the machine epsilon of the input dtype.

    Args:
        normalized_shape: size of the trailing dimension(s) to normalize over.
        eps: added to the mean square; ``None`` for ``torch.finfo(x.dtype).eps``.
        elementwise_affine: learn a per-feature weight.
        backend: ``"kernel"`` runs normlab's fused kernel where it applies
            (:mod:`normlab.kernels`), ``"torch"`` always the plain torch formula.

    Example:
        >>> import torch
        >>> rms = RMSNorm(8, backend="kernel")
        >>> y = rms(torch.full((2, 8), 3.0))
        >>> bool(torch.allclose(y, torch.ones(2, 8)))
        True
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        backend: str = "kernel",
    ) -> None:
        self.eps, self.backend = eps, K.check_backend(backend)
        super().__init__(normalized_shape, elementwise_affine, False, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fn = K.rms_norm if self.backend == "kernel" else NF.rms_norm
        return fn(x, self.normalized_shape, self.weight, self.eps)


register(
    Method(
        "layernorm",
        "norm",
        LayerNorm,
        paper("layernorm"),
        "(x - mean) / std * weight + bias over the features",
        aliases=("ln", "layer_norm"),
    )
)
register(
    Method(
        "rmsnorm",
        "norm",
        RMSNorm,
        paper("rmsnorm"),
        "x / rms(x) * weight over the features",
        aliases=("rms", "rms_norm"),
    )
)
