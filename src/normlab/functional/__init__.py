"""Pure tensor functions behind every normlab layer.

Each module under ``normlab.layers`` and ``normlab.attention`` is a thin wrapper over one of
these functions, so they can be used without building a module.
"""

from normlab.functional.norms import dyt, dyt_saturation, l2_normalize, layer_norm, rms_norm
from normlab.functional.scores import clipped_softmax, null_mass, softmax, softmax1

__all__ = [
    "clipped_softmax",
    "dyt",
    "dyt_saturation",
    "l2_normalize",
    "layer_norm",
    "null_mass",
    "rms_norm",
    "softmax",
    "softmax1",
]
