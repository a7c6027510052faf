"""Training-dynamics probes: effective learning rates and normalization-layer curvature.

Effective learning rate (``normlab.papers.paper("delayed-spike")``): for a scale-invariant
weight ``w`` (one followed by a normalization, so ``L(c w) = L(w)``) a gradient step of size
``lr`` moves the direction ``w/||w||`` as a step of ``lr / ||w||^2`` would on the unit
sphere. :class:`EffectiveLR` records ``lr / ||w||^2`` per optimizer parameter group after
each step, in any training loop.

Curvature (``normlab.papers.paper("curvature-spikes")``): the Jacobian of LayerNorm at a
token ``x`` is ``J = diag(g)/s (I - 11^T/d - xh xh^T/d)`` with ``s = sqrt(var(x) + eps)`` and
``xh = (x - mean)/s``; RMSNorm's is ``diag(g)/r (I - xh xh^T/d)`` with ``r = rms(x)`` (``eps``
inside). With unit gains the bracket is a projection, so ``||J||_2 = 1/s``: the layer's
sensitivity grows as its input's spread shrinks. :func:`norm_curvature` records the spectral
norm of every token's Jacobian at every LayerNorm/RMSNorm in a model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from normlab._records import Record

__all__ = [
    "EffectiveLR",
    "EffectiveLRRecord",
    "NormCurvature",
    "effective_lr",
    "norm_curvature",
    "norm_jacobian",
]


def effective_lr(optimizer: torch.optim.Optimizer) -> list[float]:
    """``lr / ||w||^2`` for each parameter group, ``||w||`` over all the group's parameters."""
    out = []
    for group in optimizer.param_groups:
        sq = sum(float(p.detach().double().square().sum()) for p in group["params"])
        out.append(float(group["lr"]) / sq if sq > 0 else float("inf"))
    return out


@dataclass(frozen=True)
class EffectiveLRRecord(Record):
    """One recorded step: ``lr``, ``||w||^2`` and ``lr / ||w||^2`` per parameter group."""

    step: int
    lr: tuple[float, ...]
    norm_sq: tuple[float, ...]
    effective_lr: tuple[float, ...]


class EffectiveLR:
    """Records the effective learning rate of every parameter group after each step.

    Call :meth:`record` after ``optimizer.step()`` (or anywhere); it only reads.

    Args:
        optimizer: the optimizer whose groups hold the scale-invariant weights.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.history: list[EffectiveLRRecord] = []

    def record(self, step: int | None = None) -> EffectiveLRRecord:
        """Append and return the current record (``step`` defaults to the count so far)."""
        lrs, sqs = [], []
        for group in self.optimizer.param_groups:
            lrs.append(float(group["lr"]))
            sqs.append(sum(float(p.detach().double().square().sum()) for p in group["params"]))
        eff = tuple(lr / sq if sq > 0 else float("inf") for lr, sq in zip(lrs, sqs, strict=True))
        rec = EffectiveLRRecord(
            len(self.history) if step is None else step, tuple(lrs), tuple(sqs), eff
        )
        self.history.append(rec)
        return rec

    def series(self, group: int = 0) -> list[float]:
        """The recorded effective learning rates of one group, in order."""
        return [r.effective_lr[group] for r in self.history]


def norm_jacobian(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, *, centre: bool = True
) -> torch.Tensor:
    """Closed-form Jacobians ``(..., d, d)`` of LayerNorm (``centre``) or RMSNorm at ``x``."""
    d = x.shape[-1]
    xc = x - x.mean(-1, keepdim=True) if centre else x
    s = torch.sqrt(xc.square().mean(-1, keepdim=True) + eps)
    xh = xc / s
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    bracket = eye - xh.unsqueeze(-1) * xh.unsqueeze(-2) / d
    if centre:
        bracket = bracket - 1.0 / d
    jac = bracket / s.unsqueeze(-1)
    if weight is not None:
        jac = weight.to(x.dtype).unsqueeze(-1) * jac
    return jac


@dataclass(frozen=True)
class NormCurvature(Record):
    """Spectral norms of the Jacobians of each norm layer on one batch.

    Attributes:
        sites: module names of the norm layers, in forward order.
        max: per site, the largest token Jacobian spectral norm.
        mean: per site, the mean over tokens.
        min_scale: per site, the smallest input spread ``s`` (std or rms) over tokens.
    """

    sites: tuple[str, ...]
    max: tuple[float, ...]
    mean: tuple[float, ...]
    min_scale: tuple[float, ...]

    @property
    def overall_max(self) -> float:
        return max(self.max) if self.max else float("nan")


def _norm_kind(module: nn.Module) -> str | None:
    name = type(module).__name__
    if isinstance(module, nn.LayerNorm) or name == "LayerNorm":
        return "layernorm"
    if name == "RMSNorm":
        return "rmsnorm"
    return None


@torch.no_grad()
def norm_curvature(
    model: nn.Module,
    forward: Callable[[nn.Module], object],
    *,
    max_tokens: int = 4096,
    sites: Iterable[str] | None = None,
) -> NormCurvature:
    """Jacobian spectral norms at every LayerNorm/RMSNorm while ``forward(model)`` runs.

    Args:
        model: any module; its LayerNorm/RMSNorm submodules (torch's or normlab's, over the
            last axis) are probed through forward hooks that are removed afterwards.
        forward: runs the model on a batch, e.g. ``lambda m: m(x)``.
        max_tokens: probe at most this many tokens per site (the first ones).
        sites: module names to probe; all norm layers when None.
    """
    wanted = None if sites is None else set(sites)
    found: dict[str, tuple[float, float, float]] = {}
    handles = []
    for name, module in model.named_modules():
        kind = _norm_kind(module)
        if kind is None or (wanted is not None and name not in wanted):
            continue

        def hook(mod: nn.Module, inputs: tuple, output: object, name=name, kind=kind) -> None:
            x = inputs[0].detach().double().reshape(-1, inputs[0].shape[-1])[:max_tokens]
            eps = getattr(mod, "eps", None)
            eps = torch.finfo(inputs[0].dtype).eps if eps is None else float(eps)
            weight = getattr(mod, "weight", None)
            jac = norm_jacobian(
                x,
                None if weight is None else weight.detach().double(),
                eps,
                centre=kind == "layernorm",
            )
            norms = torch.linalg.matrix_norm(jac, ord=2)
            xc = x - x.mean(-1, keepdim=True) if kind == "layernorm" else x
            scale = torch.sqrt(xc.square().mean(-1) + eps)
            found[name] = (float(norms.max()), float(norms.mean()), float(scale.min()))

        handles.append(module.register_forward_hook(hook))
    was_training = model.training
    try:
        forward(model)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    names = tuple(found)
    return NormCurvature(
        names,
        tuple(found[n][0] for n in names),
        tuple(found[n][1] for n in names),
        tuple(found[n][2] for n in names),
    )
