"""Save and load models as folders: normlab checkpoints and local Hugging Face models.

A normlab checkpoint is a folder with ``config.json`` (``{"normlab": "tinygpt", "model":
GPTConfig fields}``) and ``model.safetensors``. A Hugging Face folder has its own
``config.json`` (with ``model_type``) and weights. A folded model (``normlab fold``) adds
``fold.json``, the module changes of the fold; loading applies them to the freshly built
architecture before the weights go in. normlab checkpoints are read with safetensors only;
a Hugging Face folder that holds ``pytorch_model.bin`` instead is loaded by transformers,
which unpickles it with ``torch.load(weights_only=True)``: tensors only, and a pickle that
asks for anything else (a ``__reduce__`` payload) is refused.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from normlab._io import atomic_write_bytes, atomic_write_json
from normlab.data.corpus import BOS, corpus
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.surgery.structure import apply_structure, capture_structure

__all__ = ["builtin_tokens", "load_model", "save_model", "special_tokens"]

FOLD_FILE = "fold.json"
_HOW_TO_LOAD = (
    "Transformed by normlab (module changes in 'structure'). Load with "
    "normlab.models.checkpoint.load_model(path); or import normlab.models.hf_auto and call "
    "register_auto_classes(), then the Auto class in 'auto_map'.from_pretrained(path); or "
    "pass trust_remote_code=True (needs normlab installed). The original class "
    "(e.g. GPT2LMHeadModel) refuses it: its weights are in normlab.safetensors."
)


def _state_bytes(model: nn.Module) -> bytes:
    from safetensors.torch import save

    # clone: safetensors refuses tensors that share storage (views, tied weights)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    return save(state)


def _load_state(model: nn.Module, path: Path) -> None:
    from safetensors.torch import load

    model.load_state_dict(load(path.read_bytes()), strict=True)


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
        data = {k: v for k, v in config.to_dict().items() if k not in _NORMLAB_KEYS}
        return record["base_model_type"], record["base_architecture"], base(**data)
    return config.model_type, type(model).__name__, config


_NORMLAB_KEYS = ("normlab", "model_type", "auto_map", "architectures", "transformers_weights")


def _untie_config(model: nn.Module, config: Any) -> None:
    """Record untied input/output embeddings (a fold gives the head its own weight)."""
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else None
    embed = get_in() if callable(get_in) else None
    untied = head is not None and embed is not None and head.weight is not embed.weight
    if untied and getattr(config, "tie_word_embeddings", False):
        config.tie_word_embeddings = False


def _save_hf(model: nn.Module, path: Path) -> None:
    import transformers

    from normlab.models.hf_auto import AUTO_FILE, WEIGHTS_FILE, auto_class_name
    from normlab.models.hf_auto import auto_module_source as source

    model_type, arch, config = _base_of(model)
    _untie_config(model, config)
    base_cls = getattr(transformers, arch)
    with torch.device("meta"):
        fresh = base_cls(copy.deepcopy(config))
    structure = capture_structure(model, fresh)
    if not structure["modules"] and not structure["added_bias"]:
        config.architectures = [arch]  # so load_model builds the head model, not the base
        atomic_write_bytes(path / "config.json", config.to_json_string().encode())
        atomic_write_bytes(path / "model.safetensors", _state_bytes(model))
        _remove(path, WEIGHTS_FILE, AUTO_FILE)
        return
    data = {k: v for k, v in config.to_dict().items() if k not in _NORMLAB_KEYS}
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
        "how_to_load": _HOW_TO_LOAD,
    }
    atomic_write_json(path / "config.json", data)
    atomic_write_bytes(path / AUTO_FILE, source(model_type, arch).encode())
    atomic_write_bytes(path / WEIGHTS_FILE, _state_bytes(model))
    _remove(path, "model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")


def save_model(
    model: nn.Module, path: str | Path, *, fold: Mapping[str, Any] | None = None
) -> Path:
    """Write ``model`` to the folder ``path`` (created) and return the folder.

    Module changes made by normlab's surgery (folded LayerNorms, replaced norms, added
    biases) are found by comparing ``model`` with a fresh build of its architecture
    (:func:`normlab.surgery.structure.capture_structure`) and recorded, so
    :func:`load_model` rebuilds them exactly; a change with no record is refused.

    - TinyGPT: ``config.json`` (``{"normlab": "tinygpt", "model": ..., "structure": ...}``)
      and ``model.safetensors``.
    - An unchanged Hugging Face model: its config (with ``architectures``, so the head
      model is rebuilt) and ``model.safetensors``, loadable by plain ``from_pretrained``.
    - A transformed Hugging Face model: ``model_type = "normlab_<type>"``, ``auto_map``,
      ``normlab_auto.py`` and ``normlab.safetensors`` (see :mod:`normlab.models.hf_auto`):
      the Auto classes reload it exactly once normlab's classes are registered, and the
      original class refuses it rather than loading it silently wrong.

    Args:
        model: a :class:`TinyGPT` or a Hugging Face model.
        path: the output folder.
        fold: the fold record (verification numbers) to keep beside it as ``fold.json``.

    Raises:
        TypeError: for any other model.
        ValueError: when the model holds module changes that cannot be recorded.
    """
    path = Path(path)
    if isinstance(model, TinyGPT):
        with torch.device("meta"):
            fresh = TinyGPT(model.config)
        structure = capture_structure(model, fresh)
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(
            path / "config.json",
            {"normlab": "tinygpt", "model": model.config.to_dict(), "structure": structure},
        )
        atomic_write_bytes(path / "model.safetensors", _state_bytes(model))
    else:
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "to_json_string"):
            raise TypeError(
                f"save_model writes TinyGPT or Hugging Face models, got {type(model).__name__}."
            )
        path.mkdir(parents=True, exist_ok=True)
        _save_hf(model, path)
    if fold is not None:
        atomic_write_json(path / FOLD_FILE, dict(fold))
    else:
        _remove(path, FOLD_FILE)
    return path


def _hf_model(path: Path, folded: bool) -> nn.Module:
    import transformers

    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    arch = (getattr(config, "architectures", None) or [None])[0]
    cls = getattr(transformers, arch, None) if arch else None
    cls = cls or transformers.AutoModel
    if not folded:
        return cls.from_pretrained(path, local_files_only=True, attn_implementation="eager")
    config._attn_implementation = "eager"
    return cls.from_config(config) if cls is transformers.AutoModel else cls(config)


def _normlab_hf(path: Path, record: Mapping[str, Any]) -> nn.Module:
    from normlab.models.hf_auto import hf_classes

    _, cls = hf_classes(record["base_model_type"], record["base_architecture"])
    model, info = cls.from_pretrained(
        path, local_files_only=True, attn_implementation="eager", output_loading_info=True
    )
    bad = {k: v for k, v in info.items() if k != "error_msgs" and v}
    if bad or info.get("error_msgs"):
        raise ValueError(f"{path}: the weights do not fit the recorded structure: {info}.")
    return model


def load_model(path: str | Path) -> tuple[nn.Module, str]:
    """Load the model in folder ``path`` in eval mode, with every recorded module change.

    Returns:
        ``(model, kind)`` with kind "normlab" or "hf". Hugging Face models are built with
        eager attention so probes can read attention probabilities.

    Raises:
        FileNotFoundError: when ``path`` is not a folder with a ``config.json``.
    """
    from normlab.surgery.fold import apply_fold_structure

    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"{path} is not a model folder: expected config.json (a normlab checkpoint or a "
            "Hugging Face model saved with save_pretrained)."
        )
    config = json.loads(config_file.read_text())
    fold_file = path / FOLD_FILE
    fold = json.loads(fold_file.read_text()) if fold_file.exists() else None
    legacy = fold is not None and "structure" in fold and "structure" not in config
    if config.get("normlab") == "tinygpt":
        model: nn.Module = TinyGPT(GPTConfig(**config["model"]))
        apply_structure(model, config.get("structure", {}))
        kind = "normlab"
    elif isinstance(config.get("normlab"), dict):
        return _normlab_hf(path, config["normlab"]).eval(), "hf"
    elif "model_type" in config:
        model, kind = _hf_model(path, legacy), "hf"
        if not legacy:
            return model.eval(), kind
    else:
        raise ValueError(
            f"{config_file} is neither a normlab checkpoint nor a Hugging Face config."
        )
    if legacy:  # written before structures were recorded in config.json
        apply_fold_structure(model, fold["structure"])
    _load_state(model, path / "model.safetensors")
    return model.eval(), kind


def builtin_tokens(
    model: nn.Module,
    path: str | Path | None = None,
    *,
    batch: int = 4,
    tokens: int = 64,
    seed: int = 0,
) -> torch.Tensor:
    """Token ids ``(batch, tokens)`` of built-in text for ``model``.

    The text is the standard-library validation corpus (:mod:`normlab.data.corpus`), cut into
    ``batch`` fixed windows. TinyGPT reads bytes after a BOS token; a Hugging Face model uses
    the tokenizer saved in ``path`` when there is one, with the special tokens the model
    expects (a BERT gets [CLS] ... [SEP]), else the bytes modulo its vocabulary
    (meaningless to a pretrained model, but enough to probe its mechanics; see
    :func:`special_tokens`, which is empty then).
    """
    data = corpus("val")
    generator = torch.Generator().manual_seed(seed)
    config = getattr(model, "config", None)
    limits = [
        getattr(config, a, None) for a in ("context", "n_positions", "max_position_embeddings")
    ]
    n = min(tokens, next((int(c) for c in limits if c), tokens))
    starts = torch.randint(0, len(data) - 8 * n, (batch,), generator=generator)
    if isinstance(model, TinyGPT):
        rows = [data[s : s + n - 1].long() for s in starts]
        return torch.stack([torch.cat([torch.tensor([BOS]), r]) for r in rows])
    vocab = int(getattr(config, "vocab_size", 256))
    tokenizer = _tokenizer(path)
    if tokenizer is not None:
        rows = []
        extra = tokenizer.num_special_tokens_to_add(pair=False)
        for s in starts:
            text = bytes(data[s : s + 8 * n].tolist()).decode("utf-8", "replace")
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][: max(n - extra, 1)]
            ids = tokenizer.build_inputs_with_special_tokens(ids)  # [CLS] ... [SEP], BOS ...
            if len(ids) < n or max(ids) >= vocab:
                break  # an unusable tokenizer: fall back to bytes
            rows.append(torch.tensor(ids[:n]))
        if len(rows) == batch:
            return torch.stack(rows)
    return torch.stack([data[s : s + n].long() % vocab for s in starts])


def special_tokens(path: str | Path | None) -> dict[str, int] | None:
    """Name -> id of the special tokens of the tokenizer in ``path``; None without one."""
    tokenizer = _tokenizer(path)
    if tokenizer is None:
        return None
    names = getattr(tokenizer, "all_special_tokens", [])
    return {str(t): int(tokenizer.convert_tokens_to_ids(t)) for t in names}


_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model")


def _tokenizer(path: str | Path | None) -> Any:
    """The tokenizer saved in ``path``, or None (transformers builds an empty one without
    vocabulary files, so their presence is checked first)."""
    if path is None or not any((Path(path) / f).exists() for f in _TOKENIZER_FILES):
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, ImportError):
        return None
