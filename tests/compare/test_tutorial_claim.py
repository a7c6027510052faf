"""docs/tutorial.md's tuned claim (Premise, beats_every, FreeSetting, run_arms, fit) runs
with ``normlab claim --module`` at smoke scale and reports its premises and verdict."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_tuned_tutorial_claim_runs(tmp_path):
    text = (ROOT / "docs" / "tutorial.md").read_text()
    section = text[text.index("## A tuned claim") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "my_tuned.py").write_text(code)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "normlab",
            "claim",
            "--module",
            "my_tuned",
            "my-tuned-claim",
            "--scale",
            "smoke",
            "--out",
            str(tmp_path / "r"),
            "--no-progress",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = " ".join(done.stdout.split())
    assert "verdict:" in out
    for arm in ("layernorm", "rmsnorm", "dyt"):
        assert f"premise {arm}_learned" in out  # the engine's learned premise, per arm
    assert "the LayerNorm model learns the task" in out  # the declared Premise
