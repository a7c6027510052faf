"""Claims, their effects and the verdict rule, as a replication study would judge them.

A :class:`Claim` restates one seed paper's headline claim so it can be measured at small
scale. Its ``run(config, seed)`` trains/evaluates the method and its baselines and returns a
*measurement*: a JSON-serialisable dict whose ``"table"`` maps method -> metric -> number
(other keys hold curves for figures). A claim declares:

- exactly one **primary** :class:`Effect` (the paper's headline, method against a named
  baseline, in the metric's natural units); its verdict is the claim's verdict;
- **secondary** effects, judged the same way and reported beside it, never changing it;
- **checks** (:class:`Check`): deterministic properties of normlab's own code, run once per
  scale and "verified" or "failed"; a failed check makes the claim "error";
- **preconditions** (:class:`Precondition`): measured conditions without which the effects
  say nothing; a failed one makes them "untestable" at this scale.

The rule (:func:`verdict`): a two-sided 95% t-interval of the effect's per-seed values.
"supported" when the interval lies entirely on the claimed side of the margin;
"contradicted" when it lies entirely on the other side of zero (for non-inferiority: beyond
the margin); else "inconclusive". Under a true zero effect each of "supported" and
"contradicted" occurs at most 2.5% of the time (tests/claims/test_core.py simulates it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

__all__ = [
    "DIRECTIONS",
    "SCALES",
    "VERDICTS",
    "Check",
    "CheckOutcome",
    "CheckVerdict",
    "Claim",
    "ClaimVerdict",
    "Effect",
    "EffectVerdict",
    "Margin",
    "Precondition",
    "PreconditionVerdict",
    "all_claims",
    "get_claim",
    "interval",
    "judge_claim",
    "judge_effect",
    "register_claim",
    "verdict",
]

Scale = Literal["smoke", "quick", "full"]
#: smoke: seconds, proves the pipeline (tests); quick: the default report; full: paper-like.
SCALES: tuple[str, ...] = ("smoke", "quick", "full")
Verdict = Literal["supported", "contradicted", "inconclusive", "untestable", "error"]
VERDICTS: tuple[str, ...] = ("supported", "contradicted", "inconclusive", "untestable", "error")
Direction = Literal["greater", "less", "no_greater", "no_less"]
#: What an effect claims of its value v with margin m >= 0:
#: ``greater``: v > m (the method is better by more than m, on a higher-is-better scale);
#: ``less``: v < -m; ``no_greater``: v < m (non-inferiority where lower is better, e.g. a
#: loss gap at most m); ``no_less``: v > -m (non-inferiority where higher is better).
DIRECTIONS: tuple[str, ...] = ("greater", "less", "no_greater", "no_less")
#: Confidence level of the interval.
LEVEL = 0.95

Measurement = dict[str, Any]


@dataclass(frozen=True)
class Margin:
    """The smallest effect that counts (or the largest loss tolerated), with its source.

    Attributes:
        value: the margin, >= 0, in the effect's units.
        source: where it comes from: ``"paper: ..."`` (the paper's own number) or
            ``"normlab's choice: ..."`` with one sentence saying why.
    """

    value: float
    source: str

    def __post_init__(self) -> None:
        if not (self.value >= 0 and math.isfinite(self.value)):
            raise ValueError(f"A margin is a finite number >= 0; got {self.value!r}.")
        if not self.source.strip():
            raise ValueError("A margin needs a source: the paper's number or normlab's choice.")


@dataclass(frozen=True)
class Effect:
    """One effect of a claim: a number per seed, in natural units, and what is claimed of it.

    Attributes:
        name: short identifier, e.g. ``"bpb_gap"``.
        description: what the value is, e.g. "OASIS minus AttnRes+Softmax1 max inf-norm".
        fn: measurement -> value, read from ``measurement["table"]`` only (so tests can
            construct measurements); no threshold or margin inside.
        direction: one of :data:`DIRECTIONS`.
        margin: the :class:`Margin` the direction is judged against.
        baseline: the named baseline the method is compared with ("" for a property of the
            method alone, e.g. a fitted slope).
        unit: the value's unit for display ("bpb", "dB", "" for a ratio or a count).
    """

    name: str
    description: str
    fn: Callable[[Measurement], float]
    direction: Direction
    margin: Margin
    baseline: str = ""
    unit: str = ""

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(
                f"Effect {self.name!r}: direction {self.direction!r} is not one of {DIRECTIONS}."
            )

    @property
    def claimed(self) -> str:
        """The claimed relation in words, e.g. ``"> 0.01"``."""
        m = self.margin.value
        return {
            "greater": f"> {m:g}",
            "less": f"< {-m:g}",
            "no_greater": f"< {m:g} (no worse than)",
            "no_less": f"> {-m:g} (no worse than)",
        }[self.direction]


@dataclass(frozen=True)
class CheckOutcome:
    """What one run of a :class:`Check` found.

    Attributes:
        passed: whether the property holds.
        value: the measured number (an error, a count, a slope).
        detail: the property and its tolerance in words, e.g. "max |p - q| 2e-16 <= 1e-12".
    """

    passed: bool
    value: float
    detail: str = ""


@dataclass(frozen=True)
class Check:
    """A deterministic property of normlab's own code, verified once per scale.

    Attributes:
        name: short identifier.
        description: the property and its tolerance.
        fn: ``fn(config) -> CheckOutcome``; deterministic, run once (never per seed).
    """

    name: str
    description: str
    fn: Callable[[Mapping[str, Any]], CheckOutcome]


@dataclass(frozen=True)
class Precondition:
    """A measured condition without which the claim's effects say nothing.

    Judged on the mean over seeds of ``fn``: it holds when ``mean >= threshold`` (``op=">="``)
    or ``mean <= threshold`` (``op="<="``). When it fails, the effects it gates are
    "untestable at this scale".

    Attributes:
        name: short identifier.
        description: the condition in words, e.g. "the baseline's average kurtosis".
        fn: measurement -> value, read from ``measurement["table"]``.
        op: ``">="`` or ``"<="``.
        threshold: the bound.
        source: why this bound (the paper's number or normlab's choice).
        gates: names of the effects it gates; empty means every effect.
    """

    name: str
    description: str
    fn: Callable[[Measurement], float]
    op: Literal[">=", "<="]
    threshold: float
    source: str
    gates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.op not in (">=", "<="):
            raise ValueError(f"Precondition {self.name!r}: op must be '>=' or '<='.")

    def holds(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        return value >= self.threshold if self.op == ">=" else value <= self.threshold


@dataclass(frozen=True)
class Claim:
    """A seed paper's headline claim, restated so that it can be measured on a CPU.

    Attributes:
        id: identifier used on the command line, e.g. ``"dyt-regime"``.
        paper: the seed paper's title (see :mod:`normlab.papers`).
        hypothesis: the claim in one sentence.
        primary: the headline effect; its verdict is the claim's.
        headline: the paper's own headline number, shown beside the primary effect.
        configs: per-scale settings; each must hold ``"seeds"`` (how many).
        run: ``run(config, seed) -> measurement``.
        secondary: further effects, reported with their own verdicts.
        checks: implementation checks, run once per scale.
        preconditions: measured conditions the effects need.
        setup: the experiment in a sentence or two.
        scale_note: what quick scale leaves out (variants run only at full scale), or "".
        figure: ``figure(measurements) -> matplotlib Figure`` over all seeds, or None.
        caption: what to look at in the figure.
        exclusive: the measurement is a timing: the runner runs this claim's tasks alone,
            one at a time in its own process, after every other task has finished.
        version: bump to invalidate cached results when the claim's meaning changes.
    """

    id: str
    paper: str
    hypothesis: str
    primary: Effect
    headline: str
    configs: Mapping[str, Mapping[str, Any]]
    run: Callable[[Mapping[str, Any], int], Measurement]
    secondary: tuple[Effect, ...] = ()
    checks: tuple[Check, ...] = ()
    preconditions: tuple[Precondition, ...] = ()
    setup: str = ""
    scale_note: str = ""
    figure: Callable[[Sequence[Measurement]], Any] | None = None
    caption: str = ""
    exclusive: bool = False
    version: int = 1

    def __post_init__(self) -> None:
        missing = [s for s in SCALES if s not in self.configs]
        if missing:
            raise ValueError(f"Claim {self.id!r} has no config for scale(s) {missing}.")
        for scale, config in self.configs.items():
            if int(config.get("seeds", 0)) < 1:
                raise ValueError(f"Claim {self.id!r}: config {scale!r} needs seeds >= 1.")
        names = [e.name for e in self.effects]
        if len(set(names)) != len(names):
            raise ValueError(f"Claim {self.id!r}: effect names repeat: {names}.")
        for pre in self.preconditions:
            unknown = set(pre.gates) - set(names)
            if unknown:
                raise ValueError(
                    f"Claim {self.id!r}: precondition {pre.name!r} gates unknown effects "
                    f"{sorted(unknown)}; effects are {names}."
                )
        if self.figure is not None and not self.caption:
            raise ValueError(f"Claim {self.id!r}: a figure needs a caption.")

    @property
    def effects(self) -> tuple[Effect, ...]:
        """The primary effect followed by the secondary ones."""
        return (self.primary, *self.secondary)

    def config(self, scale: str) -> dict[str, Any]:
        """The settings at ``scale``."""
        if scale not in self.configs:
            raise ValueError(f"Unknown scale {scale!r}; expected one of {SCALES}.")
        return dict(self.configs[scale])

    def seeds(self, scale: str) -> list[int]:
        """The seeds run at ``scale``: 0, 1, ..., n - 1."""
        return list(range(int(self.config(scale)["seeds"])))


@cache
def _t_quantile(df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + LEVEL / 2, df))


def interval(values: Sequence[float]) -> tuple[float, float, float, float]:
    """``(mean, se, low, high)``: the mean and its two-sided 95% t-interval.

    One value gives an infinite interval (nothing can be concluded from one seed).
    """
    vals = [float(v) for v in values]
    n = len(vals)
    if n == 0:
        return math.nan, math.nan, -math.inf, math.inf
    mean = statistics.fmean(vals)
    if n == 1:
        return mean, math.inf, -math.inf, math.inf
    se = statistics.stdev(vals) / math.sqrt(n)
    half = _t_quantile(n - 1) * se
    return mean, se, mean - half, mean + half


def verdict(values: Sequence[float], direction: str, margin: float) -> tuple[str, str]:
    """The verdict on one effect from its per-seed values, by the t-interval rule.

    Returns:
        ``(label, reason)``; the label is "supported", "contradicted" or "inconclusive".
    """
    vals = [float(v) for v in values]
    if any(not math.isfinite(v) for v in vals):
        return "inconclusive", "a seed gave a non-finite value"
    if len(vals) < 2:
        return "inconclusive", f"{len(vals)} seed(s): a t-interval needs at least 2"
    _, _, lo, hi = interval(vals)
    span = f"95% interval [{lo:.3g}, {hi:.3g}]"
    m = float(margin)
    if direction == "greater":
        supported, contradicted = lo > m, hi < 0
        sides = (f"above {m:g}", "below 0")
    elif direction == "less":
        supported, contradicted = hi < -m, lo > 0
        sides = (f"below {-m:g}", "above 0")
    elif direction == "no_greater":
        supported, contradicted = hi < m, lo > m
        sides = (f"below the margin {m:g}", f"above the margin {m:g}")
    elif direction == "no_less":
        supported, contradicted = lo > -m, hi < -m
        sides = (f"above the margin {-m:g}", f"below the margin {-m:g}")
    else:
        raise ValueError(f"Unknown direction {direction!r}; expected one of {DIRECTIONS}.")
    if supported:
        return "supported", f"{span} lies {sides[0]}"
    if contradicted:
        return "contradicted", f"{span} lies {sides[1]}"
    return "inconclusive", f"{span} crosses the decision bounds"


@dataclass(frozen=True)
class EffectVerdict:
    """The verdict on one effect over seeds, with the rule's inputs.

    Attributes:
        name: the effect's name.
        description: what the value is.
        role: "primary" or "secondary".
        values: the per-seed values.
        mean: their mean.
        se: standard error of the mean.
        low: lower end of the 95% t-interval.
        high: upper end.
        direction: the claimed direction.
        margin: the margin's value.
        margin_source: where the margin comes from.
        baseline: the named baseline.
        unit: the value's unit.
        verdict: the computed label.
        reason: which test decided it.
        degenerate: every seed gave the same value (the interval is a point).
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
    baseline: str
    unit: str
    verdict: str
    reason: str
    degenerate: bool

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["values"] = list(self.values)
        return out


@dataclass(frozen=True)
class CheckVerdict:
    """A check's outcome: "verified" or "failed", with the measured value."""

    name: str
    description: str
    status: str
    value: float
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PreconditionVerdict:
    """A precondition's outcome over seeds: the mean value and whether it held."""

    name: str
    description: str
    op: str
    threshold: float
    source: str
    value: float
    held: bool
    gates: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["gates"] = list(self.gates)
        return out


@dataclass(frozen=True)
class ClaimVerdict:
    """Everything the rule decided about one claim at one scale."""

    verdict: str
    reason: str
    effects: tuple[EffectVerdict, ...]
    checks: tuple[CheckVerdict, ...]
    preconditions: tuple[PreconditionVerdict, ...]

    @property
    def primary(self) -> EffectVerdict | None:
        return self.effects[0] if self.effects else None


def _values(fn: Callable[[Measurement], float], measurements: Sequence[Measurement]):
    out = []
    for m in measurements:
        try:
            out.append(float(fn(m)))
        except (ArithmeticError, ValueError):
            out.append(math.nan)
    return tuple(out)


def judge_effect(
    effect: Effect, measurements: Sequence[Measurement], role: str = "primary"
) -> EffectVerdict:
    """Evaluate ``effect`` on each seed's measurement and apply :func:`verdict`."""
    values = _values(effect.fn, measurements)
    finite = [v for v in values if math.isfinite(v)]
    mean, se, lo, hi = interval(finite)
    label, reason = verdict(values, effect.direction, effect.margin.value)
    degenerate = len(finite) > 1 and len(set(finite)) == 1
    if degenerate:
        reason += "; degenerate: every seed gave the same value"
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
        baseline=effect.baseline,
        unit=effect.unit,
        verdict=label,
        reason=reason,
        degenerate=degenerate,
    )


def judge_claim(
    claim: Claim,
    measurements: Sequence[Measurement],
    check_outcomes: Mapping[str, CheckOutcome] | None = None,
    failed_tasks: int = 0,
) -> ClaimVerdict:
    """The claim's verdict: its primary effect's, unless a check failed or a task failed
    ("error") or a precondition gating the primary failed ("untestable")."""
    outcomes = dict(check_outcomes or {})
    checks = tuple(
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
    pres = []
    for p in claim.preconditions:
        vals = [v for v in _values(p.fn, measurements) if math.isfinite(v)]
        value = statistics.fmean(vals) if vals else math.nan
        pres.append(
            PreconditionVerdict(
                p.name,
                p.description,
                p.op,
                p.threshold,
                p.source,
                value,
                p.holds(value),
                p.gates or tuple(e.name for e in claim.effects),
            )
        )
    untestable = {g for p in pres if not p.held for g in p.gates}
    effects = []
    for role, effect in [("primary", claim.primary)] + [("secondary", e) for e in claim.secondary]:
        ev = judge_effect(effect, measurements, role)
        if effect.name in untestable:
            failed = [p for p in pres if not p.held and effect.name in p.gates]
            why = "; ".join(
                f"{p.description} {p.value:.3g}, needs {p.op} {p.threshold:g}" for p in failed
            )
            ev = EffectVerdict(
                **{
                    **ev.__dict__,
                    "verdict": "untestable",
                    "reason": f"untestable at this scale: {why}",
                }
            )
        effects.append(ev)
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
    return ClaimVerdict(label, reason, tuple(effects), checks, tuple(pres))


@dataclass
class _Catalogue:
    claims: dict[str, Claim] = field(default_factory=dict)
    loaded: bool = False


_CATALOGUE = _Catalogue()


def register_claim(claim: Claim) -> Claim:
    """Add ``claim`` to the catalogue; a second claim with the same id raises."""
    if claim.id in _CATALOGUE.claims:
        raise ValueError(f"A claim with id {claim.id!r} is already registered.")
    _CATALOGUE.claims[claim.id] = claim
    return claim


def _load() -> None:
    """Import every module of ``normlab.claims.catalogue`` once, so each registers itself."""
    if _CATALOGUE.loaded:
        return
    import importlib
    import pkgutil

    import normlab.claims.catalogue as package

    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    _CATALOGUE.loaded = True


def all_claims() -> list[Claim]:
    """Every registered claim, sorted by id."""
    _load()
    return sorted(_CATALOGUE.claims.values(), key=lambda c: c.id)


def get_claim(claim_id: str) -> Claim:
    """The claim with ``claim_id``; an unknown id raises with the list of valid ones."""
    _load()
    try:
        return _CATALOGUE.claims[claim_id]
    except KeyError:
        valid = ", ".join(sorted(_CATALOGUE.claims))
        raise KeyError(f"Unknown claim {claim_id!r}. Valid ids: {valid}.") from None
