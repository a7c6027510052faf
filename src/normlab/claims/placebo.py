"""The A/A placebo: the claim-level null.

The baseline arm is trained again through the method's own path (its search space, its
tuning and divergence handling, the same data, a training seed of its own: see
:mod:`normlab.claims.arms`) and judged by the claim's primary effect as if it were the
method. Nothing differs but the path, so a fair comparison reads "supported" at most 2.5%
of the time; a placebo that reads "supported" shows that the comparison favours the
method's path (a wider grid, a handicapped baseline, a selection on test), and the report
flags it. The flag reads the verdict at margin 0, so that a non-inferiority primary (for
which an A/A pair is rightly "no worse") is held to the same test: the placebo must not
beat its baseline.

Unlike the within-seed exchange of :mod:`normlab.claims.calibration` (for two arms, a
sign flip of the per-seed differences, which says nothing about bias in the arms), the
placebo trains: it costs one extra training of the method's path per seed, so the report
runs it on request (``normlab report --placebo``; always at full scale).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from normlab.claims.core import Claim, Effect, Measurement, claimed_bound
from normlab.claims.protocol import PLACEBO_KEY
from normlab.claims.rule import judge_effect

__all__ = ["judge_placebo", "not_applicable", "placebo_effect", "placebo_override"]


def placebo_effect(claim: Claim) -> Effect | None:
    """The effect the placebo is judged by: the primary, or for "beats every baseline" the
    part against the first named baseline; None when the primary compares no two tuned
    arms (it names none, or rows derived from them, e.g. a selection against a random
    pick)."""
    primary = claim.primary
    candidates = primary.parts or (primary,)
    for effect in candidates:
        if _tuned_arm(claim, effect.method) and _tuned_arm(claim, effect.baseline):
            return effect
    return None


def _tuned_arm(claim: Claim, row: str | None) -> bool:
    """Whether ``row`` (``"<arm>"`` or a pooled ``"<configuration>/<arm>"``) is an arm of
    the claim's quick search."""
    spec = claim.config("quick").get("search")
    if not row or not isinstance(spec, Mapping):
        return False
    arms = spec.get("arms") or list(spec.get("per_arm") or ())
    return row in arms or row.rsplit("/", 1)[-1] in arms


def placebo_override(claim: Claim) -> dict[str, Any] | None:
    """The config override of the placebo tasks: ``{"placebo": {"method", "baseline"}}``,
    or None when the claim has no method/baseline pair to swap."""
    effect = placebo_effect(claim)
    if effect is None:
        return None
    return {PLACEBO_KEY: {"method": effect.method, "baseline": effect.baseline}}


def not_applicable(claim: Claim, scale: str) -> dict[str, str] | None:
    """``{"status": "not applicable", "why"}`` for a claim that has no A/A placebo by
    design at ``scale`` (no arm is tuned, or its primary compares rows derived from the
    arms), else None (the placebo applies: run or not run)."""
    if "search" in claim.config(scale) and placebo_effect(claim) is not None:
        return None
    return {"status": "not applicable", "why": _why_not(claim, scale)}


def _why_not(claim: Claim, scale: str) -> str:
    """Why ``claim`` has no A/A placebo at ``scale`` (see :func:`not_applicable`)."""
    if "search" not in claim.config(scale):
        return f"no arm is tuned ({claim.untuned}), so no method's path trains the baseline"
    rows = " and ".join(f"'{r}'" for r in (claim.primary.method, claim.primary.baseline) if r)
    return (
        "the primary compares no two tuned arms, only rows derived from them "
        f"({rows or 'none named'}), so no baseline can take the method's place"
    )


def _honoured(measurement: Measurement, effect: Effect) -> bool:
    record = (measurement.get("tuning") or {}).get(effect.method) or {}
    return record.get("placebo_of") == effect.baseline


def judge_placebo(
    claim: Claim, measurements: Sequence[Measurement], scale: str = "quick"
) -> dict[str, Any]:
    """The placebo's verdict by the claim's primary (see :func:`placebo_effect`).

    Returns:
        ``{"status": "run", "effect", "verdict", "reason", "mean", "low", "high", "seeds",
        "at_zero", "claimed_side", "flagged"}`` (``claimed_side``: the fraction of seeds
        whose value lies on the claimed side of the margin; ``flagged``: the placebo is
        "supported" at margin 0, i.e. it beats the baseline in the claimed direction, which
        a fair comparison does 2.5% of the time, for superiority and non-inferiority
        primaries alike); ``{"status": "not available", "why"}`` when the claim's run does
        not honour the placebo (it does not go through :func:`normlab.claims.arms.run_arms`,
        or the primary's cells are missing under it); ``{"status": "not applicable",
        "why"}`` when its primary compares no two tuned arms (:func:`not_applicable` at
        ``scale``, the measurements' scale).
    """
    effect = placebo_effect(claim)
    if effect is None:
        return {"status": "not applicable", "why": _why_not(claim, scale)}
    if not measurements or not all(_honoured(m, effect) for m in measurements):
        return {
            "status": "not available",
            "why": "the claim tunes no arms through the engine (normlab.claims.protocol."
            "tune_arms or normlab.claims.arms.run_arms), so it cannot train its baseline "
            "through the method's path",
        }
    try:
        ev = judge_effect(effect, measurements, role="primary")
    except (KeyError, ValueError, TypeError) as err:  # a claim whose rows follow arm names
        why = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        return {
            "status": "not available",
            "why": f"the claim's run does not give the primary's cells under the placebo ({why})",
        }
    upward = effect.direction in ("greater", "no_less")
    bound = claimed_bound(effect.direction, effect.margin.value)
    side = [v > bound if upward else v < bound for v in ev.values]
    return {
        "status": "run",
        "effect": effect.name,
        "verdict": ev.verdict,
        "reason": ev.reason,
        "mean": ev.mean,
        "low": ev.low,
        "high": ev.high,
        "seeds": len(ev.values),
        "at_zero": ev.at_zero,
        "claimed_side": sum(side) / len(side) if side else float("nan"),
        "flagged": ev.at_zero == "supported",
    }
