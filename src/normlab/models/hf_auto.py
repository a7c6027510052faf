"""Hugging Face Auto classes for models that normlab transformed (folded, norms replaced).

A transformed Hugging Face model no longer fits its original architecture: LayerNorms are
RMSNorms or another registered norm, some linear layers gained a bias. normlab ships such a
model the way custom architectures are shipped:

- ``config.json`` gets ``model_type = "normlab_<base type>"``, ``architectures =
  ["Normlab<BaseClass>"]``, the recorded module changes under ``"normlab"`` and an
  ``auto_map`` pointing at a three-line ``normlab_auto.py`` in the folder;
- the weights are written as ``normlab.safetensors``, not ``model.safetensors``.

So the ordinary path either reproduces the transformed model exactly or refuses:

- ``AutoModelForCausalLM.from_pretrained(path)`` works after :func:`register_auto_classes`
  (``import normlab.models.hf_auto``), or with ``trust_remote_code=True`` through
  ``auto_map`` (normlab must be installed); without either it refuses (unknown model type /
  custom code needs ``trust_remote_code``);
- the original class (``GPT2LMHeadModel.from_pretrained(path)``), which only warns on a
  model-type mismatch, finds no ``model.safetensors`` and refuses instead of silently
  dropping the folded biases.

The folder is written by :func:`normlab.surgery.hf_format.save_hf` (``normlab.save``, or
``save_pretrained`` of any model normlab changed; see :mod:`normlab._marks`).
"""

from __future__ import annotations

import functools
from typing import Any

from torch import nn

from normlab._layouts import LAYOUTS
from normlab._marks import save_changed
from normlab.surgery.hf_format import AUTO_FILE, WEIGHTS_FILE, auto_class_name, auto_module_source
from normlab.surgery.structure import apply_structure

__all__ = [
    "AUTO_FILE",
    "FAMILIES",
    "WEIGHTS_FILE",
    "auto_class_name",
    "auto_module_source",
    "hf_classes",
    "register_auto_classes",
]

#: ``(model_type, model class)`` registered by :func:`register_auto_classes`: every
#: architecture of every family in :data:`normlab._layouts.LAYOUTS` (the table is data, so
#: a family added there is registered too).
FAMILIES = tuple((kind, arch) for kind, lay in LAYOUTS.items() for arch in lay.architectures)


@functools.cache
def _config_class(model_type: str) -> type:
    import transformers
    from transformers import AutoConfig

    base = transformers.CONFIG_MAPPING[model_type]

    def post_init(self: Any, **kwargs: Any) -> None:
        base.__post_init__(self, **kwargs)
        self.transformers_weights = WEIGHTS_FILE  # read on load, never serialized

    attrs: dict[str, Any] = {"model_type": "normlab_" + model_type, "__post_init__": post_init}
    cls = type(f"Normlab{base.__name__}", (base,), attrs)
    AutoConfig.register("normlab_" + model_type, cls, exist_ok=True)
    return cls


@functools.cache
def hf_classes(model_type: str, arch: str) -> tuple[type, type]:
    """``(config class, model class)`` of normlab's version of the Hugging Face ``arch``.

    The config class is the base config with ``model_type = "normlab_<model_type>"``; the
    model class builds the base model and then replays ``config.normlab["structure"]`` (the
    recorded module changes, :func:`normlab.surgery.structure.apply_structure`), so the
    transformed state dict loads into it exactly. Its ``save_pretrained`` writes normlab's
    format again (:func:`normlab._marks.save_changed`), so a reloaded model saved the usual
    way stays loadable. Both are registered with the Auto classes.
    """
    import transformers

    config_cls = _config_class(model_type)
    base_model = getattr(transformers, arch)

    def model_init(self: nn.Module, config: Any, *args: Any, **kwargs: Any) -> None:
        base_model.__init__(self, config, *args, **kwargs)
        record = getattr(config, "normlab", None) or {}
        apply_structure(self, record.get("structure", {}))

    def save_pretrained(self: nn.Module, save_directory: Any, **kwargs: Any) -> None:
        save_changed(self, save_directory, **kwargs)  # normlab's format again, never plain

    attrs = {
        "config_class": config_cls,
        "__init__": model_init,
        "save_pretrained": save_pretrained,
    }
    model_cls = type(f"Normlab{arch}", (base_model,), attrs)
    getattr(transformers, auto_class_name(arch)).register(config_cls, model_cls, exist_ok=True)
    return config_cls, model_cls


def register_auto_classes() -> None:
    """Register normlab's classes for every architecture in :data:`FAMILIES` with the Auto
    classes, so ``AutoModelForCausalLM.from_pretrained`` loads transformed checkpoints."""
    for kind, lay in LAYOUTS.items():
        for arch in lay.architectures:
            hf_classes(kind, arch)
