"""Run claims as tasks, caching each finished task on disk.

A claim at a scale is one task per seed (``claim.run(config, seed)``) plus, when it has
implementation checks, one *checks* task that runs every :class:`~normlab.claims.core.Check`
once. Every finished task is written atomically to ``OUT/tasks/`` under a key that hashes
the claim's id, scale, seed and config and the source of every normlab module the
claim's module imports, directly or not (:mod:`normlab._sources`): a run killed at any
moment resumes without recomputing finished work, and a change anywhere in the code a claim
depends on recomputes it. A task that raises is recorded with its traceback, the run goes
on, and the failed task is tried again next time. A cached file that cannot be read is a
cache miss, with a warning naming the file.

Worker processes exit when the process that started them dies (SIGKILL included), and
SIGTERM of the parent terminates its workers before it exits. A script whose top-level code
is not under ``if __name__ == "__main__":`` cannot start spawned workers (each would run the
script again), so its tasks run in its own process, with a note.

On Ray, each task carries the driver's :func:`code_identity` (the inputs of its cache key)
and a worker whose own differs refuses it, so no result lands under a key its code does not
match; a task Ray gives up on is recorded as that task's error and the run goes on.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import sys
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from normlab._io import atomic_write_json
from normlab._sources import closure_hash
from normlab.claims import _workers
from normlab.claims.core import Claim
from normlab.claims.plan import tunes
from normlab.claims.results import ClaimResult
from normlab.claims.schedule import Schedule, Task
from normlab.claims.tasks import (
    CHECKS,
    THREADS,
    TaskResult,
    _find_claim,
    claim_modules,
    library_versions,
    reusable,
    run_task,
    task_key,
    usable,
)

__all__ = ["CONNECT_TIMEOUT", "ClaimRunner", "code_identity", "run_checked_task"]


def _writable(out: Path) -> None:
    blocker = next((p for p in (out, *out.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise PermissionError(
            f"Cannot write the report to {out}: {blocker} is a file, not a folder. "
            "Choose another folder with --out."
        )
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
        ConnectionError: when nothing answers at ``address`` (checked at once).
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
        if backend == "ray" and address:
            _reachable(address)  # before any work or progress display: a typo fails at once
        self.out = Path(out)
        _writable(self.out)
        self.tasks_dir = self.out / "tasks"
        self.jobs = jobs or os.cpu_count() or 1
        self.backend, self.address, self.force = backend, address, force
        self.on_result = on_result
        #: called with (claim id, count) for the robustness tasks a claim did not run
        self.on_skipped: Callable[[str, int], None] | None = None
        self._code: dict[str, str] = {}

    def key(
        self,
        claim: Claim,
        scale: str,
        seed: int | None,
        override: dict | None = None,
        fixed: list | None = None,
    ) -> str:
        """:func:`task_key`, with each claim's source closure hashed once per runner."""
        if claim.id not in self._code:
            self._code[claim.id] = closure_hash(claim_modules(claim))
        code = self._code[claim.id]
        return task_key(claim, scale, seed, code=code, override=override, fixed=fixed)

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

    def current_keys(self, claim: Claim, scale: str) -> set[str]:
        """The keys every main task of ``claim`` at ``scale`` has when it tunes for itself
        (no fixed choices), under the code as it is now: a record's own tuning keys must be
        among them, or older code computed it (stale)."""
        return {key for _, key in self.tasks(claim, scale)}

    def tuning_keys(self, claim: Claim, scale: str) -> set[str]:
        """The keys of the main tasks that must have tuned for themselves: the checks and
        the first seed of a tuned claim (its others train at its choices), every seed of
        an untuned one (:mod:`normlab.claims.schedule`)."""
        tasks = self.tasks(claim, scale)
        if not tunes(claim, scale) or len(claim.seeds(scale)) < 2:
            return {key for _, key in tasks}
        first = min(s for s, _ in tasks if s is not None)
        return {key for s, key in tasks if s is None or s == first}

    def cached(
        self,
        claim: Claim,
        scale: str,
        seed: int | None,
        override: dict | None = None,
        fixed: list | None = None,
    ) -> TaskResult | None:
        """The finished result of a task if a successful one is cached, else None.

        A cached file that cannot be read, or that holds no usable measurement (null, or a
        seed task without a table), is a miss, with a warning naming it.
        """
        key = self.key(claim, scale, seed, override, fixed)
        return self._cached_at(claim.id, scale, seed, key)

    def _cached_at(
        self, claim_id: str, scale: str, seed: int | None, key: str
    ) -> TaskResult | None:
        """:meth:`cached` for a task whose key is known."""
        path = self.path(claim_id, scale, seed, key)
        if self.force or not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            result = TaskResult(**data, cached=True)
            if result.status == "ok" and not usable(result):
                raise ValueError("the task is marked ok but holds no usable measurement")
        except (OSError, ValueError, TypeError) as err:
            warnings.warn(
                f"normlab: ignoring the unreadable cached task {path} "
                f"({type(err).__name__}: {err}); it will be recomputed.",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        return result if reusable(result) else None  # a failed or faulty task reruns

    def _record(self, data: dict[str, Any]) -> TaskResult:
        result = TaskResult(**data)
        path = self.path(result.claim_id, result.scale, result.seed, result.key)
        atomic_write_json(path, result.to_dict())
        if self.on_result is not None:
            self.on_result(result)
        return result

    def run(
        self,
        claims: Sequence[Claim],
        scale: str,
        *,
        robustness: bool | str = False,
        placebo: bool = False,
    ) -> list[ClaimResult]:
        """Run every task of every claim at ``scale`` and return the judged results.

        The tasks start in the order of :class:`~normlab.claims.schedule.Schedule`: a tuned
        claim's first seed tunes, its other seeds train at its choices; a claim's
        robustness reruns follow its decided verdict. A cached task counts as finished at
        once.

        Args:
            claims: the claims.
            scale: "smoke", "quick" or "full".
            robustness: rerun each decided claim's seeds at free settings' neighbours:
                "decisive" (its decisive setting's), "all" or True (every one's), "none" or
                False.
            placebo: also run the A/A placebo of every tuned claim.
        """
        schedule = Schedule(
            claims,
            scale,
            robustness=robustness,
            placebo=placebo,
            key=self.key,
            on_skipped=self.on_skipped,
        )
        shared: deque[Task] = deque()
        alone: deque[Task] = deque()  # timing claims' seeds run last and alone (idle machine)

        def release(tasks: Iterable[Task], front: bool = False) -> None:
            """Queue the tasks that are not cached (released ones go first); a cached task
            counts as finished at once."""
            fresh = []
            for task in tasks:
                hit = self._cached_at(*task.args(), task.key)
                if hit is None:
                    fresh.append(task)
                    continue
                if self.on_result is not None:
                    self.on_result(hit)
                release(schedule.finished(task, hit), front)
            for task in reversed(fresh) if front else fresh:
                queue = alone if task.claim.exclusive and task.seed is not None else shared
                queue.appendleft(task) if front else queue.append(task)

        def record(task: Task, data: dict[str, Any]) -> None:
            release(schedule.finished(task, self._record(data)), front=True)

        release(schedule.start())
        self._execute(shared, record)
        while alone:
            task = alone.popleft()
            record(task, run_task(*task.args(), **self._kwargs(task)))
            self._execute(shared, record)
        return schedule.results()

    def _kwargs(self, task: Task) -> dict[str, Any]:
        module = task.claim.run.__module__
        return {"module": module, "key": task.key, "override": task.override, "fixed": task.fixed}

    def _execute(self, queue: deque[Task], record: Callable[[Task, dict], None]) -> None:
        """Run the queue's tasks until it is empty; ``record`` takes each result and queues
        the tasks it releases."""
        if not queue:
            return
        if self.backend == "ray":
            self._execute_ray(queue, record)
        elif self.jobs == 1:
            self._serial(queue, record)
        elif (script := _workers.unguarded_main()) is not None:
            print(
                f"normlab: running the tasks one at a time in this process: {script} "
                'has no `if __name__ == "__main__":` block, which worker processes need '
                "(add one to run tasks in parallel).",
                file=sys.stderr,
            )
            self._serial(queue, record)
        else:
            self._execute_pool(queue, record)

    def _serial(self, queue: deque[Task], record: Callable[[Task, dict], None]) -> None:
        while queue:
            task = queue.popleft()
            record(task, run_task(*task.args(), **self._kwargs(task)))

    def _execute_pool(self, queue: deque[Task], record: Callable[[Task, dict], None]) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        with _workers.guarded_pool(self.jobs) as pool:
            running: dict[Any, Task] = {}
            while queue or running:
                while queue and len(running) < self.jobs:  # the queue decides what runs next
                    task = queue.popleft()
                    running[pool.submit(run_task, *task.args(), **self._kwargs(task))] = task
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    task = running.pop(future)
                    try:
                        data = future.result()
                    except Exception:  # the worker itself died (e.g. out of memory)
                        data = _failed(task, traceback.format_exc())
                    record(task, data)

    def _execute_ray(self, queue: deque[Task], record: Callable[[Task, dict], None]) -> None:
        ray = _import_ray()
        started = not ray.is_initialized()
        if started:
            _connect(ray, self.address, self.jobs)
        try:
            remote = ray.remote(num_cpus=1)(run_checked_task)
            refs: dict[Any, Task] = {}
            while queue or refs:
                while queue:  # Ray queues what the cluster cannot start yet
                    t = queue.popleft()
                    refs[remote.remote(self.identity(t.claim), *t.args(), **self._kwargs(t))] = t
                (ready,), _ = ray.wait(list(refs), num_returns=1)
                task = refs.pop(ready)
                try:
                    data = ray.get(ready)
                except ray.exceptions.RayError as err:  # Ray gave up: retries spent, node lost
                    data = _failed(task, f"Ray could not finish this task: {err}")
                record(task, data)
        finally:
            if started:
                ray.shutdown()

    def identity(self, claim: Claim) -> dict[str, str]:
        """:func:`code_identity` of ``claim`` as this process sees it (the driver's)."""
        if claim.id not in self._code:
            self._code[claim.id] = closure_hash(claim_modules(claim))
        return code_identity(claim, code=self._code[claim.id])


def _failed(task: Task, error: str) -> dict[str, Any]:
    """The record of a task that ended without a result of its own (its worker died)."""
    return TaskResult(
        *task.args(), task.key, "error", None, error, 0.0, THREADS, task.override, fixed=task.fixed
    ).to_dict()


def code_identity(claim: Claim, *, code: str | None = None) -> dict[str, str]:
    """What a task's result depends on besides its config: the inputs of its cache key.

    Args:
        claim: the claim.
        code: its :func:`~normlab._sources.closure_hash` when already computed.

    Returns:
        normlab's version, the hash of the source of every normlab module the claim uses,
        the torch and Python versions, and those of the libraries that can change numbers
        (:func:`~normlab.claims.tasks.library_versions`).
    """
    import torch

    from normlab import __version__

    libraries = library_versions()
    return {
        "normlab": __version__,
        "source": code or closure_hash(claim_modules(claim)),
        "torch": torch.__version__,
        "python": platform.python_version(),
        **{f"library {name}": version for name, version in libraries.items()},
    }


@functools.cache
def _worker_identity(claim_id: str, module: str | None) -> tuple[tuple[str, str], ...]:
    """:func:`code_identity` on this worker, hashed once per claim and worker process."""
    return tuple(code_identity(_find_claim(claim_id, module)).items())


def _identity_mismatch(driver: dict[str, str], claim_id: str, module: str | None) -> str | None:
    """Why this worker must not run the task (its code is not the driver's), or None."""
    try:
        mine = dict(_worker_identity(claim_id, module))
    except Exception:  # no such claim here: run_task records that failure with its traceback
        return None
    differ = [f"{k} {driver.get(k)} vs {v} here" for k, v in mine.items() if driver.get(k) != v]
    if not differ:
        return None
    return (
        f"refused on Ray node {platform.node()}: this worker's code is not the driver's "
        f"({', '.join(differ)}), so its result would be cached under a key it does not "
        "match. Install the driver's normlab (the same commit or wheel) and torch, with the "
        "same Python, on every node (docs/cluster.md)."
    )


def run_checked_task(
    driver: dict[str, str], claim_id: str, scale: str, seed: int | None, **kwargs: Any
) -> dict[str, Any]:
    """:func:`~normlab.claims.tasks.run_task` on a Ray worker, refused (recorded as an
    error) when the worker's :func:`code_identity` differs from the driver's ``driver``."""
    why = _identity_mismatch(driver, claim_id, kwargs.get("module"))
    if why is None:
        return run_task(claim_id, scale, seed, **kwargs)
    key, override = kwargs.get("key") or "", kwargs.get("override")
    result = TaskResult(claim_id, scale, seed, key, "error", None, why, 0.0, THREADS, override)
    return result.to_dict()


#: Seconds to wait for a Ray cluster's address to accept a connection.
CONNECT_TIMEOUT = 5.0


def _import_ray() -> Any:
    """Import Ray, with token authentication on when a token is at hand and the mode unset.

    Ray 2.60 turns token authentication on for clusters it starts, but a driver given an
    explicit address does not look for the token: it is refused until it gives up. Ray's own
    rule for ``address="auto"`` (token found, mode unset: use it) is applied to every address.
    """
    try:
        import ray
    except ImportError:
        raise ImportError("The ray backend needs Ray: pip install 'normlab[ray]'.") from None
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return ray
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    return ray


def _connect(ray: Any, address: str | None, jobs: int) -> None:
    """Start a local Ray (``address`` None) or join the cluster at ``address``.

    Raises:
        ConnectionError: Ray refuses the connection; the message says what to check.
    """
    if address is None:
        ray.init(num_cpus=jobs)
        return
    try:
        ray.init(address=address)
    except (ConnectionError, RuntimeError, ray.exceptions.RayError) as err:
        mode = os.environ.get("RAY_AUTH_MODE", "unset")
        raise ConnectionError(
            f"The Ray cluster at {address!r} refused this driver ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}; RAY_AUTH_MODE is "
            f"{mode}). If the cluster uses token authentication, give this machine its token "
            "(`ray get-auth-token` on the head node, saved to ~/.ray/auth_token or set as "
            "RAY_AUTH_TOKEN) and set RAY_AUTH_MODE=token; see docs/cluster.md."
        ) from None


def _reachable(address: str) -> None:
    """Refuse, within :data:`CONNECT_TIMEOUT`, a Ray address nothing listens on."""
    import socket

    if address == "auto":
        return
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not port.isdigit():
        raise ConnectionError(
            f"{address!r} is not a Ray cluster address: expected HOST:PORT, as printed by "
            "`ray start --head` (e.g. 10.0.0.1:6379), or 'auto' for a cluster on this machine."
        )
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), CONNECT_TIMEOUT):
            pass
    except OSError as err:
        raise ConnectionError(
            f"No Ray cluster answers at {address!r} within {CONNECT_TIMEOUT:g} s ({err}). "
            "Start one with `ray start --head` and pass the address it prints (HOST:PORT), "
            "or drop --backend ray to run locally."
        ) from None
