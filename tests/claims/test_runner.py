"""The runner: caching, resumption, failures, parallel backends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import normlab.claims.runner as runner_module
from normlab.claims import get_claim
from normlab.claims.core import VERDICTS
from normlab.claims.runner import Runner


def test_run_caches_and_resumes(tmp_path, monkeypatch):
    claim = get_claim("affine-rank")
    (result,) = Runner(tmp_path, jobs=1).run([claim], "smoke")
    assert result.verdict in VERDICTS and result.verdict != "error"
    files = list((tmp_path / "tasks").glob("affine-rank.smoke.seed0.*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["status"] == "ok"

    def no_work(*args, **kwargs):
        raise AssertionError("a cached task was recomputed")

    monkeypatch.setattr(runner_module, "run_task", no_work)
    (again,) = Runner(tmp_path, jobs=1).run([claim], "smoke")
    assert again.tasks == result.tasks
    with pytest.raises(AssertionError, match="recomputed"):
        Runner(tmp_path, jobs=1, force=True).run([claim], "smoke")


def test_failing_task_is_recorded_and_retried(tmp_path, failing_claim):
    (result,) = Runner(tmp_path, jobs=1).run([failing_claim], "quick")
    assert result.verdict == "error"
    assert all(t.status == "error" for t in result.tasks)
    assert "planted failure in seed 2" in result.tasks[2].error
    runner = Runner(tmp_path, jobs=1)
    assert runner.cached(failing_claim, "quick", 0) is None  # failures are not finished work


def test_unwritable_output_fails_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(PermissionError, match="Choose another folder"):
        Runner(blocker / "report")


@pytest.mark.slow
def test_process_pool_matches_in_process(tmp_path):
    claim = get_claim("affine-rank")
    (serial,) = Runner(tmp_path / "a", jobs=1).run([claim], "quick")
    (pooled,) = Runner(tmp_path / "b", jobs=2).run([claim], "quick")
    assert [t.measurement for t in serial.tasks] == [t.measurement for t in pooled.tasks]
    assert serial.verdict == pooled.verdict


@pytest.mark.slow
def test_ray_backend(tmp_path):
    pytest.importorskip("ray")
    claim = get_claim("affine-rank")
    (result,) = Runner(tmp_path, jobs=2, backend="ray").run([claim], "quick")
    (local,) = Runner(tmp_path / "local", jobs=1).run([claim], "quick")
    assert [t.measurement for t in result.tasks] == [t.measurement for t in local.tasks]


@pytest.mark.slow
def test_sigkill_resumes_without_recomputing(tmp_path):
    out = tmp_path / "report"
    cmd = [
        sys.executable,
        "-m",
        "normlab.cli",
        "report",
        "--scale",
        "smoke",
        "--jobs",
        "1",
        "--no-progress",
        "--out",
        str(out),
        "--only",
        "affine-rank",
        "dyt-regime",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    first: list[Path] = []
    while time.time() < deadline and not first:
        first = list((out / "tasks").glob("affine-rank.*.json"))
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first, "the first task never finished"
    stamp = first[0].stat().st_mtime_ns
    assert not (out / "index.html").exists()

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert first[0].stat().st_mtime_ns == stamp  # the finished task was not recomputed
    results = json.loads((out / "results.json").read_text())
    assert [c["id"] for c in results["claims"]] == ["affine-rank", "dyt-regime"]
