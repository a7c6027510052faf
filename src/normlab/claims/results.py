"""A claim's judged result at one scale: its tasks, the rule's verdict, the primary's null
calibration and the robustness reruns."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from normlab.claims._format import NO_VERDICT, robustness_status
from normlab.claims.calibration import null_calibration
from normlab.claims.core import CheckOutcome, Claim, Effect, Margin
from normlab.claims.placebo import judge_placebo, not_applicable
from normlab.claims.plan import robustness_overrides
from normlab.claims.rule import ClaimVerdict, judge_claim
from normlab.claims.tasks import TaskResult

__all__ = ["ClaimResult"]


@dataclass(frozen=True)
class ClaimResult:
    """A claim's tasks at one scale and the verdict the rule computed from them.

    Attributes:
        claim: the claim.
        scale: the scale.
        tasks: the seed tasks, by seed.
        checks: the checks task, or None when the claim has no checks.
        verdict: :func:`~normlab.claims.rule.judge_claim`'s record, with the primary's
            null calibration and (after ``--robustness``) its robustness records.
        neighbours: the robustness reruns' and the A/A placebo's seed tasks.
    """

    claim: Claim
    scale: str
    tasks: tuple[TaskResult, ...]
    checks: TaskResult | None
    verdict: ClaimVerdict
    neighbours: tuple[TaskResult, ...] = ()

    @property
    def label(self) -> str:
        """The claim's verdict label ("supported", ..., "error")."""
        return self.verdict.verdict

    @property
    def measurements(self) -> list[dict[str, Any]]:
        return [t.measurement for t in self.tasks if t.status == "ok" and t.measurement]

    @property
    def all_tasks(self) -> tuple[TaskResult, ...]:
        return self.tasks + ((self.checks,) if self.checks is not None else ()) + self.neighbours

    @property
    def robustness(self) -> str:
        """ "robust", "fragile at NAME=VALUE", or "not run" (`_format.robustness_status`:
        a neighbour where the claim is untestable is named apart, never fragile)."""
        record = {
            "verdict": self.label,
            "robustness": list(self.verdict.robustness),
            "free_settings": [s.key for s in self.claim.free_settings],
        }
        return robustness_status(record)

    @property
    def seconds(self) -> float:
        """Wall seconds of every task."""
        return sum(t.seconds for t in self.all_tasks)

    @property
    def cpu_seconds(self) -> float | None:
        """CPU seconds of every task, or None when none recorded it (caches from before)."""
        known = [t.cpu_seconds for t in self.all_tasks if t.cpu_seconds is not None]
        return math.fsum(known) if known else None

    @classmethod
    def from_tasks(
        cls,
        claim: Claim,
        scale: str,
        tasks: Iterable[TaskResult],
        neighbours: Iterable[TaskResult] = (),
        *,
        placebo: Iterable[TaskResult] = (),
    ) -> ClaimResult:
        """Judge the claim from its finished tasks (a failed task makes it "error"), with
        the primary's null calibration, the robustness reruns in ``neighbours`` and the A/A
        placebo's tasks in ``placebo``."""
        neighbours, placebo = list(neighbours), list(placebo)
        tasks = list(tasks)
        seeds = tuple(sorted((t for t in tasks if not t.is_checks), key=lambda t: t.seed or 0))
        checks = next((t for t in tasks if t.is_checks), None)
        outcomes: dict[str, CheckOutcome] = {}
        if checks is not None and checks.status == "ok" and checks.measurement:
            outcomes = {
                name: CheckOutcome(bool(o["passed"]), _float(o["value"]), str(o["detail"]))
                for name, o in checks.measurement.items()
            }
        good = [t for t in seeds if t.status == "ok" and t.measurement is not None]
        ok = [t.measurement for t in good]
        failed = sum(t.status != "ok" for t in tasks)
        verdict = judge_claim(
            claim, ok, outcomes, failed_tasks=failed, seeds=[t.seed for t in good], scale=scale
        )
        if verdict.verdict != "error":
            null = null_calibration(claim.primary, ok)
            reruns = _robustness(claim, neighbours, scale)
            if reruns:  # robustness was asked for: the margin's neighbours cost no training
                reruns += _below_floor(claim, scale, {r["setting"] for r in reruns})
                reruns += _margin_robustness(claim, ok, outcomes, scale)
            robust = tuple({**r, "flips": _flips(r["verdict"], verdict.verdict)} for r in reruns)
            aa = not_applicable(claim, scale)
            if placebo:
                done = [t.measurement for t in placebo if t.status == "ok" and t.measurement]
                aa = judge_placebo(claim, done, scale)
                aa["failed_tasks"] = sum(t.status != "ok" for t in placebo)
                if aa["failed_tasks"] == len(placebo):
                    aa = {**aa, "status": "not available", "why": "every placebo task failed"}
            verdict = replace(verdict, null=null, robustness=robust, placebo=aa)
        return cls(claim, scale, seeds, checks, verdict, tuple(neighbours) + tuple(placebo))


def _robustness(
    claim: Claim, neighbours: Iterable[TaskResult], scale: str
) -> tuple[dict[str, Any], ...]:
    """The primary's verdict at each neighbour setting (tasks grouped by their override)."""
    groups: dict[str, list[TaskResult]] = {}
    for t in neighbours:
        groups.setdefault(json.dumps(t.override, sort_keys=True), []).append(t)
    out = []
    for text, tasks in sorted(groups.items()):
        ((key, value),) = json.loads(text).items()
        ok = [t.measurement for t in tasks if t.status == "ok" and t.measurement is not None]
        failed = sum(t.status != "ok" for t in tasks)
        v = judge_claim(claim, ok, failed_tasks=failed, check_outcomes=_PASS(claim), scale=scale)
        p = v.primary
        out.append(
            {
                "setting": key,
                "value": value,
                "verdict": v.verdict,
                "mean": p.mean if p is not None else math.nan,
                "low": p.low if p is not None else math.nan,
                "high": p.high if p is not None else math.nan,
                "seeds": len(ok),
            }
        )
    return tuple(out)


def _below_floor(claim: Claim, scale: str, settings: set[str]) -> tuple[dict[str, Any], ...]:
    """The neighbours of the rerun ``settings`` that were not rerun because they lie below
    the value measured testable (:attr:`FreeSetting.testable_from`): untestable, with the
    measurement that says so."""
    why = {s.key: s.below_why for s in claim.free_settings}
    return tuple(
        {
            "setting": key,
            "value": value,
            "verdict": "untestable",
            "mean": math.nan,
            "low": math.nan,
            "high": math.nan,
            "seeds": 0,
            "why": f"not rerun: {why[key]}",
        }
        for ((key, value),) in (
            o.items() for o in robustness_overrides(claim, scale, "all", below_floor=True)
        )
        if key in settings
    )


#: The factors on a margin that is normlab's choice: its robustness neighbours.
MARGIN_FACTORS = (0.5, 2.0)


def _margin_robustness(
    claim: Claim, measurements: list[dict[str, Any]], outcomes, scale: str
) -> tuple[dict[str, Any], ...]:
    """The claim's verdict with the primary's margin halved and doubled, re-judged on the
    main seeds, when the margin is normlab's choice (a free setting that needs no rerun)."""
    margin = claim.primary.margin
    if not margin.source.startswith("normlab's choice") or margin.value <= 0:
        return ()
    out = []
    for factor in MARGIN_FACTORS:
        moved = _with_margin(claim.primary, Margin(margin.value * factor, margin.source))
        v = judge_claim(replace(claim, primary=moved), measurements, outcomes, scale=scale)
        p = v.primary
        out.append(
            {
                "setting": "margin",
                "value": margin.value * factor,
                "verdict": v.verdict,
                "mean": p.mean if p is not None else math.nan,
                "low": p.low if p is not None else math.nan,
                "high": p.high if p is not None else math.nan,
                "seeds": len(measurements),
            }
        )
    return tuple(out)


def _with_margin(effect: Effect, margin: Margin) -> Effect:
    parts = tuple(_with_margin(p, margin) for p in effect.parts)
    return replace(effect, margin=margin, parts=parts)


def _flips(neighbour: str, main: str) -> bool:
    """Whether a neighbour's verdict contradicts the main one: a neighbour where a premise
    (or a task) failed reached no verdict, so it is shown apart, never counted as a flip."""
    return neighbour != main and neighbour not in NO_VERDICT


def _PASS(claim: Claim) -> dict[str, CheckOutcome]:
    """Checks count as passed for a robustness rerun (they ran once, on the main config)."""
    return {c.name: CheckOutcome(True, 0.0, "run on the main config") for c in claim.checks}


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)
