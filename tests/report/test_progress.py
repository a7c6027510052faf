"""The time left of a report run, estimated from the tasks' expected times."""

from __future__ import annotations

import json
import os

import pytest

from normlab.claims.progress import Estimate, expected_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_known_times_give_an_estimate_from_the_start_that_counts_down():
    clock = Clock()
    tasks = [("a", 0), ("a", 1), ("b", 0), ("b", None)]
    eta = Estimate(tasks, jobs=1, expected=dict.fromkeys(tasks, 10.0), clock=clock)
    assert eta.seconds_left() == pytest.approx(40.0)
    clock.now = 5.0
    assert eta.seconds_left() == pytest.approx(35.0)  # counts down between results
    clock.now = 10.0
    eta.finished(("a", 0), 10.0, cached=False)
    assert eta.seconds_left() == pytest.approx(30.0)
    clock.now = 400.0  # a long task: the estimate stays a number, never "-:--:--"
    assert eta.seconds_left() == 0.0
    eta.finished(("a", 1), 390.0, cached=False)  # far slower than its previous time
    slowdown = (400.0 + 30.0) / (20.0 + 30.0)  # smoothed actual / previous times
    assert eta.seconds_left() == pytest.approx(20.0 * slowdown)


def test_without_history_it_waits_for_a_first_task_then_uses_the_claims_mean():
    clock = Clock()
    eta = Estimate([("a", 0), ("a", 1), ("b", 0)], jobs=2, clock=clock)
    assert eta.seconds_left() is None
    clock.now = 4.0
    eta.finished(("a", 0), 4.0, cached=False)
    # 2 tasks of 4 s left; throughput (4 + 2 * 30) / (4 + 30) task-seconds a second
    assert eta.seconds_left() == pytest.approx(8.0 / (64.0 / 34.0))


def test_cached_tasks_cost_nothing_and_previous_times_are_read(tmp_path):
    record = {
        "id": "a",
        "scale": "quick",
        "tasks": [
            {"seed": 0, "seconds": 12.5, "status": "ok"},
            {"seed": None, "seconds": 1.0, "status": "ok"},
            {"seed": 1, "seconds": 3.0, "status": "error"},
        ],
    }
    (tmp_path / "results.json").write_text(json.dumps({"claims": [record]}))
    assert expected_seconds(tmp_path, "quick") == {("a", 0): 12.5, ("a", None): 1.0}
    assert expected_seconds(tmp_path, "smoke") == {}
    assert expected_seconds(tmp_path / "missing", "quick") == {}
    eta = Estimate([("a", 0)], expected={("a", 0): 12.5}, clock=Clock())
    eta.finished(("a", 0), 12.5, cached=True)
    assert eta.seconds_left() == 0.0 and eta.work_done == 0.0


def test_skipped_robustness_reruns_leave_the_totals_and_the_estimate():
    from rich.console import Console

    from normlab.claims.progress import ClaimProgress
    from tests.claims._planted import OK as claim

    with open(os.devnull, "w") as sink:
        bars = ClaimProgress([claim], "quick", console=Console(file=sink), robustness="all")
        assert bars.total == 3 + 1 + 2 * 3  # seeds, checks, a free setting's two neighbours
        bars.skip(claim.id, 2 * 3)
        assert bars.total == 4 and len(bars.estimate.left) == 4
