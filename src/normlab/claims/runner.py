"""Run claims as (claim, scale, seed) tasks, caching each finished task on disk.

Every finished task is written atomically to ``OUT/tasks/`` under a key that hashes the
claim's id, scale, seed, config, version and the source of the claim's module, so a run
killed at any moment (SIGKILL included) resumes without recomputing finished work, and a
changed claim is recomputed. A task that raises is recorded with its traceback, the run
goes on, and the failed task is tried again on the next run.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from normlab._io import atomic_write_json, content_hash
from normlab.claims.core import Claim, EffectVerdict, combine, get_claim, judge

__all__ = ["ClaimResult", "Runner", "TaskResult", "run_task", "task_key"]


@dataclass(frozen=True)
class TaskResult:
    """The outcome of one (claim, scale, seed) task.

    Attributes:
        claim: the claim id.
        scale: the scale it ran at.
        seed: the seed.
        key: the cache key.
        status: "ok" or "error".
        measurement: the claim's measurement when ok.
        error: the traceback when it failed.
        seconds: wall time of the task.
    """

    claim: str
    scale: str
    seed: int
    key: str
    status: str
    measurement: dict[str, Any] | None
    error: str | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClaimResult:
    """A claim's tasks at one scale and the verdict computed from them."""

    claim: Claim
    scale: str
    tasks: tuple[TaskResult, ...]
    effects: tuple[EffectVerdict, ...]
    verdict: str

    @property
    def measurements(self) -> list[dict[str, Any]]:
        return [t.measurement for t in self.tasks if t.status == "ok" and t.measurement]

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.tasks)

    @classmethod
    def from_tasks(cls, claim: Claim, scale: str, tasks: Iterable[TaskResult]) -> ClaimResult:
        """Judge every effect over the successful seeds; any failed seed makes it "error"."""
        tasks = tuple(sorted(tasks, key=lambda t: t.seed))
        ok = [t.measurement for t in tasks if t.status == "ok" and t.measurement is not None]
        if len(ok) < len(tasks) or not ok:
            return cls(claim, scale, tasks, (), "error")
        effects = tuple(judge(effect, ok) for effect in claim.effects)
        return cls(claim, scale, tasks, effects, combine([e.verdict for e in effects]))


def _code_version(claim: Claim) -> str:
    module = sys.modules.get(claim.run.__module__)
    source = inspect.getsource(module) if module is not None else ""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def task_key(claim: Claim, scale: str, seed: int) -> str:
    """The cache key of a task: changes when the claim's config, version or code changes."""
    return content_hash(
        {
            "claim": claim.id,
            "scale": scale,
            "seed": seed,
            "config": claim.config(scale),
            "version": claim.version,
            "code": _code_version(claim),
        }
    )


def run_task(claim_id: str, scale: str, seed: int, threads: int = 1) -> dict[str, Any]:
    """Run one task and return its :class:`TaskResult` as a dict; never raises.

    This is the function a worker process (or Ray) executes.
    """
    import torch

    torch.set_num_threads(max(1, threads))
    claim = get_claim(claim_id)
    key = task_key(claim, scale, seed)
    start = time.perf_counter()
    try:
        measurement = claim.run(claim.config(scale), seed)
        json.dumps(measurement)  # a claim must return JSON-serialisable numbers
        status, error = "ok", None
    except Exception:
        measurement, status, error = None, "error", traceback.format_exc()
    seconds = time.perf_counter() - start
    return TaskResult(claim_id, scale, seed, key, status, measurement, error, seconds).to_dict()


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


class Runner:
    """Runs claims' tasks locally (a process pool) or on Ray, with a resumable cache.

    Args:
        out: report folder; finished tasks are cached in ``out/tasks``.
        jobs: parallel tasks; 1 runs in this process.
        backend: "local" or "ray".
        address: Ray cluster address (None starts a local Ray).
        force: recompute tasks even when cached.
        on_result: called with each finished :class:`TaskResult` (progress display).

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
        self.out = Path(out)
        _writable(self.out)
        self.tasks_dir = self.out / "tasks"
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        self.backend, self.address, self.force = backend, address, force
        self.on_result = on_result

    def _path(self, claim_id: str, scale: str, seed: int, key: str) -> Path:
        return self.tasks_dir / f"{claim_id}.{scale}.seed{seed}.{key}.json"

    def cached(self, claim: Claim, scale: str, seed: int) -> TaskResult | None:
        """The finished result of a task, if a successful one is cached."""
        path = self._path(claim.id, scale, seed, task_key(claim, scale, seed))
        if self.force or not path.exists():
            return None
        data = json.loads(path.read_text())
        return TaskResult(**data) if data.get("status") == "ok" else None

    def _record(self, data: dict[str, Any]) -> TaskResult:
        result = TaskResult(**data)
        atomic_write_json(self._path(result.claim, result.scale, result.seed, result.key), data)
        if self.on_result is not None:
            self.on_result(result)
        return result

    def run(self, claims: Sequence[Claim], scale: str) -> list[ClaimResult]:
        """Run every seed of every claim at ``scale`` and return the judged results."""
        done: dict[tuple[str, int], TaskResult] = {}
        todo: list[tuple[str, str, int]] = []
        for claim in claims:
            for seed in claim.seeds(scale):
                hit = self.cached(claim, scale, seed)
                if hit is None:
                    todo.append((claim.id, scale, seed))
                else:
                    done[(claim.id, seed)] = hit
                    if self.on_result is not None:
                        self.on_result(hit)
        for data in self._execute(todo):
            result = self._record(data)
            done[(result.claim, result.seed)] = result
        return [
            ClaimResult.from_tasks(c, scale, [done[(c.id, s)] for s in c.seeds(scale)])
            for c in claims
        ]

    def _threads(self) -> int:
        return max(1, (os.cpu_count() or 1) // self.jobs)

    def _execute(self, todo: list[tuple[str, str, int]]) -> Iterable[dict[str, Any]]:
        if not todo:
            return
        if self.backend == "ray":
            yield from self._execute_ray(todo)
        elif self.jobs == 1 or len(todo) == 1:
            for task in todo:
                yield run_task(*task, threads=self._threads())
        else:
            yield from self._execute_pool(todo)

    def _execute_pool(self, todo: list[tuple[str, str, int]]) -> Iterable[dict[str, Any]]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")
        workers = min(self.jobs, len(todo))
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            futures = {pool.submit(run_task, *t, threads=self._threads()): t for t in todo}
            for future in as_completed(futures):
                claim_id, scale, seed = futures[future]
                try:
                    yield future.result()
                except Exception:  # the worker itself died (e.g. out of memory)
                    key = task_key(get_claim(claim_id), scale, seed)
                    error = traceback.format_exc()
                    yield TaskResult(
                        claim_id, scale, seed, key, "error", None, error, 0.0
                    ).to_dict()

    def _execute_ray(self, todo: list[tuple[str, str, int]]) -> Iterable[dict[str, Any]]:
        try:
            import ray
        except ImportError:
            raise ImportError("The ray backend needs Ray: pip install 'normlab[ray]'.") from None
        started = not ray.is_initialized()
        if started:
            ray.init(address=self.address, num_cpus=None if self.address else self.jobs)
        try:
            remote = ray.remote(num_cpus=1)(run_task)
            pending = [remote.remote(*t, threads=1) for t in todo]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                yield ray.get(ready[0])
        finally:
            if started:
                ray.shutdown()
