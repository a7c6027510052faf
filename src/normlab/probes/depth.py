"""Depth metrics: variance growth, block influence, angular distance, drop-one-layer damage.

Seed paper "curse-of-depth": in Pre-LN models the residual stream's variance grows with
depth, pushing deep blocks toward identity maps; sparsity (weight decay, GQA, MoE) dampens
the growth and keeps deep layers useful. Per residual state ``h_l`` (``l = 0`` the
embedding output, ``l`` the output of block ``l - 1``) and per block:

- output variance ``V_l = mean over tokens of Var_d(h_l)`` (reference code);
- block influence ``1 - mean cos(h_in, h_out)`` (ShortGPT);
- angular distance ``mean arccos(cos(h_in, h_out)) / pi`` (Gromov et al.);
- drop-one-layer damage: the model run without block ``l``: KL of its next-token
  distribution to the full model's (LM head) or the relative change of its output, and the
  change of the next-token loss when targets are given.

LayerNorm-Scaling (scale each block norm's output by ``1/sqrt(l + 1)``) is a TinyGPT
option, :func:`normlab.models.gpt.ln_scaling`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from normlab._records import Record
from normlab.probes._runner import as_block_runner
from normlab.probes.swap import kl_to_base

__all__ = ["DepthProfile", "depth_profile", "residual_growth", "weight_rms"]


@dataclass(frozen=True)
class DepthProfile(Record):
    """Depth metrics of one model on one batch.

    Attributes:
        variance: ``V_l`` for ``l = 0..L`` (embedding output, then each block's output).
        influence: ``1 - cos`` per block.
        angular: ``arccos(cos) / pi`` per block.
        drop_effect: per block, KL to the full model (LM head) or relative output change.
        drop_loss: per block, loss without it minus the full loss (nats), if targets given.
        base_loss: the full model's loss, if targets given.
    """

    variance: tuple[float, ...]
    influence: tuple[float, ...]
    angular: tuple[float, ...]
    drop_effect: tuple[float, ...]
    drop_loss: tuple[float, ...] = ()
    base_loss: float | None = None

    @property
    def variance_growth(self) -> float:
        """Least-squares slope of ``ln V_l`` against ``l``: mean log-growth per block."""
        y = [math.log(max(v, 1e-30)) for v in self.variance]
        n = len(y)
        if n < 2:
            return 0.0
        xm, ym = (n - 1) / 2, sum(y) / n
        num = sum((i - xm) * (v - ym) for i, v in enumerate(y))
        return num / sum((i - xm) ** 2 for i in range(n))

    def summary(self) -> dict[str, float]:
        """The profile by depth half (blocks ``L // 2`` on are the deep half): the variance
        growth, the last over the first residual variance, and the mean drop-one-block loss
        increase (deep and shallow half; needs targets) and influence (deep half)."""
        half = len(self.influence) // 2
        deep, shallow = self.drop_loss[half:], self.drop_loss[:half]
        return {
            "variance_growth": self.variance_growth,
            "variance_ratio": self.variance[-1] / self.variance[0],
            "deep_drop_loss": sum(deep) / len(deep),
            "shallow_drop_loss": sum(shallow) / len(shallow),
            "deep_influence": sum(self.influence[half:]) / len(deep),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "variance_growth": self.variance_growth}


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> float:
    return float(F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten()))


@torch.no_grad()
def depth_profile(
    model: Any, tokens: torch.Tensor, *, targets: torch.Tensor | None = None
) -> DepthProfile:
    """Depth metrics of ``model`` (any model :func:`normlab.probes.adapt` understands).

    Args:
        model: the model or its adapter; it is not changed.
        tokens: token ids ``(batch, tokens)``.
        targets: next-token targets ``(batch, tokens)`` for the loss changes (LM head only).
    """
    run = as_block_runner(model)
    states = run.adapter.trace(tokens).residual
    variance = tuple(float(h.double().var(dim=-1, unbiased=False).mean()) for h in states)
    influence, angular = [], []
    for h_in, h_out in itertools.pairwise(states):
        cos = F.cosine_similarity(h_in.double(), h_out.double(), dim=-1).clamp(-1.0, 1.0)
        influence.append(float((1 - cos).mean()))
        angular.append(float((torch.arccos(cos) / math.pi).mean()))
    base = run(tokens, None)
    lm = run.adapter.has_lm_head
    base_loss = _loss(base, targets) if targets is not None and lm else None
    effect, drop_loss = [], []
    for i in range(run.n_layers):
        out = run(tokens, [k for k in range(run.n_layers) if k != i])
        if lm:
            effect.append(kl_to_base(base, out))
        else:
            effect.append(float((out - base).double().norm() / base.double().norm()))
        if base_loss is not None:
            drop_loss.append(_loss(out, targets) - base_loss)  # type: ignore[arg-type]
    return DepthProfile(
        variance, tuple(influence), tuple(angular), tuple(effect), tuple(drop_loss), base_loss
    )


@torch.no_grad()
def weight_rms(model: torch.nn.Module) -> float:
    """Root mean square over the entries of every weight matrix of ``model`` (parameters
    with at least two dimensions; norm gains excluded): what weight decay shrinks."""
    mats = [p for n, p in model.named_parameters() if p.dim() >= 2 and "norm" not in n]
    total = sum(float(p.square().sum()) for p in mats)
    return (total / sum(p.numel() for p in mats)) ** 0.5


@torch.no_grad()
def residual_growth(model: Any, tokens: torch.Tensor) -> float:
    """``log(rms(h_final) / rms(h_embed))`` of a TinyGPT on ``tokens``: how much the residual
    stream grew from the embedding to the state the head reads (over every block and loop)."""
    states, _ = model.trunk(tokens)
    rms = [float(s.square().mean().sqrt()) for s in (states[0], states[-1])]
    return math.log(rms[1] / rms[0])
