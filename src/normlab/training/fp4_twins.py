"""A TinyGPT and its NVFP4-trained twin (seed paper "ngpt-fp4").

The seed trains nGPT (unit-norm hidden states and weights, ``residual="ngpt"``) end to end
in NVFP4 and finds it robust where a standard transformer needs Hadamard transforms and
per-tensor scaling. Here an architecture is trained in fp32 at a tuned lr and again, at the
same lr, seed and batches, with every linear layer's three GEMMs (forward, input and weight
gradients) fake-quantized to NVFP4 (straight-through, round-to-nearest;
``LMTrainConfig.matmul_quant``). The FP4 tensor scale follows each recipe: nGPT's forward
operands use the fixed range ``amax = 1.0`` of its reference recipe (unit-norm weights and
states); a standard transformer keeps the measured per-tensor ``amax`` (``None``); gradients
always use their measured amax. The NVFP4 twin is evaluated under the NVFP4 forward it
trained with (:func:`fp4_forward_formats`). The cost of NVFP4 is the twin's bits per byte
minus the fp32 model's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from torch import nn

from normlab.models.gpt import GPTConfig
from normlab.quant.model import quantized
from normlab.quant.spec import QuantFormat, preset
from normlab.training.lm import LMTrainConfig, evaluate_bpb, train_lm

__all__ = ["fp4_forward_formats", "fp4_twin", "gpt_for", "twin_train_config"]


def gpt_for(name: str, width: int, n_layers: int, n_heads: int, context: int) -> GPTConfig:
    """A pre-LN TinyGPT (``name`` "tinygpt") or an nGPT-style one ("ngpt") of ``width``."""
    residual = "ngpt" if name == "ngpt" else "pre"
    return GPTConfig(
        d_model=width, n_layers=n_layers, n_heads=n_heads, context=context, residual=residual
    )


def twin_train_config(
    steps: int, batch: int, lr: float, weight_decay: float, ngpt: bool
) -> LMTrainConfig:
    """The fp32 training of either architecture: nGPT without weight decay or warm-up (its
    reference recipe: the hypersphere constraint replaces both), pre-LN with AdamW decay
    ``weight_decay`` and a warm-up over the first tenth; four evaluations."""
    return LMTrainConfig(
        steps=steps,
        batch=batch,
        lr=float(lr),
        weight_decay=0.0 if ngpt else weight_decay,
        warmup=0 if ngpt else max(1, steps // 10),
        eval_every=max(1, steps // 4),
        eval_batches=2,
    )


def fp4_forward_formats(amax: float | None) -> dict[str, QuantFormat]:
    """The NVFP4 forward formats (weights, activations) for a recipe's tensor range
    ``amax`` (``None``: the measured per-tensor range, the preset's)."""
    if amax is None:
        return {}
    weights, activations = preset("nvfp4")
    return {
        "weights": replace(weights, tensor_amax=amax),
        "activations": replace(activations, tensor_amax=amax),
    }


def fp4_twin(
    gpt: GPTConfig,
    tc: LMTrainConfig,
    amax: float | None,
    seed: int,
    held: dict[str, Any],
) -> tuple[float, Any, nn.Module]:
    """Train ``gpt`` with NVFP4 GEMMs at ``tc`` (the fp32 twin's settings and lr) and seed
    ``seed``; return its bits per byte on ``held`` (``evaluate_bpb``'s keywords) under its
    NVFP4 forward (NaN when it diverged), the divergence record (or ``None``) and the
    model."""
    fp4_tc = replace(tc, matmul_quant="nvfp4", matmul_quant_amax=amax)
    model, log = train_lm(gpt, fp4_tc, seed)
    if log.get("diverged"):
        return math.nan, log["diverged"], model
    with quantized(model, "nvfp4", **fp4_forward_formats(amax)):
        return float(evaluate_bpb(model, **held)), None, model
