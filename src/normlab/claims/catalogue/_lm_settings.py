"""LM training settings shared by claims that train the same TinyGPT.

Kept out of :mod:`normlab.claims.common` so that claims which train no language model do not
carry the trainer in their cache key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from normlab.claims.arms import Trained
from normlab.claims.core import FreeSetting
from normlab.data.corpus import VOCAB, corpus, sample_batch
from normlab.models.gpt import GPTConfig
from normlab.training.lm import LMTrainConfig, train_lm

__all__ = [
    "LM_FREE",
    "UNIFORM_BPB",
    "lm_curve",
    "lm_free",
    "lm_train_config",
    "lm_trial",
    "test_windows",
]

#: Bits per byte of the uniform predictor over the vocabulary: what a diverged LM counts as.
UNIFORM_BPB = math.log2(VOCAB)

#: TinyGPT's shape and training budget as free settings, declared once for every claim that
#: trains it (none is a seed's value: the seeds train 64M-8B-parameter models on millions to
#: billions of tokens). Relative neighbours (halved and doubled; the lr a third and three
#: times), so one declaration serves every scale.
LM_FREE: dict[str, FreeSetting] = {
    s.key: s
    for s in (
        FreeSetting.scaled("d_model", "normlab's choice: TinyGPT's width, for the budget"),
        FreeSetting.scaled("n_layers", "normlab's choice: TinyGPT's depth, for the budget"),
        FreeSetting.scaled("n_heads", "normlab's choice: attention heads at that width"),
        FreeSetting.scaled("context", "normlab's choice: bytes per sequence, for the budget"),
        FreeSetting.scaled("steps", "normlab's choice: the training budget the scale affords"),
        FreeSetting.scaled("batch", "normlab's choice: sequences per step, for the budget"),
        FreeSetting.scaled("warmup", "normlab's choice: linear warm-up steps"),
        FreeSetting.scaled("lr", "normlab's choice: the shared model's AdamW rate", 1 / 3, 3.0),
        FreeSetting.scaled(
            "eval_batches", "normlab's choice: validation batches per score (its noise)"
        ),
        FreeSetting.scaled("eval_batch", "normlab's choice: sequences per probe batch"),
    )
}


def lm_free(*keys: str, **reasons: str) -> tuple[FreeSetting, ...]:
    """The shared declarations of ``keys`` and of the keys of ``reasons`` (a claim's own
    reason, where a value means something else there, replaces the shared one)."""
    return tuple(
        replace(LM_FREE[k], reason=reasons[k]) if k in reasons else LM_FREE[k]
        for k in dict.fromkeys((*keys, *reasons))
    )


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


def test_windows(batch: int, context: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` of ``batch`` windows of the corpus's "test" split, fixed by
    ``seed``: the text every reported probe reads (disjoint by file from the "val" split the
    trainer's selection scores)."""
    return sample_batch(corpus("test"), batch, context, torch.Generator().manual_seed(seed))


def lm_curve(log: Mapping[str, Any]) -> list[float]:
    """The training curve of a :func:`~normlab.training.lm.train_lm` log that the convergence
    premise reads: the bits per byte of every step (its windows then average a tenth of
    the run's steps: one batch's bpb every 10 steps made the late share's seed-to-seed
    spread about 0.09, as wide as the bound it is judged against)."""
    return log.get("step_bpb", log["train_bpb"])


def lm_trial(model_config: GPTConfig, train_config: LMTrainConfig, seed: int) -> Trained:
    """One trial of the engine's ``train`` for a TinyGPT (trained or read from the model
    cache): scored by the trainer's last validation bits per byte (the "val" split's
    windows; inf if diverged), with ``(model, log)``, the divergence record and the
    :func:`lm_curve`."""
    model, log = train_lm(model_config, train_config, seed)
    val = math.inf if log.get("diverged") else float(log["val_bpb"][-1])
    return Trained(val, (model, log), log.get("diverged"), lm_curve(log))
