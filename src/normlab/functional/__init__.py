"""Pure tensor functions behind every normlab layer.

Each module under ``normlab.layers`` and ``normlab.attention`` is a thin wrapper over one of
these functions, so they can be used without building a module.
"""

from normlab.functional.activations import swish_gaussian_mean, zc_swish
from normlab.functional.approx import (
    approx_layer_norm,
    approx_reciprocal,
    approx_rsqrt,
    approx_softmax,
    layer_norm_approximation_error,
    softmax_approximation_error,
)
from normlab.functional.entropic import abe_softmax, kappa_exp, kappa_log, kappa_softmax
from normlab.functional.manifolds import (
    hermitian,
    hpd_exp,
    hpd_frechet_mean,
    hpd_geodesic,
    hpd_log,
    hpd_power,
    hpd_sqrt,
    hpd_transport,
    in_siegel_disk,
    is_hpd,
    siegel_exp0,
    siegel_frechet_mean,
    siegel_from_origin,
    siegel_log0,
    siegel_to_origin,
)
from normlab.functional.norms import dyt, dyt_saturation, l2_normalize, layer_norm, rms_norm
from normlab.functional.quadrature import (
    blend_quad_norm,
    quad_moments,
    quad_norm,
    quad_relative_error,
    quadrature_weights,
    quadrature_weights_1d,
)
from normlab.functional.residual import add_layer_norm, add_rms_norm
from normlab.functional.scores import clipped_softmax, null_mass, softmax, softmax1
from normlab.functional.sparse import entmax15, sparsemax

__all__ = [
    "abe_softmax",
    "add_layer_norm",
    "add_rms_norm",
    "approx_layer_norm",
    "approx_reciprocal",
    "approx_rsqrt",
    "approx_softmax",
    "blend_quad_norm",
    "clipped_softmax",
    "dyt",
    "dyt_saturation",
    "entmax15",
    "hermitian",
    "hpd_exp",
    "hpd_frechet_mean",
    "hpd_geodesic",
    "hpd_log",
    "hpd_power",
    "hpd_sqrt",
    "hpd_transport",
    "in_siegel_disk",
    "is_hpd",
    "kappa_exp",
    "kappa_log",
    "kappa_softmax",
    "l2_normalize",
    "layer_norm",
    "layer_norm_approximation_error",
    "null_mass",
    "quad_moments",
    "quad_norm",
    "quad_relative_error",
    "quadrature_weights",
    "quadrature_weights_1d",
    "rms_norm",
    "siegel_exp0",
    "siegel_frechet_mean",
    "siegel_from_origin",
    "siegel_log0",
    "siegel_to_origin",
    "softmax",
    "softmax1",
    "softmax_approximation_error",
    "sparsemax",
    "swish_gaussian_mean",
    "zc_swish",
]
