"""One task of a claim: a (claim, scale, seed) run or a claim's checks, its cache key and
its result record.

A task's key hashes the claim's id, scale, seed, config (with any robustness override),
the source of every normlab module the claim's module imports, directly or not,
C++ included (:mod:`normlab._sources`), and the torch and Python versions and the thread
count: a change anywhere a result depends on recomputes it. Every task runs with
:data:`THREADS` torch threads, whatever ``--jobs`` is, so results never depend on how many
tasks share the machine.

A task records its wall time and its CPU time (the process's and its children's, which a
loaded machine does not inflate). The checks task runs with Python, NumPy and torch seeded
with :data:`CHECKS_SEED` (restored afterwards), so its outcome never depends on what ran
before it in the same worker. A seed task whose primary effect is not finite although no arm
recorded a divergence is kept (the report shows it) but marked ``recompute``: a fault, not
an outcome, so the next run computes it again instead of reusing it (:func:`reusable`).
"""

from __future__ import annotations

import json
import math
import os
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from normlab._io import content_hash
from normlab._sources import closure_hash
from normlab.claims import tune_once
from normlab.claims.core import Claim, Measurement, get_claim
from normlab.claims.protocol import PLACEBO_KEY

__all__ = [
    "CHECKS",
    "CHECKS_SEED",
    "NUMERIC_LIBRARIES",
    "THREADS",
    "TaskResult",
    "claim_modules",
    "cpu_seconds",
    "library_versions",
    "reusable",
    "run_task",
    "task_config",
    "task_key",
    "usable",
]

#: The ``seed`` of a claim's checks task (it has no seed: it runs once per scale).
CHECKS = None
#: Threads every task runs with, whatever ``--jobs`` is: results never depend on how many
#: tasks share the machine (the count is recorded in each task and hashed in its key).
THREADS = 1
#: The seed of Python's, NumPy's and torch's global generators while a checks task runs.
CHECKS_SEED = 0


@dataclass(frozen=True)
class TaskResult:
    """The outcome of one task: a (claim, scale, seed) run, or a claim's checks at a scale.

    Attributes:
        claim_id: the claim's id.
        scale: the scale it ran at.
        seed: the seed, or None for the checks task.
        key: the cache key.
        status: "ok" or "error".
        measurement: the claim's measurement (a seed task) or ``{check name: {"passed",
            "value", "detail"}}`` (the checks task) when ok.
        error: the traceback when it failed.
        seconds: wall time of the task.
        threads: the torch thread count it ran with.
        override: config values changed for a robustness rerun (None for the main run).
        cpu_seconds: CPU time of the task (:func:`cpu_seconds`; None in caches written
            before it was recorded).
        recompute: the primary effect was not finite with no divergence recorded (a fault):
            the result is reported but the next run computes the task again.
        fixed: the tuned parameters the task trained at, chosen by its claim's first seed
            (:mod:`normlab.claims.tune_once`); None for a task that tuned its arms itself.
        choices: the parameters each of its ``tune_arms`` calls chose (fixed or tuned), in
            call order: what the first seed hands on to the others.
        cached: whether this result was read from the cache rather than computed now.
    """

    claim_id: str
    scale: str
    seed: int | None
    key: str
    status: str
    measurement: dict[str, Any] | None
    error: str | None
    seconds: float
    threads: int = THREADS
    override: dict[str, Any] | None = None
    cpu_seconds: float | None = None
    recompute: bool = False
    fixed: list[dict[str, Any]] | None = None
    choices: list[dict[str, Any]] | None = None
    cached: bool = False

    @property
    def is_checks(self) -> bool:
        return self.seed is None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("cached")
        return out


def claim_modules(claim: Claim) -> list[str]:
    """The modules that define a claim's functions (its run, effects, checks, figure)."""
    effects = [p for e in claim.effects for p in (e, *e.parts)]
    fns = [claim.run, claim.figure, *(e.fn for e in effects)]
    fns += [c.fn for c in claim.checks]
    fns += [p.fn for p in (*claim.premises, *claim.preconditions)]
    return sorted({f.__module__ for f in fns if f is not None and hasattr(f, "__module__")})


def task_config(claim: Claim, scale: str, override: dict[str, Any] | None = None):
    """The config a task runs with: the claim's at ``scale``, with ``override`` applied (a
    robustness rerun also takes the claim's ``figure_only`` values)."""
    rerun = bool(override) and PLACEBO_KEY not in override
    return {**claim.config(scale), **(claim.figure_only if rerun else {}), **(override or {})}


def task_key(
    claim: Claim,
    scale: str,
    seed: int | None,
    *,
    code: str | None = None,
    override: dict[str, Any] | None = None,
    fixed: list[dict[str, Any]] | None = None,
) -> str:
    """The cache key of a task: changes when the claim's config changes, the
    source of any normlab module it imports (directly or not, its C++ included) changes,
    or torch, Python, a library that can change its numbers (:func:`library_versions`)
    or the task's thread count change.

    Args:
        claim: the claim.
        scale: the scale.
        seed: the seed, or None for the checks task.
        code: the claim's :func:`~normlab._sources.closure_hash` when already computed.
        override: config values of a robustness rerun.
        fixed: the tuning seed's choices the task trains at (:mod:`normlab.claims.tune_once`).
    """
    import platform

    import torch

    at = {"fixed": fixed} if fixed is not None else {}  # a tuning task's key is unchanged
    return content_hash(
        {
            **at,
            "claim": claim.id,
            "scale": scale,
            "seed": "checks" if seed is None else seed,
            "config": task_config(claim, scale, override),
            "code": code or closure_hash(claim_modules(claim)),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "libraries": library_versions(),
            "threads": THREADS,
        }
    )


#: Libraries whose version can change a claim's numbers (numerics, data, peers).
NUMERIC_LIBRARIES = (
    "numpy",
    "scipy",
    "scikit-learn",
    "transformers",
    "torchao",
    "optimum-quanto",
    "hqq",
    "gymnasium",
    "zuko",
    "entmax",
    "optuna",
    "trl",
)


def library_versions() -> dict[str, str]:
    """The installed version of each of :data:`NUMERIC_LIBRARIES` ("absent" when not
    installed), read from package metadata without importing them (once a process: every
    task key reads them, and a metadata scan costs ~1 ms a library)."""
    return dict(_installed_versions())


@cache
def _installed_versions() -> tuple[tuple[str, str], ...]:
    from importlib import metadata

    out = []
    for name in NUMERIC_LIBRARIES:
        try:
            out.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            out.append((name, "absent"))
    return tuple(out)


def _find_claim(claim_id: str, module: str | None) -> Claim:
    """The claim ``claim_id``: from ``module``'s globals when given (so claims defined
    outside the catalogue run in workers too), else from the catalogue."""
    if module is not None:
        import importlib

        namespace = vars(importlib.import_module(module))
        for value in namespace.values():
            if isinstance(value, Claim) and value.id == claim_id:
                return value
    return get_claim(claim_id)


def cpu_seconds() -> float:
    """CPU seconds (user and system) of this process and of its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed Python's, NumPy's and torch's global generators for the block and restore the
    caller's states after it (a task run in-process must not move its caller's streams)."""
    import random

    import numpy as np
    import torch

    from normlab.claims.common import seed_everything

    states = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    seed_everything(seed)
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.random.set_rng_state(states[2])


def _run_checks(claim: Claim, config: dict[str, Any]) -> dict[str, Any]:
    out = {}
    with _seeded(CHECKS_SEED):
        for check in claim.checks:
            outcome = check.fn(config)
            value = float(outcome.value)
            out[check.name] = {
                "passed": bool(outcome.passed),
                "value": value if math.isfinite(value) else None,
                "detail": str(outcome.detail),
            }
    return out


def _faulty(claim: Claim, measurement: Measurement) -> bool:
    """Whether the primary effect (or one of its parts) is not finite on a measurement that
    records no divergence: no declared outcome explains it, so it is a fault to retry."""
    if measurement.get("diverged"):
        return False
    for effect in claim.primary.parts or (claim.primary,):
        try:
            value = float(effect.fn(measurement))
        except ArithmeticError:
            value = math.nan
        except Exception:  # a missing cell: the rule reports it as the claim's error
            return False
        if not math.isfinite(value):
            return True
    return False


def run_task(
    claim_id: str,
    scale: str,
    seed: int | None,
    module: str | None = None,
    key: str | None = None,
    override: dict[str, Any] | None = None,
    fixed: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run one task and return its :class:`TaskResult` as a dict; never raises.

    This is the function a worker process (or Ray) executes, with :data:`THREADS` torch
    threads. ``seed=None`` runs the claim's checks; ``override`` changes config values (a
    robustness rerun); ``fixed`` is the tuning seed's choices to train at.
    """
    import torch

    caller_threads = torch.get_num_threads()  # restored below: in-process tasks share it
    torch.set_num_threads(THREADS)
    start, cpu_start = time.perf_counter(), cpu_seconds()
    recompute, choices = False, None
    try:
        claim = _find_claim(claim_id, module)
        key = key or task_key(claim, scale, seed, override=override, fixed=fixed)
        config = task_config(claim, scale, override)
        if seed is None:
            measurement = _run_checks(claim, config)
        else:
            with tune_once.session(fixed) as tuning:
                measurement = claim.run(config, seed)
            choices = tuning.chosen or None
        json.dumps(measurement, allow_nan=True)  # JSON-serialisable numbers only
        if seed is not None:
            if not isinstance(measurement.get("table"), dict):
                raise TypeError("A claim's run must return a dict with a 'table'.")
            recompute = _faulty(claim, measurement)
        status, error = "ok", None
    except Exception:
        measurement, status, error = None, "error", traceback.format_exc()
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    torch.set_num_threads(caller_threads)
    return TaskResult(
        claim_id,
        scale,
        seed,
        key or "",
        status,
        measurement,
        error,
        seconds,
        THREADS,
        override,
        cpu_seconds=cpu,
        recompute=recompute,
        fixed=fixed,
        choices=choices,
    ).to_dict()


def usable(result: TaskResult) -> bool:
    """Whether an "ok" task holds a measurement a verdict can use."""
    if not isinstance(result.measurement, dict):
        return False
    return result.seed is None or isinstance(result.measurement.get("table"), dict)


def reusable(result: TaskResult) -> bool:
    """Whether a cached task may stand in for running it again: it succeeded and its
    primary was not an unexplained non-finite value (``recompute``)."""
    return result.status == "ok" and not result.recompute
