"""Loading the model a subcommand works on, with every failure as a :class:`CliError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from normlab.cli._common import CliError, check_model_folder

__all__ = ["load_checked", "nonfinite_weights"]


def load_checked(path: str | Path) -> tuple[Any, str]:
    """``(model, kind)`` of the model folder ``path`` in float32, or :class:`CliError`.

    The folder is checked first (:func:`~normlab.cli._common.check_model_folder`); then
    any failure to build or load the model (a refused pickle: ``pytorch_model.bin`` is read
    with ``torch.load(weights_only=True)``, mismatched weights, an unknown architecture)
    is reported with the file and the reason instead of a traceback.
    """
    from normlab.models.checkpoint import load_model

    try:
        check_model_folder(path)
    except CliError as err:
        raise CliError(f"cannot load {path}: {err}") from None
    try:
        model, kind = load_model(path)
    except Exception as err:  # the CLI boundary: never a raw traceback for bad input
        text = str(err).strip().splitlines()
        reason = text[0] if text else ""
        if "weights_only" in str(err) or "Unpickl" in type(err).__name__:
            reason = "its pickled weights hold more than tensors and were refused " + (
                "(loaded with torch.load(weights_only=True))"
            )
        raise CliError(f"cannot load {path}: {type(err).__name__}: {reason}") from None
    return model.float(), kind


def nonfinite_weights(model: Any) -> str:
    """ "" when every parameter and buffer of ``model`` is finite, else which are not
    (e.g. "28 of 28 tensors, first transformer.wte.weight")."""
    import torch

    tensors = dict(model.named_parameters())
    tensors.update(dict(model.named_buffers()))
    floats = {k: v for k, v in tensors.items() if v.is_floating_point()}
    bad = [k for k, v in floats.items() if not bool(torch.isfinite(v).all())]
    return f"{len(bad)} of {len(floats)} tensors, first {bad[0]}" if bad else ""
