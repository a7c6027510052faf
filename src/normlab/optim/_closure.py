"""The closure step of torch optimizers, shared by normlab's optimizers."""

from __future__ import annotations

from collections.abc import Callable

import torch


def closure_loss(closure: Callable[[], float] | None) -> float | None:
    """``closure()`` evaluated with gradients enabled (inside a ``no_grad`` step), or None.

    The loss re-evaluation of ``torch.optim.Optimizer.step(closure)``.
    """
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
