"""The verdict rule and the claim records."""

from __future__ import annotations

import math

import pytest

from normlab.claims import Claim, Effect, all_claims, combine, get_claim, verdict
from normlab.claims.core import SCALES, judge


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.1, 0.2, 0.05], "supported"),  # same sign in every seed
        ([-0.1, -0.3, -0.2], "contradicted"),
        ([1.0, 1.1, 0.9, 1.2, -0.05], "supported"),  # mean far beyond 2 SE, one dissent
        ([-1.0, -1.1, -0.9, -1.2, 0.05], "contradicted"),
        ([0.1, -0.1, 0.05], "inconclusive"),  # mixed, small mean
        ([0.0, 0.0, 0.0], "inconclusive"),  # no effect at all
        ([0.3, 0.4], "inconclusive"),  # too few seeds
        ([0.3, math.nan, 0.4], "inconclusive"),  # a failed measurement
    ],
)
def test_verdict_rule(values, expected):
    label, reason = verdict(values)
    assert label == expected, reason


def test_combine_needs_every_effect_supported():
    assert combine(["supported", "supported"]) == "supported"
    assert combine(["supported", "inconclusive"]) == "inconclusive"
    assert combine(["supported", "contradicted"]) == "contradicted"
    assert combine(["inconclusive", "error"]) == "error"
    assert combine([]) == "error"


def _toy(**overrides):
    fields = {
        "id": "toy",
        "paper": "p",
        "hypothesis": "h",
        "metrics": ("x",),
        "effects": (Effect("e", "x positive", lambda m: m["table"]["a"]["x"]),),
        "headline": "",
        "configs": {s: {"seeds": 3} for s in SCALES},
        "run": lambda config, seed: {"table": {"a": {"x": 1.0}}},
    }
    fields.update(overrides)
    return Claim(**fields)


def test_claim_validates_its_configs():
    with pytest.raises(ValueError, match="no config for scale"):
        _toy(configs={"quick": {"seeds": 3}})
    with pytest.raises(ValueError, match="seeds >= 1"):
        _toy(configs={s: {"seeds": 0} for s in SCALES})
    with pytest.raises(ValueError, match="at least one Effect"):
        _toy(effects=())


def test_judge_computes_mean_and_se():
    effect = Effect("e", "", lambda m: m["v"])
    result = judge(effect, [{"v": 1.0}, {"v": 2.0}, {"v": 3.0}])
    assert result.values == (1.0, 2.0, 3.0)
    assert result.mean == pytest.approx(2.0)
    assert result.se == pytest.approx(1.0 / math.sqrt(3))
    assert result.verdict == "supported"


def test_unknown_claim_lists_valid_ids():
    with pytest.raises(KeyError, match=r"Valid ids: .*affine-rank"):
        get_claim("no-such-claim")


def test_every_claim_is_well_formed():
    claims = all_claims()
    assert len({c.id for c in claims}) == len(claims)
    for claim in claims:
        assert claim.paper and claim.hypothesis and claim.headline, claim.id
        assert len(claim.seeds("quick")) >= 3, f"{claim.id}: quick needs >= 3 seeds"
        assert len(claim.seeds("full")) >= len(claim.seeds("quick")), claim.id
