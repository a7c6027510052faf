"""Normalization done by the optimizer (kind "optim"): StableGrad and MACRO.

:class:`StableGrad` wraps any optimizer and equalises each layer's weight-gradient std
before the step; :class:`MACRO` keeps weight matrices on a sphere or oblique manifold,
standing in for RMSNorm and weight decay.
"""

from normlab.optim.macro import (
    MACRO,
    MANIFOLDS,
    MUON_COEFFICIENTS,
    msign,
    project_,
    retract_,
    tangent,
)
from normlab.optim.stablegrad import REFERENCES, StableGrad, rescale_weight_grads_

__all__ = [
    "MACRO",
    "MANIFOLDS",
    "MUON_COEFFICIENTS",
    "REFERENCES",
    "StableGrad",
    "msign",
    "project_",
    "rescale_weight_grads_",
    "retract_",
    "tangent",
]
