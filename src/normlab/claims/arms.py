"""The experiment engine: a claim declares how to train and test one arm; the engine tunes
every arm the same way, trains the seeds, and writes the measurement the effects read.

A claim gives two functions:

- ``train(arm, params, seed) -> Trained``: train ``arm`` with the tuned ``params`` (its
  search's parameters) and the training seed, and score it on *validation* (lower is
  better). The data are the claim's, built from the task's seed outside ``train``, so that
  every arm of a seed sees the same data.
- ``test(arm, trained) -> row``: the arm's test metrics (the table row), computed once,
  for the chosen parameters only (``arm`` is the arm trained; ``trained.slot`` the row
  it fills).

:func:`run_arms` tunes each arm over the config's ``"search"`` with
:func:`~normlab.claims.protocol.tune_arms` (equal grid trials, selection on validation,
edge extension on every axis, ties without a direction bias), records each arm's trivial
reference for the learned premise, the late share of its training curve for the
convergence premise, its divergence, and the chosen parameters beside its test metrics.

**The A/A placebo.** With ``config["placebo"] = {"method": M, "baseline": B}`` (set by the
runner, never by a claim), arm ``M`` is the baseline ``B`` trained again through ``M``'s
own path: ``M``'s search space, the same tuning and divergence handling, on the same data,
with a training seed of its own (:func:`placebo_seed`). Judged as if it were the method,
it must not read "supported": when it does, the comparison favours the method's path (a
wider grid, a handicapped baseline), not the method.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from normlab.claims.core import Measurement
from normlab.claims.protocol import PLACEBO_KEY, placebo_pair, reference_of, tune_arms
from normlab.training.fit import late_share

__all__ = ["Trained", "placebo_seed", "run_arms"]


@dataclass(frozen=True)
class Trained:
    """One arm trained at one setting.

    Attributes:
        val: its validation score, lower is better (a diverged run may give anything:
            the engine reads it as ``inf``).
        model: whatever ``test`` needs (the model, predictions, curves).
        diverged: ``{"step", "last"}`` of a run that diverged (e.g.
            ``FitResult.diverged.record()``), or None.
        curve: the run's lower-is-better curve in training order (e.g.
            ``FitResult.losses``), or None; the engine records the share of its
            improvement made in the last quarter for the convergence premise
            (:func:`~normlab.training.fit.late_share`).
        slot: the table row this training fills, set by the engine before ``test``: the
            arm itself, or under the A/A placebo the method's arm while ``model`` holds
            the baseline. A test that writes rows beside its own (a twin's, e.g.
            ngpt-fp4's ``"<arm>-fp4"``) keys them by ``slot``, so the placebo's rows land
            where the primary reads the method's.
    """

    val: float
    model: Any = None
    diverged: Mapping[str, Any] | None = None
    curve: Sequence[float] | None = None
    slot: str = ""


def placebo_seed(seed: int) -> int:
    """The training seed of the placebo arm: distinct from every main seed's, fixed per
    seed (so the placebo is reproducible and cached like any task)."""
    return 1_000_003 + seed


def run_arms(
    config: Mapping[str, Any],
    seed: int,
    train: Callable[[str, dict[str, Any], int], Trained],
    test: Callable[[str, Trained], Mapping[str, float]],
    *,
    reference: float | Mapping[str, float] | Callable[[str], float],
    arms: Sequence[str] | None = None,
) -> Measurement:
    """Tune, train and test every arm of the config's search for one seed.

    Args:
        config: the claim's config at this scale (its ``"search"``; ``"placebo"`` when the
            runner asks for the A/A placebo).
        seed: the task's seed (the training seed of every arm but the placebo's).
        train: ``(arm, params, seed) -> Trained``, scored on validation.
        test: ``(arm, trained) -> {metric: value}`` on test, for the chosen setting.
        reference: each arm's trivial reference on the validation scale (see
            :func:`~normlab.claims.protocol.tune_arms`).
        arms: a subset of the search's arms (default: all).

    Returns:
        The measurement: ``"table"`` (arm -> test metrics and the chosen parameters),
        ``"tuning"`` (the placebo arm's record marked ``"placebo_of"``; ``"late_share"``
        for an arm whose chosen run gave a curve) and ``"diverged"``.
    """
    placebo = placebo_pair(config)

    def source(arm: str) -> tuple[str, int]:
        """The arm actually trained and its training seed: under the placebo, the method's
        arm trains the baseline with a seed of its own (the pair differs by training
        noise alone)."""
        if placebo is not None and arm == placebo[0]:
            return placebo[1], placebo_seed(seed)
        return arm, seed

    def evaluate(arm: str, params: dict[str, Any]) -> tuple[float, Trained]:
        name, training_seed = source(arm)
        t = train(name, params, training_seed)
        val = float(t.val)
        return (val if t.diverged is None and math.isfinite(val) else math.inf), t

    # the engine redirects the placebo itself (with its seed), so tune_arms sees no request
    plain = {k: v for k, v in config.items() if k != PLACEBO_KEY}
    tuned, records = tune_arms(
        plain, evaluate, arms, reference=lambda arm: reference_of(reference, source(arm)[0])
    )
    if placebo is not None and placebo[0] in records:
        records[placebo[0]]["placebo_of"] = placebo[1]
    table: dict[str, dict[str, Any]] = {}
    diverged: dict[str, Any] = {}
    for arm, t in tuned.items():
        trained: Trained = t.result
        if trained.diverged is not None:
            diverged[arm] = dict(trained.diverged)
        elif trained.curve is not None:
            share = late_share(trained.curve)
            records[arm]["late_share"] = share if math.isfinite(share) else None
        row = test(source(arm)[0], replace(trained, slot=arm))
        table[arm] = {**dict(row), **t.chosen}
    return {"table": table, "tuning": records, "diverged": diverged}
