"""A process pool whose workers never outlive the process that started them.

Each worker runs a daemon thread that polls its parent's pid and exits the moment the
parent is gone (SIGKILL included: the worker is re-parented and ``os.getppid()``
changes). SIGTERM of the parent raises :class:`SystemExit` in its main thread while the
pool is open, and leaving the pool on any exception terminates the workers instead of
waiting for their tasks. With the workers gone, multiprocessing's resource tracker sees its
pipe close and exits too.

Spawned workers import the parent's ``__main__`` again: a script whose top-level code is not
under ``if __name__ == "__main__":`` would run again in every worker, so
:func:`unguarded_main` lets the caller see that before starting a pool.
"""

from __future__ import annotations

import ast
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

__all__ = ["Terminated", "guarded_pool", "sigterm_raises", "unguarded_main"]

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


class Terminated(SystemExit):
    """SIGTERM, raised in the main thread so that cleanup runs; exit status 128 + 15."""


def _raise_exit(signum: int, frame: object) -> None:
    raise Terminated(128 + signum)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within this block SIGTERM raises :class:`Terminated` in the main thread (elsewhere
    it does nothing), so ``finally`` blocks and handlers run before the process exits."""
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
    with sigterm_raises():
        try:
            yield pool
        except BaseException:
            _terminate(pool)
            raise
        pool.shutdown(wait=True)


def _is_main_guard(node: ast.stmt) -> bool:
    """Whether ``node`` is ``if __name__ == "__main__":`` (either operand order)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    operands = [node.test.left, *node.test.comparators]
    names = {o.id for o in operands if isinstance(o, ast.Name)}
    values = {o.value for o in operands if isinstance(o, ast.Constant)}
    return names == {"__name__"} and values == {"__main__"}


def unguarded_main() -> str | None:
    """The file of ``__main__`` when spawned workers would run its top-level code again.

    A spawned worker re-imports the parent's main module (multiprocessing's
    ``_fixup_main_from_name`` / ``_fixup_main_from_path``) unless it is a package's
    ``__main__`` or the interpreter has no main file (``-c``, a REPL, a notebook). A file
    with an ``if __name__ == "__main__":`` block is taken as guarded; one that has none, or
    that cannot be read, is not.

    Returns:
        The path of the unguarded main file, or None when a spawn pool is safe.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        if spec.name == "__main__" or spec.name.endswith(".__main__"):
            return None
        path = spec.origin
    else:
        path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return path
    return None if any(_is_main_guard(node) for node in tree.body) else path
