"""The claim records, the catalogue, and every registered effect's reach (the verdict rule
itself is tested in test_rule.py)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from normlab.claims import Effect, FreeSetting, Margin
from normlab.claims.core import SCALES, all_claims, get_claim
from tests.claims._toys import CHOICE, toy_claim, toy_effect


def test_claim_validation():
    with pytest.raises(ValueError, match="config for scale"):
        toy_claim(configs={"smoke": {"seeds": 1}})
    with pytest.raises(ValueError, match="seeds >= 1"):
        toy_claim(configs={s: {"seeds": 0} for s in SCALES})
    with pytest.raises(ValueError, match="repeat"):
        toy_claim(secondary=(toy_effect(),))
    with pytest.raises(ValueError, match="direction"):
        toy_effect(direction="up")
    with pytest.raises(ValueError, match="source"):
        Margin(0.1, " ")
    with pytest.raises(ValueError, match=">= 0"):
        Margin(-0.1, "paper")
    with pytest.raises(ValueError, match="caption"):
        toy_claim(figure=lambda ms: None)
    with pytest.raises(ValueError, match="exclusive"):
        toy_claim(primary=Effect("t", "a time", lambda m: 1.0, "less", CHOICE, unit="s"))
    with pytest.raises(ValueError, match="not config keys"):
        toy_claim(free_settings=(FreeSetting("lr", 1e-3, 1e-2, "normlab's choice"),))
    with pytest.raises(ValueError, match="lowercase"):
        toy_claim(id="Bad_Id")
    with pytest.raises(ValueError, match="below_why"):
        FreeSetting.scaled("steps", "normlab's choice", testable_from={"quick": 250})
    with pytest.raises(ValueError, match="figure_only"):
        toy_claim(figure_only={"widths": ()})
    with pytest.raises(ValueError, match="share"):
        Effect("iut", "all", None, "greater", CHOICE, parts=(toy_effect(direction="less"),))


def test_catalogue_lookup():
    claims = all_claims()
    assert claims and [c.id for c in claims] == sorted(c.id for c in claims)
    assert get_claim(claims[0].id) is claims[0]
    with pytest.raises(KeyError, match="Valid ids"):
        get_claim("no-such-claim")
    assert get_claim(claims[0].id.replace("-", "_").upper()) is claims[0]


# Every effect of every registered claim can come out both ways --------------------------


def _numeric_cells(table):
    return [
        (method, metric)
        for method, row in table.items()
        for metric, value in row.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]


def _perturbed_tables(table, rng, trials):
    """Tables built from ``table``: rows of methods exchanged, cells rescaled or redrawn."""
    cells = _numeric_cells(table)
    methods = list(table)
    for t in range(trials):
        new = copy.deepcopy(table)
        if t % 3 == 0 and len(methods) > 1:  # exchange the rows of two methods
            a, b = rng.choice(len(methods), 2, replace=False)
            shared = set(table[methods[a]]) & set(table[methods[b]])
            for metric in shared:
                new[methods[a]][metric] = table[methods[b]][metric]
                new[methods[b]][metric] = table[methods[a]][metric]
        for method, metric in cells:
            v = float(new[method][metric])
            r = rng.random()
            if r < 0.4:
                v *= math.exp(rng.uniform(-3, 3))
            elif r < 0.7:
                v = v + rng.normal(0.0, abs(v) + 1.0)
            elif r < 0.8:
                v = -v
            new[method][metric] = v
        yield new


def _sides(effect):
    m = effect.margin.value
    if effect.direction in ("greater", "less"):
        return -m, m  # must reach beyond the margin on the claimed side and past zero
    bound = m if effect.direction == "no_greater" else -m
    return bound, bound


CLAIMS = all_claims()


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_every_effect_can_come_out_both_ways(claim, smoke_measurement):
    base = smoke_measurement(claim.id)
    rng = np.random.default_rng(0)
    for effect in (e for top in claim.effects for e in (top.parts or (top,))):
        values = []
        for table in _perturbed_tables(base["table"], rng, 600):
            try:
                v = float(effect.fn({**base, "table": table}))
            except (ArithmeticError, ValueError, KeyError, TypeError):
                continue
            if math.isfinite(v):
                values.append(v)
        lo, hi = _sides(effect)
        assert values, f"{claim.id}/{effect.name}: no finite value from any table"
        assert min(values) < lo and max(values) > hi, (
            f"{claim.id}/{effect.name} ({effect.direction}, margin {effect.margin.value}) "
            f"only reached [{min(values):.3g}, {max(values):.3g}]"
        )


def test_free_settings_neighbours_and_declared_settings():
    width = FreeSetting.scaled("width", "normlab's choice: small")
    assert width.neighbours({"width": 16}) == (8, 32)
    assert width.neighbours({"width": 1}) == (0, 2)  # integers never repeat the value
    assert FreeSetting.scaled("lr", "x", 0.3, 3).neighbours({"lr": 1e-2}) == pytest.approx(
        (3e-3, 3e-2)
    )
    form = FreeSetting("form", "per-step", "per-episode", "the paper's code")
    assert form.neighbours({"form": "per-episode"}) == ("per-step", "per-episode")
    with pytest.raises(ValueError, match="0 < low < 1 < high"):
        FreeSetting.scaled("width", "x", 2, 4)
    with pytest.raises(ValueError, match="not a number"):
        width.neighbours({"width": "wide"})
    configs = {s: {"seeds": 5, "width": 16, "form": "a", "data": {"nested": 1}} for s in SCALES}
    claim = toy_claim(configs=configs, free_settings=(width,), sourced={"form": "paper: §3"})
    assert claim.undeclared("quick") == []  # seeds is the protocol's; dicts are not settings
    assert toy_claim(configs=configs).undeclared("quick") == ["form", "width"]
    with pytest.raises(ValueError, match="both sourced and free"):
        toy_claim(configs=configs, free_settings=(width,), sourced={"width": "paper"})
    with pytest.raises(ValueError, match="not a free setting"):
        toy_claim(configs=configs, decisive="form", sourced={"form": "paper"})


def test_beats_every_is_an_intersection_union_of_differences():
    from normlab.claims import beats_every
    from normlab.claims.rule import judge_effect

    effect = beats_every(
        "wins", "test accuracy", "m", ["a", "b"], "acc", direction="greater", margin=CHOICE
    )
    assert [p.name for p in effect.parts] == ["wins_vs_a", "wins_vs_b"]
    assert effect.groups == (("m", "a"), ("m", "b"))

    def seeds(m, a, b):
        return [
            {"table": {"m": {"acc": x}, "a": {"acc": y}, "b": {"acc": z}}}
            for x, y, z in zip(m, a, b, strict=True)
        ]

    both = seeds([0.9, 0.91, 0.92], [0.5, 0.52, 0.5], [0.6, 0.61, 0.6])
    assert judge_effect(effect, both).verdict == "supported"
    one = seeds([0.9, 0.91, 0.92], [0.5, 0.52, 0.5], [0.95, 0.97, 0.96])  # b is better
    assert judge_effect(effect, one).verdict == "contradicted"
    with pytest.raises(ValueError, match="at least one baseline"):
        beats_every("x", "y", "m", [], "acc", direction="greater", margin=CHOICE)
