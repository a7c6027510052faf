"""Tune once, train every seed (claims.tune_once, claims.schedule): the first seed tunes,
the others train at its choices; robustness reruns follow a decided verdict only."""

from __future__ import annotations

import json

import pytest

import normlab.claims.runner as runner_module
from normlab.claims.arms import Trained, run_arms
from normlab.claims.protocol import tune_arms
from normlab.claims.runner import ClaimRunner
from normlab.claims.tasks import task_key
from normlab.claims.tune_once import session

SEARCH = {"arms": ["method", "baseline"], "space": {"lr": [1e-3, 1e-2, 1e-1]}, "extend": 0}


def _counting(calls):
    def evaluate(arm, params):
        calls.append((arm, params["lr"]))
        return abs(params["lr"] - 1e-2), None

    return evaluate


def test_a_tuning_task_records_its_choices_per_call():
    calls = []
    other = {"per_arm": {"method": {"lr": [1e-3, 1e-2, 1e-1]}, "baseline": {"lr": [1, 2, 3]}}}
    with session() as s:
        tune_arms({"search": {**other, "extend": 0}}, _counting(calls))
        tune_arms({"search": SEARCH}, _counting(calls), arms=["method"])
    assert s.chosen == [{"method": {"lr": 1e-2}, "baseline": {"lr": 1}}, {"method": {"lr": 1e-2}}]
    assert len(calls) == 3 + 3 + 3  # every grid point of both calls


def test_a_fixed_task_trains_each_arm_once_at_the_given_choice():
    calls = []
    config = {"search": {"per_arm": {"method": {"lr": [1e-3, 1e-2, 1e-1]}}}}
    with session([{"method": {"lr": 1e-1}}]) as s:
        tuned, records = tune_arms(config, _counting(calls))
    assert calls == [("method", 1e-1)]  # no grid: the tuning seed's choice, even a poor one
    assert tuned["method"].chosen == {"lr": 1e-1}
    record = records["method"]
    assert record["fixed"] and record["trials"] == 1 and record["tie"] == "fixed"
    assert record["grid_trials"] == 3 and not record["on_edge"]
    assert s.chosen == [{"method": {"lr": 1e-1}}]


def test_an_arm_without_a_fixed_choice_is_tuned():
    calls = []
    config = {"search": {"arms": ["a", "b"], "space": {"lr": [1e-3, 1e-2, 1e-1]}}}
    with session([{"a": {"lr": 1e-3}}]):
        _, records = tune_arms(config, _counting(calls))
    assert [c for c in calls if c[0] == "a"] == [("a", 1e-3)]
    assert len([c for c in calls if c[0] == "b"]) == 3 and "fixed" not in records["b"]


def test_a_call_the_tuning_seed_did_not_make_is_tuned():
    calls = []
    config = {"search": {"arms": ["a"], "space": {"lr": [1e-3, 1e-2, 1e-1]}}}
    with session([{"a": {"lr": 1e-3}}]):
        tune_arms(config, _counting(calls))
        tune_arms(config, _counting(calls))
    assert len(calls) == 1 + 3


def test_run_arms_outside_a_session_tunes_as_before():
    def train(arm, params, seed):
        return Trained(abs(params["lr"] - 1e-2), model=seed)

    m = run_arms({"search": SEARCH}, 0, train, lambda a, t: {"x": 1.0}, reference=1.0)
    assert all("fixed" not in r for r in m["tuning"].values())
    assert m["tuning"]["method"]["trials"] == 3


@pytest.fixture
def counted(monkeypatch):
    """The planted handicap claim (tuned, 5 seeds) with every toy training counted."""
    import tests.claims._planted as planted

    calls = []
    train = planted._train_toy

    def counting(arm, params, seed):
        calls.append((arm, seed))
        return train(arm, params, seed)

    monkeypatch.setattr(planted, "_train_toy", counting)
    return planted.HANDICAP, calls


def test_the_runner_tunes_on_the_first_seed_and_trains_the_others_at_its_choices(
    tmp_path, counted, monkeypatch
):
    claim, calls = counted
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness="none")
    first, *others = result.tasks
    assert first.fixed is None and first.choices
    assert all(t.fixed == first.choices for t in others)
    for t in others:
        assert all(r["fixed"] and r["trials"] == 1 for r in t.measurement["tuning"].values())
        assert t.key == task_key(claim, "quick", t.seed, fixed=first.choices)
    assert len(calls) == 2 * 3 + 2 * 4  # each arm: its grid on seed 0, once on seeds 1-4

    def no_work(*args, **kwargs):
        raise AssertionError("a cached task was recomputed")

    monkeypatch.setattr(runner_module, "run_task", no_work)
    (again,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness="none")
    assert all(t.cached for t in again.tasks) and again.verdict == result.verdict


def test_a_new_tuning_choice_recomputes_the_other_seeds(tmp_path, counted):
    claim, calls = counted
    ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness="none")
    first = json.loads(next((tmp_path / "tasks").glob("*.seed0.*.json")).read_text())
    first["choices"] = [{"method": {"lr": 1e-1}, "baseline": {"lr": 1e-3}}]
    next((tmp_path / "tasks").glob("*.seed0.*.json")).write_text(json.dumps(first))
    calls.clear()
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness="none")
    assert [t.cached for t in result.tasks] == [True, False, False, False, False]
    assert result.tasks[1].measurement["table"]["method"]["lr"] == 1e-1
    assert len(calls) == 2 * 4


def test_robustness_reruns_a_decided_claim_at_the_main_choices(tmp_path, counted):
    claim, calls = counted
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness="decisive")
    assert result.label == "supported", result.verdict.reason  # the handicap wins
    reruns = [t for t in result.neighbours if t.override]
    assert {json.dumps(t.override) for t in reruns} == {
        '{"scale_lr": 0.5}',
        '{"scale_lr": 2.0}',
    }
    assert all(t.fixed == result.tasks[0].choices for t in reruns) and len(reruns) == 10
    assert len(calls) == 2 * 3 + 2 * 4 + 2 * 10  # reruns train once per arm, no tuning
    assert {r["setting"] for r in result.verdict.robustness} >= {"scale_lr"}


def test_an_undecided_claim_runs_no_robustness_and_says_why(tmp_path, planted):
    from dataclasses import replace

    from normlab.claims._format import robustness_status
    from normlab.claims.core import FreeSetting
    from normlab.claims.report import claim_record

    offset = FreeSetting("offset", -1.0, 1.0, "normlab's choice: a planted test setting")
    claim = replace(planted["planted-untestable"], free_settings=(offset,), decisive="offset")
    skipped = []
    runner = ClaimRunner(tmp_path, jobs=1)
    runner.on_skipped = lambda claim_id, count: skipped.append((claim_id, count))
    (result,) = runner.run([claim], "quick", robustness="all")
    assert result.label == "untestable" and not result.neighbours
    assert skipped == [(claim.id, 2 * len(claim.seeds("quick")))]
    assert robustness_status(claim_record(result)) == "not run (no decided verdict)"


def test_worker_processes_release_the_other_seeds_and_the_record_stays_current(tmp_path, planted):
    from normlab.claims.report import _is_current, claim_record, write_report

    claim = planted["planted-handicap"]
    runner = ClaimRunner(tmp_path, jobs=2)
    results = runner.run([claim], "quick", robustness="none")
    first, *others = results[0].tasks
    assert first.choices and all(t.fixed == first.choices for t in others)
    write_report(results, tmp_path, runner=runner)
    record = json.loads((tmp_path / "results.json").read_text())["claims"][0]
    assert _is_current(runner)(record)
    assert claim_record(results[0])["tasks"][1]["fixed"] == first.choices


def test_the_placebo_tunes_once_on_its_own_first_seed_and_is_flagged(tmp_path, counted):
    claim, _ = counted
    (result,) = ClaimRunner(tmp_path, jobs=1).run(
        [claim], "quick", robustness="none", placebo=True
    )
    placebo = [t for t in result.neighbours if t.override and "placebo" in t.override]
    first, *others = sorted(placebo, key=lambda t: t.seed)
    assert first.fixed is None and all(t.fixed == first.choices for t in others)
    assert first.measurement["tuning"]["method"]["placebo_of"] == "baseline"
    aa = result.verdict.placebo
    assert aa["status"] == "run" and aa["flagged"], aa  # the handicapped baseline shows


def test_a_placebo_whose_every_task_failed_says_so(tmp_path, counted):
    from dataclasses import replace

    from normlab.claims.results import ClaimResult

    claim, _ = counted
    (result,) = ClaimRunner(tmp_path, jobs=1).run([claim], "quick", robustness="none")
    failed = [replace(t, status="error", measurement=None, error="boom") for t in result.tasks]
    judged = ClaimResult.from_tasks(claim, "quick", result.tasks, placebo=failed)
    aa = judged.verdict.placebo
    assert aa["status"] == "not available" and aa["why"] == "every placebo task failed"
    assert aa["failed_tasks"] == len(failed)
