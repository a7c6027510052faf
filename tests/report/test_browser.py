"""The report as a reader sees it: a smoke report opened in headless Chromium.

At 1400, 1280 and 1000 px: no element wider than its container, the index under 10,000 px
tall, every verdict and why-line visible without scrolling sideways, no console errors,
every figure loaded; the index has a column for robustness, premises held, tuned choices on
an edge and null calibration. ``NORMLAB_REPORT_DIR=report pytest
tests/report/test_browser.py`` runs the same checks on an existing report (e.g. the full
quick one) instead of a fresh smoke one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.report._browser import browser_path, measure_report

pytestmark = pytest.mark.slow
#: Cheap real claims whose smoke runs take a few seconds and draw their own figures; a
#: constructed record (tests/report/_records.py) adds every part a v3 verdict carries.
SMOKE_CLAIMS = ("affine-rank", "delayed-spike")


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("NORMLAB_REPORT_DIR")
    if given:
        folder = Path(given)
        if not (folder / "index.html").exists():
            pytest.fail(f"NORMLAB_REPORT_DIR={given} holds no index.html; run `normlab report`")
        return folder
    import json

    import normlab.claims
    from normlab.claims import report
    from normlab.claims.schema import decode, encode
    from tests.report._records import everything_record

    out = tmp_path_factory.mktemp("smoke-report")
    normlab.claims.run(list(SMOKE_CLAIMS), scale="smoke", jobs=1, out=out)
    # plus a page with every part a v3 verdict can carry (parts, premises, tuning, ...)
    data = json.loads((out / "results.json").read_text())
    # (read as supported, so its neighbours show both fragile and untestable)
    data["claims"].append(encode({**everything_record(), "verdict": "supported"}))
    report._write_pages(decode(data), out)
    return out


def _need_browser() -> None:
    pytest.importorskip("playwright", reason="the browser test needs `pip install playwright`")
    if browser_path() is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set NORMLAB_CHROMIUM)")


@pytest.fixture(scope="module")
def stats(report_dir: Path):
    _need_browser()
    return measure_report(report_dir)


def test_the_measure_sees_what_a_reader_would_miss(tmp_path):
    _need_browser()
    wide = "<td style='white-space:nowrap'>" + "wide " * 300 + "</td>"
    (tmp_path / "index.html").write_text(
        f"<body style='max-width:600px'><table><tr>{wide}</tr></table>"
        "<img src='missing.png'><script>console.error('planted')</script></body>"
    )
    (narrow,) = [s for s in measure_report(tmp_path) if s.width == 1000]
    assert narrow.overflowing and narrow.page_scroll
    assert narrow.broken_images and narrow.console_errors


def test_every_page_is_measured_at_both_widths(stats, report_dir):
    pages = {s.page for s in stats}
    assert "index.html" in pages and len(pages) == 1 + len(list(report_dir.glob("claims/*.html")))
    assert {s.width for s in stats} == {1400, 1280, 1000}


def test_nothing_is_wider_than_its_container(stats):
    for s in stats:
        assert not s.overflowing, f"{s.page} at {s.width} px: {s.overflowing[:5]}"
        assert not s.page_scroll, f"{s.page} at {s.width} px scrolls sideways"


def test_the_index_stays_short(stats):
    for s in stats:
        if s.page == "index.html":
            assert s.height < 10_000, f"index.html is {s.height} px tall at {s.width} px"


def test_every_verdict_and_why_is_on_screen(stats, report_dir):
    n_claims = len(list(report_dir.glob("claims/*.html")))
    for s in stats:
        if s.page == "index.html":
            assert s.verdicts == n_claims and s.whys == n_claims
        else:
            assert s.verdicts >= 1 and s.whys == 1
        assert s.verdicts_hidden == 0 and s.whys_hidden == 0, s.faults()


def test_no_console_errors_and_every_figure_loads(stats):
    for s in stats:
        assert not s.console_errors, s.faults()
        assert not s.broken_images, s.faults()
    assert any(s.images for s in stats if s.page != "index.html")  # the claims' figures


def test_the_index_has_the_caveat_columns(stats):
    for s in stats:
        if s.page == "index.html":
            for column in ("robustness", "premises held", "tuned on an edge", "null calibration"):
                assert column in s.headers, (s.width, s.headers)


def test_the_index_says_robustness_for_every_claim(report_dir):
    import html
    import re

    index = (report_dir / "index.html").read_text()
    rows = [html.unescape(re.sub(r"<[^>]+>", "", r)) for r in re.findall(r"<tr>(.*?)</tr>", index)]
    states = ("robust", "fragile at", "not run", "no free settings")
    for row in rows[1:]:  # the first is the header
        assert any(state in row for state in states), row
        assert re.search(r"\d+ of \d+|none", row), row  # premises held, tuned on an edge
    if not os.environ.get("NORMLAB_REPORT_DIR"):
        text = "".join(rows)
        # the smoke claims ran without: a decided one says how to run it, others why not
        assert "not run" in text and ("--robustness" in text or "no decided verdict" in text)
        assert "fragile at" in text and "untestable at depth=12" in text  # the constructed
