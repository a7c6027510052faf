"""Tune once, train every seed: the tuning a claim's first seed chose, reused by its others.

A tuned claim's first seed tunes every arm on its own validation split (the grid, the edge
extensions and the tie rule of :func:`~normlab.claims.protocol.tune`); each other seed
trains every arm once, at the parameters the first seed chose, and is tested as usual. The
seeds' spread is then the spread of training at fixed hyperparameters (the usual reading
of "mean over n seeds" in the papers), every arm still gets the same tuning budget, and a
claim with t trials per arm and n seeds trains ``t + n - 1`` times per arm instead of
``t * n``. The runner orders the tasks (:mod:`normlab.claims.schedule`); this module
carries the choices through a task.

A task runs inside :func:`session`. :func:`~normlab.claims.protocol.tune_arms` asks it
for the fixed choices of its call (a claim may call ``tune_arms`` several times per seed,
once per dataset or configuration: the calls are matched by their order, which a claim's
``run`` makes deterministic), and tells it what it chose, so the first seed's task can
hand its choices on. An arm without a fixed choice (a task outside the runner, a call the
first seed did not make) is tuned as before.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Choices", "Session", "current", "session"]

#: Per ``tune_arms`` call of one task, in call order: arm -> the chosen parameters.
Choices = list[dict[str, dict[str, Any]]]


@dataclass
class Session:
    """The fixed choices a task trains at (None: it tunes) and the choices it made."""

    fixed: Choices | None = None
    chosen: Choices = field(default_factory=list)

    def fixed_for_next_call(self) -> dict[str, dict[str, Any]]:
        """The fixed choices of the next ``tune_arms`` call (empty when there are none)."""
        call = len(self.chosen)
        if not self.fixed or call >= len(self.fixed):
            return {}
        return dict(self.fixed[call])

    def record(self, chosen: Mapping[str, Mapping[str, Any]]) -> None:
        """Record one ``tune_arms`` call's chosen parameters (fixed or tuned)."""
        self.chosen.append({arm: dict(params) for arm, params in chosen.items()})


_CURRENT: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "normlab_tune_once", default=None
)


def current() -> Session | None:
    """The session of the task running now, or None outside one."""
    return _CURRENT.get()


@contextmanager
def session(fixed: Sequence[Mapping[str, Mapping[str, Any]]] | None = None) -> Iterator[Session]:
    """Run a task's ``claim.run`` inside a session; ``fixed`` is the first seed's choices
    (:attr:`Session.chosen` of its task), or None for a task that tunes."""
    s = Session(fixed=[{a: dict(p) for a, p in call.items()} for call in fixed] if fixed else None)
    token = _CURRENT.set(s)
    try:
        yield s
    finally:
        _CURRENT.reset(token)
