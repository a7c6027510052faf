"""The experiment engine (claims.arms) and the A/A placebo (claims.placebo) on toy arms whose
"training" is a noisy quadratic in log10(lr), so thousands of runs cost milliseconds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from normlab.claims import Margin
from normlab.claims.arms import Trained, placebo_seed, run_arms
from normlab.claims.core import SCALES, difference
from normlab.claims.placebo import judge_placebo, not_applicable, placebo_override
from normlab.claims.rule import judge_claim
from tests.claims._toys import toy_claim

GOOD = [1e-3, 1e-2, 1e-1]  # the optimum lr 1e-2 lies inside
HANDICAP = [1e-5, 1e-4, 1e-3]  # the optimum is two decades beyond this grid's top


def _train(arm, params, seed):
    """Validation loss (lr - 1e-2)^2 in decades plus seed noise; the same for both arms."""
    rng = np.random.default_rng([seed, len(arm), round(1e6 * params["lr"])])
    loss = (math.log10(params["lr"]) + 2) ** 2 + rng.normal(0, 0.05)
    return Trained(loss, model={"loss": loss, "seed": seed})


def _test(arm, trained):
    noise = np.random.default_rng([trained.model["seed"], 7]).normal(0, 0.3)
    return {"acc": -trained.model["loss"] + noise}


def _config(baseline_grid, extend=0, placebo=None):
    config = {
        "seeds": 5,
        "search": {
            "per_arm": {"method": {"lr": GOOD}, "baseline": {"lr": baseline_grid}},
            "extend": extend,
        },
    }
    if placebo:
        config.update(placebo)
    return config


def _claim(baseline_grid):
    primary = difference(
        "acc_gain",
        "method minus baseline test accuracy",
        "method",
        "baseline",
        "acc",
        direction="greater",
        margin=Margin(0.0, "normlab's choice: test"),
    )
    return toy_claim(primary=primary, configs={s: _config(baseline_grid) for s in SCALES})


def test_run_arms_tunes_on_validation_and_records_the_table():
    m = run_arms(_config(GOOD), 3, _train, _test, reference=10.0)
    assert m["table"]["method"]["lr"] == 1e-2 and "acc" in m["table"]["baseline"]
    assert m["tuning"]["method"]["reference"] == 10.0 and m["diverged"] == {}
    assert all("placebo_of" not in r for r in m["tuning"].values())


def test_a_diverged_training_is_recorded_and_loses_the_tuning():
    def train(arm, params, seed):
        if params["lr"] == 1e-1:
            return Trained(0.0, model={"loss": 0.0, "seed": seed}, diverged={"step": 3})
        return _train(arm, params, seed)

    m = run_arms(_config(GOOD), 0, train, _test, reference=10.0)
    assert m["table"]["method"]["lr"] == 1e-2  # the diverged 0.0 counts as inf
    assert m["tuning"]["method"]["history"][2]["val"] is None


def test_the_placebo_trains_the_baseline_through_the_methods_path():
    claim = _claim(GOOD)
    seen = []

    def train(arm, params, seed):
        seen.append((arm, seed))
        return _train(arm, params, seed)

    m = run_arms(
        {**claim.config("quick"), **placebo_override(claim)}, 4, train, _test, reference=10
    )
    assert m["tuning"]["method"]["placebo_of"] == "baseline"
    assert {a for a, _ in seen} == {"baseline"}  # the method itself never trains
    assert {s for _, s in seen} == {4, placebo_seed(4)}


def _placebo_verdict(claim, seeds):
    config = {**claim.config("quick"), **placebo_override(claim)}
    ms = [run_arms(config, s, _train, _test, reference=10.0) for s in seeds]
    return judge_placebo(claim, ms)


def test_a_handicapped_baseline_makes_the_placebo_supported_and_flagged():
    placebo = _placebo_verdict(_claim(HANDICAP), range(5))
    assert placebo["status"] == "run"
    assert placebo["verdict"] == "supported" and placebo["flagged"]
    assert placebo["claimed_side"] >= 0.8


def test_a_fair_comparison_flags_its_placebo_at_most_five_percent_of_the_time():
    claim = _claim(GOOD)
    flags = [_placebo_verdict(claim, range(5 * k, 5 * k + 5))["flagged"] for k in range(200)]
    assert np.mean(flags) <= 0.05


def test_a_claim_off_the_engine_has_no_placebo():
    claim = _claim(GOOD)
    plain = [{"table": {"method": {"acc": 1.0}, "baseline": {"acc": 0.0}}}] * 5
    out = judge_placebo(claim, plain)
    assert out["status"] == "not available" and "tune_arms" in out["why"]


def test_tune_arms_alone_honours_the_placebo_with_the_seeds_own_training():
    from normlab.claims.protocol import tune_arms

    claim = _claim(HANDICAP)
    config = {**claim.config("quick"), **placebo_override(claim)}
    calls = []

    def evaluate(arm, params):
        calls.append(arm)
        return _train(arm, params, 0).val, None

    _, records = tune_arms(config, evaluate)
    assert set(calls) == {"baseline"} and records["method"]["placebo_of"] == "baseline"
    assert records["method"]["chosen"] == {"lr": 1e-2}  # the method's own grid


def test_the_learned_premise_reads_the_engines_references():
    claim = _claim(GOOD)
    ms = [run_arms(claim.config("quick"), s, _train, _test, reference=0.01) for s in range(5)]
    result = judge_claim(claim, ms)  # loss ~0 at the optimum does not beat 0.01 reliably
    learned = {p.name: p.state for p in result.premises}
    assert set(learned) == {"method_learned", "baseline_learned"}
    ms = [run_arms(claim.config("quick"), s, _train, _test, reference=5.0) for s in range(5)]
    assert {p.state for p in judge_claim(claim, ms).premises} == {"held"}


def test_a_malformed_placebo_request_is_refused():
    with pytest.raises(ValueError, match="placebo"):
        run_arms(_config(GOOD, placebo={"placebo": "method"}), 0, _train, _test, reference=1)


def test_the_engine_records_the_late_share_of_each_chosen_run():
    def train(arm, params, seed):  # a fast learner converges; a slow one is still learning
        rate = 0.5 if arm == "method" else 0.002
        curve = [math.exp(-rate * t) for t in range(200)]
        return Trained(_train(arm, params, seed).val, {"loss": 0.0, "seed": seed}, None, curve)

    m = run_arms(_config(GOOD), 0, train, _test, reference=5.0)
    shares = {arm: m["tuning"][arm]["late_share"] for arm in ("method", "baseline")}
    assert shares["method"] < 0.01 and 0.15 < shares["baseline"] < 0.3, shares
    claim = _claim(GOOD)
    ms = [run_arms(claim.config("quick"), s, train, _test, reference=5.0) for s in range(3)]
    states = {p.name: p.state for p in judge_claim(claim, ms).premises}
    assert states["method_converged"] == "held" and states["baseline_converged"] == "failed"


def test_a_placebo_without_the_primarys_cells_is_not_available_and_says_why():
    claim = _claim(GOOD)
    config = {**claim.config("quick"), **placebo_override(claim)}
    ms = [run_arms(config, s, _train, _test, reference=10.0) for s in range(3)]
    for m in ms:
        del m["table"]["method"]["acc"]  # e.g. rows named after the arm actually trained
    out = judge_placebo(claim, ms)
    assert out["status"] == "not available" and "No 'acc' for 'method'" in out["why"]


def test_a_primary_over_derived_rows_has_no_placebo():
    derived = difference(
        "share_gap",
        "a selection's share minus a random pick's",
        "selected",
        "placebo",
        "share",
        direction="greater",
        margin=Margin(0.0, "normlab's choice: test"),
    )
    claim = toy_claim(primary=derived, configs={s: _config(GOOD) for s in SCALES})
    assert placebo_override(claim) is None
    out = judge_placebo(claim, [{"table": {}}])
    assert out["status"] == "not applicable" and "no two tuned arms" in out["why"]
    moot = not_applicable(claim, "quick")
    assert moot["status"] == "not applicable" and "'selected' and 'placebo'" in moot["why"]
    assert placebo_override(_claim(GOOD)) is not None  # method and baseline are tuned arms
    assert not_applicable(_claim(GOOD), "quick") is None


def test_an_untuned_claim_has_no_placebo_by_design_and_says_why():
    configs = {s: {"seeds": 5} for s in SCALES}
    claim = toy_claim(primary=_claim(GOOD).primary, configs=configs, untuned="one shared model")
    moot = not_applicable(claim, "quick")
    assert moot["status"] == "not applicable" and "(one shared model)" in moot["why"]


def test_a_test_writing_side_rows_keys_them_by_the_slot_under_the_placebo():
    """A twin row written beside the arm's (ngpt-fp4's "<arm>-fp4") lands on the method's
    slot when the placebo trains the baseline there, so the primary finds its cells."""
    claim = _claim(GOOD)
    twins = {}

    def test(arm, trained):
        twins[f"{trained.slot}-twin"] = {"acc": trained.model["loss"], "trained": arm}
        return _test(arm, trained)

    m = run_arms(
        {**claim.config("quick"), **placebo_override(claim)}, 3, _train, test, reference=10
    )
    assert twins["method-twin"]["trained"] == "baseline"
    assert twins["baseline-twin"]["trained"] == "baseline" and set(twins) == {
        "method-twin",
        "baseline-twin",
    }
    assert set(m["table"]) == {"method", "baseline"}
