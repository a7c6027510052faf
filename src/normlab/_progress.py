"""Progress of long work (training steps, probe sites), reported to whoever listens.

Library code calls :func:`report_progress` at each step; it does nothing unless a caller
installed a callback with :func:`progress_callback`; :class:`StepBars` is the command
line's one such callback (a rich bar per task). The callback lives in a context variable,
so it never leaks across threads or into workers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

__all__ = ["ProgressCallback", "StepBars", "progress_callback", "report_progress"]

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


class StepBars:
    """The terminal's view of :func:`report_progress`: one rich bar per task ``what``.

    The one progress helper of the command line (``normlab claim``, ``normlab probe``):
    used as a context manager, it shows the bars on stderr and installs itself as the
    progress callback for the block; :meth:`add` and :meth:`advance` drive extra bars of
    the caller's own (e.g. tasks done of tasks to run).

    Args:
        enabled: show anything at all (``--no-progress`` turns it off).
        transient: remove the bars when the block ends.
        eta: add rich's time-remaining column (for steps of equal cost).
    """

    def __init__(self, *, enabled: bool = True, transient: bool = True, eta: bool = True) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns: list[Any] = [
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ]
        if eta:
            columns += [TextColumn("ETA"), TimeRemainingColumn()]
        self.progress = Progress(
            *columns, console=Console(stderr=True), disable=not enabled, transient=transient
        )
        self._bars: dict[str, Any] = {}
        self._installed: contextlib.ExitStack | None = None

    def on_step(self, what: str, done: int, total: int) -> None:
        """A :data:`ProgressCallback`: ``done`` of ``total`` steps of ``what``."""
        if what not in self._bars:
            self._bars[what] = self.progress.add_task(what, total=total)
        self.progress.update(self._bars[what], completed=done, total=total)

    def add(self, description: str, total: int) -> Any:
        """A bar of the caller's own; returns its id for :meth:`advance`."""
        return self.progress.add_task(description, total=total)

    def advance(self, bar: Any, steps: int = 1) -> None:
        """Move the caller's bar ``bar`` on by ``steps``."""
        self.progress.advance(bar, steps)

    def __enter__(self) -> StepBars:
        self._installed = contextlib.ExitStack()
        self._installed.enter_context(self.progress)
        self._installed.enter_context(progress_callback(self.on_step))
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._installed is not None
        self._installed.close()
        self._installed = None
