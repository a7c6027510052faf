"""Claims and what they declare, as a replication study would state them (protocol v3).

A :class:`Claim` restates one seed paper's headline claim so it can be measured at small
scale. Its ``run(config, seed)`` trains/evaluates the method and its baselines and returns a
*measurement*: a JSON-serialisable dict whose ``"table"`` maps arm -> metric -> number. Other
keys the harness reads: ``"tuning"`` (arm -> :class:`~normlab.claims.protocol.Tuned` record,
written by :func:`~normlab.claims.protocol.tune`) and ``"diverged"`` (arm -> ``{"step",
"last"}``, a training run that diverged; see :func:`~normlab.claims.protocol.diverged`). Any
other key holds curves for figures. A claim declares:

- exactly one **primary** :class:`Effect` (the paper's headline, method against a named
  baseline, in natural units); its verdict is the claim's; **secondary** effects are judged
  the same way and never change it. "Beats every baseline" is one effect whose ``parts``
  are the pairwise comparisons (an intersection-union test, :mod:`normlab.claims.rule`);
- at least one **premise** (:class:`Premise`): the phenomenon that must exist in the
  baseline for the test to mean anything, judged by the same interval as an effect; a failed
  one makes the effects it gates "untestable at this scale", and the report still shows
  their values and what their verdicts would be;
- **checks** (:class:`Check`): deterministic properties of normlab's own code, run once per
  scale; a failed check makes the claim "error";
- how each arm is **tuned**: a ``"search"`` in every scale's config (see
  :func:`~normlab.claims.protocol.searches`), or ``untuned``, one line saying why nothing is
  tuned;
- its **free settings** (:class:`FreeSetting`): what normlab chose rather than the paper, with
  a neighbour on each side, rerun by ``normlab report --robustness``.

The verdict rule lives in :mod:`normlab.claims.rule`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DIRECTIONS",
    "PROTOCOL_KEYS",
    "SCALES",
    "VERDICTS",
    "Check",
    "CheckOutcome",
    "Claim",
    "Effect",
    "FreeSetting",
    "Margin",
    "Precondition",
    "Premise",
    "all_claims",
    "beats_every",
    "cell",
    "claimed_bound",
    "claimed_relation",
    "difference",
    "get_claim",
    "is_setting",
    "measured_at",
    "register_claim",
]

Scale = Literal["smoke", "quick", "full"]
#: smoke: seconds, proves the pipeline (tests); quick: the default report; full: paper-like.
SCALES: tuple[str, ...] = ("smoke", "quick", "full")
VERDICTS: tuple[str, ...] = ("supported", "contradicted", "inconclusive", "untestable", "error")
Direction = Literal["greater", "less", "no_greater", "no_less"]
#: What an effect claims of its value v with margin m >= 0:
#: ``greater``: v > m (the method is better by more than m, on a higher-is-better scale);
#: ``less``: v < -m; ``no_greater``: v < m (non-inferiority where lower is better, e.g. a
#: loss gap at most m); ``no_less``: v > -m (non-inferiority where higher is better).
DIRECTIONS: tuple[str, ...] = ("greater", "less", "no_greater", "no_less")
#: Units that mark an effect as a timing: its claim must be exclusive (runs alone).
TIMING_UNITS: frozenset[str] = frozenset({"s", "ms", "us", "x", "% speed-up", "speed-up"})

Measurement = dict[str, Any]


def claimed_bound(direction: str, margin: float) -> float:
    """The bound the value must clear: ``+margin`` for "greater" and "no_greater",
    ``-margin`` for "less" and "no_less"."""
    if direction not in DIRECTIONS:
        raise ValueError(f"Unknown direction {direction!r}; expected one of {DIRECTIONS}.")
    return margin if direction in ("greater", "no_greater") else -margin


def claimed_relation(direction: str, margin: float) -> str:
    """A direction and margin in words, e.g. ``"> 0.01"`` or ``"< 0.03 (no worse than)"``."""
    bound = claimed_bound(direction, margin)
    op = ">" if direction in ("greater", "no_less") else "<"
    return f"{op} {bound:g}" + (" (no worse than)" if direction.startswith("no_") else "")


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
            construct measurements); no threshold or margin inside. Unused when ``parts``
            is given.
        direction: one of :data:`DIRECTIONS`.
        margin: the :class:`Margin` the direction is judged against.
        baseline: the named baseline arm ("" for a property of the method alone).
        method: the arm the claim is about ("" for a property of no arm).
        unit: the value's unit for display ("bpb", "dB", "" for a ratio or a count).
        parts: for "beats every baseline": one effect per baseline, judged as an
            intersection-union test (supported iff supported against each; contradicted iff
            contradicted against at least one at level alpha / k).
        if_diverged: metric -> the value a diverged arm counts as (e.g. ``{"bpb": 8.0}``,
            the uniform byte predictor); applied to every arm listed in the measurement's
            ``"diverged"`` before ``fn`` reads the table.
        exchangeable: groups of arms whose rows are exchangeable when the method does
            nothing (the null calibration permutes rows within each group and seed);
            default: ``((method, baseline),)`` when both are named, the union of the parts'
            groups for an intersection-union effect.
        scales: the scales at which the effect is measured; empty means every scale. A
            secondary too costly for the quick budget names ``("full",)``; the report lists
            it as measured at full scale only. The primary is measured at every scale.
    """

    name: str
    description: str
    fn: Callable[[Measurement], float] | None
    direction: Direction
    margin: Margin
    baseline: str = ""
    method: str = ""
    unit: str = ""
    parts: tuple[Effect, ...] = ()
    if_diverged: Mapping[str, float] = field(default_factory=dict)
    exchangeable: tuple[tuple[str, ...], ...] = ()
    scales: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_scales(f"Effect {self.name!r}", self.scales)
        if self.direction not in DIRECTIONS:
            raise ValueError(
                f"Effect {self.name!r}: direction {self.direction!r} is not one of {DIRECTIONS}."
            )
        if self.fn is None and not self.parts:
            raise ValueError(f"Effect {self.name!r} needs fn or parts.")
        for part in self.parts:
            if part.direction != self.direction:
                raise ValueError(
                    f"Effect {self.name!r}: part {part.name!r} has direction "
                    f"{part.direction!r}; every part must share {self.direction!r}."
                )

    @property
    def claimed(self) -> str:
        """The claimed relation in words, e.g. ``"> 0.01"``."""
        return claimed_relation(self.direction, self.margin.value)

    @property
    def groups(self) -> tuple[tuple[str, ...], ...]:
        """The exchangeable arm groups (see ``exchangeable``); empty when none is known."""
        if self.exchangeable:
            return self.exchangeable
        if self.parts:
            seen: list[tuple[str, ...]] = []
            for part in self.parts:
                seen += [g for g in part.groups if g not in seen]
            return tuple(seen)
        if self.method and self.baseline:
            return ((self.method, self.baseline),)
        return ()

    @property
    def is_timing(self) -> bool:
        """Whether the value is a timing (its claim must be exclusive)."""
        return self.unit in TIMING_UNITS or any(p.is_timing for p in self.parts)


def _check_scales(what: str, scales: tuple[str, ...]) -> None:
    unknown = [s for s in scales if s not in SCALES]
    if unknown:
        raise ValueError(f"{what}: unknown scales {unknown}; expected a subset of {SCALES}.")


def measured_at(item: Effect | Premise | Precondition, scale: str | None) -> bool:
    """Whether ``item`` (an effect, premise or precondition) is measured at ``scale``
    (None: at every scale)."""
    return scale is None or not item.scales or scale in item.scales


def cell(measurement: Measurement, arm: str, metric: str) -> float:
    """``measurement["table"][arm][metric]`` as a float: the one reader of a table cell.

    A cell holding None (a value the claim could not compute, e.g. a diverged run's
    validation loss; ``results.json`` writes non-finite numbers as null too) reads as NaN.

    Raises:
        KeyError: naming the table's arms when ``arm`` or its ``metric`` is absent.
    """
    try:
        value = measurement["table"][arm][metric]
    except KeyError:
        arms = sorted(measurement.get("table", {}))
        raise KeyError(f"No {metric!r} for {arm!r} in the table (arms: {arms}).") from None
    return math.nan if value is None else float(value)


def difference(
    name: str,
    description: str,
    method: str,
    baseline: str,
    metric: str,
    *,
    direction: Direction,
    margin: Margin,
    unit: str = "",
    log10: bool = False,
    baseline_metric: str | None = None,
    if_diverged: Mapping[str, float] | None = None,
    scales: tuple[str, ...] = (),
) -> Effect:
    """The commonest effect: ``table[method][metric] - table[baseline][metric]``.

    Args:
        log10: compare ``log10`` of the two cells instead (a ratio on a log scale).
        baseline_metric: read this metric of the baseline instead of ``metric``.
        scales: as for :class:`Effect` (empty: every scale).
    """
    other = baseline_metric or metric

    def fn(m: Measurement) -> float:
        a, b = cell(m, method, metric), cell(m, baseline, other)
        return math.log10(a) - math.log10(b) if log10 else a - b

    return Effect(
        name,
        description,
        fn,
        direction=direction,
        margin=margin,
        baseline=baseline,
        method=method,
        unit=unit,
        if_diverged=dict(if_diverged or {}),
        scales=tuple(scales),
    )


def beats_every(
    name: str,
    description: str,
    method: str,
    baselines: Sequence[str],
    metric: str,
    *,
    direction: Direction,
    margin: Margin,
    unit: str = "",
    log10: bool = False,
    if_diverged: Mapping[str, float] | None = None,
    scales: tuple[str, ...] = (),
) -> Effect:
    """The effect "``method`` beats every one of ``baselines``": one intersection-union
    effect whose parts are the pairwise :func:`difference` effects ``<name>_vs_<baseline>``
    (supported iff supported against each; contradicted iff contradicted against one at
    level 0.05 / k; see :mod:`normlab.claims.rule`), never a min() or max() picked on test.

    Args:
        name: the effect's name; each part is ``<name>_vs_<baseline>``.
        description: what the value is, e.g. "test accuracy".
        method: the arm the claim is about.
        baselines: the arms it must beat, each one part.
        metric: the table metric every part compares.
        direction: as for :class:`Effect`, shared by every part.
        margin: as for :class:`Effect`, shared by every part.
        unit: the value's unit.
        log10: compare ``log10`` of the cells (as for :func:`difference`).
        if_diverged: as for :class:`Effect`.
        scales: as for :class:`Effect`.
    """
    if not baselines:
        raise ValueError(f"beats_every {name!r} needs at least one baseline.")
    parts = tuple(
        difference(
            f"{name}_vs_{baseline}",
            f"{description}: {method} minus {baseline}",
            method,
            baseline,
            metric,
            direction=direction,
            margin=margin,
            unit=unit,
            log10=log10,
            if_diverged=if_diverged,
            scales=scales,
        )
        for baseline in baselines
    )
    return Effect(
        name,
        f"{description}: {method} against each of {', '.join(baselines)} (intersection-union)",
        None,
        direction=direction,
        margin=margin,
        baseline=", ".join(baselines),
        method=method,
        unit=unit,
        parts=parts,
        if_diverged=dict(if_diverged or {}),
        scales=tuple(scales),
    )


@dataclass(frozen=True)
class Premise:
    """The phenomenon that must exist in the baseline for the claim's test to mean anything.

    Judged like an effect (:func:`normlab.claims.rule.verdict` on its per-seed values): it
    holds when its interval lies on the holding side of its margin ("supported"). When it
    does not hold, the effects it gates are "untestable at this scale" (their values and
    would-be verdicts are still reported).

    Attributes:
        name: short identifier.
        description: the phenomenon in words, e.g. "the baseline's max |x| grows past 20".
        fn: measurement -> value, read from ``measurement["table"]``.
        direction: one of :data:`DIRECTIONS`, as for an effect.
        margin: the bound and its source.
        unit: the value's unit.
        gates: names of the effects it gates; empty means every effect.
        if_diverged: as for :class:`Effect`.
        scales: as for :class:`Effect` (a premise of full-only effects is full-only too).
    """

    name: str
    description: str
    fn: Callable[[Measurement], float]
    direction: Direction
    margin: Margin
    unit: str = ""
    gates: tuple[str, ...] = ()
    if_diverged: Mapping[str, float] = field(default_factory=dict)
    scales: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_scales(f"Premise {self.name!r}", self.scales)
        if self.direction not in DIRECTIONS:
            raise ValueError(
                f"Premise {self.name!r}: direction {self.direction!r} is not one of {DIRECTIONS}."
            )

    @property
    def claimed(self) -> str:
        """The relation that must hold, e.g. ``"> 10"``."""
        return claimed_relation(self.direction, self.margin.value)


@dataclass(frozen=True)
class Precondition:
    """A measured condition the effects need (not the phenomenon itself: that is a
    :class:`Premise`), stated as a bound: ``value >= threshold`` or ``value <= threshold``.

    Judged by the same interval as a premise: it holds when the 95% interval of its
    per-seed values lies entirely on the holding side of ``threshold`` (so 1, 1, 1, 1, 50
    does not pass ">= 10"). A failed one makes the effects it gates "untestable".

    Attributes:
        name: short identifier.
        description: the condition in words.
        fn: measurement -> value, read from ``measurement["table"]``.
        op: ``">="`` or ``"<="``.
        threshold: the bound.
        source: why this bound (the paper's number or normlab's choice).
        gates: names of the effects it gates; empty means every effect.
        scales: as for :class:`Effect`.
    """

    name: str
    description: str
    fn: Callable[[Measurement], float]
    op: Literal[">=", "<="]
    threshold: float
    source: str
    gates: tuple[str, ...] = ()
    scales: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_scales(f"Precondition {self.name!r}", self.scales)
        if self.op not in (">=", "<="):
            raise ValueError(f"Precondition {self.name!r}: op must be '>=' or '<='.")

    @property
    def claimed(self) -> str:
        return f"{self.op} {self.threshold:g}"


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

    A check that would find the paper wrong is a contradicted effect, never a check.

    Attributes:
        name: short identifier.
        description: the property and its tolerance.
        fn: ``fn(config) -> CheckOutcome``; deterministic, run once (never per seed).
    """

    name: str
    description: str
    fn: Callable[[Mapping[str, Any]], CheckOutcome]


@dataclass(frozen=True)
class FreeSetting:
    """A setting normlab chose (not the paper), with one neighbour on each side.

    ``normlab report --robustness`` reruns the primary effect with ``config[key]`` set to
    each neighbour (same seeds) and marks the verdict robust or fragile. A discrete design
    choice (a filter form, a start point) is a free setting too, its neighbours the
    alternatives.

    Attributes:
        key: the config key.
        low: the neighbour below the chosen value (a factor on it when ``relative``).
        high: the neighbour above it (a factor on it when ``relative``).
        reason: why normlab chose the value it did.
        relative: ``low`` and ``high`` are factors on the value at each scale (so one
            declaration serves smoke, quick and full); integers round to the nearest
            integer other than the value itself.
        testable_from: scale -> the least value at which the claim was measured testable
            (its premises hold), where a smaller one was measured untestable: a neighbour
            below it is not rerun (it could reach no verdict) and is reported as untestable
            with ``below_why``, the measurement that set it.
        below_why: what was measured below ``testable_from`` (required with it).
    """

    key: str
    low: Any
    high: Any
    reason: str
    relative: bool = False
    testable_from: Mapping[str, float] = field(default_factory=dict)
    below_why: str = ""

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise ValueError(f"Free setting {self.key!r} needs a reason.")
        if self.testable_from and not self.below_why.strip():
            raise ValueError(
                f"Free setting {self.key!r}: testable_from needs below_why, the measurement "
                "below it (e.g. 'at 150 steps the premises fail: ...')."
            )
        if self.relative and not (0 < float(self.low) < 1 < float(self.high)):
            raise ValueError(
                f"Free setting {self.key!r}: relative neighbours are factors with "
                f"0 < low < 1 < high; got {self.low!r} and {self.high!r}."
            )

    @classmethod
    def scaled(
        cls,
        key: str,
        reason: str,
        low: float = 0.5,
        high: float = 2.0,
        *,
        testable_from: Mapping[str, float] | None = None,
        below_why: str = "",
    ) -> FreeSetting:
        """A numeric free setting whose neighbours are its value times ``low`` and ``high``
        at every scale (halved and doubled by default)."""
        floor = dict(testable_from or {})
        return cls(key, low, high, reason, relative=True, testable_from=floor, below_why=below_why)

    def below_floor(self, value: Any, scale: str) -> bool:
        """Whether ``value`` lies below the least value measured testable at ``scale``."""
        floor = self.testable_from.get(scale)
        return floor is not None and value < floor

    def neighbours(self, config: Mapping[str, Any]) -> tuple[Any, Any]:
        """The two neighbour values at the scale whose ``config`` is given."""
        if not self.relative:
            return self.low, self.high
        value = config[self.key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(
                f"Free setting {self.key!r} is relative but its value {value!r} is not a "
                "number; give absolute neighbours."
            )
        if isinstance(value, float):
            return value * self.low, value * self.high
        return min(round(value * self.low), value - 1), max(round(value * self.high), value + 1)


#: Config keys that belong to the protocol, not to the experiment: never declared.
PROTOCOL_KEYS: frozenset[str] = frozenset({"seeds", "search"})


def is_setting(value: Any) -> bool:
    """Whether a config value is a setting that must be declared: a number, a flag, a
    string choice, or a list of them (a grid of test noise levels, sizes, budgets)."""
    if isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        return all(isinstance(v, bool | int | float | str) for v in value)
    return False


@dataclass(frozen=True)
class Claim:
    """A seed paper's headline claim, restated so that it can be measured on a CPU.

    Attributes:
        id: identifier used on the command line, e.g. ``"dyt-regime"``.
        paper: the seed paper's title (see :mod:`normlab.papers`).
        hypothesis: the claim in one sentence.
        primary: the headline effect; its verdict is the claim's.
        headline: the paper's own headline number, shown beside the primary effect.
        quote: the abstract's words that the primary tests, verbatim (a sentence or the
            clause that makes the claim), shown beside the hypothesis that restates them.
        configs: per-scale settings; each must hold ``"seeds"`` (how many) and, unless
            ``untuned`` says why not, a ``"search"`` (each arm's search space; the
            catalogue's tests require one or the other).
        run: ``run(config, seed) -> measurement``.
        premises: at least one :class:`Premise` (the catalogue's tests require it).
        preconditions: measured conditions the effects need.
        secondary: further effects, reported with their own verdicts.
        checks: implementation checks, run once per scale.
        free_settings: the settings normlab chose, for the robustness rerun.
        sourced: config key -> where the paper gives that value (``"paper: Table 3"``);
            every setting of a config is either sourced or a free setting
            (:meth:`undeclared` lists the others; a test requires none at quick).
        decisive: the free setting whose neighbours the default report reruns (the one
            most likely to change the verdict); "" when the claim has no free setting.
        untuned: one line saying why nothing is tuned ("" when the configs hold a search).
        setup: the experiment in a sentence or two.
        scale_note: what quick scale leaves out (variants run only at full scale), or "".
        figure: ``figure(measurements) -> matplotlib Figure`` over all seeds, or None.
        caption: what to look at in the figure; a mapping from scale to text when the
            figure draws different panels at different scales.
        figure_only: config values a robustness rerun runs at instead of the scale's, for
            settings that feed only the figure (drawn from the main seeds, never from a
            rerun) and no effect: the rerun skips that work (fold-ln's width sweep).
        exclusive: the measurement is a timing: the runner runs this claim's seed tasks
            alone, one at a time in its own process, after every other task has finished
            (its checks, which time nothing, share the machine).
        convergence: the convergence premise's bound on the late share of a tuned arm's
            training curve, when not the engine's default
            (:data:`normlab.claims.rule.CONVERGED`).
    """

    id: str
    paper: str
    hypothesis: str
    primary: Effect
    headline: str
    configs: Mapping[str, Mapping[str, Any]]
    run: Callable[[Mapping[str, Any], int], Measurement]
    premises: tuple[Premise, ...] = ()
    preconditions: tuple[Precondition, ...] = ()
    secondary: tuple[Effect, ...] = ()
    checks: tuple[Check, ...] = ()
    free_settings: tuple[FreeSetting, ...] = ()
    sourced: Mapping[str, str] = field(default_factory=dict)
    decisive: str = ""
    untuned: str = ""
    setup: str = ""
    scale_note: str = ""
    figure: Callable[[Sequence[Measurement]], Any] | None = None
    caption: str | Mapping[str, str] = ""
    figure_only: Mapping[str, Any] = field(default_factory=dict)
    exclusive: bool = False
    convergence: Margin | None = None
    quote: str = ""

    def __post_init__(self) -> None:
        if not _ID.fullmatch(self.id):
            raise ValueError(
                f"Claim id {self.id!r}: use lowercase letters, digits and '-' (e.g. 'dyt-regime')."
            )
        missing = [s for s in SCALES if s not in self.configs]
        if missing:
            raise ValueError(f"Claim {self.id!r} has no config for scale(s) {missing}.")
        for scale, config in self.configs.items():
            if int(config.get("seeds", 0)) < 1:
                raise ValueError(f"Claim {self.id!r}: config {scale!r} needs seeds >= 1.")
        names = [e.name for e in self.effects]
        if len(set(names)) != len(names):
            raise ValueError(f"Claim {self.id!r}: effect names repeat: {names}.")
        for pre in (*self.premises, *self.preconditions):
            unknown = set(pre.gates) - set(names)
            if unknown:
                raise ValueError(
                    f"Claim {self.id!r}: premise {pre.name!r} gates unknown effects "
                    f"{sorted(unknown)}; effects are {names}."
                )
        if self.primary.scales:
            raise ValueError(
                f"Claim {self.id!r}: the primary {self.primary.name!r} is measured at every "
                f"scale; drop its scales={self.primary.scales}."
            )
        timing = [e.name for e in self.effects if e.is_timing]
        if timing and not self.exclusive:
            raise ValueError(
                f"Claim {self.id!r}: effects {timing} are timings; set exclusive=True so its "
                "tasks run alone."
            )
        keys = [s.key for s in self.free_settings]
        absent = [k for k in keys if any(k not in c for c in self.configs.values())]
        if absent:
            raise ValueError(f"Claim {self.id!r}: free settings {absent} are not config keys.")
        unknown = sorted(set(self.figure_only) - set(keys))
        if unknown:
            raise ValueError(
                f"Claim {self.id!r}: figure_only {unknown} are not free settings; only a "
                "setting normlab chose for the figure may change in a rerun."
            )
        if self.decisive and self.decisive not in keys:
            raise ValueError(
                f"Claim {self.id!r}: decisive {self.decisive!r} is not a free setting; "
                f"free settings are {keys}."
            )
        both = sorted(set(keys) & set(self.sourced))
        if both:
            raise ValueError(f"Claim {self.id!r}: {both} are both sourced and free.")
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

    def undeclared(self, scale: str) -> list[str]:
        """The settings of the ``scale`` config that are neither sourced to the paper nor
        declared free (see :func:`is_setting`)."""
        declared = set(self.sourced) | {f.key for f in self.free_settings} | PROTOCOL_KEYS
        config = self.config(scale)
        return sorted(k for k, v in config.items() if k not in declared and is_setting(v))

    def seeds(self, scale: str) -> list[int]:
        """The seeds run at ``scale``: 0, 1, ..., n - 1."""
        return list(range(int(self.config(scale)["seeds"])))


_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")


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
    """The claim with ``claim_id`` ("_" and case are accepted for "-" and lowercase, as for
    method names); an unknown id raises with the list of valid ones."""
    _load()
    key = claim_id.strip().lower().replace("_", "-")
    try:
        return _CATALOGUE.claims[key]
    except KeyError:
        valid = ", ".join(sorted(_CATALOGUE.claims))
        raise KeyError(f"Unknown claim {claim_id!r}. Valid ids: {valid}.") from None
