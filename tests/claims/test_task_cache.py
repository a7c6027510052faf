"""Tasks: a non-finite primary is recomputed next run, the checks task is seeded, and a
task's CPU time is measured as CPU time."""

from __future__ import annotations

import dataclasses
import math
import random
import subprocess
import sys
import time

import numpy as np
import torch

from normlab.claims.core import Check, CheckOutcome
from normlab.claims.report import claim_record
from normlab.claims.runner import ClaimRunner
from normlab.claims.schema import decode
from normlab.claims.tasks import run_task
from tests.claims import _planted

#: The planted fault: while False, the method's score is NaN (a bug, not a divergence).
FIXED = False


def _run_faulty(config, seed):
    score = 1.0 + 0.1 * seed if FIXED else math.nan
    return {
        "table": {
            "method": {"rank": 3.0, "score": score},
            "baseline": {"rank": 2.0, "score": 0.0},
        }
    }


def _run_diverged(config, seed):
    out = _run_faulty(config, seed)
    out["diverged"] = {"method": {"step": 3, "last": 1e9}}  # an outcome, recorded
    return out


def _random_check(config):
    value = float(torch.rand(())) + float(np.random.rand()) + random.random()
    return CheckOutcome(True, value, f"drew {value!r}")


def _busy_child(config, seed):
    code = "import time\nwhile time.process_time() < 0.3: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
    return _run_faulty(config, seed)


def _sleepy(config, seed):
    time.sleep(0.3)
    return _run_faulty(config, seed)


_BASE = dataclasses.replace(_planted.OK, checks=(), figure=None, caption="")
FAULTY = dataclasses.replace(_BASE, id="planted-nan-then-fixed", run=_run_faulty)
DIVERGED = dataclasses.replace(_BASE, id="planted-nan-diverged", run=_run_diverged)
RANDOM_CHECKS = dataclasses.replace(
    _BASE, id="planted-random-checks", checks=(Check("draws", "global RNG", _random_check),)
)
BUSY = dataclasses.replace(_BASE, id="planted-busy-child", run=_busy_child)
SLEEPY = dataclasses.replace(_BASE, id="planted-sleepy", run=_sleepy)


def test_a_nan_task_is_recomputed_once_the_fault_is_fixed(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "FIXED", False)
    (first,) = ClaimRunner(tmp_path, jobs=1).run([FAULTY], "quick")
    assert first.label == "inconclusive"
    assert all(t.recompute for t in first.tasks)
    why = decode(claim_record(first))["why"]
    assert "the value was NaN in 3 of 3 seeds: no interval" in why
    assert "crosses the decision bounds" not in why
    monkeypatch.setattr(sys.modules[__name__], "FIXED", True)  # the fault is fixed
    (second,) = ClaimRunner(tmp_path, jobs=1).run([FAULTY], "quick")  # no --force
    assert not any(t.cached for t in second.tasks)
    assert second.label == "supported"
    assert second.verdict.primary.values == (1.0, 1.1, 1.2)
    (third,) = ClaimRunner(tmp_path, jobs=1).run([FAULTY], "quick")
    assert all(t.cached for t in third.tasks)  # a finite result is reused


def test_a_recorded_divergence_is_an_outcome_and_stays_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "FIXED", False)
    ClaimRunner(tmp_path, jobs=1).run([DIVERGED], "quick")
    (again,) = ClaimRunner(tmp_path, jobs=1).run([DIVERGED], "quick")
    assert all(t.cached and not t.recompute for t in again.tasks)


def _checks_value() -> float:
    done = run_task(RANDOM_CHECKS.id, "quick", None, module=__name__)
    assert done["status"] == "ok", done["error"]
    return done["measurement"]["draws"]["value"]


def test_the_checks_task_does_not_depend_on_the_global_rng():
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    first = _checks_value()
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    torch.rand(7)  # whatever ran before in the same worker
    after = torch.random.get_rng_state()
    assert _checks_value() == first
    assert torch.equal(torch.random.get_rng_state(), after)  # the caller's stream is kept


def test_cpu_time_counts_children_and_not_waiting(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "FIXED", True)
    busy = run_task(BUSY.id, "quick", 0, module=__name__, key="k")
    assert busy["cpu_seconds"] >= 0.25  # the child's 0.3 CPU s (counted in ticks), any load
    sleepy = run_task(SLEEPY.id, "quick", 0, module=__name__, key="k")
    assert sleepy["seconds"] >= 0.3 and sleepy["cpu_seconds"] < 0.2  # waiting is not CPU


def test_delayed_spike_angle_map_check_is_the_same_after_other_work():
    outcomes = []
    for state in (1, 5):
        torch.manual_seed(state)
        np.random.seed(state)
        random.seed(state)
        torch.randn(100)  # what ran before in the same worker
        done = run_task("delayed-spike", "smoke", None)
        assert done["status"] == "ok", done["error"]
        outcomes.append(done["measurement"])
    assert outcomes[0] == outcomes[1] and "angle_map" in outcomes[0]
