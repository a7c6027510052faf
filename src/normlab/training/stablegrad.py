"""Adam with and without StableGrad on the StableGrad testbeds: a tanh PINN on the 1D
Poisson problem and a BN-free residual CNN on the digits (:mod:`normlab.models.pinn`).

:func:`stablegrad_invariance` measures what StableGrad promises a PINN (an untouched
forward, equal weight-gradient stds). Each trainer goes through
:func:`~normlab.training.fit.fit` and returns a :class:`Run`: the trained model, its
validation score and its divergence (None when it finished). The optimizer is named by
kind: ``"adam"``, ``"stablegrad"`` (Adam + StableGrad with the paper's reference, the std
of the gradient reaching the network output, watched every step) or ``"stablegrad-last"``
(the last layer's gradient std).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from normlab.data.images import ImageSplit
from normlab.models.pinn import PINN, ResidualCNN, poisson_loss
from normlab.optim import StableGrad
from normlab.training.fit import Divergence, EpochBatches, fit

__all__ = [
    "OPTIMIZERS",
    "Run",
    "accuracy",
    "make_optimizer",
    "stablegrad_invariance",
    "train_digits_cnn",
    "train_pinn",
]

#: The optimizer kinds :func:`make_optimizer` builds.
OPTIMIZERS = ("adam", "stablegrad", "stablegrad-last")


@dataclass(frozen=True)
class Run:
    """One trained model.

    Attributes:
        model: the trained module.
        val: its validation score (the PINN's held-out physics loss, lower is better; the
            CNN's held-out accuracy, higher is better).
        diverged: where it diverged, or None.
        curve: the training loss of every completed step, in order (for the convergence
            premise).
    """

    model: torch.nn.Module
    val: float
    diverged: Divergence | None
    curve: list[float] = field(default_factory=list)


def make_optimizer(model: torch.nn.Module, kind: str, lr: float) -> torch.optim.Optimizer:
    """Adam over ``model``'s parameters, wrapped in StableGrad unless ``kind`` is "adam"."""
    if kind not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer kind {kind!r}; expected one of {OPTIMIZERS}.")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    if kind == "adam":
        return opt
    return StableGrad(opt, reference="last" if kind.endswith("last") else "output")


def _watched(opt: torch.optim.Optimizer, kind: str, loss: torch.Tensor, out: torch.Tensor):
    """The loss, after StableGrad's output reference has watched the network output."""
    if kind == "stablegrad":
        opt.watch(out)
    return loss


def train_pinn(
    kind: str, lr: float, *, depth: int, width: int, steps: int, points: int, seed: int
) -> Run:
    """Train a :class:`~normlab.models.pinn.PINN` on fresh uniform collocation points each
    step; validation is the physics loss on 256 held-out points (no use of the exact
    solution). A run whose held-out loss is not finite after the last step diverged there.

    Args:
        kind: the optimizer (see :data:`OPTIMIZERS`).
        lr: Adam's learning rate.
        depth: the PINN's tanh layers.
        width: their units.
        steps: optimizer steps (0: the untrained model, the trivial reference).
        points: collocation points per step.
        seed: initialisation, collocation points and held-out points.
    """
    torch.manual_seed(seed)
    model = PINN(depth, width)
    opt = make_optimizer(model, kind, lr)
    g = torch.Generator().manual_seed(seed)
    held_out = torch.rand(256, 1, generator=torch.Generator().manual_seed(90_000 + seed))
    result = fit(
        model,
        lambda m, x: _watched(opt, kind, *poisson_loss(m, x)),
        lambda step: torch.rand(points, 1, generator=g),
        steps,
        opt,
    )
    if result.diverged is not None:
        return Run(model, math.inf, result.diverged, result.losses)
    val = poisson_loss(model, held_out)[0].item()
    if not math.isfinite(val):
        return Run(model, val, Divergence(result.steps, result.final_loss), result.losses)
    return Run(model, val, None, result.losses)


def train_digits_cnn(
    data: ImageSplit,
    kind: str,
    lr: float,
    *,
    blocks: int,
    width: int,
    epochs: int,
    batch: int,
    seed: int,
    train_size: int | None = None,
) -> Run:
    """Train a :class:`~normlab.models.pinn.ResidualCNN` on the first ``train_size``
    training images (all when None), a seeded fifth of them held out for validation
    (the run's ``val`` is the accuracy there)."""
    torch.manual_seed(seed)
    model = ResidualCNN(blocks, width)
    opt = make_optimizer(model, kind, lr)
    g = torch.Generator().manual_seed(seed)
    n = min(len(data.train_y), train_size or len(data.train_y))
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    val, train = order[: n // 5], order[n // 5 :]
    batches = EpochBatches(len(train), batch, g)

    def loss_fn(m: torch.nn.Module, pos: torch.Tensor) -> torch.Tensor:
        out = m(data.train_x[train[pos]])
        return _watched(opt, kind, F.cross_entropy(out, data.train_y[train[pos]]), out)

    result = fit(model, loss_fn, batches, batches.steps(epochs), opt)
    acc = accuracy(model, data.train_x[val], data.train_y[val])
    return Run(model, acc, result.diverged, result.losses)


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The share of ``x`` whose arg-max class is ``y``."""
    return float((model(x).argmax(1) == y).float().mean())


def stablegrad_invariance(depth: int = 6, width: int = 8, points: int = 32) -> tuple[bool, float]:
    """What StableGrad (last-layer reference) must do to a PINN: ``(same, worst)``, where
    ``same`` says the output and the physics loss are bit-identical with and without it
    (before and after a zero-lr step) and ``worst`` is the largest ``|std(G_l) / s - 1|``
    over weight matrices after its rescaling (``s`` the reference std), ideally 0."""
    torch.manual_seed(0)
    a, b = PINN(depth, width), PINN(depth, width)
    b.load_state_dict(a.state_dict())
    x = torch.rand(points, 1, generator=torch.Generator().manual_seed(0))
    opt = StableGrad(torch.optim.SGD(a.parameters(), lr=0.0), reference="last")
    la, ua = poisson_loss(a, x)
    lb, ub = poisson_loss(b, x)
    same = bool(torch.equal(ua, ub) and torch.equal(la, lb))
    params = list(a.parameters())
    for p, grad in zip(params, torch.autograd.grad(la, params), strict=True):
        p.grad = grad
    ref = opt.reference_std()
    opt.step()
    stds = [float(p.grad.double().std(correction=0)) for p in a.parameters() if p.dim() >= 2]
    worst = max(abs(s / ref - 1.0) for s in stds)
    return same and bool(torch.equal(a(x), b(x))), worst
