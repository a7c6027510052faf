"""One training loop for every model normlab trains: batches, steps, optimizer groups, a
learning-rate schedule, gradient clipping, evaluations, progress, and divergence as an
outcome.

A run whose loss turns non-finite (or exceeds ``diverge_above``) stops there and returns a
:class:`Divergence` (the step and the last finite loss) instead of raising: a diverged arm
is a result the claims count (see :mod:`normlab.claims.protocol`), never an error.
:class:`EpochBatches` feeds it epochs of shuffled minibatches.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from normlab._progress import report_progress

__all__ = ["Divergence", "EpochBatches", "FitResult", "fit", "late_share"]

Batch = Any


@dataclass(frozen=True)
class Divergence:
    """Where a run diverged: the step whose loss was not finite (or too large), and the
    last finite training loss before it (NaN when the first step diverged)."""

    step: int
    last: float

    def record(self) -> dict[str, Any]:
        """The JSON record a claim writes under its measurement's ``"diverged"``."""
        return {"step": self.step, "last": self.last if math.isfinite(self.last) else None}


@dataclass
class FitResult:
    """What :func:`fit` did.

    Attributes:
        steps: optimizer steps completed.
        losses: the training loss of every completed step.
        evals: ``(step, value)`` of every evaluation.
        diverged: the :class:`Divergence`, or None when the run finished.
        seconds: wall time of the loop.
    """

    steps: int = 0
    losses: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    diverged: Divergence | None = None
    seconds: float = 0.0

    @property
    def final_loss(self) -> float:
        """The last step's training loss (NaN when no step completed)."""
        return self.losses[-1] if self.losses else math.nan


def late_share(curve: Sequence[float], window: float = 0.1) -> float:
    """The share of a run's improvement that came in its last quarter: how far from
    converged a lower-is-better curve (training losses per step, validation scores per
    evaluation) still was when training stopped.

    ``(c(3/4) - c(end)) / (c(start) - c(end))``, each ``c`` the mean of a window of
    ``window`` of the curve's points (at least one) at the start, ending at three quarters,
    and at the end. About 0 for a run that had converged, 0.28 for one still improving at
    a constant rate. NaN when the curve has fewer than 4 points or a non-finite one, or
    did not improve overall (the learned premise judges that). An early-stopped run's
    curve is best given as its best-so-far validation score, which does not rise.

    >>> round(late_share([1.0 / (1 + t) for t in range(400)]), 3)
    0.009
    >>> round(late_share([1.0 - t / 400 for t in range(400)]), 2)
    0.28
    """
    values = [float(v) for v in curve]
    n = len(values)
    if n < 4 or not all(math.isfinite(v) for v in values):
        return math.nan
    k = max(1, round(window * n))
    three_quarters = round(0.75 * n)

    def mean(lo: int, hi: int) -> float:
        return sum(values[lo:hi]) / (hi - lo)

    start, late, end = mean(0, k), mean(three_quarters - k, three_quarters), mean(n - k, n)
    total = start - end
    return (late - end) / total if total > 0 else math.nan


class EpochBatches:
    """``step -> index batch``: epochs of shuffled minibatches of ``range(n)``, for :func:`fit`.

    At each epoch's first step a fresh permutation of ``range(n)`` is drawn from
    ``generator`` (its first ``take`` entries when given: a random subset per epoch) and
    cut into batches of ``batch`` in order, the last one short unless ``drop_last``. Steps
    must be asked for in order, as :func:`fit` does.

    Args:
        n: the number of examples.
        batch: examples per batch.
        generator: the source of every permutation.
        take: examples used per epoch (None: all ``n``).
        drop_last: leave out a short last batch.
    """

    def __init__(
        self,
        n: int,
        batch: int,
        generator: torch.Generator,
        *,
        take: int | None = None,
        drop_last: bool = False,
    ) -> None:
        if n < 1 or batch < 1:
            raise ValueError(f"EpochBatches needs n >= 1 and batch >= 1, got {n} and {batch}.")
        self.n, self.batch, self.generator = n, batch, generator
        self.used = n if take is None else min(take, n)
        self.per_epoch = self.used // batch if drop_last else math.ceil(self.used / batch)
        if self.per_epoch < 1:
            raise ValueError(f"batch {batch} is larger than the {self.used} examples per epoch.")
        self._order = torch.empty(0, dtype=torch.long)

    def steps(self, epochs: int) -> int:
        """Optimizer steps in ``epochs`` epochs."""
        return epochs * self.per_epoch

    def size(self, step: int) -> int:
        """The number of examples in ``step``'s batch."""
        return min(self.batch, self.used - step % self.per_epoch * self.batch)

    def __call__(self, step: int) -> torch.Tensor:
        i = step % self.per_epoch
        if i == 0:
            self._order = torch.randperm(self.n, generator=self.generator)[: self.used]
        return self._order[i * self.batch : (i + 1) * self.batch]


def _batches(batches: Callable[[int], Batch] | Iterable[Batch]) -> Callable[[int], Batch]:
    if callable(batches):
        return batches
    iterator: Iterator[Batch] = iter(batches)

    def take(step: int) -> Batch:
        try:
            return next(iterator)
        except StopIteration:
            raise ValueError(
                f"The batches ran out at step {step}; pass more batches, fewer steps, or a "
                "function step -> batch."
            ) from None

    return take


def fit(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.nn.Module, Batch], torch.Tensor],
    batches: Callable[[int], Batch] | Iterable[Batch],
    steps: int,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
    *,
    schedule: Callable[[int], float] | None = None,
    grad_clip: float = 0.0,
    seed: int | None = None,
    eval_fn: Callable[[torch.nn.Module], float] | None = None,
    eval_every: int = 0,
    after_step: Callable[[int, torch.Tensor], None] | None = None,
    progress: str | None = None,
    diverge_above: float = math.inf,
    stop: Callable[[torch.nn.Module], bool] | None = None,
    train_mode: bool = True,
) -> FitResult:
    """Train ``model`` for ``steps`` optimizer steps.

    Args:
        model: the module; put in ``train_mode`` before every step.
        loss_fn: ``(model, batch) -> scalar loss``.
        batches: ``step -> batch`` or an iterable of batches.
        steps: optimizer steps.
        optimizers: one optimizer or several (e.g. MACRO for matrices, AdamW for the rest).
        schedule: ``step -> factor`` on every group's initial learning rate (warm-up,
            decay); None keeps the rates fixed.
        grad_clip: global gradient-norm clip over the model's parameters (0 disables).
        seed: seed torch's global generator first (dropout, sampling inside the loss).
        eval_fn: ``model -> value`` evaluated every ``eval_every`` steps and at the end.
        eval_every: evaluation period in steps (0: only at the end).
        after_step: ``(step, loss) -> None`` after each optimizer step (projections such as
            nGPT's renormalisation, logging).
        progress: a label for :func:`normlab._progress.report_progress`, or None.
        diverge_above: a finite loss above this also counts as divergence.
        stop: ``model -> bool`` asked before every step; True ends the run there (a goal
            reached, not a divergence).
        train_mode: the mode the model takes before every step; False trains in eval mode
            (e.g. BatchNorm with its running statistics frozen).
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}.")
    opts = [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else list(optimizers)
    if not opts:
        raise ValueError("fit needs at least one optimizer.")
    if seed is not None:
        torch.manual_seed(seed)
    for opt in opts:
        for group in opt.param_groups:
            group.setdefault("initial_lr", group["lr"])
    take = _batches(batches)
    params = [p for p in model.parameters() if p.requires_grad]
    result = FitResult()
    start = time.perf_counter()
    for step in range(steps):
        if stop is not None and stop(model):
            break
        if schedule is not None:
            factor = float(schedule(step))
            for opt in opts:
                for group in opt.param_groups:
                    group["lr"] = group["initial_lr"] * factor
        model.train(train_mode)
        loss = loss_fn(model, take(step))
        value = float(loss.detach())
        if not math.isfinite(value) or value > diverge_above:
            result.diverged = Divergence(step, result.final_loss)
            break
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        for opt in opts:
            opt.step()
        result.steps = step + 1
        result.losses.append(value)
        if after_step is not None:
            after_step(step, loss.detach())
        if progress is not None:
            report_progress(progress, step + 1, steps)
        if eval_fn is not None and eval_every and (step + 1) % eval_every == 0:
            result.evals.append((step + 1, float(eval_fn(model))))
    if (
        eval_fn is not None
        and result.diverged is None
        and (not result.evals or result.evals[-1][0] != result.steps)
    ):
        result.evals.append((result.steps, float(eval_fn(model))))
    result.seconds = time.perf_counter() - start
    return result
