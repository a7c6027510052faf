"""Ctrl-C during ``normlab compare`` exits 130 with one line saying how to resume; the same
command then reuses every task finished before the interrupt."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_then_the_same_command_resumes(text_file, tmp_path):
    out = tmp_path / "out"
    argv = [
        sys.executable,
        "-m",
        "normlab",
        "compare",
        "tests.compare._toys:byte_lm",
        "--data",
        str(text_file),
        "--norms",
        "layernorm",
        "rmsnorm",
        "--steps",
        "30",
        "--seeds",
        "4",
        "--lr",
        "3e-3",
        "1e-2",
        "--batch",
        "4",
        "--context",
        "16",
        "--quiet",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240
    while not list(out.glob("tasks/*.json")) and time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"finished before the interrupt: {proc.stderr.read()[-500:]}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-1000:]
    assert "run the same command again to resume" in err and "Traceback" not in err
    kept = len(list(out.glob("tasks/*.json")))
    assert 1 <= kept < 8
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1000:]
    assert json.loads((out / "results.json").read_text())["cached"] == kept
