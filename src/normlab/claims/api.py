"""The main job as a function: run claims and write the report, ``normlab.claims.run``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from normlab.claims.core import all_claims, get_claim
from normlab.claims.runner import ClaimResult, ClaimRunner, TaskResult

__all__ = ["Report", "run"]


@dataclass(frozen=True)
class Report:
    """What :func:`run` produced.

    Attributes:
        results: one :class:`~normlab.claims.runner.ClaimResult` per claim run, whose
            ``verdict`` is the rule's :class:`~normlab.claims.core.ClaimVerdict`.
        scale: the scale.
        out: the report folder.
        index: ``out/index.html``.
        results_json: ``out/results.json``.
    """

    results: tuple[ClaimResult, ...]
    scale: str
    out: Path
    index: Path
    results_json: Path

    @property
    def verdicts(self) -> dict[str, str]:
        """Claim id -> verdict label."""
        return {r.claim.id: r.label for r in self.results}


def run(
    ids: Sequence[str] | None = None,
    scale: str = "quick",
    *,
    jobs: int | None = 1,
    out: Path | str = "report",
    force: bool = False,
    backend: str = "local",
    address: str | None = None,
    on_result: Callable[[TaskResult], None] | None = None,
) -> Report:
    """Run claims at ``scale`` (cached and resumable) and write the report to ``out``.

    Args:
        ids: claim ids; None runs every registered claim. A subset is merged into an
            existing ``out/results.json`` instead of replacing it.
        scale: "smoke", "quick" or "full".
        jobs: parallel tasks (None: one per core).
        out: the report folder (finished tasks are cached in ``out/tasks``).
        force: recompute cached tasks.
        backend: "local" (a process pool) or "ray".
        address: the Ray cluster address.
        on_result: called with each finished task (progress).

    Raises:
        KeyError: an unknown claim id (the message lists the valid ones).
        PermissionError: ``out`` cannot be written (before any work).
    """
    from normlab.claims.report import write_report

    claims = all_claims() if ids is None else [get_claim(i) for i in dict.fromkeys(ids)]
    runner = ClaimRunner(
        out, jobs=jobs, backend=backend, address=address, force=force, on_result=on_result
    )
    results = tuple(runner.run(claims, scale))
    index = write_report(results, out, merge=ids is not None)
    return Report(results, scale, Path(out), index, index.parent / "results.json")
