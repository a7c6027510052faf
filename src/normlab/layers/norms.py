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


def _offset(offset: float, zero_centered: bool) -> float:
    """The gain offset: ``zero_centered=True`` is ``offset=1.0`` under TransformerEngine's name."""
    if zero_centered and offset not in (0.0, 1.0):
        raise ValueError(
            f"zero_centered=True means offset=1.0; got offset={offset}. Pass one of them."
        )
    return 1.0 if zero_centered else float(offset)


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


class _GainNorm(_AffineNorm):
    """LayerNorm and RMSNorm: the gain ``weight + offset`` and the residual-in form."""

    offset: float

    def reset_parameters(self) -> None:
        """Weight to ``1 - offset`` (a gain of 1; zeros when zero-centred) and bias to zeros."""
        _reset_affine(self)
        if self.weight is not None and self.offset:
            with torch.no_grad():
                self.weight.sub_(self.offset)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``norm(x)``; with ``residual``, ``(norm(x + residual), x + residual)``.

        The residual form is the pre-norm step ``h = h + f(h); y = norm(h)`` as one call
        (vLLM's ``RMSNorm.forward(x, residual)``): on the kernel path the add is fused into
        the norm, which reads ``x`` and ``residual`` once. It returns the normalized sum and
        the new residual stream.
        """
        kernel = self.backend == "kernel"
        if residual is None:
            return self._norm(x, kernel)
        return self._add_norm(x, residual, kernel)

    def extra_repr(self) -> str:
        offset = f", offset={self.offset}" if self.offset else ""
        return super().extra_repr() + offset


class LayerNorm(_GainNorm):
    r"""Layer normalization: ``(x - mean) / sqrt(var + eps) * (weight + offset) + bias``.

    $$y = \frac{x - \mu(x)}{\sqrt{\sigma^2(x) + \epsilon}} \odot (w + o) + b$$

    Same signature, defaults and numbers as ``torch.nn.LayerNorm`` (Ba et al., 2016);
    half-precision inputs are normalized in float32 and cast back, and a float32 weight
    with a bfloat16/float16 input is applied in float32. ``forward(x, residual)`` adds the
    residual first and returns ``(normed, x + residual)`` (see ``forward``).

    Args:
        normalized_shape: size of the trailing dimension(s) to normalize over.
        eps: added to the variance.
        elementwise_affine: learn a per-feature weight (and bias).
        bias: learn a bias when ``elementwise_affine``.
        offset: added to the weight to form the gain ``w + offset`` in float32; the weight
            starts at ``1 - offset``, so the gain starts at 1.
        zero_centered: the weight is the gain's deviation from 1 (``offset=1.0``, weight
            initialised to zeros; TransformerEngine's ``zero_centered_gamma``), which keeps
            weight decay pulling the gain towards 1 rather than 0.
        backend: ``"kernel"`` runs normlab's fused kernel where it applies
            (:mod:`normlab.kernels`), ``"torch"`` always the plain torch formula.

    Example:
        >>> import torch
        >>> ln = LayerNorm(8, backend="torch")
        >>> y = ln(torch.randn(2, 8))
        >>> bool(y.mean(-1).abs().max() < 1e-5)
        True
        >>> y, h = LayerNorm(8, zero_centered=True)(torch.ones(2, 8), residual=torch.randn(2, 8))
        >>> y.shape, h.shape
        (torch.Size([2, 8]), torch.Size([2, 8]))
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
        offset: float = 0.0,
        zero_centered: bool = False,
        backend: str = "kernel",
    ) -> None:
        self.eps, self.backend = eps, K.check_backend(backend)
        self.offset = _offset(offset, zero_centered)
        super().__init__(normalized_shape, elementwise_affine, bias, device, dtype)

    def _norm(self, x: torch.Tensor, kernel: bool) -> torch.Tensor:
        fn = K.layer_norm if kernel else NF.layer_norm
        return fn(x, self.normalized_shape, self.weight, self.bias, self.eps, offset=self.offset)

    def _add_norm(
        self, x: torch.Tensor, residual: torch.Tensor, kernel: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        fn = K.add_layer_norm if kernel else NF.add_layer_norm
        shape, w, b = self.normalized_shape, self.weight, self.bias
        return fn(x, residual, shape, w, b, self.eps, offset=self.offset)


class RMSNorm(_GainNorm):
    r"""Root-mean-square normalization: ``x / sqrt(mean(x^2) + eps) * (weight + offset)``.

    $$y = \frac{x}{\sqrt{\frac{1}{d}\sum_i x_i^2 + \epsilon}} \odot (w + o)$$

    Same signature, defaults and numbers as ``torch.nn.RMSNorm`` (Zhang & Sennrich, 2019):
    ``eps=None`` means the machine epsilon of the input dtype. ``offset=1.0`` (or
    ``zero_centered=True``) is Gemma's ``1 + w`` gain, formed in float32 even for bfloat16
    inputs (where ``1 + 0.0039`` would round to 1). ``forward(x, residual)`` adds the
    residual first and returns ``(normed, x + residual)`` (see ``forward``).

    Args:
        normalized_shape: size of the trailing dimension(s) to normalize over.
        eps: added to the mean square; ``None`` for ``torch.finfo(x.dtype).eps``.
        elementwise_affine: learn a per-feature weight.
        offset: added to the weight to form the gain ``w + offset`` in float32; the weight
            starts at ``1 - offset``, so the gain starts at 1.
        zero_centered: ``offset=1.0`` with the weight initialised to zeros (Gemma;
            TransformerEngine's ``zero_centered_gamma``).
        backend: ``"kernel"`` runs normlab's fused kernel where it applies
            (:mod:`normlab.kernels`), ``"torch"`` always the plain torch formula.

    Example:
        >>> import torch
        >>> rms = RMSNorm(8, backend="kernel")
        >>> y = rms(torch.full((2, 8), 3.0))
        >>> bool(torch.allclose(y, torch.ones(2, 8)))
        True
        >>> gemma = RMSNorm(8, zero_centered=True)  # weight zeros, gain 1 + w
        >>> float(gemma.weight.abs().sum()), bool(torch.allclose(gemma(3 * y), y))
        (0.0, True)
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        offset: float = 0.0,
        zero_centered: bool = False,
        backend: str = "kernel",
    ) -> None:
        self.eps, self.backend = eps, K.check_backend(backend)
        self.offset = _offset(offset, zero_centered)
        super().__init__(normalized_shape, elementwise_affine, False, device, dtype)

    def _norm(self, x: torch.Tensor, kernel: bool) -> torch.Tensor:
        fn = K.rms_norm if kernel else NF.rms_norm
        return fn(x, self.normalized_shape, self.weight, self.eps, offset=self.offset)

    def _add_norm(
        self, x: torch.Tensor, residual: torch.Tensor, kernel: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        fn = K.add_rms_norm if kernel else NF.add_rms_norm
        return fn(x, residual, self.normalized_shape, self.weight, self.eps, offset=self.offset)


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
