"""Write a Hugging Face model that normlab may have changed, so that it reloads exactly.

An unchanged model is written as plain Hugging Face files (``config.json`` with
``architectures``, ``model.safetensors``). A changed one (modules that differ from a fresh
build of its class, found by :func:`~normlab.surgery.structure.capture_structure`) is written
in normlab's format: ``config.json`` with ``model_type = "normlab_<type>"``,
``architectures = ["Normlab<Class>"]``, the recorded changes under ``"normlab"`` and an
``auto_map`` pointing at a three-line ``normlab_auto.py``; the weights go to
``normlab.safetensors``, so the original class finds no weights and refuses, and the Auto
classes (:mod:`normlab.models.hf_auto`) rebuild the changed modules before loading.

This module registers :func:`save_hf` as the writer of :func:`normlab._marks.save_changed`,
the ``save_pretrained`` of every model normlab changed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from torch import nn

from normlab._io import atomic_write_bytes, atomic_write_json
from normlab._marks import set_hf_writer
from normlab.surgery.structure import capture_structure

__all__ = [
    "AUTO_FILE",
    "WEIGHTS_FILE",
    "auto_class_name",
    "auto_module_source",
    "save_hf",
    "state_bytes",
]

#: Weights of a transformed Hugging Face model (not ``model.safetensors``; see above).
WEIGHTS_FILE = "normlab.safetensors"
#: The module ``auto_map`` points at.
AUTO_FILE = "normlab_auto.py"
HOW_TO_LOAD = (
    "Transformed by normlab (module changes in 'structure'). Load with normlab.load(path); "
    "or import normlab.models.hf_auto and call register_auto_classes(), then the Auto class "
    "in 'auto_map'.from_pretrained(path); or pass trust_remote_code=True (needs normlab "
    "installed). The original class (e.g. GPT2LMHeadModel) refuses it: its weights are in "
    "normlab.safetensors."
)
#: Config keys of normlab's format, dropped when the base config is rebuilt.
NORMLAB_KEYS = ("normlab", "model_type", "auto_map", "architectures", "transformers_weights")


def auto_class_name(arch: str) -> str:
    """The Auto class that maps to the Hugging Face model class ``arch``."""
    from transformers.models.auto import modeling_auto as ma

    for mapping, auto in (
        (ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, "AutoModelForCausalLM"),
        (ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES, "AutoModelForMaskedLM"),
        (ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "AutoModelForSeq2SeqLM"),
        (ma.MODEL_MAPPING_NAMES, "AutoModel"),
    ):
        if arch in mapping.values():
            return auto
    return "AutoModel"


def auto_module_source(model_type: str, arch: str) -> str:
    """The ``normlab_auto.py`` written beside a transformed model (for ``auto_map``)."""
    return (
        '"""Loads this folder\'s normlab-transformed model (needs the normlab package)."""\n\n'
        "from normlab.models.hf_auto import hf_classes\n\n"
        f"NormlabConfig, NormlabModel = hf_classes({model_type!r}, {arch!r})\n"
    )


def state_bytes(model: nn.Module) -> bytes:
    """The model's state dict as safetensors bytes (shared tensors written once each)."""
    from safetensors.torch import save

    # clone: safetensors refuses tensors that share storage (views, tied weights)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    return save(state)


def _remove(path: Path, *names: str) -> None:
    for name in names:
        if (path / name).exists():
            (path / name).unlink()


def _base_of(model: nn.Module) -> tuple[str, str, Any]:
    """``(model_type, architecture, config)`` of the untransformed Hugging Face model."""
    config = copy.deepcopy(model.config)
    record = getattr(config, "normlab", None)
    if record:  # loaded through normlab's classes: save as the base architecture again
        import transformers

        base = transformers.CONFIG_MAPPING[record["base_model_type"]]
        data = {k: v for k, v in config.to_dict().items() if k not in NORMLAB_KEYS}
        return record["base_model_type"], record["base_architecture"], base(**data)
    return config.model_type, type(model).__name__, config


def _untie_config(model: nn.Module, config: Any) -> None:
    """Record untied input/output embeddings (a fold may give the head its own weight)."""
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else None
    embed = get_in() if callable(get_in) else None
    untied = head is not None and embed is not None and head.weight is not embed.weight
    if untied and getattr(config, "tie_word_embeddings", False):
        config.tie_word_embeddings = False


def _write_generation_config(model: nn.Module, path: Path) -> None:
    """Keep ``generation_config.json`` (what ``save_pretrained`` writes for a generator)."""
    generation = getattr(model, "generation_config", None)
    can_generate = getattr(model, "can_generate", None)
    if generation is not None and callable(can_generate) and can_generate():
        atomic_write_bytes(path / "generation_config.json", generation.to_json_string().encode())


def _refuse_quantized(model: nn.Module) -> None:
    wrapped = [n for n, m in model.named_modules() if type(m).__name__ == "QuantLinear"]
    if wrapped:
        raise ValueError(
            f"Cannot save a quantized model ({len(wrapped)} QuantLinear layers, e.g. "
            f"'{wrapped[0]}'): normlab's format does not record quantization formats. Call "
            "normlab.quant.dequantize_model(model) first and quantize again after loading."
        )


def save_hf(model: nn.Module, path: str | Path) -> Path:
    """Write the Hugging Face ``model`` to the folder ``path`` (created); return it.

    Raises:
        ValueError: for a quantized model, or changes that cannot be recorded.
    """
    import transformers

    path = Path(path)
    _refuse_quantized(model)
    model_type, arch, config = _base_of(model)
    _untie_config(model, config)
    base_cls = getattr(transformers, arch)
    with torch.device("meta"):
        fresh = base_cls(copy.deepcopy(config))
    structure = capture_structure(model, fresh)
    path.mkdir(parents=True, exist_ok=True)
    if not structure["modules"] and not structure["added_bias"]:
        config.architectures = [arch]  # so load_model builds the head model, not the base
        atomic_write_bytes(path / "config.json", config.to_json_string().encode())
        atomic_write_bytes(path / "model.safetensors", state_bytes(model))
        _remove(path, WEIGHTS_FILE, AUTO_FILE)
        _write_generation_config(model, path)
        return path
    data = {k: v for k, v in config.to_dict().items() if k not in NORMLAB_KEYS}
    data["model_type"] = "normlab_" + model_type
    data["architectures"] = [f"Normlab{arch}"]
    data["auto_map"] = {
        "AutoConfig": "normlab_auto.NormlabConfig",
        auto_class_name(arch): "normlab_auto.NormlabModel",
    }
    data["normlab"] = {
        "version": 1,
        "base_model_type": model_type,
        "base_architecture": arch,
        "structure": structure,
        "how_to_load": HOW_TO_LOAD,
    }
    atomic_write_json(path / "config.json", data)
    atomic_write_bytes(path / AUTO_FILE, auto_module_source(model_type, arch).encode())
    atomic_write_bytes(path / WEIGHTS_FILE, state_bytes(model))
    _remove(path, "model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
    _write_generation_config(model, path)
    return path


set_hf_writer(save_hf)
