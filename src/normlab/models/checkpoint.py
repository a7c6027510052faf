"""Save and load models as folders: normlab checkpoints and local Hugging Face models.

A normlab checkpoint is a folder with ``config.json`` (``{"normlab": "tinygpt", "model":
GPTConfig fields}``) and ``model.safetensors``. A Hugging Face folder has its own
``config.json`` (with ``model_type``) and weights. A folded model (``normlab fold``) adds
``fold.json``, the module changes of the fold; loading applies them to the freshly built
architecture before the weights go in. Weights are read with safetensors only, never
unpickled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from normlab._io import atomic_write_bytes, atomic_write_json
from normlab.data.corpus import BOS, corpus
from normlab.models.gpt import GPTConfig, TinyGPT

__all__ = ["builtin_tokens", "load_model", "save_model"]

FOLD_FILE = "fold.json"


def _state_bytes(model: nn.Module) -> bytes:
    from safetensors.torch import save

    # clone: safetensors refuses tensors that share storage (views, tied weights)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    return save(state)


def _load_state(model: nn.Module, path: Path) -> None:
    from safetensors.torch import load

    model.load_state_dict(load(path.read_bytes()), strict=True)


def save_model(
    model: nn.Module, path: str | Path, *, fold: Mapping[str, Any] | None = None
) -> Path:
    """Write ``model`` to the folder ``path`` (created) and return the folder.

    Args:
        model: a :class:`TinyGPT` (normlab checkpoint) or a Hugging Face model (its config
            plus ``model.safetensors``).
        path: the output folder.
        fold: the fold record (``{"structure": ..., ...}``) when the model was folded.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if isinstance(model, TinyGPT):
        atomic_write_json(
            path / "config.json", {"normlab": "tinygpt", "model": model.config.to_dict()}
        )
    else:
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "to_json_string"):
            raise TypeError(
                f"save_model writes TinyGPT or Hugging Face models, got {type(model).__name__}."
            )
        if fold and fold.get("structure", {}).get("untied"):
            config.tie_word_embeddings = False  # the fold gave the head its own weight
        atomic_write_bytes(path / "config.json", config.to_json_string().encode())
    atomic_write_bytes(path / "model.safetensors", _state_bytes(model))
    if fold is not None:
        atomic_write_json(path / FOLD_FILE, dict(fold))
    elif (path / FOLD_FILE).exists():
        (path / FOLD_FILE).unlink()
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


def load_model(path: str | Path) -> tuple[nn.Module, str]:
    """Load the model in folder ``path`` in eval mode.

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
    if config.get("normlab") == "tinygpt":
        model: nn.Module = TinyGPT(GPTConfig(**config["model"]))
        kind = "normlab"
    elif "model_type" in config:
        model, kind = _hf_model(path, fold is not None), "hf"
        if fold is None:
            return model.eval(), kind
    else:
        raise ValueError(
            f"{config_file} is neither a normlab checkpoint nor a Hugging Face config."
        )
    if fold is not None:
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
    the tokenizer saved in ``path`` when there is one, else the bytes modulo its vocabulary
    (meaningless to a pretrained model, but enough to probe its mechanics).
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
        for s in starts:
            text = bytes(data[s : s + 8 * n].tolist()).decode("utf-8", "replace")
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][:n]
            if len(ids) < n or max(ids) >= vocab:
                break  # an unusable tokenizer: fall back to bytes
            rows.append(torch.tensor(ids))
        if len(rows) == batch:
            return torch.stack(rows)
    return torch.stack([data[s : s + n].long() % vocab for s in starts])


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
