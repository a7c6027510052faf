"""The verdict rule: a two-sided 95% t-interval over seeds, judged against the margin.

For an effect whose claimed relation is ``v > m`` ("greater"; the other directions mirror
it): **supported** when the interval lies entirely above ``m``; **contradicted** when it
lies entirely below ``m``, either in the opposite direction (below 0) or precisely smaller
than the margin; otherwise **inconclusive**. Non-inferiority (``no_greater``: ``v < m``) is
supported below ``m`` and contradicted above it. Under a true zero effect, "supported"
occurs at most 2.5% of the time and "opposite direction" at most 2.5%
(tests/claims/test_rule.py simulates both, the rates at the margin, and the power).

An intersection-union effect ("beats every baseline", ``Effect.parts``) is supported iff
every part is supported at 95%, and contradicted iff at least one part is contradicted at
level ``1 - 0.05 / k`` for ``k`` parts (a Bonferroni bound on the union).

A premise is judged by the same interval: it holds when it would be "supported". Effects
gated by a failed premise are "untestable at this scale"; their would-be verdicts stay in
the record. A diverged arm counts as the value its effect declares (``if_diverged``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from normlab._records import Record
from normlab.claims.core import (
    CheckOutcome,
    Claim,
    Effect,
    Margin,
    Measurement,
    Precondition,
    Premise,
    claimed_bound,
    measured_at,
)

__all__ = [
    "CONVERGED",
    "LEVEL",
    "RULE",
    "CheckVerdict",
    "ClaimVerdict",
    "EffectVerdict",
    "PremiseVerdict",
    "converged_premises",
    "detectable",
    "interval",
    "judge_claim",
    "judge_effect",
    "judge_premise",
    "learned_premises",
    "opposite",
    "power",
    "verdict",
    "with_divergence",
]

#: Confidence level of the interval.
LEVEL = 0.95
#: The rule in one paragraph, as the README and the report state it (a test keeps the
#: README's copy equal to this one).
RULE = (
    "The verdict is computed from at least five seeds at quick scale: a two-sided 95% "
    't-interval of the primary effect, judged against its declared margin. "supported" '
    'when the interval lies entirely on the claimed side of the margin; "contradicted" '
    "when it lies entirely on the far side of the margin (in the opposite direction, or "
    'precisely smaller than the margin); otherwise "inconclusive". "Beats every '
    'baseline" is an intersection-union test: supported against each, contradicted '
    "against one at level 0.05 / k. A premise (the phenomenon the baseline must show) is "
    'judged by the same interval; when it fails the claim is "untestable at this scale" '
    "and its effects still show their values and would-be verdicts. A failed "
    'implementation check or task makes the claim "error". Secondary effects never '
    "change the verdict. "
).strip()


@cache
def _t_ppf(df: int, p: float) -> float:
    """Student's t quantile ``p`` at ``df`` degrees of freedom (scipy, once per pair)."""
    from scipy import stats

    return float(stats.t.ppf(p, df))


def _t_quantile(df: int, level: float) -> float:
    """The two-sided ``level`` interval's t multiplier."""
    return _t_ppf(df, 0.5 + level / 2)


def interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float, float]:
    """``(mean, se, low, high)``: the mean and its two-sided t-interval at ``level``.

    One value gives an infinite interval (nothing can be concluded from one seed).
    """
    vals = [float(v) for v in values]
    n = len(vals)
    if n == 0:
        return math.nan, math.nan, -math.inf, math.inf
    mean = statistics.fmean(vals)
    if n == 1:
        return mean, math.inf, -math.inf, math.inf
    # two-pass float sum of squares (statistics.stdev's exact fractions cost ~30 us a call,
    # and the null calibration calls this thousands of times)
    se = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1)) / math.sqrt(n)
    half = _t_quantile(n - 1, level) * se
    return mean, se, mean - half, mean + half


def _bounds(direction: str, m: float) -> tuple[float, float]:
    """``(claimed bound, zero)`` of a direction: the interval must clear the first; the
    second is where "opposite direction" starts (the bound itself for non-inferiority)."""
    bound = claimed_bound(direction, m)
    return bound, (bound if direction.startswith("no_") else 0.0)


def verdict(
    values: Sequence[float],
    direction: str,
    margin: float,
    *,
    level: float = LEVEL,
    source: str = "",
) -> tuple[str, str]:
    """The verdict on one effect from its per-seed values.

    Returns:
        ``(label, reason)``; the label is "supported", "contradicted" or "inconclusive";
        a contradiction's reason says "opposite direction" or "smaller than the margin".
    """
    vals = [float(v) for v in values]
    bad = [i for i, v in enumerate(vals) if not math.isfinite(v)]
    if bad:
        return "inconclusive", f"seed(s) {bad} gave a non-finite value"
    if len(vals) < 2:
        return "inconclusive", f"{len(vals)} seed(s): a t-interval needs at least 2"
    _, _, lo, hi = interval(vals, level)
    span = f"{level:.3g} interval [{lo:.3g}, {hi:.3g}]"
    m = float(margin)
    bound, _ = _bounds(direction, m)
    upward = direction in ("greater", "no_less")
    if (lo > bound) if upward else (hi < bound):
        side = "above" if upward else "below"
        return "supported", f"{span} lies {side} {bound:g}"
    if (hi < bound) if upward else (lo > bound):
        why = f" ({source})" if source else ""
        if direction in ("greater", "less") and ((hi < 0) if upward else (lo > 0)):
            return "contradicted", f"{span}: opposite direction (beyond 0)"
        if direction in ("greater", "less"):
            return "contradicted", f"{span}: smaller than the margin {m:g}{why}"
        return "contradicted", f"{span}: worse than the margin {bound:g}{why}"
    return "inconclusive", f"{span} crosses {bound:g}"


def opposite(low: float, high: float, direction: str) -> bool:
    """Whether an interval lies beyond zero on the unclaimed side (the wrong direction)."""
    if direction in ("greater", "no_less"):
        return high < 0
    return low > 0


def with_divergence(measurement: Measurement, if_diverged: Mapping[str, float]) -> Measurement:
    """``measurement`` with every diverged arm's declared metrics set to their outcome.

    The arms come from ``measurement["diverged"]`` (arm -> ``{"step", "last"}``).
    """
    diverged = measurement.get("diverged") or {}
    if not diverged or not if_diverged:
        return measurement
    table = {arm: dict(row) for arm, row in measurement["table"].items()}
    for arm in diverged:
        if arm in table:
            table[arm].update({k: float(v) for k, v in if_diverged.items()})
    return {**measurement, "table": table}


@dataclass(frozen=True)
class EffectVerdict(Record):
    """The verdict on one effect over seeds, with the rule's inputs.

    Attributes:
        name: the effect's name.
        description: what the value is.
        role: "primary", "secondary" or "part".
        values: the per-seed values (for an intersection-union effect: its weakest part's).
        mean, se, low, high: their mean, standard error and 95% t-interval.
        direction, margin, margin_source: what is claimed, against what, and why.
        method, baseline, unit: the arms compared and the value's unit.
        verdict: the computed label ("untestable" when a premise gating it failed).
        reason: which test decided it.
        would_be: the label the rule gives the values, whatever the premises.
        degenerate: every seed gave the same value (the interval is a point).
        parts: an intersection-union effect's pairwise verdicts.
        at_zero: the label the rule gives the same values at margin 0 (shown beside the
            verdict at the declared margin, so a margin that decides the verdict shows).
        power: the probability of "supported" at margin 0 if the true effect were the
            margin (for non-inferiority: of "supported" at the margin if the true effect
            were 0), at the observed spread and seed count (:func:`power`).
        mde: the true effect at which "supported" at the declared margin has 80% power,
            at the observed spread and seed count (:func:`detectable`).
    """

    name: str
    description: str
    role: str
    values: tuple[float, ...]
    mean: float
    se: float
    low: float
    high: float
    direction: str
    margin: float
    margin_source: str
    method: str
    baseline: str
    unit: str
    verdict: str
    reason: str
    would_be: str
    degenerate: bool
    parts: tuple[EffectVerdict, ...] = ()
    at_zero: str = ""
    power: float = math.nan
    mde: float = math.nan

    @property
    def claimed(self) -> str:
        from normlab.claims.core import claimed_relation

        return claimed_relation(self.direction, self.margin)


def _values(
    effect: Effect | Premise | Precondition, measurements: Sequence[Measurement]
) -> tuple[float, ...]:
    out = []
    for m in measurements:
        declared = getattr(effect, "if_diverged", None) or {}
        try:
            out.append(float(effect.fn(with_divergence(m, declared))))
        except ArithmeticError:
            out.append(math.nan)
        except TypeError:  # a None cell: only a diverged arm may leave one
            if not m.get("diverged"):
                raise
            out.append(math.nan)
    return tuple(out)


def _divergence_note(values: Sequence[float], measurements: Sequence[Measurement]) -> str:
    seeds = [
        i
        for i, (v, m) in enumerate(zip(values, measurements, strict=True))
        if not math.isfinite(v) and m.get("diverged")
    ]
    if not seeds:
        return ""
    return (
        f"; an arm diverged in seed(s) {seeds} and the effect declares no outcome for it "
        "(if_diverged)"
    )


def _record(
    effect: Effect,
    role: str,
    values: tuple[float, ...],
    label: str,
    reason: str,
    parts: tuple[EffectVerdict, ...] = (),
    powered: bool = True,
) -> EffectVerdict:
    finite = [v for v in values if math.isfinite(v)]
    mean, se, lo, hi = interval(finite)
    degenerate = len(finite) > 1 and len(set(finite)) == 1
    if degenerate:
        reason += "; degenerate: every seed gave the same value"
    at_zero, _ = verdict(values, effect.direction, 0.0)
    n, m = len(finite), effect.margin.value
    if powered:
        pw, mde = power(n, se * math.sqrt(n), m), detectable(n, se, effect.direction, m)
    else:
        pw = mde = math.nan
    return EffectVerdict(
        name=effect.name,
        description=effect.description,
        role=role,
        values=values,
        mean=mean,
        se=se,
        low=lo,
        high=hi,
        direction=effect.direction,
        margin=effect.margin.value,
        margin_source=effect.margin.source,
        method=effect.method,
        baseline=effect.baseline,
        unit=effect.unit,
        verdict=label,
        reason=reason,
        would_be=label,
        degenerate=degenerate,
        parts=parts,
        at_zero=at_zero,
        power=pw,
        mde=mde,
    )


def power(n: int, sd: float, margin: float, level: float = LEVEL) -> float:
    """The probability that the interval clears its bound when the true effect lies one
    margin beyond it: ``P(T > t_q)`` with ``T`` noncentral t, ``n - 1`` degrees of freedom
    and noncentrality ``margin / (sd / sqrt n)``.

    For "greater" this is the power of the margin-0 test at a true effect equal to the
    margin; for non-inferiority the power of "supported" at a true effect of 0. NaN when
    it cannot be computed (fewer than 2 seeds, no spread).
    """
    if n < 2 or not (math.isfinite(sd) and sd > 0) or not math.isfinite(margin):
        return math.nan
    from scipy import stats

    q = _t_quantile(n - 1, level)
    return float(stats.nct.sf(q, n - 1, margin / (sd / math.sqrt(n))))


def detectable(n: int, se: float, direction: str, margin: float, level: float = LEVEL) -> float:
    """The minimum detectable effect: the true value at which "supported" at the declared
    margin has 80% power, ``bound +- (t_q + t_0.8) se`` on the claimed side (NaN below two
    seeds or without spread)."""
    if n < 2 or not (math.isfinite(se) and se > 0):
        return math.nan
    reach = (_t_quantile(n - 1, level) + _t_ppf(n - 1, 0.8)) * se
    bound = claimed_bound(direction, margin)
    return bound + reach if direction in ("greater", "no_less") else bound - reach


def _slack(ev: EffectVerdict) -> float:
    """How far a part's mean clears its claimed bound, in standard errors (lower: weaker)."""
    bound, _ = _bounds(ev.direction, ev.margin)
    gap = ev.mean - bound if ev.direction in ("greater", "no_less") else bound - ev.mean
    if not math.isfinite(gap):
        return -math.inf
    return gap / ev.se if ev.se and math.isfinite(ev.se) else math.copysign(math.inf, gap)


def judge_effect(
    effect: Effect,
    measurements: Sequence[Measurement],
    role: str = "primary",
    *,
    powered: bool = True,
) -> EffectVerdict:
    """Evaluate ``effect`` on each seed's measurement and apply :func:`verdict`.

    ``powered=False`` leaves the power and the minimum detectable effect NaN (the null
    calibration judges thousands of relabellings and reads only the verdict and interval).
    """
    if not effect.parts:
        values = _values(effect, measurements)
        label, reason = verdict(
            values, effect.direction, effect.margin.value, source=effect.margin.source
        )
        reason += _divergence_note(values, measurements)
        return _record(effect, role, values, label, reason, powered=powered)
    k = len(effect.parts)
    parts = tuple(judge_effect(p, measurements, "part", powered=powered) for p in effect.parts)
    strict = 1 - (1 - LEVEL) / k
    against = []
    for part, ev in zip(effect.parts, parts, strict=True):
        label, why = verdict(
            ev.values, part.direction, part.margin.value, level=strict, source=part.margin.source
        )
        if label == "contradicted":
            against.append(f"{part.baseline or part.name}: {why}")
    weakest = min(parts, key=_slack)
    if all(p.verdict == "supported" for p in parts):
        label, reason = "supported", f"supported against each of {k} baselines"
    elif against:
        label = "contradicted"
        reason = f"contradicted at level {strict:.3g} against " + "; ".join(against)
    else:
        undecided = [p.baseline or p.name for p in parts if p.verdict != "supported"]
        label, reason = "inconclusive", f"not supported against {', '.join(undecided)}"
    reason += f" (weakest part: {weakest.name}, {weakest.reason})"
    return _record(effect, role, weakest.values, label, reason, parts, powered)


@dataclass(frozen=True)
class PremiseVerdict(Record):
    """A premise's outcome over seeds: its interval and whether it held.

    ``state`` is "held" (the interval lies on the holding side of the bound), "failed"
    (it lies entirely on the other side) or "underpowered" (it crosses the bound, or one
    seed gave no interval); only "held" lets the effects it gates be judged.
    """

    name: str
    description: str
    values: tuple[float, ...]
    mean: float
    low: float
    high: float
    direction: str
    margin: float
    margin_source: str
    unit: str
    held: bool
    reason: str
    gates: tuple[str, ...]
    state: str = ""

    @property
    def value(self) -> float:
        return self.mean


def _state(label: str) -> str:
    return {"supported": "held", "contradicted": "failed"}.get(label, "underpowered")


def judge_premise(
    premise: Premise | Precondition,
    measurements: Sequence[Measurement],
    effect_names: Sequence[str],
) -> PremiseVerdict:
    """Judge a premise (or precondition) by :func:`verdict`: it holds when it would be
    "supported" (a precondition ``v >= t`` as the effect ``v - t > 0``)."""
    if isinstance(premise, Precondition):
        t = premise.threshold
        values = tuple(v - t for v in _values(premise, measurements))
        direction = "greater" if premise.op == ">=" else "less"
        label, reason = verdict(values, direction, 0.0, source=premise.source)
        values = tuple(v + t for v in values)
        reason = f"{reason} (shifted by the threshold {t:g})"
        margin, source, unit = t, premise.source, ""
    else:
        values = _values(premise, measurements)
        direction, margin, source, unit = (
            premise.direction,
            premise.margin.value,
            premise.margin.source,
            premise.unit,
        )
        label, reason = verdict(values, direction, margin, source=source)
    mean, _, lo, hi = interval([v for v in values if math.isfinite(v)])
    return PremiseVerdict(
        premise.name,
        premise.description,
        values,
        mean,
        lo,
        hi,
        direction if isinstance(premise, Premise) else premise.op,
        margin,
        source,
        unit,
        label == "supported",
        reason,
        premise.gates or tuple(effect_names),
        _state(label),
    )


#: The learned premise's source, shown beside it on every claim page.
LEARNED_SOURCE = (
    "the engine: a tuned arm that does not beat its trivial reference on validation did "
    "not train, and a comparison with it says nothing about the method"
)


#: The convergence premise's default bound (a claim may declare its own).
CONVERGED = Margin(
    0.1,
    "normlab's choice: a run whose last quarter still made more than a tenth of its whole "
    "improvement was stopped while learning (a constant rate gives 0.28, 1/t gives 0.01)",
)


def _arms_of(effect: Effect) -> set[str]:
    arms = {effect.method, effect.baseline} - {""}
    for part in effect.parts:
        arms |= _arms_of(part)
    return arms


def _engine_premise(
    name: str,
    description: str,
    values: Sequence[float],
    direction: str,
    margin: Margin,
    gates: tuple[str, ...],
    why: Callable[[str, str], str],
    forced: str = "",
) -> PremiseVerdict:
    """A premise the engine adds (not declared by the claim), judged by :func:`verdict`;
    ``forced`` is a contradiction's reason that the values alone would not give."""
    finite = [v for v in values if math.isfinite(v)]
    mean, _, lo, hi = interval(finite)
    if forced:
        label, reason = "contradicted", forced
    else:
        label, reason = verdict(values, direction, margin.value, source=margin.source)
    state = _state(label)
    if state != "held":
        reason = f"{why(_span(mean, lo, hi), state)}: {reason}"
    return PremiseVerdict(
        name,
        description,
        tuple(values),
        mean,
        lo,
        hi,
        direction,
        margin.value,
        margin.source,
        "",
        state == "held",
        reason,
        gates,
        state,
    )


def _tuned_arms(measurements: Sequence[Measurement], key: str) -> list[str]:
    """The tuned arms whose record holds ``key`` (with a value) in some seed, in order."""
    arms: list[str] = []
    for m in measurements:
        for arm, record in (m.get("tuning") or {}).items():
            if record.get(key) is not None and arm not in arms:
                arms.append(arm)
    return arms


def _gates(arm: str, effects: Sequence[Effect]) -> tuple[str, ...]:
    """The effects an arm's engine premise gates: those comparing it, and those naming no
    arm."""
    return tuple(e.name for e in effects if arm in _arms_of(e) or not _arms_of(e))


def learned_premises(
    measurements: Sequence[Measurement], effects: Sequence[Effect]
) -> tuple[PremiseVerdict, ...]:
    """The engine's learned premise for every tuned arm that declares a trivial reference:
    per seed, the reference's validation score minus the tuned arm's (both lower is
    better), which must be > 0 by the same interval as any premise.

    A seed whose every trial diverged (no finite validation score) fails it outright. The
    premise gates the effects that compare the arm, and every effect that names no arm.
    """
    out = []
    for arm in _tuned_arms(measurements, "reference"):
        values = []
        for m in measurements:
            record = (m.get("tuning") or {}).get(arm) or {}
            ref, val = record.get("reference"), record.get("val")
            values.append(math.nan if ref is None else (-math.inf if val is None else ref - val))
        diverged = [i for i, v in enumerate(values) if v == -math.inf]
        out.append(
            _engine_premise(
                f"{arm}_learned",
                _engine_description(f"{arm}_learned"),
                values,
                "greater",
                Margin(0.0, LEARNED_SOURCE),
                _gates(arm, effects),
                lambda span, _, arm=arm: f"{arm} did not train ({span} vs its reference)",
                f"every trial diverged in seed(s) {diverged}" if diverged else "",
            )
        )
    return tuple(out)


def converged_premises(
    measurements: Sequence[Measurement],
    effects: Sequence[Effect],
    bound: Margin = CONVERGED,
) -> tuple[PremiseVerdict, ...]:
    """The engine's convergence premise for every tuned arm whose chosen run gave a curve
    (:class:`~normlab.claims.arms.Trained` ``curve``): per seed, the share of the run's
    improvement made in its last quarter (:func:`~normlab.training.fit.late_share`) must
    lie below ``bound``. "failed" reads "under-trained at this scale": the arm was still
    learning when its budget ended, so a comparison says more about the budget than about
    the method. Seeds that diverged or gave no curve are left out; the premise gates as the
    learned premise does."""
    out = []
    for arm in _tuned_arms(measurements, "late_share"):
        values = []
        for m in measurements:
            share = ((m.get("tuning") or {}).get(arm) or {}).get("late_share")
            if share is not None:
                values.append(float(share))
        out.append(
            _engine_premise(
                f"{arm}_converged",
                _engine_description(f"{arm}_converged"),
                values,
                "no_greater",
                bound,
                _gates(arm, effects),
                lambda span, state, arm=arm: (
                    f"{arm} was under-trained at this scale (late share {span})"
                    if state == "failed"
                    else f"{arm}'s convergence is not shown (late share {span})"
                ),
            )
        )
    return tuple(out)


def _span(mean: float, lo: float, hi: float) -> str:
    return f"{mean:.4g} [{lo:.4g}, {hi:.4g}]"


@dataclass(frozen=True)
class CheckVerdict(Record):
    """A check's outcome: "verified" or "failed", with the measured value."""

    name: str
    description: str
    status: str
    value: float
    detail: str


@dataclass(frozen=True)
class ClaimVerdict:
    """Everything the rule decided about one claim at one scale.

    Attributes:
        verdict, reason: the claim's label and its why-line.
        effects: the primary's verdict, then the secondaries'.
        checks: the implementation checks.
        premises: the premises, with intervals.
        divergences: ``{"seed", "arm", "step", "last"}`` for every diverged training run.
        tuning: ``{"seed", "arm", "chosen", "trials", "val", "on_edge", ...}`` per tuned arm.
        null: the primary's null calibration (see :mod:`normlab.claims.calibration`), or
            None when not computed.
        robustness: the primary's verdict at each free setting's neighbours.
        not_measured: names of the effects and premises declared only for other scales.
        placebo: the A/A placebo's verdict (:func:`normlab.claims.placebo.judge_placebo`),
            or None when it was not run.
    """

    verdict: str
    reason: str
    effects: tuple[EffectVerdict, ...]
    checks: tuple[CheckVerdict, ...]
    premises: tuple[PremiseVerdict, ...]
    divergences: tuple[dict[str, Any], ...] = ()
    tuning: tuple[dict[str, Any], ...] = ()
    null: dict[str, Any] | None = None
    robustness: tuple[dict[str, Any], ...] = field(default=())
    not_measured: tuple[str, ...] = ()
    placebo: dict[str, Any] | None = None

    @property
    def primary(self) -> EffectVerdict | None:
        return self.effects[0] if self.effects else None


def _collect(measurements: Sequence[Measurement], seeds: Sequence[int], key: str):
    out = []
    for seed, m in zip(seeds, measurements, strict=False):
        for arm, record in (m.get(key) or {}).items():
            out.append({"seed": seed, "arm": arm, **record})
    return tuple(out)


def _checks(claim: Claim, outcomes: Mapping[str, CheckOutcome]) -> tuple[CheckVerdict, ...]:
    return tuple(
        CheckVerdict(
            c.name,
            c.description,
            "verified" if outcomes[c.name].passed else "failed",
            float(outcomes[c.name].value),
            outcomes[c.name].detail,
        )
        if c.name in outcomes
        else CheckVerdict(c.name, c.description, "failed", math.nan, "the check did not run")
        for c in claim.checks
    )


def _engine_description(name: str) -> str:
    """The description of the engine's premise ``name`` (``<arm>_learned`` or
    ``<arm>_converged``); "" for any other name. A claim's own premise that happens to end
    the same way keeps its own description, so the two are told apart by it."""
    arm, _, kind = name.rpartition("_")
    if kind == "learned":
        return (
            f"{arm} beats its trivial reference on validation (reference minus the tuned "
            "validation score)"
        )
    if kind == "converged":
        return f"share of {arm}'s training improvement made in its last quarter"
    return ""


def _not_shown(p: PremiseVerdict) -> str:
    if p.description == _engine_description(p.name):  # the engine's: the reason says it all
        return p.reason
    state = "failed" if p.state == "failed" else "underpowered"
    return f"premise {p.name} {state} ({p.reason})"


def judge_claim(
    claim: Claim,
    measurements: Sequence[Measurement],
    check_outcomes: Mapping[str, CheckOutcome] | None = None,
    failed_tasks: int = 0,
    seeds: Sequence[int] | None = None,
    scale: str | None = None,
) -> ClaimVerdict:
    """The claim's verdict: its primary effect's, unless a check or a task failed, or the
    rule itself raised ("error"), or a premise gating the primary failed ("untestable").

    With ``scale``, the effects and premises declared for other scales only are left out
    and named in ``not_measured``."""
    checks = _checks(claim, dict(check_outcomes or {}))
    seeds = list(seeds) if seeds is not None else list(range(len(measurements)))
    every = (*claim.effects, *claim.premises, *claim.preconditions)
    skipped = tuple(x.name for x in every if not measured_at(x, scale))
    try:
        names = [e.name for e in claim.effects]
        pres = tuple(
            judge_premise(p, measurements, names)
            for p in (*claim.premises, *claim.preconditions)
            if measured_at(p, scale)
        )
        judged = [e for e in claim.effects if measured_at(e, scale)]
        pres += learned_premises(measurements, judged)
        pres += converged_premises(measurements, judged, claim.convergence or CONVERGED)
        failed_pres = [p for p in pres if not p.held]
        effects = []
        roles = ["primary"] + ["secondary"] * len(claim.secondary)
        for role, effect in zip(roles, claim.effects, strict=True):
            if not measured_at(effect, scale):
                continue
            ev = judge_effect(effect, measurements, role)
            gating = [p for p in failed_pres if effect.name in p.gates]
            if gating:
                why = "; ".join(_not_shown(p) for p in gating)
                ev = replace(
                    ev,
                    verdict="untestable",
                    reason=f"untestable at this scale: {why}; the values would say "
                    f"{ev.would_be} ({ev.reason})",
                )
            effects.append(ev)
    except Exception as err:  # any failure of an effect, premise or check is this claim's
        return ClaimVerdict(
            "error",
            f"the rule could not evaluate the claim: {type(err).__name__}: {err}",
            (),
            checks,
            (),
        )
    failed_checks = [c.name for c in checks if c.status == "failed"]
    primary = effects[0]
    if failed_tasks:
        label, reason = "error", f"{failed_tasks} task(s) failed"
    elif failed_checks:
        label, reason = "error", f"implementation check(s) failed: {', '.join(failed_checks)}"
    elif not measurements:
        label, reason = "error", "no seed produced a measurement"
    else:
        label, reason = primary.verdict, primary.reason
    return ClaimVerdict(
        label,
        reason,
        tuple(effects),
        checks,
        pres,
        _collect(measurements, seeds, "diverged"),
        _collect(measurements, seeds, "tuning"),
        not_measured=skipped,
    )
