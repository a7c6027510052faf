"""LM training settings shared by claims that train the same TinyGPT.

Kept out of :mod:`normlab.claims.common` so that claims which train no language model do not
carry the trainer in their cache key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from normlab.data.corpus import VOCAB
from normlab.training.lm import LMTrainConfig

__all__ = ["HELD_OUT", "UNIFORM_BPB", "lm_train_config"]

#: Bits per byte of the uniform predictor over the vocabulary: what a diverged LM counts as.
UNIFORM_BPB = math.log2(VOCAB)
#: Offset of the held-out (test) validation windows' seed. The trainer's own evaluations
#: (``log["val_bpb"]``, the tuning's selection score) use the windows of ``seed``; claims
#: score the selected model on the disjoint windows of ``HELD_OUT + seed``.
HELD_OUT = 50_000


def lm_train_config(config: Mapping[str, Any], lr: float | None = None) -> LMTrainConfig:
    """The LM training settings of a claim config (``steps``, ``batch``, ``lr``): warm-up
    over the first tenth, four evaluations. Claims that train the same TinyGPT through this
    one function share its cached model. ``lr`` overrides ``config["lr"]`` (a tuning
    trial)."""
    steps = config["steps"]
    tc = LMTrainConfig(
        steps=steps,
        batch=config["batch"],
        lr=config["lr"],
        warmup=max(1, steps // 10),
        eval_every=max(1, steps // 4),
        eval_batches=2,
    )
    return tc if lr is None else replace(tc, lr=float(lr))
