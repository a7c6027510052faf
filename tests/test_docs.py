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
    functional = (site / "api" / "functional" / "index.html").read_text()
    # The docstrings' LaTeX formulas are rendered as MathML, with no TeX left behind.
    assert functional.count("<math") >= 5
    assert "\\frac" not in functional and 'class="arithmatex"' not in functional
    for family in ("kernels", "ssl", "wrappers", "rl", "flows", "optim"):
        assert (site / "api" / family / "index.html").exists(), family


def test_formulas_become_mathml():
    pytest.importorskip("latex2mathml")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from docs_hooks import render_math
    finally:
        sys.path.pop(0)
    page = (
        '<p>a <span class="arithmatex">\\(x^2\\)</span> b</p>'
        '<div class="arithmatex">\\[\\frac{a}{b} &lt; 1\\]</div>'
    )
    out = render_math(page)
    assert out.count("<math") == 2 and 'display="block"' in out
    assert "<mfrac>" in out and "<mo>&#x0003C;</mo>" in out and "arithmatex" not in out
