"""Running a comparison's tasks: cached per (arm, seed, setting), resumable, in parallel;
each arm tuned once, on its first seed.

Each finished task is written at once, atomically (:func:`normlab._io.atomic_write_json`),
to ``OUT/tasks/``, under a key that hashes the setting (MODEL and DATA contents, the arm's
search, steps, batch, the library versions the claims engine keys on). A rerun reuses
every task whose key matches, so an interrupted comparison (Ctrl-C) resumes where it
stopped. Tasks run in this process (``jobs=1``), in a spawn pool whose workers die with
the driver (:func:`normlab.claims._workers.guarded_pool`), or on Ray.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import as_completed
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from normlab._io import atomic_write_json, content_hash
from normlab.compare.tasks import run_task

__all__ = ["run_tasks", "task_key", "task_path"]


def task_key(
    setting: Mapping[str, Any],
    fingerprints: Mapping[str, str],
    arm: str,
    seed: int,
    fixed: Mapping[str, Any] | None = None,
) -> str:
    """The cache key of one task: the setting, what MODEL and DATA hold, the arm, the seed,
    the library versions and, for a seed trained at its first seed's choice, that choice
    (so a new tuning recomputes the seeds that reused the old one)."""
    from normlab import __version__
    from normlab.claims.tasks import library_versions

    content = {
        "setting": dict(setting),
        "fingerprints": dict(fingerprints),
        "arm": arm,
        "seed": seed,
        "normlab": __version__,
        "libraries": library_versions(),
    }
    if fixed is not None:
        content["fixed"] = dict(fixed)
    return content_hash(content)


def task_path(out: Path, arm: str, seed: int) -> Path:
    """Where one task's record lives under ``out``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in arm)
    return out / "tasks" / f"{safe}-{content_hash(arm, 6)}-seed{seed}.json"


def _cached(path: Path, key: str) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if record.get("key") == key else None


def run_tasks(
    setting: Mapping[str, Any],
    fingerprints: Mapping[str, str],
    seeds: Sequence[int],
    out: Path,
    *,
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    on_done: Callable[[dict[str, Any], bool], None] | None = None,
) -> list[dict[str, Any]]:
    """Run (or reuse) every (arm, seed) task of ``setting``; return their records.

    Tune once, train every seed (:mod:`normlab.claims.tune_once`): each arm's first seed
    tunes its learning rate on validation; once every first seed is done, the other seeds
    train each arm once at its first seed's choice.

    Args:
        setting: the plain setting (its ``"norms"`` are the arms).
        fingerprints: the hashes of MODEL's and DATA's contents (part of the key).
        seeds: the seeds (the first tunes).
        out: the output folder (tasks go to ``out/tasks``).
        jobs: worker processes (1: in this process); on Ray, the local cluster's CPUs.
        backend: "local" or "ray".
        address: a Ray cluster's address (None: start a local one).
        on_done: ``(record, cached) -> None`` after each task (progress).
    """
    records: dict[tuple[str, int], dict[str, Any]] = {}

    def todo(seed: int, fixed: Mapping[str, Mapping[str, Any]] | None) -> list[_Task]:
        """The tasks of ``seed`` not in the cache (cached ones are recorded at once)."""
        tasks = []
        for arm in setting["norms"]:
            choice = fixed[arm] if fixed is not None else None
            key = task_key(setting, fingerprints, arm, seed, choice)
            path = task_path(out, arm, seed)
            hit = _cached(path, key)
            if hit is None:
                tasks.append((arm, seed, choice, key, path))
                continue
            records[arm, seed] = hit
            if on_done is not None:
                on_done(hit, True)
        return tasks

    def finish(task: _Task, record: dict[str, Any]) -> None:
        record = {**record, "key": task[3], "finished": time.time()}
        atomic_write_json(task[4], record)
        records[task[0], task[1]] = record
        if on_done is not None:
            on_done(record, False)

    first, *others = seeds
    tuning = todo(first, None)
    with _executor(dict(setting), jobs, backend, address) as execute:
        execute(tuning, finish)
        chosen = {arm: records[arm, first]["tuning"]["chosen"] for arm in setting["norms"]}
        execute([t for seed in others for t in todo(seed, chosen)], finish)
    return [records[arm, seed] for seed in seeds for arm in setting["norms"]]


#: One task to run: (arm, seed, fixed choice or None, cache key, record path).
_Task = tuple[str, int, Mapping[str, Any] | None, str, Path]


@contextmanager
def _executor(setting: dict[str, Any], jobs: int, backend: str, address: str | None):
    """``execute(tasks, finish)`` that runs a batch of tasks to the end (in this process,
    a spawn pool or on Ray), started once for every batch and only when one has work."""
    state: dict[str, Any] = {}
    with ExitStack() as stack:

        def execute(tasks: list[_Task], finish) -> None:
            if not tasks:
                return
            if backend == "ray":
                if "ray" not in state:
                    state["ray"] = stack.enter_context(_ray_remote(jobs, address))
                _run_ray(state["ray"], setting, tasks, finish)
            elif jobs <= 1 or len(tasks) <= 1:
                for task in tasks:
                    finish(task, run_task(setting, *task[:3]))
            else:
                from normlab.claims._workers import guarded_pool

                if "pool" not in state:
                    state["pool"] = stack.enter_context(guarded_pool(jobs))
                futures = {state["pool"].submit(run_task, setting, *t[:3]): t for t in tasks}
                for future in as_completed(futures):
                    finish(futures[future], future.result())

        yield execute


@contextmanager
def _ray_remote(jobs: int, address: str | None):
    """:func:`run_task` as a Ray remote function on a connected cluster (a local one is
    started and shut down here when ``address`` is None and none runs)."""
    from normlab.claims.runner import _connect, _import_ray, _reachable

    ray = _import_ray()
    if address is not None:
        _reachable(address)
    started = not ray.is_initialized()
    if started:
        _connect(ray, address, jobs)
    try:
        yield ray, ray.remote(num_cpus=1)(run_task)
    finally:
        if started:
            ray.shutdown()


def _run_ray(remote, setting, tasks: list[_Task], finish) -> None:
    ray, run = remote
    pending = {run.remote(setting, *t[:3]): t for t in tasks}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            finish(pending.pop(ref), ray.get(ref))
