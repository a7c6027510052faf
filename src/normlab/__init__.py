"""normlab: normalization methods for deep learning, and the instruments to judge them.

Every method is registered by name::

    import normlab
    norm = normlab.create("rmsnorm", 512)
    normlab.methods(kind="score")
"""

from normlab import (  # noqa: F401  (optim registers StableGrad, MACRO)
    attention,
    flows,
    functional,
    layers,
    optim,
    probes,
    quant,
    rl,
    series,
    ssl,
    surgery,
    wrappers,
)
from normlab._registry import KINDS, Method, create, get, methods, register

__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "Method",
    "__version__",
    "attention",
    "create",
    "functional",
    "get",
    "layers",
    "methods",
    "probes",
    "quant",
    "register",
    "series",
    "surgery",
]
