"""Progress of long work (training steps, probe sites), reported to whoever listens.

Library code calls :func:`report_progress` at each step; it does nothing unless a caller
installed a callback with :func:`progress_callback` (the command line shows a bar). The
callback lives in a context variable, so it never leaks across threads or into workers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

__all__ = ["ProgressCallback", "progress_callback", "report_progress"]

#: ``callback(what, done, total)``: ``done`` of ``total`` units of the task ``what`` finished.
ProgressCallback = Callable[[str, int, int], None]

_CALLBACK: ContextVar[ProgressCallback | None] = ContextVar("normlab_progress", default=None)


def report_progress(what: str, done: int, total: int) -> None:
    """Tell the installed callback (if any) that ``done`` of ``total`` units of ``what`` ran."""
    callback = _CALLBACK.get()
    if callback is not None:
        callback(what, done, total)


@contextlib.contextmanager
def progress_callback(callback: ProgressCallback | None) -> Iterator[None]:
    """Install ``callback`` for :func:`report_progress` calls inside the block."""
    token = _CALLBACK.set(callback)
    try:
        yield
    finally:
        _CALLBACK.reset(token)
