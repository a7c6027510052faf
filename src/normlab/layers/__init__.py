"""Normalization layers (kind "norm"), each a thin module over ``normlab.functional``."""

from normlab.layers.activations import ZCSwish
from normlab.layers.approx import ApproxLayerNorm
from normlab.layers.dyt import DyT, llm_alpha_init
from normlab.layers.hypersphere import (
    HypersphereNorm,
    HypersphereResidual,
    LearnedScale,
    NGPTBlock,
    NormalizedLinear,
    renormalize_weights_,
)
from normlab.layers.norms import LayerNorm, RMSNorm
from normlab.layers.quadrature import QuadNorm
from normlab.layers.riemannian import HPDBatchNorm, SiegelBatchNorm
from normlab.layers.scaling import AdaptiveScaling

__all__ = [
    "AdaptiveScaling",
    "ApproxLayerNorm",
    "DyT",
    "HPDBatchNorm",
    "HypersphereNorm",
    "HypersphereResidual",
    "LayerNorm",
    "LearnedScale",
    "NGPTBlock",
    "NormalizedLinear",
    "QuadNorm",
    "RMSNorm",
    "SiegelBatchNorm",
    "ZCSwish",
    "llm_alpha_init",
    "renormalize_weights_",
]
