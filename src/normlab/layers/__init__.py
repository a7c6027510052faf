"""Normalization layers (kind "norm"), each a thin module over ``normlab.functional``."""

from normlab.layers.dyt import DyT, llm_alpha_init
from normlab.layers.hypersphere import (
    HypersphereNorm,
    HypersphereResidual,
    LearnedScale,
    NormalizedLinear,
    renormalize_weights_,
)
from normlab.layers.norms import LayerNorm, RMSNorm

__all__ = [
    "DyT",
    "HypersphereNorm",
    "HypersphereResidual",
    "LayerNorm",
    "LearnedScale",
    "NormalizedLinear",
    "RMSNorm",
    "llm_alpha_init",
    "renormalize_weights_",
]
