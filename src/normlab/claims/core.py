"""Claims, measurements and the verdict rule.

A :class:`Claim` restates one seed paper's headline claim so it can be measured at small
scale. Its ``run(config, seed)`` trains/evaluates the method and its baselines and returns a
*measurement*: a JSON-serialisable dict whose ``"table"`` maps method -> metric -> number
(other keys hold curves for figures). Each :class:`Effect` turns one measurement into a
number whose sign says whether a sub-hypothesis held in that seed (positive supports). The
verdict is computed from those numbers over seeds by :func:`verdict`, never written by hand.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "SCALES",
    "VERDICTS",
    "Claim",
    "Effect",
    "EffectVerdict",
    "all_claims",
    "combine",
    "get_claim",
    "register_claim",
    "verdict",
]

Scale = Literal["smoke", "quick", "full"]
#: smoke: seconds, proves the pipeline (tests); quick: the default report; full: paper-like.
SCALES: tuple[str, ...] = ("smoke", "quick", "full")
Verdict = Literal["supported", "contradicted", "inconclusive", "error"]
VERDICTS: tuple[str, ...] = ("supported", "contradicted", "inconclusive", "error")
#: The verdict needs at least this many seeds; fewer gives "inconclusive".
MIN_SEEDS = 3

Measurement = dict[str, Any]


@dataclass(frozen=True)
class Effect:
    """One sub-hypothesis of a claim, measured per seed.

    Attributes:
        name: short identifier, e.g. ``"loss_gap"``.
        description: what a positive value means, in one sentence.
        fn: measurement -> float; positive supports the claim, negative contradicts it.
            Put any margin the claim states inside ``fn`` (e.g. ``margin - |diff|``).
    """

    name: str
    description: str
    fn: Callable[[Measurement], float]


@dataclass(frozen=True)
class Claim:
    """A seed paper's headline claim, restated so that it can be measured on a CPU.

    Attributes:
        id: identifier used on the command line, e.g. ``"dyt-regime"``.
        paper: the seed paper's title (see :mod:`normlab.papers`).
        hypothesis: the claim in one sentence.
        metrics: the metric names the measurement's table holds.
        effects: the sub-hypotheses; the claim is supported when all are.
        headline: the paper's own headline number, shown for scale.
        configs: per-scale settings; each must hold ``"seeds"`` (how many).
        run: ``run(config, seed) -> measurement``.
        setup: the experiment in a sentence or two.
        key: ``(metric, method, baseline)`` shown in the summary table, or None.
        figure: ``figure(measurements) -> matplotlib Figure`` over all seeds, or None.
        version: bump to invalidate cached results when the claim's meaning changes.
    """

    id: str
    paper: str
    hypothesis: str
    metrics: tuple[str, ...]
    effects: tuple[Effect, ...]
    headline: str
    configs: Mapping[str, Mapping[str, Any]]
    run: Callable[[Mapping[str, Any], int], Measurement]
    setup: str = ""
    key: tuple[str, str, str] | None = None
    figure: Callable[[Sequence[Measurement]], Any] | None = None
    version: int = 1

    def __post_init__(self) -> None:
        missing = [s for s in SCALES if s not in self.configs]
        if missing:
            raise ValueError(f"Claim {self.id!r} has no config for scale(s) {missing}.")
        for scale, config in self.configs.items():
            if int(config.get("seeds", 0)) < 1:
                raise ValueError(f"Claim {self.id!r}: config {scale!r} needs seeds >= 1.")
        if not self.effects:
            raise ValueError(f"Claim {self.id!r} needs at least one Effect.")

    def config(self, scale: str) -> dict[str, Any]:
        """The settings at ``scale``."""
        if scale not in self.configs:
            raise ValueError(f"Unknown scale {scale!r}; expected one of {SCALES}.")
        return dict(self.configs[scale])

    def seeds(self, scale: str) -> list[int]:
        """The seeds run at ``scale``: 0, 1, ..., n - 1."""
        return list(range(int(self.config(scale)["seeds"])))


@dataclass(frozen=True)
class EffectVerdict:
    """The verdict on one effect over seeds, with the rule's inputs.

    Attributes:
        name: the effect's name.
        description: what a positive value means.
        values: the per-seed values.
        mean: their mean.
        se: standard error of the mean (0 for one value).
        verdict: the computed label.
        reason: which test decided it.
    """

    name: str
    description: str
    values: tuple[float, ...]
    mean: float
    se: float
    verdict: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "values": list(self.values),
            "mean": self.mean,
            "se": self.se,
            "verdict": self.verdict,
            "reason": self.reason,
        }


def verdict(values: Sequence[float]) -> tuple[str, str]:
    """The verdict on one effect from its per-seed values (positive supports).

    Over at least :data:`MIN_SEEDS` seeds: "supported" when every value is positive or the
    mean exceeds two standard errors; "contradicted" when every value is negative or the
    mean is below minus two standard errors; otherwise "inconclusive". A non-finite value
    makes the effect inconclusive, as do fewer seeds.

    Returns:
        ``(label, reason)``.
    """
    vals = [float(v) for v in values]
    n = len(vals)
    if any(not math.isfinite(v) for v in vals):
        return "inconclusive", "a seed gave a non-finite value"
    if n < MIN_SEEDS:
        return "inconclusive", f"{n} seed(s); the rule needs >= {MIN_SEEDS}"
    mean = statistics.fmean(vals)
    se = statistics.stdev(vals) / math.sqrt(n)
    if all(v > 0 for v in vals):
        return "supported", f"positive in all {n} seeds"
    if all(v < 0 for v in vals):
        return "contradicted", f"negative in all {n} seeds"
    if se > 0 and mean > 2 * se:
        return "supported", f"mean {mean:.3g} > 2 SE ({2 * se:.3g})"
    if se > 0 and mean < -2 * se:
        return "contradicted", f"mean {mean:.3g} < -2 SE ({-2 * se:.3g})"
    return "inconclusive", f"mixed signs, |mean| {abs(mean):.3g} <= 2 SE ({2 * se:.3g})"


def judge(effect: Effect, measurements: Sequence[Measurement]) -> EffectVerdict:
    """Evaluate ``effect`` on each seed's measurement and apply :func:`verdict`."""
    values = tuple(float(effect.fn(m)) for m in measurements)
    finite = [v for v in values if math.isfinite(v)]
    mean = statistics.fmean(finite) if finite else math.nan
    se = statistics.stdev(finite) / math.sqrt(len(finite)) if len(finite) > 1 else 0.0
    label, reason = verdict(values)
    return EffectVerdict(effect.name, effect.description, values, mean, se, label, reason)


def combine(labels: Sequence[str]) -> str:
    """The claim's verdict from its effects' verdicts.

    "error" if any is an error; "supported" only when every effect is supported;
    "contradicted" when any effect is contradicted; otherwise "inconclusive".
    """
    if not labels:
        return "error"
    if "error" in labels:
        return "error"
    if all(label == "supported" for label in labels):
        return "supported"
    if "contradicted" in labels:
        return "contradicted"
    return "inconclusive"


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
    """Import every claim module of ``normlab.claims`` once, so each registers itself."""
    if _CATALOGUE.loaded:
        return
    import importlib
    import pkgutil

    import normlab.claims as package

    infrastructure = {"core", "runner", "report", "common", "progress"}
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_") and info.name not in infrastructure:
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
