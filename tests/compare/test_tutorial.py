"""docs/compare.md runs: its setup snippets, then each `normlab compare` command at a tiny
budget (the same command with fewer steps, seeds and trials appended: argparse keeps the
last value), each writing a page and a valid results.json."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from normlab.cli import main
from normlab.compare.results import validate

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BUDGET = [
    "--steps",
    "4",
    "--seeds",
    "2",
    "--lr",
    "3e-3",
    "1e-2",
    "--batch",
    "4",
    "--context",
    "16",
    "--quiet",
]


def test_the_compare_tutorial_runs(tmp_path, monkeypatch, capsys):
    text = (ROOT / "docs" / "compare.md").read_text()
    monkeypatch.chdir(tmp_path)
    for code in re.findall(r"```python\n(.*?)```", text, re.S):
        if "my_models" in code:  # the user's own module: not shipped
            continue
        exec(compile(code.replace("2_000_000", "40_000"), "compare.md", "exec"), {})
    commands = [c.strip() for c in re.findall(r"```bash\n(.*?)```", text, re.S)]
    assert len(commands) == 2 and all(c.startswith("normlab compare ") for c in commands)
    for command in commands:
        argv = shlex.split(command)[1:]
        out = Path(argv[argv.index("--out") + 1])
        assert main([*argv, *BUDGET]) == 0, capsys.readouterr().err
        data = json.loads((out / "results.json").read_text())
        validate(data)
        assert (out / "index.html").is_file() and data["recommendation"]
    assert os.path.isdir("compare-gpt2") and os.path.isdir("compare-series")
