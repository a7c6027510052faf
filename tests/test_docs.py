"""The API reference builds offline with warnings as errors, and lists every method."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import normlab

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_docs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    site = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    methods = (site / "methods" / "index.html").read_text()
    for method in normlab.methods():
        assert f"<code>{method.name}</code>" in methods, method.name
    assert "RMSNorm" in (site / "api" / "layers" / "index.html").read_text()
