"""The comparison page as a reader sees it, in headless Chromium (tests/report/_browser.py):
at 1400, 1280 and 1000 px no element wider than its container, no sideways scroll, every
verdict badge and why-line visible, the learning-curve figure loaded, no console errors."""

from __future__ import annotations

import pytest

from tests.report._browser import browser_path, measure_report

pytestmark = pytest.mark.slow


def test_compare_page_reads_well(text_file, tmp_path):
    pytest.importorskip("playwright")
    if browser_path() is None:
        pytest.skip("no Chromium on this machine")
    from normlab.compare import compare

    c = compare(
        "tests.compare._toys:byte_lm",
        str(text_file),
        ["layernorm", "rmsnorm", "dyt:alpha_init=0.5"],
        steps=6,
        seeds=2,
        lrs=[3e-3, 1e-2],
        batch=4,
        context=16,
        out=tmp_path,
    )
    c.write(tmp_path)
    stats = measure_report(tmp_path)
    assert {s.width for s in stats} == {1400, 1280, 1000}
    faults = [f for s in stats for f in s.faults()]
    assert not faults, faults
    for s in stats:
        assert s.images == 1 and s.verdicts >= 5 and s.whys >= 3
        assert (
            "lr per seed (the first tuned)" in s.headers
            and "lr: validation (every trial)" in s.headers
        )
