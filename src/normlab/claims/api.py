"""The main job as a function: run claims and write the report, ``normlab.claims.run``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from normlab.claims.core import Claim, all_claims, get_claim
from normlab.claims.results import ClaimResult
from normlab.claims.runner import ClaimRunner
from normlab.claims.tasks import TaskResult

__all__ = ["Report", "resolve_claims", "run"]


@dataclass(frozen=True)
class Report:
    """What :func:`run` produced.

    Attributes:
        results: one :class:`~normlab.claims.results.ClaimResult` per claim run, whose
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


def _canonical(claim_id: str) -> str:
    return claim_id.strip().lower().replace("_", "-")


def resolve_claims(ids: Sequence[str] | None) -> list[Claim]:
    """The claims named by ``ids`` (every claim when None or empty), in order, once each.

    Ids are matched like method names: case and ``_`` versus ``-`` do not matter
    (``bn_geometry`` is ``bn-geometry``).

    Raises:
        KeyError: an unknown id (the message names the closest ids).
    """
    if not ids:
        return all_claims()
    known = {_canonical(c.id): c.id for c in all_claims()}
    for claim_id in ids:
        if _canonical(claim_id) not in known:
            raise KeyError(_unknown(claim_id, list(known)))
    return [get_claim(known[_canonical(i)]) for i in dict.fromkeys(ids)]


def _unknown(claim_id: str, known: list[str]) -> str:
    """The message for an unknown claim id: its closest ids, or where the list is."""
    import difflib

    close = difflib.get_close_matches(_canonical(claim_id), known, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else "no id is close to it;"
    return f"Unknown claim {claim_id!r}: {hint} `normlab list claims` lists all {len(known)}."


def run(
    ids: Sequence[str] | None = None,
    scale: str = "quick",
    *,
    jobs: int | None = None,
    out: Path | str = "report",
    force: bool = False,
    backend: str = "local",
    address: str | None = None,
    on_result: Callable[[TaskResult], None] | None = None,
    progress: bool = False,
    robustness: bool | str | None = None,
    placebo: bool | None = None,
) -> Report:
    """Run claims at ``scale`` (cached and resumable) and write the report to ``out``.

    Args:
        ids: claim ids (``_`` or ``-`` alike); None runs every registered claim. A subset
            is merged into an existing ``out/results.json`` instead of replacing it.
        scale: "smoke", "quick" or "full".
        jobs: parallel tasks; None (the default, as ``normlab report --jobs auto``) runs
            one per CPU core.
        out: the report folder (finished tasks are cached in ``out/tasks``).
        force: recompute cached tasks.
        backend: "local" (a process pool) or "ray".
        address: the Ray cluster address (only with ``backend="ray"``).
        on_result: called with each finished task.
        progress: show progress bars on stderr (a bar per claim and the time left).
        robustness: rerun each claim's seeds at free settings' neighbours and mark its
            verdict robust or fragile: "decisive" (its decisive setting's neighbours),
            "all" or True (every free setting's), "none" or False; None (the default) is
            :func:`~normlab.claims.plan.default_robustness`: "all" at full scale,
            "decisive" at quick, "none" at smoke. Only claims whose verdict is decided
            (supported or contradicted) are rerun; the reruns train at the main run's
            tuned choices.
        placebo: also run the A/A placebo of every tuned claim (the baseline trained again
            through the method's path; see :mod:`normlab.claims.placebo`); None (the
            default) runs it at full scale only.

    Raises:
        KeyError: an unknown claim id (the message names the closest ids).
        ValueError: an unknown scale or backend, ``jobs`` < 1, or ``address`` without
            ``backend="ray"``.
        PermissionError: ``out`` cannot be written (before any work).
        ConnectionError: no Ray cluster answers at ``address`` (before any work), or it
            refuses this driver (its message says how to give it the cluster's token).
    """
    from normlab.claims.core import SCALES
    from normlab.claims.plan import default_robustness
    from normlab.claims.progress import ClaimProgress, expected_seconds
    from normlab.claims.report import write_report

    if scale not in SCALES:
        raise ValueError(f"Unknown scale {scale!r}; expected one of {SCALES}.")
    if address is not None and backend != "ray":
        raise ValueError(
            f"address={address!r} is a Ray cluster address; it needs backend='ray' "
            "(--backend ray), or drop it to run locally."
        )
    claims = resolve_claims(ids)
    if robustness is None:
        robustness = default_robustness(scale)
    if placebo is None:
        placebo = scale == "full"
    runner = ClaimRunner(out, jobs=jobs, backend=backend, address=address, force=force)
    bars = ClaimProgress(
        claims,
        scale,
        enabled=progress,
        jobs=runner.jobs,
        expected=expected_seconds(out, scale),
        robustness=robustness,
        placebo=placebo,
    )

    def report(result: TaskResult) -> None:
        bars.update(result)
        if on_result is not None:
            on_result(result)

    runner.on_result = report
    runner.on_skipped = bars.skip
    with bars:
        results = tuple(runner.run(claims, scale, robustness=robustness, placebo=placebo))
    index = write_report(results, out, merge=bool(ids), runner=runner)
    return Report(results, scale, Path(out), index, index.parent / "results.json")
