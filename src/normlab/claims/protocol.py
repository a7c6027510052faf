"""The fair-experiment protocol a claim's ``run`` uses: tuning every arm the same way, and
recording divergence as an outcome.

**Tuning.** Each scale's config holds a ``"search"``: either one space shared by arms whose
scales agree, ``{"arms": ["bn", "no-bn"], "space": {"lr": [3e-3, 1e-2, 3e-2]}}``, or one
space per arm, ``{"per_arm": {"grpo": {"lr": [...]}, "dr-grpo": {"lr": [...]}}}``, plus
optional ``"extend"`` (how many steps a choice on the edge of an ordered numeric axis may
extend the space; default 1). Every arm gets the same number of grid trials
(:func:`searches` refuses otherwise). :func:`tune` evaluates the grid, selects on the
*validation* score (never test), breaks ties on validation without a direction bias
(nearest the centre of the space, then a hash), extends an edge choice along every
ordered axis on whose edge it sits, one step per axis per round up to ``extend`` rounds
(geometric axes continue geometrically, others arithmetically), and flags a choice still
on the edge. The record goes into the measurement under ``"tuning"`` so the report shows
it, with the arm's trivial reference on validation (the learned premise: every tuned arm
must beat it; :mod:`normlab.claims.rule` judges it). Under the runner a claim tunes once,
on its first seed, and its other seeds train at that seed's choices
(:mod:`normlab.claims.tune_once`; their records say ``"fixed"``).

**Divergence.** A training run that diverges is an outcome, not an error:
:func:`diverged` records it (step, last finite metric) under the measurement's
``"diverged"``; each effect says what a diverged arm counts as (``Effect.if_diverged``).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from normlab.claims import tune_once

__all__ = [
    "PLACEBO_KEY",
    "Search",
    "Tuned",
    "at_fixed",
    "diverged",
    "placebo_pair",
    "reference_of",
    "searches",
    "tune",
    "tune_arms",
]


@dataclass(frozen=True)
class Search:
    """One arm's search space: each parameter's ordered candidate values.

    Attributes:
        space: parameter -> candidate values (a grid; every combination is one trial).
        extend: how many extra steps a choice on the edge of an ordered numeric axis may
            take beyond it.
    """

    space: Mapping[str, Sequence[Any]]
    extend: int = 1

    def __post_init__(self) -> None:
        if not self.space:
            raise ValueError("A search needs at least one parameter with candidate values.")
        for key, values in self.space.items():
            if not values:
                raise ValueError(f"Search parameter {key!r} has no candidate values.")
        if self.extend < 0:
            raise ValueError(f"extend must be >= 0, got {self.extend}.")

    @property
    def trials(self) -> int:
        """The number of grid trials (edge extensions come on top)."""
        return math.prod(len(v) for v in self.space.values())

    def grid(self) -> list[dict[str, Any]]:
        keys = list(self.space)
        return [
            dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(self.space[k] for k in keys))
        ]


def searches(config: Mapping[str, Any]) -> dict[str, Search]:
    """Each arm's :class:`Search` from a config's ``"search"``; equal trial counts enforced."""
    spec = config.get("search")
    if not isinstance(spec, Mapping):
        raise ValueError(
            "The config has no 'search': give {'arms': [...], 'space': {...}} or "
            "{'per_arm': {arm: {...}}}."
        )
    extend = int(spec.get("extend", 1))
    if "per_arm" in spec:
        out = {arm: Search(dict(space), extend) for arm, space in spec["per_arm"].items()}
    elif "arms" in spec and "space" in spec:
        out = {arm: Search(dict(spec["space"]), extend) for arm in spec["arms"]}
    else:
        raise ValueError(
            f"Unreadable search {dict(spec)!r}: use {{'arms': [...], 'space': {{...}}}} or "
            "{'per_arm': {arm: {param: [values]}}}."
        )
    counts = {arm: s.trials for arm, s in out.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"Every arm must get the same number of trials; got {counts}.")
    return out


@dataclass(frozen=True)
class Tuned:
    """What :func:`tune` chose for one arm.

    Attributes:
        chosen: the selected parameters.
        val: their validation score (lower is better).
        trials: how many configurations were evaluated (grid plus extensions).
        grid_trials: the grid's size (the same for every arm).
        extended: how many edge extensions were taken (over every axis).
        on_edge: the choice is still on the edge of an ordered axis after extending.
        history: ``(params, val)`` of every trial, in order.
        tie: how the choice was made among trials tied on validation: ``"unique"`` (no
            tie), ``"centre"`` (the tied trial nearest the centre of the searched space) or
            ``"hash"`` (equally central tied trials, one drawn by a hash of its parameters);
            never the first or the smallest value, which would favour one direction;
            ``"fixed"`` for an arm trained at the choice of its claim's tuning seed
            (:func:`at_fixed`).
        reference: the validation score of the arm's trivial reference (chance accuracy,
            the uniform predictor, the untrained model), on the same lower-is-better scale;
            the learned premise requires ``val < reference``. NaN when none was declared.
        result: what the evaluation returned for the chosen parameters (not recorded).
    """

    chosen: dict[str, Any]
    val: float
    trials: int
    grid_trials: int
    extended: int
    on_edge: bool
    history: tuple[tuple[dict[str, Any], float], ...]
    tie: str = "unique"
    reference: float = math.nan
    result: Any = field(default=None, compare=False)

    def record(self) -> dict[str, Any]:
        """The JSON record written under the measurement's ``"tuning"``."""
        out = asdict(self)
        out.pop("result")
        out["val"] = _finite_or_none(self.val)
        out["reference"] = _finite_or_none(self.reference)
        out["history"] = [{"params": p, "val": _finite_or_none(v)} for p, v in self.history]
        return out


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _next_value(values: Sequence[Any], upward: bool) -> Any | None:
    """The value one step beyond an ordered numeric axis, or None when it has no order."""
    nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(nums) != len(values) or len(nums) < 2 or sorted(nums) != list(nums):
        return None
    a, b = (nums[-2], nums[-1]) if upward else (nums[1], nums[0])
    out = b * (b / a) if a > 0 and b > 0 else b + (b - a)  # geometric axes stay geometric
    return type(nums[0])(out) if isinstance(nums[0], int) else float(out)


def _edges(chosen: Mapping[str, Any], axes: Mapping[str, list[Any]]) -> dict[str, Any]:
    """Every ordered axis on whose edge ``chosen`` sits, with the value one step beyond."""
    out = {}
    for key, values in axes.items():
        if len(values) < 2 or chosen[key] not in (values[0], values[-1]):
            continue
        nxt = _next_value(values, upward=chosen[key] == values[-1])
        if nxt is not None:
            out[key] = nxt
    return out


def _centrality(params: Mapping[str, Any], axes: Mapping[str, list[Any]]) -> float:
    """Squared distance of ``params`` from the centre of the space, each ordered axis
    mapped to [0, 1] by rank (axes without an order do not count)."""
    total = 0.0
    for key, values in axes.items():
        if len(values) > 1 and _next_value(values, upward=True) is not None:
            total += (values.index(params[key]) / (len(values) - 1) - 0.5) ** 2
    return total


def _pick(history: Sequence[tuple[dict[str, Any], float]], axes) -> tuple[int, str]:
    """The index of the best trial and the rule that broke a tie on validation.

    Ties go to the trial nearest the centre of the searched space, then to a hash of the
    parameters: neither favours small or large values, so an arm that scores the same
    everywhere (every lr at chance) is not pushed to the least travel.
    """
    best = min(v for _, v in history)
    tied = [i for i, (_, v) in enumerate(history) if v == best]
    if len(tied) == 1:
        return tied[0], "unique"
    keys = {i: _centrality(history[i][0], axes) for i in tied}
    nearest = min(keys.values())
    central = [i for i in tied if keys[i] == nearest]
    if len(central) == 1:
        return central[0], "centre"
    digest = {
        i: hashlib.sha256(repr(sorted(history[i][0].items())).encode()).hexdigest()
        for i in central
    }
    return min(central, key=digest.__getitem__), "hash"


def tune(
    search: Search,
    evaluate: Callable[[dict[str, Any]], tuple[float, Any]],
    reference: float = math.nan,
) -> Tuned:
    """Evaluate every grid point, select the lowest validation score, extend edge choices.

    An edge choice extends along *every* ordered axis on whose edge it sits, one step per
    axis per round, for up to ``search.extend`` rounds (each axis gets the same budget, so
    a second axis is not starved while the first stays on its edge). Geometric axes
    continue geometrically, others arithmetically. Ties on validation are broken without
    a direction bias (see :func:`_pick`).

    Args:
        search: the arm's space.
        evaluate: ``params -> (validation score, result)``; lower is better; a diverged run
            returns ``math.inf`` (NaN is read as inf). Never pass a test score.
        reference: the validation score of the arm's trivial reference (see
            :class:`Tuned`), recorded for the learned premise.
    """
    history: list[tuple[dict[str, Any], float]] = []
    results: list[Any] = []
    axes = {k: list(v) for k, v in search.space.items()}

    def trial(params: dict[str, Any]) -> None:
        val, result = evaluate(dict(params))
        val = float(val)
        history.append((dict(params), val if math.isfinite(val) else math.inf))
        results.append(result)

    for params in search.grid():
        trial(params)
    extended = 0
    for _ in range(search.extend):
        i, _rule = _pick(history, axes)
        if not math.isfinite(history[i][1]):
            break
        steps = _edges(history[i][0], axes)
        if not steps:
            break
        chosen = history[i][0]
        for key, value in steps.items():
            axes[key] = [*axes[key], value] if value > axes[key][-1] else [value, *axes[key]]
            trial({**chosen, key: value})
            extended += 1
    i, rule = _pick(history, axes)
    return Tuned(
        chosen=history[i][0],
        val=history[i][1],
        trials=len(history),
        grid_trials=search.trials,
        extended=extended,
        on_edge=bool(_edges(history[i][0], axes)),
        history=tuple(history),
        tie=rule,
        reference=float(reference),
        result=results[i],
    )


def tune_arms(
    config: Mapping[str, Any],
    evaluate: Callable[[str, dict[str, Any]], tuple[float, Any]],
    arms: Sequence[str] | None = None,
    *,
    reference: float | Mapping[str, float] | Callable[[str], float] = math.nan,
) -> tuple[dict[str, Tuned], dict[str, dict[str, Any]]]:
    """:func:`tune` every arm of the config's search.

    Args:
        config: the claim's config (its ``"search"``).
        evaluate: ``(arm, params) -> (validation score, result)``.
        arms: a subset of the search's arms (default: all).
        reference: each arm's trivial reference on validation (a number for every arm, a
            mapping or ``arm -> number``), on the validation score's lower-is-better scale;
            the engine's learned premise requires every tuned arm to beat it.

    Returns:
        ``(tuned, records)``: arm -> :class:`Tuned`, and arm -> its JSON record for the
        measurement's ``"tuning"``. Under the A/A placebo (:func:`placebo_pair`) the
        method's arm holds the baseline trained through the method's search.
    """
    spaces = searches(config)
    chosen = list(arms) if arms is not None else list(spaces)
    unknown = [a for a in chosen if a not in spaces]
    if unknown:
        raise ValueError(f"Arms {unknown} have no search space; the search has {list(spaces)}.")

    placebo = placebo_pair(config)

    def trained_as(arm: str) -> str:
        return placebo[1] if placebo is not None and arm == placebo[0] else arm

    task = tune_once.current()
    fixed = task.fixed_for_next_call() if task is not None else {}
    tuned = {}
    for arm in chosen:

        def run(params: dict[str, Any], arm: str = arm) -> tuple[float, Any]:
            return evaluate(trained_as(arm), params)

        ref = reference_of(reference, trained_as(arm))
        tuned[arm] = (
            at_fixed(spaces[arm], fixed[arm], run, ref)
            if arm in fixed
            else tune(spaces[arm], run, ref)
        )
    if task is not None:
        task.record({arm: t.chosen for arm, t in tuned.items()})
    records = {arm: t.record() for arm, t in tuned.items()}
    for arm in fixed.keys() & records.keys():
        records[arm]["fixed"] = True
    if placebo is not None and placebo[0] in records:
        records[placebo[0]]["placebo_of"] = placebo[1]
    return tuned, records


def at_fixed(
    search: Search,
    params: Mapping[str, Any],
    evaluate: Callable[[dict[str, Any]], tuple[float, Any]],
    reference: float = math.nan,
) -> Tuned:
    """One arm trained once at ``params``, chosen on another seed's validation (see
    :mod:`normlab.claims.tune_once`): a single trial, recorded like a tuning of its own
    (``tie`` "fixed"; ``on_edge`` is the tuning seed's to report, so False here)."""
    val, result = evaluate(dict(params))
    val = float(val) if math.isfinite(float(val)) else math.inf
    return Tuned(
        chosen=dict(params),
        val=val,
        trials=1,
        grid_trials=search.trials,
        extended=0,
        on_edge=False,
        history=((dict(params), val),),
        tie="fixed",
        reference=float(reference),
        result=result,
    )


#: The config key through which the runner asks for the A/A placebo
#: (:mod:`normlab.claims.placebo`); a claim never sets it.
PLACEBO_KEY = "placebo"


def placebo_pair(config: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(method, baseline)`` when the config asks for the A/A placebo, else None.

    Under the placebo, :func:`tune_arms` tunes the method's arm over the method's own
    search space but trains the baseline in its place (``evaluate(baseline, params)``),
    and marks the method's tuning record ``"placebo_of"``.
    """
    spec = config.get(PLACEBO_KEY)
    if not spec:
        return None
    if not isinstance(spec, Mapping) or set(spec) != {"method", "baseline"}:
        raise ValueError(
            f"config[{PLACEBO_KEY!r}] must be {{'method': arm, 'baseline': arm}}; got {spec!r}."
        )
    return str(spec["method"]), str(spec["baseline"])


def reference_of(
    reference: float | Mapping[str, float] | Callable[[str], float], arm: str
) -> float:
    """``arm``'s trivial reference from a number (every arm), a mapping or a callable."""
    if callable(reference):
        return float(reference(arm))
    if isinstance(reference, Mapping):
        return float(reference[arm])
    return float(reference)


def diverged(step: int, last: float) -> dict[str, Any]:
    """The record of a diverged run: the step it diverged at and its last finite metric."""
    return {"step": int(step), "last": float(last) if math.isfinite(last) else None}
