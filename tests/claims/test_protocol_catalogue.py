"""Every registered claim follows the v3 protocol: a premise, a declared search (or a reason
for none), timings only in exclusive claims, and a primary whose null calibration holds."""

from __future__ import annotations

import copy
import json
import math
import pathlib
import re

import numpy as np
import pytest

from normlab.claims.calibration import NULL_LIMIT, null_calibration
from normlab.claims.core import all_claims
from normlab.claims.protocol import searches

CLAIMS = all_claims()
IDS = [c.id for c in CLAIMS]


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_every_claim_declares_a_premise(claim):
    assert claim.premises, f"{claim.id}: no premise (the phenomenon the baseline must show)"


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_every_claim_declares_its_search_or_why_not(claim):
    if claim.untuned:
        assert len(claim.untuned.splitlines()) == 1 and len(claim.untuned) > 20, (
            f"{claim.id}: untuned must be one line saying why nothing is tuned"
        )
        assert "todo" not in claim.untuned.lower()
        return
    for scale in ("smoke", "quick", "full"):
        spaces = searches(claim.config(scale))  # raises on unequal trial counts
        assert spaces, f"{claim.id}: empty search at {scale}"


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_timings_belong_to_exclusive_claims(claim):
    timing = [e.name for e in claim.effects if e.is_timing]
    assert not timing or claim.exclusive, f"{claim.id}: timing effects {timing}"


def _noisy_seeds(measurement, n, rng):
    """``n`` measurements built from one smoke measurement: every numeric cell scaled by a
    small independent random factor (the arms stay as the smoke run left them)."""
    out = []
    for _ in range(n):
        m = copy.deepcopy(measurement)
        for row in m["table"].values():
            for key, value in row.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    row[key] = value * math.exp(rng.normal(0.0, 0.05)) + rng.normal(0, 1e-9)
        out.append(m)
    return out


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_primary_null_calibration(claim, smoke_measurement):
    """Permuting the primary's arms within seeds: "supported" (superiority) and "opposite
    direction" each at most 5% (DESIGN.md, null calibration)."""
    primary = claim.primary
    assert primary.groups, (
        f"{claim.id}: the primary names no arms to exchange (set method= and baseline=, "
        "parts=, or exchangeable=)"
    )
    base = smoke_measurement(claim.id)
    rng = np.random.default_rng(0)
    n = int(claim.config("quick")["seeds"])
    null = null_calibration(primary, _noisy_seeds(base, n, rng), draws=400)
    assert null is not None
    assert null["opposite_rate"] <= NULL_LIMIT, null
    if null["superiority"]:
        assert null["supported_rate"] <= NULL_LIMIT, null


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_quick_scale_runs_at_least_five_seeds(claim):
    assert int(claim.config("quick")["seeds"]) >= 5, claim.id


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_every_quick_setting_is_sourced_or_free(claim):
    """A number, flag or choice in the quick config is the paper's (``sourced``) or a
    declared :class:`FreeSetting` (which robustness can vary): nothing decides a verdict
    unseen."""
    assert claim.undeclared("quick") == [], (
        f"{claim.id}: declare {claim.undeclared('quick')} in sourced= (the paper's value and "
        "where) or free_settings= (normlab's choice, with neighbours)"
    )


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_every_claim_names_its_decisive_free_setting(claim):
    assert claim.decisive, f"{claim.id}: name the free setting robustness varies (decisive=)"
    for setting in claim.free_settings:  # every neighbour is computable at every scale
        for scale in ("smoke", "quick", "full"):
            low, high = setting.neighbours(claim.config(scale))
            assert low != claim.config(scale)[setting.key] != high, (claim.id, setting.key)


@pytest.mark.parametrize("claim", [c for c in CLAIMS if not c.untuned], ids=lambda c: c.id)
def test_every_tuned_arm_declares_a_trivial_reference(claim, smoke_measurement):
    tuning = smoke_measurement(claim.id).get("tuning") or {}
    assert tuning, f"{claim.id}: tuned, but its measurement records no tuning"
    missing = [arm for arm, record in tuning.items() if record.get("reference") is None]
    assert not missing, (
        f"{claim.id}: tuned arms {missing} declare no trivial reference (tune_arms(..., "
        "reference=...): chance accuracy, the uniform predictor, the untrained model)"
    )


@pytest.mark.parametrize("claim", [c for c in CLAIMS if not c.untuned], ids=lambda c: c.id)
def test_every_quick_search_has_an_extension_step(claim):
    """A choice on the edge of its grid extends at least one step at quick (issue: a
    two-value axis is always on the edge, and without a step "on the edge" means nothing)."""
    spaces = searches(claim.config("quick"))
    assert min(s.extend for s in spaces.values()) >= 1, claim.id


SEEDS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "seeds"


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_every_primary_stands_beside_the_abstracts_words(claim):
    """The primary is the abstract's headline: the record quotes the words it tests (a
    sentence or a clause, not a restatement), and where the seed abstracts are at hand
    (the project's shared folder beside the checkout) the quote is found there verbatim."""
    quote = _squeeze(claim.quote)
    assert len(quote) >= 30, f"{claim.id}: quote the abstract's words the primary tests"
    if SEEDS.is_dir():
        abstracts = _squeeze(" ".join(p.read_text() for p in sorted(SEEDS.glob("*.txt"))))
        assert quote in abstracts, f"{claim.id}: the quote is not in the seed abstracts"


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_robustness_reruns_each_neighbour_once(claim):
    from normlab.claims.plan import robustness_overrides

    for scale in ("quick", "full"):
        overrides = robustness_overrides(claim, scale, "all")
        keys = [json.dumps(o, sort_keys=True) for o in overrides]
        assert len(keys) == len(set(keys)), (claim.id, scale, keys)
        config = claim.config(scale)
        assert all(config[k] != v for o in overrides for k, v in o.items()), claim.id


def test_a_setting_with_one_alternative_is_rerun_once():
    from normlab.claims.core import get_claim
    from normlab.claims.plan import robustness_overrides

    # adaptive-scaling's start has one alternative to asinh (low = high = "linear")
    assert robustness_overrides(get_claim("adaptive-scaling"), "quick", "decisive") == [
        {"start": "linear"}
    ]


def test_no_rerun_below_the_steps_measured_testable():
    """curse-of-depth read untestable at 150 steps (its quick budget is 250): its quick
    robustness reruns 500 steps, not 125; full scale declares no floor."""
    from normlab.claims.core import get_claim
    from normlab.claims.plan import robustness_overrides

    claim = get_claim("curse-of-depth")
    assert robustness_overrides(claim, "quick", "decisive") == [{"steps": 500}]
    assert robustness_overrides(claim, "quick", "decisive", below_floor=True) == [{"steps": 125}]
    assert robustness_overrides(claim, "full", "decisive") == [{"steps": 1500}, {"steps": 6000}]


def test_a_rerun_skips_figure_only_work():
    """fold-ln's width sweep draws only its figure (from the main seeds): reruns skip it; the
    main seeds and the placebo keep the scale's widths."""
    from normlab.claims.core import get_claim
    from normlab.claims.protocol import PLACEBO_KEY
    from normlab.claims.tasks import task_config

    claim = get_claim("fold-ln")
    widths = claim.config("quick")["time_widths"]
    assert widths and task_config(claim, "quick")["time_widths"] == widths
    assert task_config(claim, "quick", {"time_d_model": 256})["time_widths"] == ()
    placebo = {PLACEBO_KEY: {"method": "a", "baseline": "b"}}
    assert task_config(claim, "quick", placebo)["time_widths"] == widths
