"""Maximum-likelihood training of a CDFlow (:func:`normlab.flows.cdflow`) on points.

:func:`train_flow` builds a flow of the given mixing, initialises its ActNorm layers from
data, takes Adam steps on the negative log-likelihood of random minibatches through
:func:`~normlab.training.fit.fit` (a non-finite loss stops the run), and scores the
validation and test points in nats per dimension.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from normlab.flows import cdflow, initialize_actnorm, mixing_parameters
from normlab.training.fit import fit

__all__ = ["train_flow"]


def train_flow(
    train: torch.Tensor,
    val: torch.Tensor,
    test: torch.Tensor,
    *,
    mixing: str,
    lr: float,
    steps: int,
    flow_steps: int,
    hidden: Sequence[int],
    batch: int,
    seed: int,
) -> dict[str, Any]:
    """Train a ``flow_steps``-step CDFlow with ``mixing`` on ``train`` for ``steps`` Adam steps.

    Returns:
        ``"val_nll"`` and ``"test_nll"`` (mean negative log-likelihood in nats per dimension;
        both ``inf`` when training diverged or either is non-finite), ``"mixing_params"`` and
        ``"params"`` (parameter counts, as floats) and ``"diverged"``: the divergence record
        ``{"step", "last"}`` of :class:`~normlab.training.fit.Divergence`, ``{"step": steps,
        "last": None}`` when training ended finite but a likelihood did not, or None.
    """
    torch.manual_seed(seed)
    flow = cdflow(train.shape[1], steps=flow_steps, mixing=mixing, hidden=tuple(hidden))
    initialize_actnorm(flow, train[:512])
    g = torch.Generator().manual_seed(seed)
    result = fit(
        flow,
        lambda f, xb: -f().log_prob(xb).mean(),
        lambda step: train[torch.randint(0, len(train), (batch,), generator=g)],
        steps,
        torch.optim.Adam(flow.parameters(), lr=lr),
    )
    with torch.no_grad():
        dim = train.shape[1]
        val_nll = -flow().log_prob(val).mean().item() / dim
        test_nll = -flow().log_prob(test).mean().item() / dim
    diverged = None if result.diverged is None else result.diverged.record()
    if diverged is not None or not math.isfinite(val_nll + test_nll):
        val_nll = test_nll = math.inf
        diverged = diverged or {"step": steps, "last": None}
    return {
        "val_nll": val_nll,
        "test_nll": test_nll,
        "mixing_params": float(mixing_parameters(flow)),
        "params": float(sum(p.numel() for p in flow.parameters())),
        "diverged": diverged,
    }
