"""A process pool whose workers never outlive the process that started them.

Each worker runs a daemon thread that polls its parent's pid and exits the moment the
parent is gone (SIGKILL included: the worker is re-parented and ``os.getppid()``
changes). SIGTERM of the parent raises :class:`SystemExit` in its main thread while the
pool is open, and leaving the pool on any exception terminates the workers instead of
waiting for their tasks. With the workers gone, multiprocessing's resource tracker sees its
pipe close and exits too.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

__all__ = ["guarded_pool"]

#: Seconds between two looks at the parent's pid.
POLL = 0.2


def _exit_when_orphaned(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(POLL)


def _init_worker(parent: int) -> None:
    """Worker initializer: watch the parent; leave Ctrl-C and SIGTERM to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminate(pool: ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=2)


@contextlib.contextmanager
def guarded_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A spawn-context :class:`ProcessPoolExecutor` of ``workers`` processes that die with
    this process (see the module docstring)."""
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(os.getpid(),),
    )
    with _sigterm_raises():
        try:
            yield pool
        except BaseException:
            _terminate(pool)
            raise
        pool.shutdown(wait=True)
