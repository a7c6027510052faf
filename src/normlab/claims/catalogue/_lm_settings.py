"""LM training settings shared by claims that train the same TinyGPT.

Kept out of :mod:`normlab.claims.common` so that claims which train no language model do not
carry the trainer in their cache key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from normlab.models.lm import LMTrainConfig

__all__ = ["lm_train_config"]


def lm_train_config(config: Mapping[str, Any]) -> LMTrainConfig:
    """The LM training settings of a claim config (``steps``, ``batch``, ``lr``): warm-up
    over the first tenth, four evaluations. Claims that train the same TinyGPT through this
    one function share its cached model."""
    steps = config["steps"]
    return LMTrainConfig(
        steps=steps,
        batch=config["batch"],
        lr=config["lr"],
        warmup=max(1, steps // 10),
        eval_every=max(1, steps // 4),
        eval_batches=2,
    )
