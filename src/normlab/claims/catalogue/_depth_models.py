"""The trained TinyGPTs shared by the "curse-of-depth", "swap-kl" and "fold-ln" claims.

All three use the same architecture and training settings per scale, so the dense
(pre-LN, no weight decay) model of a seed is trained once and read from
:func:`normlab.models.lm.train_lm`'s cache by the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.models.lm import TrainConfig, train_lm

__all__ = ["SETTINGS", "VARIANTS", "gpt_config", "train_config", "trained"]

#: Sparser variants of the dense model: (GPTConfig overrides, weight decay). Weight decay
#: 0.3 is the seed recipe's; GQA shares one key/value head among all query heads; the
#: MoE-lite activates 2 of 4 experts per token (same active width as the dense MLP).
VARIANTS: dict[str, tuple[dict[str, Any], float]] = {
    "dense": ({}, 0.0),
    "weight-decay": ({}, 0.3),
    "gqa": ({"kv_heads": 1}, 0.0),
    "moe": ({"moe_experts": 4, "moe_top_k": 2}, 0.0),
    "ln-scaling": ({"ln_scaling": True}, 0.0),
}

#: Architecture and training per scale.
SETTINGS: dict[str, dict[str, Any]] = {
    "smoke": {
        "d_model": 16,
        "n_layers": 4,
        "n_heads": 2,
        "context": 32,
        "steps": 8,
        "batch": 8,
        "lr": 3e-3,
        "warmup": 2,
    },
    "quick": {
        "d_model": 32,
        "n_layers": 8,
        "n_heads": 4,
        "context": 64,
        "steps": 150,
        "batch": 16,
        "lr": 3e-3,
        "warmup": 20,
    },
    "full": {
        "d_model": 64,
        "n_layers": 12,
        "n_heads": 4,
        "context": 128,
        "steps": 3000,
        "batch": 32,
        "lr": 2e-3,
        "warmup": 100,
    },
}


def gpt_config(config: Mapping[str, Any], variant: str = "dense") -> GPTConfig:
    """The TinyGPT architecture of ``variant`` at the settings ``config``."""
    overrides, _ = VARIANTS[variant]
    arch = {k: config[k] for k in ("d_model", "n_layers", "n_heads", "context")}
    return GPTConfig(**arch, **overrides)


def train_config(config: Mapping[str, Any], variant: str = "dense") -> TrainConfig:
    """The training settings of ``variant`` at the settings ``config``."""
    _, weight_decay = VARIANTS[variant]
    return TrainConfig(
        steps=config["steps"],
        batch=config["batch"],
        lr=config["lr"],
        warmup=config["warmup"],
        weight_decay=weight_decay,
        eval_batches=2,
    )


def trained(config: Mapping[str, Any], seed: int, variant: str = "dense") -> tuple[TinyGPT, dict]:
    """The trained (or cached) model of ``variant`` and its training log."""
    return train_lm(gpt_config(config, variant), train_config(config, variant), seed)
