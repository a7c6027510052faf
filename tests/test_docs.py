"""The API reference builds offline with warnings as errors, and lists every method."""

from __future__ import annotations

import importlib
import re
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
    pages = {p: p.read_text() for p in site.rglob("*.html")}
    for path, text in pages.items():
        # Sphinx roles became links; highlighting is local (no CDN script or stylesheet)
        assert not re.search(r":(func|class|meth|mod|data|attr|exc):<code>", text), path
        assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', text), path
    assert ".highlight" in (site / "css" / "pygments.css").read_text()
    assert 'class="highlight"' in pages[site / "tutorial" / "index.html"]
    assert "&lt;p, x&gt;" in methods  # summaries are escaped, not eaten as HTML
    surgery = pages[site / "api" / "surgery" / "index.html"]
    assert surgery.index('id="normlab.surgery.replace_norms"') < surgery.index(
        'id="normlab.surgery.Replacement"'
    )
    for name in ("layers", "attention", "surgery", "claims"):  # each intro shown once
        intro = " ".join(importlib.import_module(f"normlab.{name}").__doc__.split()[:3])
        page = " ".join(re.sub("<[^>]+>", "", pages[site / "api" / name / "index.html"]).split())
        assert page.count(intro) == 1, (name, intro)
    assert "Your own experiment" in pages[site / "index.html"]
    ids = {p: set(re.findall(r'\sid="([^"]+)"', t)) for p, t in pages.items()}
    for path, text in pages.items():
        for href, anchor in re.findall(r'class="autorefs" href="([^"#]*)#(normlab[^"]*)"', text):
            target = (path.parent / href).resolve() if href else path
            target = target / "index.html" if target.is_dir() else target
            assert anchor in ids.get(target, set()), (path, href, anchor)


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


def _hooks():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_hooks
    finally:
        sys.path.pop(0)
    return docs_hooks


def test_sphinx_roles_become_links_or_plain_code():
    link_roles = _hooks().link_roles
    anchors = {"normlab.claims.run": "api/claims/index.html", "normlab.get": "index.html"}
    page = (
        "<p>:func:<code>~normlab.claims.run</code>, :py:func:<code>run</code>, "
        ":class:<code>normlab.get</code>, :meth:<code>nowhere.x</code></p>"
    )
    out = link_roles(page, anchors, "api/layers/index.html")
    assert (
        '<a class="autorefs" href="../claims/index.html#normlab.claims.run"><code>run</code>'
        in out
    )
    assert out.count('normlab.claims.run"><code>run</code>') == 2  # found by its last part
    assert 'href="../../index.html#normlab.get"><code>normlab.get</code>' in out
    assert "<code>nowhere.x</code>" in out and ":meth:" not in out and ":func:" not in out


def test_the_tutorials_claim_runs_with_module(tmp_path):
    text = (ROOT / "docs" / "tutorial.md").read_text()
    section = text[text.index("## A claim of your own") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "my_claims.py").write_text(code)
    argv = [sys.executable, "-m", "normlab", "claim", "--module", "my_claims", "my_rms_claim"]
    done = subprocess.run(
        [*argv, "--scale", "smoke", "--out", str(tmp_path / "r"), "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verdict:" in done.stdout and "my-rms-claim" in done.stdout
