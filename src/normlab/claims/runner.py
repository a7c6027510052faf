"""Run claims as tasks, caching each finished task on disk.

A claim at a scale is one task per seed (``claim.run(config, seed)``) plus, when it has
implementation checks, one *checks* task that runs every :class:`~normlab.claims.core.Check`
once. Every finished task is written atomically to ``OUT/tasks/`` under a key that hashes
the claim's id, scale, seed, config and version and the source of every normlab module the
claim's module imports, directly or not (:mod:`normlab._sources`): a run killed at any
moment resumes without recomputing finished work, and a change anywhere in the code a claim
depends on recomputes it. A task that raises is recorded with its traceback, the run goes
on, and the failed task is tried again next time. A cached file that cannot be read is a
cache miss, with a warning naming the file.

Worker processes exit when the process that started them dies (SIGKILL included), and
SIGTERM of the parent terminates its workers before it exits.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from normlab._io import atomic_write_json, content_hash
from normlab._sources import closure_hash
from normlab.claims import _workers
from normlab.claims.core import CheckOutcome, Claim, ClaimVerdict, get_claim, judge_claim

__all__ = ["CHECKS", "ClaimResult", "ClaimRunner", "TaskResult", "run_task", "task_key"]

#: The ``seed`` of a claim's checks task (it has no seed: it runs once per scale).
CHECKS = None


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
    cached: bool = False

    @property
    def is_checks(self) -> bool:
        return self.seed is None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("cached")
        return out


@dataclass(frozen=True)
class ClaimResult:
    """A claim's tasks at one scale and the verdict the rule computed from them.

    Attributes:
        claim: the claim.
        scale: the scale.
        tasks: the seed tasks, by seed.
        checks: the checks task, or None when the claim has no checks.
        verdict: :func:`~normlab.claims.core.judge_claim`'s record.
    """

    claim: Claim
    scale: str
    tasks: tuple[TaskResult, ...]
    checks: TaskResult | None
    verdict: ClaimVerdict

    @property
    def label(self) -> str:
        """The claim's verdict label ("supported", ..., "error")."""
        return self.verdict.verdict

    @property
    def measurements(self) -> list[dict[str, Any]]:
        return [t.measurement for t in self.tasks if t.status == "ok" and t.measurement]

    @property
    def all_tasks(self) -> tuple[TaskResult, ...]:
        return self.tasks + ((self.checks,) if self.checks is not None else ())

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.all_tasks)

    @classmethod
    def from_tasks(cls, claim: Claim, scale: str, tasks: Iterable[TaskResult]) -> ClaimResult:
        """Judge the claim from its finished tasks (a failed task makes it "error")."""
        tasks = list(tasks)
        seeds = tuple(sorted((t for t in tasks if not t.is_checks), key=lambda t: t.seed or 0))
        checks = next((t for t in tasks if t.is_checks), None)
        outcomes: dict[str, CheckOutcome] = {}
        if checks is not None and checks.status == "ok" and checks.measurement:
            outcomes = {
                name: CheckOutcome(bool(o["passed"]), _float(o["value"]), str(o["detail"]))
                for name, o in checks.measurement.items()
            }
        ok = [t.measurement for t in seeds if t.status == "ok" and t.measurement is not None]
        failed = sum(t.status != "ok" for t in tasks)
        verdict = judge_claim(claim, ok, outcomes, failed_tasks=failed)
        return cls(claim, scale, seeds, checks, verdict)


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def claim_modules(claim: Claim) -> list[str]:
    """The modules that define a claim's functions (its run, effects, checks, figure)."""
    fns = [claim.run, claim.figure, *(e.fn for e in claim.effects)]
    fns += [c.fn for c in claim.checks] + [p.fn for p in claim.preconditions]
    return sorted({f.__module__ for f in fns if f is not None and hasattr(f, "__module__")})


def task_key(claim: Claim, scale: str, seed: int | None, *, code: str | None = None) -> str:
    """The cache key of a task: changes when the claim's config or version changes, or the
    source of any normlab module it imports (directly or not) changes.

    Args:
        claim: the claim.
        scale: the scale.
        seed: the seed, or None for the checks task.
        code: the claim's :func:`~normlab._sources.closure_hash` when already computed.
    """
    return content_hash(
        {
            "claim": claim.id,
            "scale": scale,
            "seed": "checks" if seed is None else seed,
            "config": claim.config(scale),
            "version": claim.version,
            "code": code or closure_hash(claim_modules(claim)),
        }
    )


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


def _run_checks(claim: Claim, config: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for check in claim.checks:
        outcome = check.fn(config)
        value = float(outcome.value)
        out[check.name] = {
            "passed": bool(outcome.passed),
            "value": value if math.isfinite(value) else None,
            "detail": str(outcome.detail),
        }
    return out


def run_task(
    claim_id: str,
    scale: str,
    seed: int | None,
    threads: int = 1,
    module: str | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """Run one task and return its :class:`TaskResult` as a dict; never raises.

    This is the function a worker process (or Ray) executes. ``seed=None`` runs the claim's
    checks.
    """
    import torch

    caller_threads = torch.get_num_threads()  # restored below: in-process tasks share it
    torch.set_num_threads(max(1, threads))
    start = time.perf_counter()
    try:
        claim = _find_claim(claim_id, module)
        key = key or task_key(claim, scale, seed)
        config = claim.config(scale)
        measurement = _run_checks(claim, config) if seed is None else claim.run(config, seed)
        json.dumps(measurement)  # a claim must return JSON-serialisable numbers
        status, error = "ok", None
    except Exception:
        measurement, status, error = None, "error", traceback.format_exc()
    seconds = time.perf_counter() - start
    torch.set_num_threads(caller_threads)
    return TaskResult(
        claim_id, scale, seed, key or "", status, measurement, error, seconds
    ).to_dict()


def _writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise PermissionError(
            f"Cannot write the report to {out}: {err.strerror or err}. "
            "Choose another folder with --out."
        ) from None


@dataclass(frozen=True)
class _Task:
    claim: Claim
    scale: str
    seed: int | None
    key: str

    def args(self) -> tuple[str, str, int | None]:
        return self.claim.id, self.scale, self.seed


class ClaimRunner:
    """Runs claims' tasks locally (a process pool) or on Ray, with a resumable cache.

    Args:
        out: report folder; finished tasks are cached in ``out/tasks``.
        jobs: parallel tasks; 1 runs in this process; None uses every core.
        backend: "local" or "ray".
        address: Ray cluster address (None starts a local Ray).
        force: recompute tasks even when cached.
        on_result: called with each finished :class:`TaskResult` (progress display),
            cached ones included (``result.cached``).

    Raises:
        PermissionError: when ``out`` cannot be written, before any work starts.
    """

    def __init__(
        self,
        out: Path | str,
        *,
        jobs: int | None = None,
        backend: str = "local",
        address: str | None = None,
        force: bool = False,
        on_result: Callable[[TaskResult], None] | None = None,
    ) -> None:
        if backend not in ("local", "ray"):
            raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}.")
        if jobs is not None and jobs < 1:
            raise ValueError(f"jobs must be a positive number of parallel tasks, got {jobs}.")
        self.out = Path(out)
        _writable(self.out)
        self.tasks_dir = self.out / "tasks"
        self.jobs = jobs or os.cpu_count() or 1
        self.backend, self.address, self.force = backend, address, force
        self.on_result = on_result
        self._code: dict[str, str] = {}

    def key(self, claim: Claim, scale: str, seed: int | None) -> str:
        """:func:`task_key`, with each claim's source closure hashed once per runner."""
        if claim.id not in self._code:
            self._code[claim.id] = closure_hash(claim_modules(claim))
        return task_key(claim, scale, seed, code=self._code[claim.id])

    def path(self, claim_id: str, scale: str, seed: int | None, key: str) -> Path:
        """Where a task's result is cached."""
        which = "checks" if seed is None else f"seed{seed}"
        return self.tasks_dir / f"{claim_id}.{scale}.{which}.{key}.json"

    def tasks(self, claim: Claim, scale: str) -> list[tuple[int | None, str]]:
        """``(seed, key)`` of every task of ``claim`` at ``scale`` (None: the checks)."""
        seeds: list[int | None] = list(claim.seeds(scale))
        if claim.checks:
            seeds.append(CHECKS)
        return [(s, self.key(claim, scale, s)) for s in seeds]

    def cached(self, claim: Claim, scale: str, seed: int | None) -> TaskResult | None:
        """The finished result of a task if a successful one is cached, else None.

        A cached file that cannot be read is a miss, with a warning naming it.
        """
        path = self.path(claim.id, scale, seed, self.key(claim, scale, seed))
        if self.force or not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            result = TaskResult(**data, cached=True)
        except (OSError, ValueError, TypeError) as err:
            warnings.warn(
                f"normlab: ignoring the unreadable cached task {path} "
                f"({type(err).__name__}: {err}); it will be recomputed.",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        return result if result.status == "ok" else None

    def _record(self, data: dict[str, Any]) -> TaskResult:
        result = TaskResult(**data)
        path = self.path(result.claim_id, result.scale, result.seed, result.key)
        atomic_write_json(path, result.to_dict())
        if self.on_result is not None:
            self.on_result(result)
        return result

    def run(self, claims: Sequence[Claim], scale: str) -> list[ClaimResult]:
        """Run every task of every claim at ``scale`` and return the judged results."""
        done: dict[tuple[str, int | None], TaskResult] = {}
        todo: list[_Task] = []
        for claim in claims:
            for seed, key in self.tasks(claim, scale):
                hit = self.cached(claim, scale, seed)
                if hit is None:
                    todo.append(_Task(claim, scale, seed, key))
                else:
                    done[(claim.id, seed)] = hit
                    if self.on_result is not None:
                        self.on_result(hit)
        # Timing claims run last and alone, so no other task shares the machine's cores.
        shared = [t for t in todo if not t.claim.exclusive]
        alone = [t for t in todo if t.claim.exclusive]
        for data in itertools.chain(
            self._execute(shared),
            (run_task(*t.args(), **self._kwargs(t)) for t in alone),
        ):
            result = self._record(data)
            done[(result.claim_id, result.seed)] = result
        return [
            ClaimResult.from_tasks(c, scale, [done[(c.id, s)] for s, _ in self.tasks(c, scale)])
            for c in claims
        ]

    def _threads(self) -> int:
        return max(1, (os.cpu_count() or 1) // self.jobs)

    def _kwargs(self, task: _Task) -> dict[str, Any]:
        module = task.claim.run.__module__
        return {"threads": self._threads(), "module": module, "key": task.key}

    def _execute(self, todo: list[_Task]) -> Iterator[dict[str, Any]]:
        if not todo:
            return
        if self.backend == "ray":
            yield from self._execute_ray(todo)
        elif self.jobs == 1 or len(todo) == 1:
            for task in todo:
                yield run_task(*task.args(), **self._kwargs(task))
        else:
            yield from self._execute_pool(todo)

    def _execute_pool(self, todo: list[_Task]) -> Iterator[dict[str, Any]]:
        from concurrent.futures import as_completed

        with _workers.guarded_pool(min(self.jobs, len(todo))) as pool:
            futures = {pool.submit(run_task, *t.args(), **self._kwargs(t)): t for t in todo}
            for future in as_completed(futures):
                task = futures[future]
                try:
                    yield future.result()
                except Exception:  # the worker itself died (e.g. out of memory)
                    error = traceback.format_exc()
                    yield TaskResult(*task.args(), task.key, "error", None, error, 0.0).to_dict()

    def _execute_ray(self, todo: list[_Task]) -> Iterator[dict[str, Any]]:
        try:
            import ray
        except ImportError:
            raise ImportError("The ray backend needs Ray: pip install 'normlab[ray]'.") from None
        started = not ray.is_initialized()
        if started:
            ray.init(address=self.address, num_cpus=None if self.address else self.jobs)
        try:
            remote = ray.remote(num_cpus=1)(run_task)
            pending = [remote.remote(*t.args(), **{**self._kwargs(t), "threads": 1}) for t in todo]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                yield ray.get(ready[0])
        finally:
            if started:
                ray.shutdown()
