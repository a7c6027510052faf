"""A claim page shows every part of the verdict it is given, without a browser."""

from __future__ import annotations

import copy
import html
import math
import re

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


def _page(record) -> str:
    return html.unescape(render_claim(record, DATA, None))


def _index(*records) -> str:
    return html.unescape(render_index({**DATA, "claims": list(records)}))


def _text(markup: str) -> str:
    """The page's text as a reader sees it (tags and ``<wbr>`` gone)."""
    return re.sub(r"<[^>]+>", "", markup)


def test_a_claim_page_shows_parts_premises_tuning_divergences_null_and_robustness():
    record = everything_record()
    text = html.unescape(render_claim(record, DATA, FigureRef(error="KeyError: 'curve'")))
    assert text.count("vs_baseline_") >= 3 and "each part must hold" in text
    assert "if every premise held" in text  # would_be differs from the verdict
    assert "the baseline's loss" in text and "3.1 [2.9, 3.3]" in text and "> 3.5 nats" in text
    assert "warmup_steps_long_parameter_name = 200" in text and "on the edge" in text
    assert "812" in text and "1000000000" in text  # the divergence
    assert "2.4%" in text and "1.9% of 2000 draws" in text
    assert "flips the verdict" in text and "learning rate x 3" in text
    assert "The figure failed to render" in text and "KeyError: 'curve'" in text
    # 8 arms x 9 metrics: arms become the columns, at most 6 a table
    assert text.split("Robustness reruns")[0].count("metric \\ method") == 2
    assert text.index("Why.") < text.index("Hypothesis.")  # the why comes first


def test_the_index_row_gives_unit_margin_source_and_null_rates():
    text = _index(everything_record())
    assert "+0.346 bpb [0.27, 0.42]" in text and "> 0.1 bpb" in text
    assert "paper: Table 2 reports a gain" in text  # the margin's source, as a footnote
    assert 'href="claims/v3-everything.html"' in text
    assert "2.4% / 1.9% of 2000" in text and "9.2 s" in text


def test_measurements_pool_only_the_main_seeds_and_show_reruns_apart():
    text = _page(everything_record())
    main, reruns = text.split("Robustness reruns")
    measurements = main[main.index("<h3>Measurements</h3>") :]
    assert "123" not in measurements  # the rerun's value stays out of the main means
    assert "depth=12 (5 seeds)" in reruns and "123" in reruns


def test_robustness_is_shown_on_every_page_and_in_the_index():
    record = {**everything_record(), "verdict": "supported"}
    page, index = _page(record), _index(record)
    for text in (page, index):  # an untestable neighbour is named apart, not fragile
        assert "fragile at learning rate x 3=0.009; untestable at depth=12" in text
    not_run = {**copy.deepcopy(record), "id": "quiet"}
    del not_run["robustness"]
    for text in (_page(not_run), _index(not_run)):
        assert "not run" in text and "normlab report --only quiet --robustness" in text
    only_untestable = copy.deepcopy(record)
    only_untestable["robustness"] = only_untestable["robustness"][1:]
    assert "robust; untestable at depth=12" in _index(only_untestable)


def test_tuning_caveats_premises_held_and_null_calibration_are_marked():
    record = everything_record()
    page, index = _page(record), _index(record)
    assert "1 of 5 tuned on an edge" in page  # beside the verdict badge
    assert re.search(r"<td class=\"num\">.*1 of 5</td>", index)  # the edge column
    assert "0 of 2" in index and "Premises held: 0 of 2" in page
    assert "mark ok'></span>pass" in index and "mark ok'></span>pass" in page
    failed = copy.deepcopy(record)
    failed["null"]["passes"] = False
    assert "<b>fail</b>" in _index(failed) and "null calibration failed" in _page(failed)
    untuned = {**copy.deepcopy(record), "tuning": [], "untuned": "it trains nothing"}
    assert "Nothing is tuned: it trains nothing." in _page(untuned)
    assert "untuned" in _index(untuned)


def test_the_null_sentence_follows_the_primary_direction():
    superiority = _page(everything_record())
    assert "each must stay at or below 5%" in superiority
    record = everything_record()
    record["null"]["superiority"] = False
    text = _page(record)
    assert "is the expected answer here" in text and "the one rate held to 5%" in text
    assert "each must stay at or below 5%" not in text


def test_time_is_labelled_cpu_and_wall():
    page, index = _page(everything_record()), _index(everything_record())
    assert "CPU time 9.2 s (wall 12.5 s)" in page and "task time" not in page.lower()
    assert "seeds, CPU time" in index and "Task time" not in index


def test_the_index_cites_the_rule_module():
    text = _index(everything_record())
    assert "normlab.claims.rule" in text and "normlab.claims.core" not in text


def test_premises_wrap_at_underscores_and_one_seed_is_not_failed():
    page = render_claim(everything_record(), DATA, None)
    assert "softmax_<wbr>suppresses_<wbr>far_<wbr>score" in page
    text = _text(html.unescape(page))
    row = text[text.index("one seed of a premise") :]
    row = row[: row.index("normlab's choice")]
    assert "one seed: no interval" in row and "failed" not in row
    assert "failed" in text[text.index("the baseline's loss") :]  # a real failure says so


def test_a_non_finite_primary_says_so_instead_of_an_interval():
    record = everything_record()
    primary = record["effects"][0]
    primary["values"] = [0.31, math.nan, 0.27, 0.35, 0.38]
    page, index = _page(record), _index(record)
    assert "+0.346 bpb (no interval: NaN in 1 of 5 seeds)" in index
    assert "+0.346 bpb (no interval: NaN in 1 of 5 seeds)" in page  # the primary's card


def _with_placebo(placebo):
    record = everything_record()
    record["placebo"] = placebo
    return record


def test_the_placebo_is_shown_flagged_clean_not_applicable_or_not_run():
    flagged = {
        "status": "run",
        "effect": "bpb_gain",
        "verdict": "supported",
        "at_zero": "supported",
        "mean": 0.31,
        "low": 0.2,
        "high": 0.42,
        "seeds": 5,
        "claimed_side": 1.0,
        "flagged": True,
    }
    text = _text(_page(_with_placebo(flagged)))
    assert "A/A placebo" in text and "flagged: the baseline trained through" in text
    assert "100% of them on the claimed side" in text
    assert "placebo flagged" in _text(_index(_with_placebo(flagged)))
    clean = {**flagged, "verdict": "inconclusive", "at_zero": "inconclusive", "flagged": False}
    assert "clean: it does not beat the baseline" in _text(_page(_with_placebo(clean)))
    record = everything_record()
    record.pop("placebo", None)
    record["untuned"] = ""
    text = _text(_page(record))
    assert "--placebo" in text and "Not run" in text
    missing = {"status": "not available", "why": "the claim tunes no arms"}
    assert "Not available: the claim tunes no arms" in _text(_page(_with_placebo(missing)))
    moot = {"status": "not applicable", "why": "no arm is tuned (one shared model)"}
    assert "Not applicable: no arm is tuned" in _text(_page(_with_placebo(moot)))
    assert "placebo not applicable" in _text(_index(_with_placebo(moot)))


def test_an_effect_card_shows_the_verdict_at_margin_zero_power_and_detectable_effect():
    record = everything_record()
    primary = record["effects"][0]
    primary.update(at_zero="supported", power=0.42, mde=0.35, verdict="inconclusive")
    primary["would_be"] = "inconclusive"
    text = _text(_page(record))
    assert "the margin decides the verdict" in text
    assert "power 42% one margin beyond the bound" in text
    assert "80% power needs a true effect of 0.35" in text
