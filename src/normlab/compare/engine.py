"""Running a comparison's tasks: cached per (arm, seed, setting), resumable, in parallel.

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
from pathlib import Path
from typing import Any

from normlab._io import atomic_write_json, content_hash
from normlab.compare.tasks import run_task

__all__ = ["run_tasks", "task_key", "task_path"]


def task_key(setting: Mapping[str, Any], fingerprints: Mapping[str, str], arm: str, seed: int):
    """The cache key of one task: the setting, what MODEL and DATA hold, the arm, the seed
    and the library versions."""
    from normlab import __version__
    from normlab.claims.tasks import library_versions

    return content_hash(
        {
            "setting": dict(setting),
            "fingerprints": dict(fingerprints),
            "arm": arm,
            "seed": seed,
            "normlab": __version__,
            "libraries": library_versions(),
        }
    )


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

    Args:
        setting: the plain setting (its ``"norms"`` are the arms).
        fingerprints: the hashes of MODEL's and DATA's contents (part of the key).
        seeds: the seeds.
        out: the output folder (tasks go to ``out/tasks``).
        jobs: worker processes (1: in this process); on Ray, the local cluster's CPUs.
        backend: "local" or "ray".
        address: a Ray cluster's address (None: start a local one).
        on_done: ``(record, cached) -> None`` after each task (progress).
    """
    todo = []
    records: dict[tuple[str, int], dict[str, Any]] = {}
    for seed in seeds:
        for arm in setting["norms"]:
            key = task_key(setting, fingerprints, arm, seed)
            path = task_path(out, arm, seed)
            hit = _cached(path, key)
            if hit is not None:
                records[arm, seed] = hit
                if on_done is not None:
                    on_done(hit, True)
            else:
                todo.append((arm, seed, key, path))

    def finish(arm: str, seed: int, key: str, path: Path, record: dict[str, Any]) -> None:
        record = {**record, "key": key, "finished": time.time()}
        atomic_write_json(path, record)
        records[arm, seed] = record
        if on_done is not None:
            on_done(record, False)

    plain = dict(setting)
    if backend == "ray":
        _run_ray(plain, todo, finish, jobs, address)
    elif jobs <= 1 or len(todo) <= 1:
        for arm, seed, key, path in todo:
            finish(arm, seed, key, path, run_task(plain, arm, seed))
    else:
        from concurrent.futures import as_completed

        from normlab.claims._workers import guarded_pool

        with guarded_pool(min(jobs, len(todo))) as pool:
            futures = {
                pool.submit(run_task, plain, arm, seed): (arm, seed, key, path)
                for arm, seed, key, path in todo
            }
            for future in as_completed(futures):
                finish(*futures[future], future.result())
    return [records[arm, seed] for seed in seeds for arm in setting["norms"]]


def _run_ray(setting, todo, finish, jobs: int, address: str | None) -> None:
    from normlab.claims.runner import _connect, _import_ray, _reachable

    ray = _import_ray()
    if address is not None:
        _reachable(address)
    started = not ray.is_initialized()
    if started:
        _connect(ray, address, jobs)
    try:
        remote = ray.remote(num_cpus=1)(run_task)
        pending = {
            remote.remote(setting, arm, seed): (arm, seed, key, path)
            for arm, seed, key, path in todo
        }
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                finish(*pending.pop(ref), ray.get(ref))
    finally:
        if started:
            ray.shutdown()
