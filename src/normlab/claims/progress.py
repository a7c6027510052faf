"""Progress display for a report run and the summary table printed at its end."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from normlab.claims.core import Claim
from normlab.claims.runner import ClaimResult, TaskResult

__all__ = ["ClaimProgress", "summary_table"]

_STYLE = {
    "supported": "green",
    "contradicted": "red",
    "inconclusive": "yellow",
    "error": "bright_black",
}


class ClaimProgress:
    """A progress bar per claim (seeds done of seeds to run) plus one for the whole run.

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
            console=console,
            disable=not enabled,
        )
        total = sum(len(c.seeds(scale)) for c in claims)
        self.overall = self.progress.add_task(f"all ({scale})", total=total, status="")
        self.rows = {
            c.id: self.progress.add_task(c.id, total=len(c.seeds(scale)), status="")
            for c in claims
        }
        self.errors: dict[str, int] = dict.fromkeys(self.rows, 0)

    def update(self, result: TaskResult) -> None:
        """Count one finished task."""
        if result.status != "ok":
            self.errors[result.claim] += 1
        errors = self.errors[result.claim]
        status = f"[red]{errors} error(s)[/red]" if errors else "[green]ok[/green]"
        self.progress.update(self.rows[result.claim], advance=1, status=status)
        self.progress.update(self.overall, advance=1)

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
    """A table of claim, verdict, key number and wall time."""
    from normlab.claims.report import key_number

    table = Table(
        "claim", "verdict", "key number vs baseline", "wall time", title="normlab report"
    )
    for r in results:
        style = _STYLE.get(r.verdict, "")
        table.add_row(
            r.claim.id, f"[{style}]{r.verdict}[/{style}]", key_number(r), f"{r.seconds:.1f} s"
        )
    return table
