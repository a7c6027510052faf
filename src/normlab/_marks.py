"""Marks on models that normlab changed, so that saving one never reloads silently wrong.

A Hugging Face model whose modules normlab changed (``replace_norms``, ``fold_layernorms``,
``fold_rms_gains``, ``center_unembed``, ``quantize_model``) no longer fits its original
class: transformers' own ``save_pretrained`` would write a ``model.safetensors`` that the
original class's ``from_pretrained`` loads with default modules, dropping the change with
only a warning. :func:`mark_changed` records the change on the model and replaces that
model's ``save_pretrained`` (on the instance only) by :func:`save_changed`, which writes
normlab's format (``config.json`` with ``model_type = "normlab_<type>"`` and ``auto_map``,
``normlab.safetensors``; see :mod:`normlab.models.hf_auto`), or plain Hugging Face files
when the model turns out unchanged after all (e.g. after ``dequantize_model``).

The writer lives in :mod:`normlab.surgery.hf_format`, which registers itself here at import
(``import normlab`` imports it), so the method families can mark models without importing it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CHANGES_ATTR", "changes", "mark_changed", "save_changed", "set_hf_writer"]

#: Instance attribute listing what changed a model, e.g. ``["replace_norms"]``.
CHANGES_ATTR = "_normlab_changes"
_WRITER: list[Callable[[Any, Path], Any]] = []


def set_hf_writer(writer: Callable[[Any, Path], Any]) -> None:
    """Register the function :func:`save_changed` writes with (``writer(model, folder)``)."""
    _WRITER[:] = [writer]


def changes(model: Any) -> tuple[str, ...]:
    """What normlab changed in ``model`` (names of the functions), in order; ``()`` if none."""
    return tuple(getattr(model, CHANGES_ATTR, ()))


def mark_changed(model: Any, how: str) -> None:
    """Record that ``how`` (a function name) changed ``model``'s modules.

    A Hugging Face model (one with ``save_pretrained`` and a ``config``) also gets
    ``model.save_pretrained = save_changed`` bound to it, so the usual way of saving writes
    normlab's format. Other models (TinyGPT, plain torch modules) only get the record.
    """
    record = model.__dict__.setdefault(CHANGES_ATTR, [])
    if how not in record:
        record.append(how)
    hf = callable(getattr(type(model), "save_pretrained", None)) and hasattr(model, "config")
    if hf and "save_pretrained" not in model.__dict__:
        model.__dict__["save_pretrained"] = functools.partial(save_changed, model)


def save_changed(
    model: Any,
    save_directory: str | Path,
    *,
    is_main_process: bool = True,
    state_dict: Any = None,
    safe_serialization: bool = True,
    **kwargs: Any,
) -> None:
    """``save_pretrained`` of a model normlab changed: write it as ``normlab.save`` does.

    Accepts ``is_main_process`` (nothing is written when False) and
    ``safe_serialization=True``; the weights are always the model's own, as safetensors.

    Raises:
        TypeError: for any other argument (``state_dict``, sharding, hub upload, ...),
            which normlab's format does not support; the message names them.
        ValueError: when the model holds changes normlab cannot record (e.g. QuantLinear).
    """
    done = ", ".join(changes(model)) or "normlab"
    if kwargs or state_dict is not None or not safe_serialization:
        given = sorted(kwargs) + ["state_dict"] * (state_dict is not None)
        given += ["safe_serialization=False"] * (not safe_serialization)
        raise TypeError(
            f"save_pretrained of a model changed by {done} writes normlab's format "
            f"(normlab.save(model, folder)) and takes only the folder; got {given}."
        )
    if not is_main_process:
        return
    if not _WRITER:
        raise RuntimeError("normlab.surgery is not imported; call normlab.save(model, folder).")
    _WRITER[0](model, Path(save_directory))
