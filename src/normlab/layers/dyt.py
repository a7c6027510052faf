"""Dynamic Tanh (DyT): a learned, bounded replacement for LayerNorm."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import nn

from normlab import functional as NF
from normlab import kernels as K
from normlab._checks import check_trailing_shape
from normlab._registry import Method, register
from normlab.layers.norms import _AffineNorm
from normlab.papers import paper

__all__ = ["DyT", "llm_alpha_init"]


class DyT(_AffineNorm):
    """Dynamic Tanh: ``y = weight * tanh(alpha * x) + bias``.

    Zhu et al. (2025) replace every LayerNorm by this element-wise map; the regime study
    (seed "DyT as a Regime-Dependent Implicit Regularizer") shows it acts as a regularizer
    whose sign depends on the data budget, measurable by :meth:`saturation`.

    Args:
        normalized_shape: feature size(s) of the per-feature weight and bias.
        alpha_init: initial value of the scalar ``alpha`` (0.5 in the DyT paper; the regime
            study uses 2.0; LLM variants set it per site, see :func:`llm_alpha_init`).
        elementwise_affine: learn the per-feature ``weight`` (and ``bias``).
        bias: learn a bias when ``elementwise_affine``.
        backend: ``"kernel"`` runs normlab's fused kernel where it applies
            (:mod:`normlab.kernels`), ``"torch"`` always the plain torch formula.

    Examples:
        >>> import torch
        >>> dyt = DyT(4, alpha_init=0.5)
        >>> x = torch.tensor([[0.0, 2.0, -2.0, 100.0]])
        >>> [round(v, 4) for v in dyt(x).tolist()[0]]
        [0.0, 0.7616, -0.7616, 1.0]
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        *,
        alpha_init: float = 0.5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        backend: str = "kernel",
    ) -> None:
        self.alpha_init = float(alpha_init)
        self.backend = K.check_backend(backend)
        # weight and bias are the affine norms' own (shape checks, init, factory kwargs)
        super().__init__(normalized_shape, elementwise_affine, bias, device, dtype)
        self.alpha = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        nn.init.constant_(self.alpha, self.alpha_init)

    def reset_parameters(self) -> None:
        """``alpha`` to ``alpha_init``, weight to ones, bias to zeros."""
        super().reset_parameters()
        alpha = getattr(self, "alpha", None)  # absent while the base class builds
        if alpha is not None:
            nn.init.constant_(alpha, self.alpha_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_trailing_shape(x, self.normalized_shape)
        fn = K.dyt if self.backend == "kernel" else NF.dyt
        return fn(x, self.alpha, self.weight, self.bias)

    def saturation(self, x: torch.Tensor, threshold: float = 2.0) -> float:
        """Fraction of ``x``'s entries with ``|alpha * x| > threshold`` (no gradient)."""
        return float(NF.dyt_saturation(x, self.alpha, threshold))

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, alpha_init={self.alpha_init}, "
            f"elementwise_affine={self.elementwise_affine}"
            + ("" if self.backend == "kernel" else f", backend={self.backend!r}")
        )


def llm_alpha_init(site: str, *, attention: float = 0.8, other: float = 0.2) -> float:
    """Per-site ``alpha`` for DyT in LLMs: ``attention`` before attention, else ``other``.

    The DyT paper's LLaMA setting initialises the norms in front of attention higher (0.8)
    than those in front of the feed-forward block and the final norm (0.2). A site counts as
    "attention" when its qualified module name mentions ``attn``/``attention`` or is the
    first norm of a block (``ln_1``, ``norm1``, ``input_layernorm``).

    Examples:
        >>> llm_alpha_init("model.layers.0.input_layernorm"), llm_alpha_init("model.norm")
        (0.8, 0.2)
    """
    lowered = site.lower()
    markers = ("attn", "attention", "ln_1", "norm1", "input_layernorm")
    return attention if any(m in lowered for m in markers) else other


register(
    Method(
        "dyt",
        "norm",
        DyT,
        paper("dyt-original"),
        "weight * tanh(alpha * x) + bias, alpha learned (init 0.5)",
        aliases=("dynamic_tanh",),
    )
)
register(
    Method(
        "dyt-regime",
        "norm",
        functools.partial(DyT, alpha_init=2.0),
        paper("dyt"),
        "DyT preset of the regime study: alpha initialised at 2.0",
    )
)
