"""Progress display for a report run and the summary table printed at its end.

The estimate of the time left comes from the tasks' own expected times, not from rich's
30-second speed window (which shows ``-:--:--`` whenever no task finished in the last 30 s):
a task's expected time is its time in the folder's previous ``results.json`` (cached tasks
keep their original time), else the mean time of its claim's finished tasks, else of every
finished task. Known times are scaled by how much slower (or faster) this run's tasks are
than their previous times; the work left is divided by the run's throughput (seconds of
task time done per second of wall time). Both are smoothed over the whole run from a prior
(no slow-down, one busy worker per job, worth :data:`PRIOR_SECONDS`), and the estimate
counts down between two results.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table
from rich.text import Text

from normlab.claims.core import Claim
from normlab.claims.plan import extra_overrides
from normlab.claims.protocol import PLACEBO_KEY
from normlab.claims.results import ClaimResult
from normlab.claims.tasks import TaskResult

__all__ = ["ClaimProgress", "Estimate", "expected_seconds", "summary_table", "task_id"]

_STYLE = {
    "supported": "green",
    "contradicted": "red",
    "inconclusive": "yellow",
    "untestable": "magenta",
    "error": "bright_black",
}
#: Wall seconds of the throughput prior (one busy worker per job) in the smoothing.
PRIOR_SECONDS = 30.0

TaskId = tuple[str, int | str | None]


def _neighbour(key: str, value: object, seed: int | None) -> str:
    return f"{key}={value!r}/seed{seed}"


def task_id(result: TaskResult) -> TaskId:
    """A finished task's id: (claim, seed), or (claim, "key=value/seedN") for a
    robustness rerun."""
    if not result.override:
        return result.claim_id, result.seed
    ((key, value),) = result.override.items()
    return result.claim_id, _neighbour(key, value, result.seed)


def _task_ids(
    claim: Claim, scale: str, robustness: bool | str = False, placebo: bool = False
) -> list[TaskId]:
    ids: list[TaskId] = [(claim.id, s) for s in claim.seeds(scale)]
    ids += [(claim.id, None)] if claim.checks else []
    for override in extra_overrides(claim, scale, robustness=robustness, placebo=placebo):
        ((key, value),) = override.items()
        ids += [(claim.id, _neighbour(key, value, s)) for s in claim.seeds(scale)]
    return ids


def _recorded_id(claim_id: str, task: Mapping[str, Any]) -> TaskId:
    """A recorded task's id, as :func:`task_id` gives it (a rerun keeps its own time)."""
    override = task.get("override")
    if not override:
        return claim_id, task.get("seed")
    ((key, value),) = override.items()
    return claim_id, _neighbour(key, value, task.get("seed"))


def expected_seconds(out: Path | str, scale: str) -> dict[TaskId, float]:
    """Each task's time in ``out/results.json`` at ``scale``, by (claim id, seed or None)."""
    path = Path(out) / "results.json"
    try:
        data = json.loads(path.read_text())
        found = {}
        for c in data.get("claims", []):
            if c.get("scale") != scale:
                continue
            for t in c.get("tasks", []):
                seconds = t.get("seconds")
                if isinstance(seconds, int | float) and t.get("status") == "ok":
                    found[_recorded_id(c["id"], t)] = float(seconds)
        return found
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


class Estimate:
    """The time left of a run from its tasks' expected times.

    Args:
        tasks: every task of the run, by (claim id, seed or None for the checks).
        jobs: tasks run at once.
        expected: known expected seconds of some tasks (:func:`expected_seconds`).
        clock: the wall clock (tests pass a fake one).
    """

    def __init__(
        self,
        tasks: Sequence[TaskId],
        *,
        jobs: int = 1,
        expected: Mapping[TaskId, float] | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.left = set(tasks)
        self.jobs = max(1, jobs)
        self.expected = dict(expected or {})
        self.clock = clock
        self.start = clock()
        self.work_done = 0.0  # task seconds computed in this run (cached tasks excluded)
        self.observed: dict[str, list[float]] = {}
        self._actual = 0.0  # time of the finished tasks that had a known time
        self._known = 0.0  # their known times
        self._eta: float | None = self._compute()
        self._at = self.start

    def finished(self, task: TaskId, seconds: float, *, cached: bool) -> None:
        """Count one finished task; ``seconds`` is its task time."""
        self.left.discard(task)
        self.observed.setdefault(task[0], []).append(seconds)
        if not cached:
            self.work_done += seconds
            if task in self.expected:
                self._actual += seconds
                self._known += self.expected[task]
        self._eta, self._at = self._compute(), self.clock()

    def drop(self, tasks: Sequence[TaskId]) -> None:
        """Forget tasks the run will not start (a claim's skipped robustness reruns)."""
        self.left.difference_update(tasks)
        self._eta, self._at = self._compute(), self.clock()

    def _guess(self, task: TaskId) -> float | None:
        if task in self.expected:
            slowdown = (self._actual + PRIOR_SECONDS) / (self._known + PRIOR_SECONDS)
            return self.expected[task] * slowdown
        own = self.observed.get(task[0])
        if own:
            return sum(own) / len(own)
        every = [s for values in self.observed.values() for s in values]
        known = list(self.expected.values()) + every
        return sum(known) / len(known) if known else None

    def _compute(self) -> float | None:
        if not self.left:
            return 0.0
        guesses = [self._guess(t) for t in self.left]
        if any(g is None for g in guesses):
            return None
        elapsed = self.clock() - self.start
        busy = min(self.jobs, len(self.left))
        throughput = (self.work_done + busy * PRIOR_SECONDS) / (elapsed + PRIOR_SECONDS)
        return math.fsum(guesses) / max(throughput, 1e-9)  # type: ignore[arg-type]

    def seconds_left(self) -> float | None:
        """The estimate now (counting down since the last result), or None when nothing is
        known yet (no previous run and no finished task)."""
        if self._eta is None:
            return None
        return max(0.0, self._eta - (self.clock() - self._at))


class _EtaColumn(ProgressColumn):
    """``ETA 0:01:23`` from the task's :class:`Estimate` (field ``estimate``)."""

    def render(self, task: Any) -> Text:
        estimate = task.fields.get("estimate")
        if estimate is None:
            return Text("")
        left = estimate.seconds_left()
        if left is None:
            return Text("ETA estimating", style="progress.remaining")
        minutes, secs = divmod(round(left), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"ETA {hours}:{minutes:02d}:{secs:02d}", style="progress.remaining")


class ClaimProgress:
    """A bar per claim (tasks done of tasks to run) plus one for the whole run, with the
    elapsed time and the estimate of the time left (:class:`Estimate`); cached tasks are
    counted as "cached".

    Use as a context manager and pass :meth:`update` as the runner's ``on_result``.

    Args:
        claims: the claims of the run.
        scale: their scale.
        console: where to draw (default: stderr).
        enabled: draw at all.
        jobs: tasks run at once.
        expected: known expected task times (:func:`expected_seconds`).
    """

    def __init__(
        self,
        claims: Sequence[Claim],
        scale: str,
        *,
        console: Console | None = None,
        enabled: bool = True,
        jobs: int = 1,
        expected: Mapping[TaskId, float] | None = None,
        robustness: bool | str = False,
        placebo: bool = False,
    ) -> None:
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            _EtaColumn(),
            console=console or Console(stderr=True),
            disable=not enabled,
        )
        tasks = [t for c in claims for t in _task_ids(c, scale, robustness, placebo)]
        self.estimate = Estimate(tasks, jobs=jobs, expected=expected)
        self.overall = self.progress.add_task(
            f"all ({scale})", total=len(tasks), status="", estimate=self.estimate
        )
        self.rows = {
            c.id: self.progress.add_task(
                c.id, total=len(_task_ids(c, scale, robustness, placebo)), status=""
            )
            for c in claims
        }
        self.errors: dict[str, int] = dict.fromkeys(self.rows, 0)
        self.cached: dict[str, int] = dict.fromkeys(self.rows, 0)

    @property
    def done(self) -> int:
        """Tasks finished so far (cached ones included)."""
        return int(self.progress.tasks[self.overall].completed)

    @property
    def total(self) -> int:
        """Tasks of the run."""
        return int(self.progress.tasks[self.overall].total or 0)

    def update(self, result: TaskResult) -> None:
        """Count one finished (or cached) task."""
        claim_id = result.claim_id
        self.estimate.finished(task_id(result), result.seconds, cached=result.cached)
        if result.status != "ok":
            self.errors[claim_id] += 1
        if result.cached:
            self.cached[claim_id] += 1
        parts = []
        if self.errors[claim_id]:
            parts.append(f"[red]{self.errors[claim_id]} error(s)[/red]")
        if self.cached[claim_id]:
            parts.append(f"[cyan]{self.cached[claim_id]} cached[/cyan]")
        status = ", ".join(parts) or "[green]ok[/green]"
        self.progress.update(self.rows[claim_id], advance=1, status=status)
        total_cached = sum(self.cached.values())
        overall = f"[cyan]{total_cached} cached[/cyan]" if total_cached else ""
        self.progress.update(self.overall, advance=1, status=overall)

    def skip(self, claim_id: str, count: int) -> None:
        """Take ``count`` tasks a claim will not run off its totals (robustness reruns of a
        claim whose verdict is not decided)."""
        prefix = f"{PLACEBO_KEY}="
        self.estimate.drop(
            [
                t
                for t in self.estimate.left
                if t[0] == claim_id and isinstance(t[1], str) and not t[1].startswith(prefix)
            ]
        )
        row = self.progress.tasks[self.rows[claim_id]]
        self.progress.update(self.rows[claim_id], total=max(0, (row.total or 0) - count))
        overall = self.progress.tasks[self.overall]
        self.progress.update(self.overall, total=max(0, (overall.total or 0) - count))

    def __enter__(self) -> ClaimProgress:
        self.progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.progress.stop()


def summary_table(results: Sequence[ClaimResult]) -> Table:
    """A table of claim, verdict, primary effect with its 95% interval, and CPU time."""
    from normlab.claims._format import key_number
    from normlab.claims.report import claim_record
    from normlab.claims.schema import decode

    # The claim id and the numbers never wrap; the paper's number (often a sentence) is
    # left to index.html, which shows it beside the primary effect.
    table = Table(
        Column("claim", no_wrap=True),
        Column("verdict", no_wrap=True),
        Column("primary effect [95% interval]", ratio=1),
        Column("CPU time", no_wrap=True, justify="right"),
        title="normlab report",
    )
    for r in results:
        style = _STYLE.get(r.label, "")
        record = decode(claim_record(r))
        table.add_row(
            r.claim.id,
            f"[{style}]{r.label}[/{style}]",
            key_number(record),
            "n/a" if r.cpu_seconds is None else f"{r.cpu_seconds:.1f} s",
        )
    return table
