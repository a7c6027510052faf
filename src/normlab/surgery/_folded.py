"""The "already folded" mark: folding is done once, never a second rescale.

A fold records itself in a Hugging Face model's config (``config.normlab_folded``, a list
of the fold functions applied), so the mark travels with ``save_pretrained`` /
``normlab.save`` and survives a reload; other models (TinyGPT) carry it as an attribute.
Folding a model that carries the mark for the same fold is refused.
(TransformerLens PR #1770 fixed folding applied twice silently.)
"""

from __future__ import annotations

from typing import Any

__all__ = ["FOLDED_KEY", "folded_ops", "mark_folded", "refuse_refold"]

#: Config attribute listing the folds applied, e.g. ``["fold_rms_gains"]``.
FOLDED_KEY = "normlab_folded"


def _holder(model: Any) -> Any:
    """A Hugging Face config (it saves extra attributes to config.json), else the model."""
    config = getattr(model, "config", None)
    return config if callable(getattr(config, "to_json_string", None)) else model


def folded_ops(model: Any) -> tuple[str, ...]:
    """The folds recorded on ``model`` (its Hugging Face config, else the module itself)."""
    return tuple(getattr(_holder(model), FOLDED_KEY, None) or ())


def mark_folded(model: Any, op: str) -> None:
    """Record that ``op`` folded ``model``."""
    done = list(folded_ops(model))
    if op not in done:
        setattr(_holder(model), FOLDED_KEY, [*done, op])


def refuse_refold(model: Any, op: str) -> None:
    """Raise when ``model`` already went through ``op``.

    Raises:
        ValueError: naming the fold and where the mark is.
    """
    if op in folded_ops(model):
        raise ValueError(
            f"{type(model).__name__} was already folded by {op} (config.{FOLDED_KEY} = "
            f"{list(folded_ops(model))}); folding again would rescale the weights a second "
            "time. Fold the original model instead."
        )
