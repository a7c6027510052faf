"""Normalization layers (kind "norm"), each a thin module over ``normlab.functional``."""

from normlab.layers.activations import ZCSwish
from normlab.layers.approx import ApproxLayerNorm
from normlab.layers.dyt import DyT, llm_alpha_init
from normlab.layers.hypersphere import (
    HypersphereNorm,
    HypersphereResidual,
    LearnedScale,
    NormalizedLinear,
    renormalize_weights_,
)
from normlab.layers.norms import LayerNorm, RMSNorm
from normlab.layers.quadrature import BlendQuadNorm, QuadNorm

__all__ = [
    "ApproxLayerNorm",
    "BlendQuadNorm",
    "DyT",
    "HypersphereNorm",
    "HypersphereResidual",
    "LayerNorm",
    "LearnedScale",
    "NormalizedLinear",
    "QuadNorm",
    "RMSNorm",
    "ZCSwish",
    "llm_alpha_init",
    "renormalize_weights_",
]
