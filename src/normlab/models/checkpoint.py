"""Save and load models as folders: normlab checkpoints and local Hugging Face models.

``normlab.save(model, path)`` and ``normlab.load(path)`` are :func:`save_model` and
:func:`load_model` (the latter's model carries its kind as ``model.normlab_kind``).

A normlab checkpoint is a folder with ``config.json`` (``{"normlab": "tinygpt", "model":
GPTConfig fields, "structure": module changes}``) and ``model.safetensors``. An unchanged
Hugging Face model is written as plain Hugging Face files; one that normlab changed
(replaced norms, folded LayerNorms, added biases) in normlab's format, ``model_type =
"normlab_<type>"`` with ``normlab.safetensors`` (:mod:`normlab.surgery.hf_format`), which
the original class refuses and the Auto classes reload exactly. The ``save_pretrained`` of
a model normlab changed writes the same (:mod:`normlab._marks`). Loading refuses weights
that do not fit the model the config builds, naming the missing and unexpected keys. An
older folded model (``fold.json`` holding the changes) is still read. normlab checkpoints
are read with safetensors only; a Hugging Face folder that holds ``pytorch_model.bin``
instead is loaded by transformers, which unpickles it with ``torch.load(weights_only=True)``:
tensors only, and a pickle that asks for anything else (a ``__reduce__`` payload) is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from normlab._io import atomic_write_bytes, atomic_write_json
from normlab.data.corpus import BOS, corpus
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.surgery.hf_format import save_hf, state_bytes
from normlab.surgery.structure import apply_structure, capture_structure

__all__ = [
    "TokenBatch",
    "builtin_batch",
    "builtin_tokens",
    "load_model",
    "model_inputs",
    "position_limit",
    "save_model",
    "special_tokens",
]

FOLD_FILE = "fold.json"


def _load_state(model: nn.Module, path: Path) -> None:
    from safetensors.torch import load

    model.load_state_dict(load(path.read_bytes()), strict=True)


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
        atomic_write_bytes(path / "model.safetensors", state_bytes(model))
    else:
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "to_json_string"):
            raise TypeError(
                f"save_model writes TinyGPT or Hugging Face models, got {type(model).__name__}."
            )
        save_hf(model, path)
    if fold is not None:
        atomic_write_json(path / FOLD_FILE, dict(fold))
    elif (path / FOLD_FILE).exists():
        (path / FOLD_FILE).unlink()
    return path


def _check_loading(path: Path, info: Mapping[str, Any]) -> None:
    """Refuse weights that do not fit the model built from the config, naming the keys."""
    parts = []
    for key, what in (
        ("missing_keys", "missing"),
        ("unexpected_keys", "unexpected"),
        ("mismatched_keys", "with the wrong shape"),
    ):
        names = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(key) or ())
        if names:
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            parts.append(f"{len(names)} {what} ({', '.join(names[:5])}{more})")
    errors = [str(e) for e in info.get("error_msgs") or ()]
    if errors:
        parts.append("errors: " + "; ".join(errors)[:300])
    if parts:
        raise ValueError(
            f"{path}: the weights do not fit the model its config.json builds: "
            + "; ".join(parts)
            + ". Was the model changed (e.g. by replace_norms) and saved without normlab? "
            "Save changed models with normlab.save(model, folder)."
        )


def _hf_model(path: Path, folded: bool) -> nn.Module:
    import transformers

    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    arch = (getattr(config, "architectures", None) or [None])[0]
    cls = getattr(transformers, arch, None) if arch else None
    cls = cls or transformers.AutoModel
    if not folded:
        model, info = cls.from_pretrained(
            path, local_files_only=True, attn_implementation="eager", output_loading_info=True
        )
        _check_loading(path, info)
        return model
    config._attn_implementation = "eager"
    return cls.from_config(config) if cls is transformers.AutoModel else cls(config)


def _normlab_hf(path: Path, record: Mapping[str, Any]) -> nn.Module:
    from normlab.models.hf_auto import WEIGHTS_FILE, hf_classes

    if not (path / WEIGHTS_FILE).is_file():
        found = sorted(p.name for p in path.glob("*.safetensors")) or "no weights"
        raise FileNotFoundError(
            f"{path}: config.json describes a normlab-transformed model, whose weights are "
            f"{WEIGHTS_FILE}, but the folder holds {found}; save it again with "
            "normlab.save(model, folder)."
        )
    _, cls = hf_classes(record["base_model_type"], record["base_architecture"])
    model, info = cls.from_pretrained(
        path, local_files_only=True, attn_implementation="eager", output_loading_info=True
    )
    _check_loading(path, info)
    return model


def load_model(path: str | Path) -> tuple[nn.Module, str]:
    """Load the model in folder ``path`` in eval mode, with every recorded module change.

    Returns:
        ``(model, kind)`` with kind "normlab" (TinyGPT) or "hf"; the kind is also the
        model's ``normlab_kind`` attribute. Hugging Face models are built with eager
        attention so probes can read attention probabilities.

    Raises:
        FileNotFoundError: when ``path`` is not a folder with a ``config.json``.
        ValueError: when the weights do not fit the model the config builds (missing,
            unexpected or reshaped keys, named in the message), e.g. a model whose norms
            were replaced and then saved by a tool that does not record the change.
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
    recorded = "structure" in config or isinstance(config.get("normlab"), dict)
    legacy = fold is not None and "structure" in fold and not recorded
    if config.get("normlab") == "tinygpt":
        model: nn.Module = TinyGPT(GPTConfig(**config["model"]))
        apply_structure(model, config.get("structure", {}))
        kind = "normlab"
    elif isinstance(config.get("normlab"), dict):
        model, kind = _normlab_hf(path, config["normlab"]), "hf"
    elif "model_type" in config:
        model, kind = _hf_model(path, legacy), "hf"
    else:
        raise ValueError(
            f"{config_file} is neither a normlab checkpoint nor a Hugging Face config."
        )
    if legacy:  # written before structures were recorded in config.json
        apply_fold_structure(model, fold["structure"])
    if kind == "normlab" or legacy:
        _load_state(model, path / "model.safetensors")
    model.normlab_kind = kind
    return model.eval(), kind


def model_inputs(
    model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Keyword inputs for a Hugging Face ``model`` on token ``ids``: ``input_ids``, the
    padding mask when given, and for an encoder-decoder (T5) the decoder inputs, the same
    ids shifted right behind the decoder start token (teacher forcing)."""
    out = {"input_ids": ids}
    if mask is not None:
        out["attention_mask"] = mask
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False):
        start = getattr(config, "decoder_start_token_id", None)
        start = 0 if start is None else int(start)
        out["decoder_input_ids"] = torch.cat(
            [torch.full_like(ids[:, :1], start), ids[:, :-1]], dim=1
        )
    return out


def position_limit(model: nn.Module) -> int | None:
    """How many token positions ``model`` can read (``context``, ``n_positions`` or
    ``max_position_embeddings`` of its config), or None when it does not say."""
    config = getattr(model, "config", None)
    for attr in ("context", "n_positions", "max_position_embeddings"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class TokenBatch:
    """Built-in token ids for a model (:func:`builtin_batch`).

    Attributes:
        ids: ``(batch, tokens)`` token ids.
        mask: ``(batch, tokens)``, 1 for real tokens and 0 for padding; None when no
            position is padding.
        source: "tokenizer", "bytes" (TinyGPT, which reads bytes), or "bytes (...)" with
            the reason a Hugging Face model gets bytes (no tokenizer in the folder, or one
            whose ids do not fit the model's vocabulary).
    """

    ids: torch.Tensor
    mask: torch.Tensor | None
    source: str


def _pad_token(tokenizer: Any) -> None:
    """Give a tokenizer without a pad token one (its EOS, UNK or BOS token, else id 0), and
    pad on the right, where padding cannot disturb a causal model's real tokens."""
    if tokenizer.pad_token is None:
        for name in ("eos_token", "unk_token", "bos_token"):
            if getattr(tokenizer, name, None) is not None:
                tokenizer.pad_token = getattr(tokenizer, name)
                break
        else:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(0)
    tokenizer.padding_side = "right"


def builtin_batch(
    model: nn.Module,
    path: str | Path | None = None,
    *,
    batch: int = 4,
    tokens: int = 64,
    seed: int = 0,
    positions: int | None = None,
) -> TokenBatch:
    """``batch`` windows of built-in text as ``tokens`` token ids each, for ``model``.

    The text is the standard-library validation corpus (:mod:`normlab.data.corpus`). TinyGPT
    reads bytes after a BOS token. A Hugging Face model uses the tokenizer saved in ``path``
    through its own call (``tokenizer(texts, add_special_tokens=True, padding="max_length",
    truncation=True, max_length=tokens, return_tensors="pt")``: a BERT gets ``[CLS] ...
    [SEP]``, a Llama ``<s> ...``), with its attention mask; a tokenizer without a pad token
    pads with its EOS (else UNK, BOS) token, on the right. Without a tokenizer, or when the
    tokenizer's ids do not fit the model's vocabulary, the ids are the bytes modulo the
    vocabulary (meaningless to a pretrained model, enough to probe its mechanics), and
    :attr:`TokenBatch.source` says so.

    Args:
        positions: how many of the ``tokens`` positions the model will read (default all;
            a causal probe reads ``tokens - 1`` and predicts the last).

    Raises:
        ValueError: when the model reads fewer than ``positions`` positions.
    """
    need = tokens if positions is None else positions
    limit = position_limit(model)
    if limit is not None and need > limit:
        raise ValueError(
            f"{type(model).__name__} reads at most {limit} token positions, but {need} were "
            f"asked for; ask for at most {limit} tokens."
        )
    data = corpus("val")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data) - 8 * tokens, (batch,), generator=generator)
    if isinstance(model, TinyGPT):
        rows = [data[s : s + tokens - 1].long() for s in starts]
        ids = torch.stack([torch.cat([torch.tensor([BOS]), r]) for r in rows])
        return TokenBatch(ids, None, "bytes")
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 256))
    tokenizer = _tokenizer(path)
    source = "bytes (no tokenizer in the model folder)"
    if tokenizer is not None:
        _pad_token(tokenizer)
        texts = [
            bytes(data[s : s + 8 * tokens].tolist()).decode("utf-8", "replace") for s in starts
        ]
        enc = tokenizer(
            texts,
            add_special_tokens=True,
            padding="max_length",
            truncation=True,
            max_length=tokens,
            return_tensors="pt",
        )
        ids, mask = enc["input_ids"].long(), enc["attention_mask"].long()
        top = int(ids.max())
        if ids.shape[1] == tokens and top < vocab:
            return TokenBatch(ids, None if bool(mask.bool().all()) else mask, "tokenizer")
        source = f"bytes (the tokenizer's ids reach {top}, beyond the model's {vocab})"
    ids = torch.stack([data[s : s + tokens].long() % vocab for s in starts])
    return TokenBatch(ids, None, source)


def builtin_tokens(
    model: nn.Module,
    path: str | Path | None = None,
    *,
    batch: int = 4,
    tokens: int = 64,
    seed: int = 0,
) -> torch.Tensor:
    """The ids of :func:`builtin_batch` (``(batch, tokens)``), for callers that need no mask.

    Raises:
        ValueError: when the model reads fewer than ``tokens`` positions.
    """
    return builtin_batch(model, path, batch=batch, tokens=tokens, seed=seed).ids


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
