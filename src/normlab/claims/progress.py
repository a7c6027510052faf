"""Progress display for a report run and the summary table printed at its end."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table

from normlab.claims.core import Claim
from normlab.claims.runner import ClaimResult, TaskResult

__all__ = ["ClaimProgress", "summary_table"]

_STYLE = {
    "supported": "green",
    "contradicted": "red",
    "inconclusive": "yellow",
    "untestable": "magenta",
    "error": "bright_black",
}


def _tasks(claim: Claim, scale: str) -> int:
    return len(claim.seeds(scale)) + (1 if claim.checks else 0)


class ClaimProgress:
    """A bar per claim (tasks done of tasks to run) plus one for the whole run, with the
    elapsed time and an estimate of the time left; cached tasks are counted as "cached".

    Use as a context manager and pass :meth:`update` as the runner's ``on_result``.
    """

    def __init__(
        self, claims: Sequence[Claim], scale: str, *, console: Console, enabled: bool = True
    ) -> None:
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=not enabled,
        )
        total = sum(_tasks(c, scale) for c in claims)
        self.overall = self.progress.add_task(f"all ({scale})", total=total, status="")
        self.rows = {
            c.id: self.progress.add_task(c.id, total=_tasks(c, scale), status="") for c in claims
        }
        self.errors: dict[str, int] = dict.fromkeys(self.rows, 0)
        self.cached: dict[str, int] = dict.fromkeys(self.rows, 0)

    def update(self, result: TaskResult) -> None:
        """Count one finished (or cached) task."""
        claim_id = result.claim_id
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
    """A table of claim, verdict, primary effect with its 95% interval, and wall time."""
    from normlab.claims.report import claim_record, key_number
    from normlab.claims.schema import decode

    # The claim id and the numbers never wrap; the paper's number (often a sentence) is
    # left to index.html, which shows it beside the primary effect.
    table = Table(
        Column("claim", no_wrap=True),
        Column("verdict", no_wrap=True),
        Column("primary effect [95% interval]", ratio=1),
        Column("wall time", no_wrap=True, justify="right"),
        title="normlab report",
    )
    for r in results:
        style = _STYLE.get(r.label, "")
        record = decode(claim_record(r))
        table.add_row(
            r.claim.id,
            f"[{style}]{r.label}[/{style}]",
            key_number(record),
            f"{r.seconds:.1f} s",
        )
    return table
