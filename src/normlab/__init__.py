"""normlab: normalization methods for deep learning, and the instruments to judge them.

Every method is registered by name::

    import normlab
    norm = normlab.create("rmsnorm", 512)
    normlab.methods(kind="score")
"""

import os
import pathlib

import torch

from normlab import (
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


def save(model: torch.nn.Module, path: str | os.PathLike[str]) -> pathlib.Path:
    """Write ``model`` (TinyGPT or Hugging Face, changed by normlab or not) to the folder
    ``path`` so that :func:`load` rebuilds it exactly; returns the folder
    (:func:`normlab.models.checkpoint.save_model`)."""
    from normlab.models.checkpoint import save_model

    return save_model(model, path)


def load(path: str | os.PathLike[str]) -> torch.nn.Module:
    """The model saved in folder ``path`` (normlab checkpoint, normlab-transformed or plain
    Hugging Face folder), in eval mode, with every recorded module change; its kind
    ("normlab" or "hf") is ``model.normlab_kind``
    (:func:`normlab.models.checkpoint.load_model`)."""
    from normlab.models.checkpoint import load_model

    return load_model(path)[0]


__version__ = "0.1.0"

__all__ = [
    "KINDS",
    "Method",
    "__version__",
    "attention",
    "create",
    "flows",
    "functional",
    "get",
    "layers",
    "load",
    "methods",
    "optim",
    "probes",
    "quant",
    "register",
    "rl",
    "save",
    "series",
    "ssl",
    "surgery",
    "wrappers",
]
