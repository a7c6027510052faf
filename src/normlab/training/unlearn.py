"""Machine unlearning by gradient ascent: make a trained classifier forget a set of examples.

Gradient ascent (``grad-ascent``) maximises the cross-entropy on the forget set; NegGrad+
(``neggrad+``) does the same while minimising it on a retain set, so that the rest of the
task survives. Both run through :func:`~normlab.training.fit.fit` until the model's accuracy
on the forget set falls to a target. In train mode a BatchNorm network normalizes by batch
statistics and keeps updating its running statistics, which is where the BatchNorm
unlearning paper (``paper("bn-unlearning")``) finds forgotten information surviving.

:func:`recalibration_gap` measures that paper's artifact: unlearn, then recompute the
BatchNorm running statistics in one weight-free pass
(:func:`~normlab.surgery.batchnorm.recalibrate_bn`) and read how much forget accuracy
comes back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normlab.surgery.batchnorm import recalibrate_bn
from normlab.training.fit import Divergence, fit

__all__ = ["UNLEARN_METHODS", "UNLEARN_MODES", "recalibration_gap", "unlearn"]

#: Unlearning methods :func:`unlearn` offers.
UNLEARN_METHODS = ("grad-ascent", "neggrad+")
#: Modes the unlearning steps run in: "train" (BatchNorm uses and updates batch statistics)
#: or "eval" (running statistics frozen).
UNLEARN_MODES = ("train", "eval")


@torch.no_grad()
def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    was = model.training
    model.eval()
    acc = float((model(x).argmax(1) == y).float().mean())
    model.train(was)
    return acc


def _batch(n: int, size: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, n, (min(size, n),), generator=generator)


def unlearn(
    model: nn.Module,
    method: str,
    forget: tuple[torch.Tensor, torch.Tensor],
    retain: tuple[torch.Tensor, torch.Tensor],
    *,
    lr: float,
    batch: int,
    stop_acc: float,
    max_steps: int,
    generator: torch.Generator,
    mode: str = "train",
) -> tuple[int, Divergence | None]:
    """Unlearn the ``forget`` set in place with ``method`` (one of :data:`UNLEARN_METHODS`).

    grad-ascent minimises ``-CE(forget)``; neggrad+ minimises ``-CE(forget) + CE(retain)``
    (separate forward passes, as in common implementations), each step on ``batch``
    examples drawn with replacement. SGD with momentum 0.9 runs until the eval-mode
    accuracy on the forget set is <= ``stop_acc`` (checked after every step) or for
    ``max_steps`` steps. The model is left in eval mode.

    Args:
        model: a classifier giving logits ``(n, classes)``.
        method: "grad-ascent" or "neggrad+".
        forget: the inputs and labels to forget.
        retain: the inputs and labels to keep (read by neggrad+ only).
        lr: SGD learning rate.
        batch: examples per step from each set.
        stop_acc: the forget accuracy at which to stop.
        max_steps: the most steps to take.
        generator: draws the batches.
        mode: "train" runs the steps in train mode (BatchNorm normalizes by batch
            statistics and updates its running statistics); "eval" freezes them.

    Returns:
        The number of steps taken and the divergence, if the loss turned non-finite.

    Raises:
        ValueError: for an unknown method or mode.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> torch.manual_seed(0) and None
        >>> net = nn.Sequential(nn.Linear(4, 3))
        >>> x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
        >>> before = float((net(x).argmax(1) == y).float().mean())
        >>> steps, div = unlearn(net, "grad-ascent", (x, y), (x, y), lr=0.5, batch=8,
        ...                      stop_acc=0.25, max_steps=200, generator=torch.Generator())
        >>> after = float((net(x).argmax(1) == y).float().mean())
        >>> div is None, steps < 200, before > 0.25 >= after  # stopped once forgotten
        (True, True, True)
    """
    if method not in UNLEARN_METHODS or mode not in UNLEARN_MODES:
        raise ValueError(
            f"method must be one of {UNLEARN_METHODS} and mode one of {UNLEARN_MODES}; "
            f"got {method!r}, {mode!r}."
        )

    def draw(step: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        i = _batch(len(forget[1]), batch, generator)
        return i, _batch(len(retain[1]), batch, generator) if method == "neggrad+" else None

    def loss_fn(m: nn.Module, ij: tuple[torch.Tensor, torch.Tensor | None]) -> torch.Tensor:
        i, j = ij
        loss = -F.cross_entropy(m(forget[0][i]), forget[1][i])
        if j is not None:
            loss = loss + F.cross_entropy(m(retain[0][j]), retain[1][j])
        return loss

    result = fit(
        model,
        loss_fn,
        draw,
        max_steps,
        torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
        stop=lambda m: _accuracy(m, *forget) <= stop_acc,
        train_mode=mode == "train",
    )
    model.eval()
    return result.steps, result.diverged


Pair = tuple[torch.Tensor, torch.Tensor]


def recalibration_gap(
    model: nn.Module,
    method: str,
    mode: str,
    data: dict[str, Pair],
    loaders: dict[str, list[tuple[torch.Tensor]]],
    *,
    lr: float,
    batch: int,
    stop_acc: float,
    max_steps: int,
    generator: torch.Generator,
) -> tuple[dict[str, float], Divergence | None]:
    """Unlearn ``data["forget"]`` from the trained ``model`` (in place, :func:`unlearn`), then
    recalibrate its BatchNorm statistics over ``loaders["retain"]`` and, from the same
    unlearned state, over ``loaders["attacker"]`` (a few unlabelled images).

    Row: eval-mode forget accuracy trained (``forget_acc_trained``), right after unlearning
    (``forget_acc``), after each recalibration (``forget_acc_recalibrated``,
    ``forget_acc_attacker``), accuracy on ``data["test"]`` (the retained classes) before and
    after, the running means' relative shift, the steps taken, ``recal_gap`` (recalibrated
    minus unlearned forget accuracy: the artifact, provably due to the statistics since no
    weight changes) and ``attacker_fraction`` (the attacker's rise over the full one, the
    latter floored at 0.01). The model is left at the attacker's recalibration.

    Examples:
        >>> import torch
        >>> from normlab.data.images import forget_retain_split, load_digits_tensors
        >>> from normlab.models.bn_cnn import bn_cnn
        >>> sets, loaders = forget_retain_split(load_digits_tensors(0), 1, batch=64,
        ...     attacker_images=10, generator=torch.Generator().manual_seed(0))
        >>> row, div = recalibration_gap(bn_cnn(8, 2, seed=0), "grad-ascent", "train", sets,
        ...     loaders, lr=1e-2, batch=32, stop_acc=0.05, max_steps=3,
        ...     generator=torch.Generator().manual_seed(0))
        >>> div is None, row["recal_gap"] == row["forget_acc_recalibrated"] - row["forget_acc"]
        (True, True)
    """
    forget = data["forget"]

    def metric(m: nn.Module) -> dict[str, float]:
        return {
            "forget_acc": _accuracy(m, *forget),
            "retain_test_acc": _accuracy(m, *data["test"]),
        }

    row = {"forget_acc_trained": _accuracy(model, *forget)}
    steps, div = unlearn(
        model,
        method,
        forget,
        data["retain"],
        lr=lr,
        batch=batch,
        stop_acc=stop_acc,
        max_steps=max_steps,
        generator=generator,
        mode=mode,
    )
    unlearned = {k: v.clone() for k, v in model.state_dict().items()}
    full = recalibrate_bn(model, loaders["retain"], metric=metric)
    model.load_state_dict(unlearned)
    attack = recalibrate_bn(model, loaders["attacker"], metric=metric)
    row.update(
        forget_acc=full.before["forget_acc"],
        forget_acc_recalibrated=full.after["forget_acc"],
        forget_acc_attacker=attack.after["forget_acc"],
        retain_test_acc=full.before["retain_test_acc"],
        retain_test_acc_recalibrated=full.after["retain_test_acc"],
        bn_mean_shift=full.mean_shift,
        unlearn_steps=float(steps),
    )
    row["recal_gap"] = row["forget_acc_recalibrated"] - row["forget_acc"]
    attack_gap = row["forget_acc_attacker"] - row["forget_acc"]
    row["attacker_fraction"] = attack_gap / max(row["recal_gap"], 0.01)
    return row, div
