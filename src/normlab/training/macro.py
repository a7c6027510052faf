"""TinyGPT without normalization, trained under MACRO or AdamW, with its residual-stream scale
probed during training (``paper("macro")``: the manifold constraint alone bounds forward
activation scales, standing in for RMSNorm and weight decay).

- :func:`norm_free_gpt`: TinyGPT with every norm replaced by the identity and its token and
  position embeddings at unit RMS (what RMSNorm would hand the first layer), or the plain
  RMSNorm TinyGPT; ``embed_std`` sets the embeddings' init for either (arms compared at
  one init).
- :func:`macro_optimizers` / :func:`adamw_optimizers`: MACRO (oblique manifold: unit-norm
  rows) on the hidden matrices with AdamW (no decay) on the rest, or one AdamW with decay
  on the hidden matrices and head (optionally none at all).
- :func:`arm_optimizers`: the optimizers of the arms (:data:`ARMS`).
- :func:`manifold_drift`: how far MACRO's hidden rows leave the manifold over a short run.
- :func:`msign_error`: how far Muon's Newton-Schulz ``msign`` is from the SVD's polar factor.
- :func:`residual_scale`: the largest RMS of the residual stream over the block inputs and
  the final state.
- :func:`train_probed`: a linear warm-up then constant lr through
  :func:`~normlab.training.fit.fit` on the training split, probing the scale every
  ``probe_every`` steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab.data.corpus import corpus, sample_batch
from normlab.models.gpt import GPTConfig, TinyGPT
from normlab.optim import MACRO, msign
from normlab.training.fit import FitResult, fit

__all__ = [
    "ARMS",
    "NORM_FREE",
    "ProbedRun",
    "adamw_optimizers",
    "arm_optimizers",
    "macro_optimizers",
    "manifold_drift",
    "msign_error",
    "norm_free_gpt",
    "residual_scale",
    "train_probed",
]

_LN2 = math.log(2.0)
#: The arms: RMSNorm + AdamW with weight decay (the standard recipe), no norm + MACRO on the
#: hidden matrices, no norm + plain AdamW (the control for the activation scale), and
#: RMSNorm + MACRO (the control for the optimizer: MACRO with the norm kept, so that removing
#: the norm under MACRO isolates whether the constraint subsumes it).
ARMS = ("rmsnorm-adamw", "nonorm-macro", "nonorm-adamw", "rmsnorm-macro")
#: The arms without any norm.
NORM_FREE = ("nonorm-macro", "nonorm-adamw")


def norm_free_gpt(
    shape: Mapping[str, Any],
    seed: int,
    *,
    norm_free: bool = True,
    embed_std: float | None = None,
) -> TinyGPT:
    """TinyGPT of ``shape`` (``d_model``, ``n_layers``, ``n_heads``, ``context``) initialised
    from ``seed``: with RMSNorm, or (``norm_free``) with every norm the identity and
    unit-RMS token and position embeddings. ``embed_std``, when given, draws the token and
    position embeddings from ``N(0, embed_std^2)`` for either model (TinyGPT's own init is
    0.02); the norms hold no random state, so one ``seed`` and ``embed_std`` give the two
    models the same weights."""
    torch.manual_seed(seed)
    keys = ("d_model", "n_layers", "n_heads", "context")
    model = TinyGPT(GPTConfig(**{k: shape[k] for k in keys}, norm="rmsnorm"))
    if norm_free:
        for block in model.blocks:
            block.norm1, block.norm2 = nn.Identity(), nn.Identity()
        model.norm_f = nn.Identity()
        embed_std = 1.0 if embed_std is None else embed_std
    if embed_std is not None:
        nn.init.normal_(model.embed.weight, std=embed_std)
        nn.init.normal_(model.pos.weight, std=embed_std)
    return model


def _hidden(model: TinyGPT) -> list[nn.Parameter]:
    return [p for n, p in model.named_parameters() if p.dim() >= 2 and n.startswith("blocks.")]


def _other(model: TinyGPT, taken: Sequence[nn.Parameter]) -> list[nn.Parameter]:
    return [p for p in model.parameters() if all(p is not q for q in taken)]


def macro_optimizers(model: TinyGPT, lr: float, macro_lr: float) -> list[torch.optim.Optimizer]:
    """MACRO (oblique manifold) on the blocks' matrices at ``macro_lr``; AdamW without
    weight decay (betas 0.9, 0.95) on embeddings, head and biases at ``lr``."""
    hidden = _hidden(model)
    return [
        MACRO(hidden, lr=macro_lr, manifold="oblique"),
        torch.optim.AdamW(_other(model, hidden), lr=lr, weight_decay=0.0, betas=(0.9, 0.95)),
    ]


def adamw_optimizers(
    model: TinyGPT, lr: float, weight_decay: float, *, decay: bool = True
) -> list[torch.optim.Optimizer]:
    """One AdamW (betas 0.9, 0.95): ``weight_decay`` on the blocks' matrices and the head
    when ``decay``, none on anything otherwise."""
    decayed = [*_hidden(model), model.head.weight] if decay else []
    groups = [
        {"params": decayed, "weight_decay": weight_decay},
        {"params": _other(model, decayed), "weight_decay": 0.0},
    ]
    return [torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))]


def arm_optimizers(
    model: TinyGPT, arm: str, params: Mapping[str, float], weight_decay: float
) -> list[torch.optim.Optimizer]:
    """The optimizers of one of :data:`ARMS` at ``params`` (``lr``; ``macro_lr`` for MACRO):
    :func:`macro_optimizers`, or :func:`adamw_optimizers` with ``weight_decay`` on the
    RMSNorm baseline only."""
    if arm not in ARMS:
        raise ValueError(f"Unknown arm {arm!r}; expected one of {ARMS}.")
    if arm.endswith("-macro"):
        return macro_optimizers(model, params["lr"], params["macro_lr"])
    return adamw_optimizers(model, params["lr"], weight_decay, decay=arm == "rmsnorm-adamw")


def msign_error(shapes: Sequence[tuple[int, int]] = ((8, 16), (16, 8), (12, 12))) -> float:
    """The worst departure of ``U^T msign(X) V`` from a diagonal with entries in
    ``[0.6, 1.3]`` over float64 ``N(0, 1)`` matrices of ``shapes`` (seed 0), where
    ``X = U S V^T``: Muon's Newton-Schulz keeps the SVD's singular vectors and maps the
    singular values near 1. Returns the largest off-diagonal magnitude or the distance of a
    diagonal entry outside that band (at most 0 inside it)."""
    worst = 0.0
    for shape in shapes:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        u, _, vh = torch.linalg.svd(x, full_matrices=False)
        core = u.mT @ msign(x) @ vh.mT
        off = core - torch.diag_embed(torch.diagonal(core))
        sv = torch.diagonal(core)
        worst = max(worst, float(off.abs().max()), float((sv - 0.95).abs().max()) - 0.35)
    return worst


@torch.no_grad()
def residual_scale(model: TinyGPT, x: torch.Tensor) -> float:
    """The largest RMS of the residual stream over the block inputs and the final state."""
    states, _ = model.trunk(x)
    return max(float(s.square().mean().sqrt()) for s in states)


@dataclass
class ProbedRun:
    """A :func:`train_probed` run.

    Attributes:
        fit: the loop's result (losses, divergence).
        at: the steps at which the scale was probed (0 first).
        scales: :func:`residual_scale` at those steps.
    """

    fit: FitResult
    at: list[int] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)

    @property
    def tail_bpb(self) -> float:
        """The mean training bits per byte over the last tenth of the steps (inf when the
        run diverged or took no step)."""
        losses = self.fit.losses
        tail = [v / _LN2 for v in losses[-max(1, len(losses) // 10) :]]
        return sum(tail) / len(tail) if self.fit.diverged is None and tail else math.inf


def train_probed(
    model: TinyGPT,
    optimizers: Sequence[torch.optim.Optimizer],
    *,
    steps: int,
    batch: int,
    warmup: int,
    probe: torch.Tensor,
    probe_every: int,
    seed: int,
) -> ProbedRun:
    """Train ``model`` on random windows of the training split (drawn from ``seed``) with a
    linear warm-up over ``warmup`` steps then a constant lr, probing
    :func:`residual_scale` on ``probe`` before training and every ``probe_every`` steps."""
    context = model.config.context
    g, data = torch.Generator().manual_seed(seed), corpus("train")
    out = ProbedRun(FitResult(), [0], [residual_scale(model, probe)])

    def after_step(step: int, loss: torch.Tensor) -> None:
        if (step + 1) % probe_every == 0:
            out.scales.append(residual_scale(model, probe))
            out.at.append(step + 1)

    out.fit = fit(
        model,
        lambda net, xy: F.cross_entropy(net(xy[0]).flatten(0, 1), xy[1].flatten()),
        lambda step: sample_batch(data, batch, context, g),
        steps,
        list(optimizers),
        schedule=lambda step: min(1.0, (step + 1) / warmup),
        after_step=after_step,
    )
    return out


def manifold_drift(steps: int = 100) -> float:
    """How far MACRO's hidden rows drift off the oblique manifold: the largest
    ``| ||row|| - 1 |`` over the blocks' matrices of a small no-norm TinyGPT (d_model 16, one
    layer, context 16, seed 0) after ``steps`` steps of :func:`macro_optimizers` (AdamW lr
    1e-3, MACRO lr 0.05) on the training split. The retraction keeps it at rounding level."""
    model = norm_free_gpt({"d_model": 16, "n_layers": 1, "n_heads": 2, "context": 16}, 0)
    opts = macro_optimizers(model, 1e-3, 0.05)
    probe = torch.zeros(1, 16, dtype=torch.long)
    train_probed(
        model, opts, steps=steps, batch=4, warmup=1, probe=probe, probe_every=steps, seed=0
    )
    hidden = opts[0].param_groups[0]["params"]
    return max(float((p.detach().norm(dim=1) - 1).abs().max()) for p in hidden)
