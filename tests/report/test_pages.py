"""A claim page shows every part of the verdict it is given, without a browser."""

from __future__ import annotations

import html

from normlab.claims.report_html import FigureRef, render_claim, render_index
from tests.report._records import everything_record

DATA = {
    "normlab": "0",
    "torch": "0",
    "git_commit": None,
    "created": "now",
    "scales": ["quick"],
    "machine": {"cpus": 2, "platform": "linux", "python": "3.11"},
}


def test_a_claim_page_shows_parts_premises_tuning_divergences_null_and_robustness():
    record = everything_record()
    text = html.unescape(render_claim(record, DATA, FigureRef(error="KeyError: 'curve'")))
    assert text.count("vs_baseline_") >= 3 and "each part must hold" in text
    assert "if every premise held" in text  # would_be differs from the verdict
    assert "the baseline's loss" in text and "3.1 [2.9, 3.3]" in text and "> 3.5 nats" in text
    assert "warmup_steps_long_parameter_name = 200" in text and "on the edge" in text
    assert "812" in text and "1000000000" in text  # the divergence
    assert "2.4% / 1.9% of 2000" in text
    assert "flips the verdict" in text and "learning rate x 3" in text
    assert "The figure failed to render" in text and "KeyError: 'curve'" in text
    # 8 arms x 9 metrics: arms become the columns, at most 6 a table
    assert text.count("metric \\ method") == 2
    assert text.index("Why.") < text.index("Hypothesis.")  # the why comes first


def test_the_index_row_gives_unit_margin_source_and_null_rates():
    record = everything_record()
    text = html.unescape(render_index({**DATA, "claims": [record]}))
    assert "+0.346 bpb [0.27, 0.42]" in text and "> 0.1 bpb" in text
    assert "paper: Table 2 reports a gain" in text  # the margin's source, as a footnote
    assert 'href="claims/v3-everything.html"' in text
    assert "2.4% / 1.9% of 2000" in text and "12.5 s" in text
