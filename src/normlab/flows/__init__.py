"""Normalizing-flow layers (kind "flow"): the circulant-diagonal linear layer of CDFlow, its
zuko transform, and CDFlow built from zuko's couplings."""

from normlab.flows.circulant import (
    CirculantDiagonalLinear,
    CirculantDiagonalTransform,
    LazyCirculantDiagonal,
    cd_forward,
    cd_inverse,
    cd_logabsdet,
    cd_matrix,
)
from normlab.flows.flow import (
    MIXINGS,
    ActNorm,
    LazyLULinear,
    cdflow,
    initialize_actnorm,
    mixing_parameters,
)

__all__ = [
    "MIXINGS",
    "ActNorm",
    "CirculantDiagonalLinear",
    "CirculantDiagonalTransform",
    "LazyCirculantDiagonal",
    "LazyLULinear",
    "cd_forward",
    "cd_inverse",
    "cd_logabsdet",
    "cd_matrix",
    "cdflow",
    "initialize_actnorm",
    "mixing_parameters",
]
