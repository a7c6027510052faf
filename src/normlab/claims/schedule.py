"""Which tasks a report runs, and in what order they may start.

A claim's tasks form groups: its main seeds (with its checks), and when asked, the A/A
placebo's seeds and the robustness reruns at each neighbour of its free settings.

- **Tune once.** In a tuned claim's main and placebo groups the first seed tunes every
  arm; the group's other seeds start when it has finished and train at its choices
  (:mod:`normlab.claims.tune_once`). If the first seed fails or made no choice, the others
  tune for themselves.
- **Robustness after the verdict.** A claim's robustness reruns start when its main seeds
  and checks have finished, and only when its verdict is decided (supported or
  contradicted): robustness asks whether a verdict holds when a setting normlab chose moves
  to a neighbour, and an inconclusive or untestable claim has none to hold. The reruns
  train at the main run's choices (nothing is re-tuned: the one setting moves, the rest
  stays), every seed at once.

:class:`Schedule` is driven by the runner: :meth:`Schedule.start` gives the first tasks,
:meth:`Schedule.finished` takes each result (cached or computed) and gives the tasks it
releases, :meth:`Schedule.results` judges every claim at the end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from normlab.claims._format import DECIDED
from normlab.claims.core import Claim
from normlab.claims.placebo import placebo_override
from normlab.claims.plan import robustness_overrides, tunes
from normlab.claims.protocol import PLACEBO_KEY
from normlab.claims.results import ClaimResult
from normlab.claims.tasks import CHECKS, TaskResult

__all__ = ["Schedule", "Task"]

Key = Callable[[Claim, str, "int | None", "dict | None", "list | None"], str]


@dataclass(frozen=True)
class Task:
    """One task: a claim's seed (or its checks: ``seed`` None) at a scale, with the config
    ``override`` of a rerun and the tuning seed's ``fixed`` choices, under its cache key."""

    claim: Claim
    scale: str
    seed: int | None
    key: str
    override: dict[str, Any] | None = None
    fixed: list[dict[str, Any]] | None = None

    def args(self) -> tuple[str, str, int | None]:
        return self.claim.id, self.scale, self.seed

    @property
    def group(self) -> str:
        """The task's group within its claim: "" for the main run, else its override."""
        return json.dumps(self.override, sort_keys=True) if self.override else ""


class Schedule:
    """The tasks of a report and their order (see the module's docstring).

    Args:
        claims: the claims.
        scale: their scale.
        robustness: which free settings' neighbours to rerun ("none", "decisive", "all").
        placebo: run the A/A placebo of every tuned claim.
        key: ``(claim, scale, seed, override, fixed) -> cache key``.
        on_skipped: called with ``(claim id, count)`` when a claim's robustness reruns are
            not run (its verdict is not decided).
    """

    def __init__(
        self,
        claims: Sequence[Claim],
        scale: str,
        *,
        robustness: bool | str,
        placebo: bool,
        key: Key,
        on_skipped: Callable[[str, int], None] | None = None,
    ) -> None:
        self.claims, self.scale, self.robustness, self._key = list(claims), scale, robustness, key
        self.placebo = placebo
        self.done: dict[str, TaskResult] = {}
        self._tasks: dict[str, list[Task]] = {c.id: [] for c in self.claims}
        self._waiting: dict[tuple[str, str], list[int]] = {}
        self._neighbours_released: set[str] = set()
        #: claim id -> how many robustness tasks it did not run (its verdict not decided)
        self.skipped: dict[str, int] = {}
        self._on_skipped = on_skipped

    def _task(self, claim: Claim, seed: int | None, override=None, fixed=None) -> Task:
        key = self._key(claim, self.scale, seed, override, fixed)
        task = Task(claim, self.scale, seed, key, override, fixed)
        self._tasks[claim.id].append(task)
        return task

    def _group(self, claim: Claim, override: dict[str, Any] | None) -> list[Task]:
        """A group's first tasks: every seed of an untuned claim, the first of a tuned one
        (the others wait for it)."""
        seeds = list(claim.seeds(self.scale))
        if not tunes(claim, self.scale) or len(seeds) < 2:
            return [self._task(claim, s, override) for s in seeds]
        first = self._task(claim, seeds[0], override)
        self._waiting[(claim.id, first.group)] = seeds[1:]
        return [first]

    def start(self) -> list[Task]:
        """The tasks that can start at once: tuning seeds first (the dearest tasks)."""
        first, rest = [], []
        for claim in self.claims:
            first += self._group(claim, None)
            rest += [self._task(claim, CHECKS)] if claim.checks else []
            aa = placebo_override(claim) if self.placebo and tunes(claim, self.scale) else None
            if aa is not None:
                first += self._group(claim, aa)
        return first + rest

    def finished(self, task: Task, result: TaskResult) -> list[Task]:
        """Record a task's result and return the tasks it releases."""
        self.done[task.key] = result
        claim = task.claim
        out = []
        waiting = self._waiting.pop((claim.id, task.group), None)
        if waiting is not None:
            fixed = _choices(result)
            out += [self._task(claim, s, task.override, fixed) for s in waiting]
        if self._main_finished(claim) and claim.id not in self._neighbours_released:
            self._neighbours_released.add(claim.id)
            out += self._neighbours(claim)
        return out

    def _main(self, claim: Claim) -> list[Task]:
        return [t for t in self._tasks[claim.id] if t.override is None]

    def _main_finished(self, claim: Claim) -> bool:
        if (claim.id, "") in self._waiting:
            return False
        return all(t.key in self.done for t in self._main(claim))

    def _neighbours(self, claim: Claim) -> list[Task]:
        overrides = robustness_overrides(claim, self.scale, self.robustness)
        if not overrides:
            return []
        if self.verdict(claim) not in DECIDED:
            self.skipped[claim.id] = len(overrides) * len(claim.seeds(self.scale))
            if self._on_skipped is not None:
                self._on_skipped(claim.id, self.skipped[claim.id])
            return []
        main = [self.done[t.key] for t in self._main(claim) if t.seed is not None]
        tuning = next((r for r in main if r.fixed is None and r.choices), None)
        fixed = None if tuning is None else tuning.choices
        return [
            self._task(claim, s, override, fixed)
            for override in overrides
            for s in claim.seeds(self.scale)
        ]

    def verdict(self, claim: Claim) -> str:
        """The claim's verdict on its main tasks (seeds and checks) alone."""
        main = [self.done[t.key] for t in self._main(claim)]
        return ClaimResult.from_tasks(claim, self.scale, main, []).verdict.verdict

    def results(self) -> list[ClaimResult]:
        """Every claim judged on its finished tasks (main, robustness reruns, placebo)."""
        out = []
        for claim in self.claims:
            tasks = self._tasks[claim.id]
            main = [self.done[t.key] for t in tasks if t.override is None]
            aa = [self.done[t.key] for t in tasks if t.override and _is_placebo(t.override)]
            extra = [self.done[t.key] for t in tasks if t.override and not _is_placebo(t.override)]
            out.append(ClaimResult.from_tasks(claim, self.scale, main, extra, placebo=aa))
        return out


def _is_placebo(override: dict[str, Any]) -> bool:
    return PLACEBO_KEY in override


def _choices(result: TaskResult) -> list[dict[str, Any]] | None:
    """The tuning seed's choices to hand on, or None (it failed or tuned nothing)."""
    if result.status != "ok" or not result.choices:
        return None
    return result.choices
