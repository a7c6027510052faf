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
"""

from __future__ import annotations

import functools
from typing import Any

from torch import nn

from normlab.surgery.structure import apply_structure

__all__ = [
    "AUTO_FILE",
    "FAMILIES",
    "WEIGHTS_FILE",
    "auto_class_name",
    "hf_classes",
    "register_auto_classes",
]

#: Weights of a transformed Hugging Face model (not ``model.safetensors``; see above).
WEIGHTS_FILE = "normlab.safetensors"
#: The module ``auto_map`` points at.
AUTO_FILE = "normlab_auto.py"
#: ``(model_type, model class)`` registered by :func:`register_auto_classes`.
FAMILIES = (
    ("gpt2", "GPT2LMHeadModel"),
    ("gpt_neox", "GPTNeoXForCausalLM"),
    ("stablelm", "StableLmForCausalLM"),
    ("llama", "LlamaForCausalLM"),
    ("bert", "BertForMaskedLM"),
    ("bert", "BertModel"),
)


def auto_class_name(arch: str) -> str:
    """The Auto class that maps to the Hugging Face model class ``arch``."""
    from transformers.models.auto import modeling_auto as ma

    for mapping, auto in (
        (ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "AutoModelForCausalLM"),
        (ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES, "AutoModelForMaskedLM"),
        (ma.MODEL_MAPPING_NAMES, "AutoModel"),
    ):
        if arch in mapping.values():
            return auto
    return "AutoModel"


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
    transformed state dict loads into it exactly. Both are registered with the Auto classes.
    """
    import transformers

    config_cls = _config_class(model_type)
    base_model = getattr(transformers, arch)

    def model_init(self: nn.Module, config: Any, *args: Any, **kwargs: Any) -> None:
        base_model.__init__(self, config, *args, **kwargs)
        record = getattr(config, "normlab", None) or {}
        apply_structure(self, record.get("structure", {}))

    model_cls = type(
        f"Normlab{arch}", (base_model,), {"config_class": config_cls, "__init__": model_init}
    )
    getattr(transformers, auto_class_name(arch)).register(config_cls, model_cls, exist_ok=True)
    return config_cls, model_cls


def register_auto_classes() -> None:
    """Register normlab's classes for every family in :data:`FAMILIES` with the Auto
    classes, so ``AutoModelForCausalLM.from_pretrained`` loads transformed checkpoints."""
    for model_type, arch in FAMILIES:
        hf_classes(model_type, arch)


def auto_module_source(model_type: str, arch: str) -> str:
    """The ``normlab_auto.py`` written beside a transformed model (for ``auto_map``)."""
    return (
        '"""Loads this folder\'s normlab-transformed model (needs the normlab package)."""\n\n'
        "from normlab.models.hf_auto import hf_classes\n\n"
        f"NormlabConfig, NormlabModel = hf_classes({model_type!r}, {arch!r})\n"
    )
