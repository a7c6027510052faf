"""Null calibration and robustness of a claim's primary effect.

**Null calibration (of the effect's construction, not of the arms).** If the method did
nothing, the rows of the arms an effect compares would be exchangeable within each seed.
:func:`null_calibration` permutes them (within each of the effect's ``groups`` and seed,
the ``"diverged"`` records travelling with their rows), recomputes the effect and the rule's
verdict, and reports how often the verdict says "supported" and how often the interval lies
beyond zero on the unclaimed side (for an intersection-union effect: any part, at its
corrected level). What this can and cannot see: for an effect that is a difference of two
arms, exchanging the rows only flips the sign of each seed's difference, so there are 2^n
patterns for n seeds and a +10 and a +0.3 effect give the same rates; it checks that the
effect's *construction* is symmetric (a best-of-k picked on test, a min() composite show up
as a high opposite-direction rate), and says nothing about bias in the arms themselves (a
handicapped baseline, an arm tuned on test). The claim-level null is the A/A placebo
(:mod:`normlab.claims.placebo`), which trains. For a superiority effect both rates must stay
at or below 5%; for a non-inferiority effect the exchangeable null *is* no worse, so
"supported" is the right answer there and only the opposite-direction rate is held to 5%.
Under the null, "contradicted: smaller than the margin" is the right answer for a
superiority effect and is not counted as an error.

**Robustness.** :func:`robustness_records` compares the primary's verdict at each free
setting's neighbours with the verdict at the chosen value: "robust" when none flips.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from normlab.claims.core import Effect, Measurement
from normlab.claims.rule import LEVEL, EffectVerdict, interval, judge_effect, opposite

__all__ = ["NULL_LIMIT", "null_calibration", "null_passes", "robustness_label"]

#: The largest tolerated rate of "supported" / "opposite direction" under the null.
NULL_LIMIT = 0.05


def _exchangeable(
    measurements: Sequence[Measurement], groups
) -> tuple[list[Measurement], list[list[list[str]]]]:
    """Each seed's table and ``"diverged"`` records, and per seed the arms of each group
    present in its table, for the groups of two or more (the ones a relabelling moves)."""
    light = [{"table": m["table"], "diverged": m.get("diverged") or {}} for m in measurements]
    present = [[[a for a in group if a in m["table"]] for group in groups] for m in light]
    return light, [[g for g in seed if len(g) >= 2] for seed in present]


def _orders(
    arms: Sequence[Sequence[str]], rng: np.random.Generator
) -> tuple[tuple[int, ...], ...]:
    """A random order of each group's arms."""
    return tuple(tuple(rng.permutation(len(g)).tolist()) for g in arms)


def _permuted(
    m: Measurement, arms: Sequence[Sequence[str]], orders: Sequence[Sequence[int]]
) -> Measurement:
    """``m`` with each group's rows (and ``"diverged"`` records) moved by its order."""
    table = dict(m["table"])
    moved_div: dict[str, Any] = dict(m["diverged"])
    for group, order in zip(arms, orders, strict=True):
        rows = [m["table"][group[i]] for i in order]
        divs = [m["diverged"].get(group[i]) for i in order]
        for arm, row, div in zip(group, rows, divs, strict=True):
            table[arm] = row
            if div is None:
                moved_div.pop(arm, None)
            else:
                moved_div[arm] = div
    return {"table": table, "diverged": moved_div}


def _is_opposite(ev: EffectVerdict) -> bool:
    if not ev.parts:
        return opposite(ev.low, ev.high, ev.direction)
    strict = 1 - (1 - LEVEL) / len(ev.parts)
    for part in ev.parts:
        finite = [v for v in part.values if np.isfinite(v)]
        _, _, lo, hi = interval(finite, strict)
        if opposite(lo, hi, part.direction):
            return True
    return False


def null_calibration(
    effect: Effect, measurements: Sequence[Measurement], draws: int = 2000, seed: int = 0
) -> dict[str, Any] | None:
    """The rates of "supported" and "opposite direction" when the effect's arms are
    exchanged at random within each seed.

    Returns:
        ``{"supported_rate", "opposite_rate", "draws", "seeds", "superiority"}``, or None
        when the effect names no arms to exchange or there are fewer than 2 seeds.
    """
    groups = effect.groups
    if not groups or len(measurements) < 2:
        return None
    rng = np.random.default_rng(seed)
    light, arms = _exchangeable(measurements, groups)
    supported = opposite_count = 0
    # the draws decide only the orders, and n seeds of two-arm groups have 2^n of them:
    # each ordering is judged once
    judged: dict[tuple, tuple[bool, bool]] = {}
    for _ in range(draws):
        orders = tuple(_orders(a, rng) for a in arms)
        if orders not in judged:
            permuted = [_permuted(m, a, o) for m, a, o in zip(light, arms, orders, strict=True)]
            ev = judge_effect(effect, permuted, powered=False)
            judged[orders] = (ev.verdict == "supported", _is_opposite(ev))
        is_supported, is_opposite = judged[orders]
        supported += is_supported
        opposite_count += is_opposite
    return {
        "supported_rate": supported / draws,
        "opposite_rate": opposite_count / draws,
        "draws": draws,
        "seeds": len(measurements),
        "superiority": effect.direction in ("greater", "less"),
    }


def null_passes(null: dict[str, Any] | None) -> bool:
    """Whether a null calibration stays within :data:`NULL_LIMIT` (see the module doc)."""
    if null is None:
        return False
    ok = null["opposite_rate"] <= NULL_LIMIT
    return ok and (not null["superiority"] or null["supported_rate"] <= NULL_LIMIT)


def robustness_label(main: str, records: Sequence[dict[str, Any]]) -> str:
    """ "robust", or "fragile: flips at key=value, ..." when a neighbour's verdict differs."""
    flips = [f"{r['setting']}={r['value']!r}" for r in records if r["verdict"] != main]
    if not records:
        return "not run"
    return "robust" if not flips else "fragile: flips at " + ", ".join(flips)
