"""How the report writes numbers and states: intervals that keep their mean, premises at
one seed, robustness with untestable neighbours."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from normlab.claims._format import (
    fmt_estimate,
    fmt_interval,
    key_number,
    ordered_texts,
    premise_phrase,
    premise_state,
    premise_words,
    robustness_status,
)

_FINITE = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)


def _numbers(text: str) -> list[float]:
    """The numbers of ``"+15.2 decades [15.1, 15.3]"``, in the order printed."""
    return [float(x) for x in re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", text)]


@given(st.lists(_FINITE, min_size=3, max_size=3).map(sorted), st.booleans())
def test_printed_bounds_parse_back_in_order(triple, signed):
    low, mean, high = triple
    lo, middle, hi = ordered_texts(low, mean, high, signed=signed)
    assert float(lo) <= float(middle) <= float(hi)
    assert _numbers(fmt_estimate(mean, low, high, "bpb", signed=signed)) == [
        float(middle),
        float(lo),
        float(hi),
    ]
    printed_lo, printed_hi = _numbers(fmt_interval(low, high, mean=mean))
    assert printed_lo <= float(middle) <= printed_hi


@pytest.mark.parametrize(
    ("low", "mean", "high", "expected"),
    [
        (15.06, 15.17, 15.28, "+15.2 [15.1, 15.3]"),  # was "+15.2 [15, 15]"
        (13.55, 13.6, 13.65, "+13.6 [13.6, 13.7]"),  # was "13.6 [14, 14]"
        (1.66, 1.88, 1.96, "+1.88 [1.66, 1.96]"),  # was "+1.88 [1.7, 2]"
        (1234.0, 1234.4, 1240.0, "+1234 [1234, 1240]"),  # a whole number widens the rest
    ],
)
def test_the_issue_examples_keep_their_mean(low, mean, high, expected):
    assert fmt_estimate(mean, low, high) == expected


def test_no_interval_is_said_in_words():
    assert fmt_estimate(0.355, -math.inf, math.inf, signed=False) == "0.355 (no interval)"
    record = {"effects": [{"role": "primary", "values": [1.0, math.nan], "mean": 1.0}]}
    assert key_number(record) == "+1 (no interval: NaN in 1 of 2 seeds)"


def _premise(values, low, high, **extra):
    return {
        "name": "big",
        "description": "the value",
        "values": values,
        "mean": sum(values) / len(values),
        "low": low,
        "high": high,
        "direction": "greater",
        "margin": 0.1,
        "held": False,
        **extra,
    }


def test_a_premise_at_one_seed_is_not_failed():
    one = _premise([0.355], -math.inf, math.inf, state="underpowered")
    assert premise_state(one) == "no interval"
    assert premise_words(one) == "one seed: no interval"
    assert premise_phrase(one) == ("the value was 0.355 (one seed: no interval) against > 0.1")
    crossing = _premise([0.0, 0.3], -0.5, 0.8)
    assert premise_state(crossing) == "underpowered"
    assert "underpowered" in premise_phrase(crossing)
    below = _premise([0.01, 0.02], 0.0, 0.03)
    assert premise_state(below) == "failed" and "but needs > 0.1" in premise_phrase(below)
    assert premise_state({**below, "held": True}) == "held"


def _robust(verdicts, main="supported"):
    records = [
        {"setting": "depth", "value": v, "verdict": verdict}
        for v, verdict in zip((4, 16), verdicts, strict=True)
    ]
    return {"id": "c", "verdict": main, "robustness": records}


def test_robustness_names_untestable_neighbours_apart_from_fragile_ones():
    assert robustness_status(_robust(["supported", "supported"])) == "robust"
    assert robustness_status(_robust(["supported", "inconclusive"])) == "fragile at depth=16"
    assert robustness_status(_robust(["untestable", "supported"])) == (
        "robust; untestable at depth=4"
    )
    assert robustness_status(_robust(["untestable", "contradicted"])) == (
        "fragile at depth=16; untestable at depth=4"
    )
    assert robustness_status({"id": "c", "verdict": "supported"}) == "not run"
    assert robustness_status({"id": "c", "free_settings": []}) == "no free settings"
