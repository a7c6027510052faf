"""Maximum-likelihood training of a CDFlow (:func:`normlab.flows.cdflow`) on points.

:func:`train_flow` builds a flow of the given mixing, initialises its ActNorm layers from
data, takes Adam steps on the negative log-likelihood of random minibatches through
:func:`~normlab.training.fit.fit` (a non-finite loss stops the run), and scores the
validation and test points in nats per dimension. :func:`flow_splits` gives the claim's data
sets (two moons, 8x8 digits) as train, validation and test points.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch

from normlab.data.toy import digits, standardize, two_moons
from normlab.flows import cdflow, initialize_actnorm, mixing_parameters
from normlab.training.fit import fit

__all__ = ["DATASETS", "flow_splits", "train_flow"]

#: The data sets :func:`flow_splits` builds.
DATASETS = ("moons", "digits")


def flow_splits(
    name: str, g: torch.Generator, moons_train: int = 4000
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(train, val, test)`` points of ``name`` (one of :data:`DATASETS`): two moons
    (``moons_train`` training points, 2000 test points, standardized on the training ones)
    or the 8x8 digits; validation is the last 15% of the training points."""
    if name == "moons":
        train, test = standardize(two_moons(moons_train, g), two_moons(2000, g))
    elif name == "digits":
        train, test = digits(g)
    else:
        raise ValueError(f"Unknown data set {name!r}; expected one of {DATASETS}.")
    cut = int(0.85 * len(train))
    return train[:cut], train[cut:], test


def _best_so_far(values: Sequence[float]) -> list[float]:
    out: list[float] = []
    for v in values:
        out.append(v if not out or not v >= out[-1] else out[-1])  # NaN stays NaN
    return out


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
    evals: int = 0,
) -> dict[str, Any]:
    """Train a ``flow_steps``-step CDFlow with ``mixing`` on ``train`` for ``steps`` Adam steps.

    With ``evals > 0`` the validation NLL is computed ``evals`` times, evenly over the run
    (and at the end), and the flow returned is the one with the best of them (early
    stopping on validation, so a long budget cannot overfit the small data sets).

    Returns:
        ``"val_nll"`` and ``"test_nll"`` (mean negative log-likelihood in nats per dimension;
        both ``inf`` when training diverged or either is non-finite), ``"mixing_params"`` and
        ``"params"`` (parameter counts, as floats) and ``"diverged"``: the divergence record
        ``{"step", "last"}`` of :class:`~normlab.training.fit.Divergence`, ``{"step": steps,
        "last": None}`` when training ended finite but a likelihood did not, or None, and
        ``"curve"``: with ``evals``, the best validation NLL so far (nats per dimension) at
        each evaluation (the NLL of the flow early stopping would return had the run ended
        there), else the training NLL (nats per sample) of every completed step, in order.
    """
    torch.manual_seed(seed)
    flow = cdflow(train.shape[1], steps=flow_steps, mixing=mixing, hidden=tuple(hidden))
    initialize_actnorm(flow, train[:512])
    g = torch.Generator().manual_seed(seed)
    dim = train.shape[1]
    best: dict[str, Any] = {"val": math.inf, "state": None}

    @torch.no_grad()
    def validate(f: torch.nn.Module) -> float:
        value = -f().log_prob(val).mean().item() / dim
        if value < best["val"]:  # NaN never is
            best["val"], best["state"] = value, copy.deepcopy(f.state_dict())
        return value

    result = fit(
        flow,
        lambda f, xb: -f().log_prob(xb).mean(),
        lambda step: train[torch.randint(0, len(train), (batch,), generator=g)],
        steps,
        torch.optim.Adam(flow.parameters(), lr=lr, foreach=True),  # bit-identical, fewer calls
        eval_fn=validate if evals > 0 else None,
        eval_every=max(1, steps // evals) if evals > 0 else 0,
    )
    if evals > 0 and result.diverged is None and best["state"] is not None:
        flow.load_state_dict(best["state"])
    with torch.no_grad():
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
        "curve": _best_so_far([v for _, v in result.evals]) if evals > 0 else result.losses,
    }
