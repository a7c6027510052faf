"""The statistics of a comparison: paired per-seed differences against the reference arm.

Every arm's test metric (lower is better) is paired with the reference's on the same seed
(same data order, same initial weights outside the norms), and the differences
``arm - reference`` are judged by the claims rule (:func:`normlab.claims.rule.verdict`):

- **better**: the t-interval of the mean difference lies below 0 at the Holm-adjusted level
  (the arms compared are a family: Holm's step-down keeps the chance of any false "better"
  or "worse" at 5%);
- **worse**: it lies above 0 at that level (worse by more than the margin, or "within the
  margin" when the 95% interval also lies below the margin);
- **no worse**: the 95% interval lies below ``+margin`` (non-inferiority);
- **inconclusive** otherwise, with the seeds that would settle it at the observed effect.

Beside the t-interval, a percentile bootstrap interval of the mean difference, the fraction
of seeds on which the arm won (with a Wilson interval) and the bootstrap probability that
the mean difference is below 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from normlab.claims.rule import LEVEL, detectable, interval, verdict

__all__ = [
    "ArmStats",
    "bootstrap",
    "holm",
    "judge_arms",
    "p_value",
    "seeds_needed",
    "wilson",
]

#: Bootstrap resamples of the per-seed differences.
RESAMPLES = 4000


def p_value(diffs: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test that the mean difference is 0.

    Examples:
        >>> round(p_value([1.0, 1.1, 0.9, 1.05]), 6) < 0.001
        True
    """
    vals = [float(d) for d in diffs]
    n = len(vals)
    if n < 2 or not all(math.isfinite(v) for v in vals):
        return math.nan
    sd = statistics.stdev(vals)
    mean = statistics.fmean(vals)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    from scipy import stats

    t = mean / (sd / math.sqrt(n))
    return float(2 * stats.t.sf(abs(t), n - 1))


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and counts as 1).

    Examples:
        >>> holm({"a": 0.01, "b": 0.04, "c": 0.03})
        {'a': 0.03, 'b': 0.06, 'c': 0.06}
    """
    order = sorted(pvalues, key=lambda k: 1.0 if math.isnan(pvalues[k]) else pvalues[k])
    k = len(order)
    out: dict[str, float] = {}
    running = 0.0
    for i, name in enumerate(order):
        p = pvalues[name]
        if math.isnan(p):
            out[name] = math.nan
            continue
        running = max(running, min(1.0, (k - i) * p))
        out[name] = round(running, 12)
    return {name: out[name] for name in pvalues}


def bootstrap(
    diffs: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float, float]:
    """``(low, high, p_below)``: the percentile bootstrap interval of the mean difference and
    the fraction of resampled means below 0 (ties count half). Seeded: reproducible.

    Examples:
        >>> lo, hi, p = bootstrap([-1.0, -2.0, -1.5])
        >>> lo <= -1.5 <= hi and p == 1.0
        True
    """
    vals = [float(d) for d in diffs]
    n = len(vals)
    if n < 2 or not all(math.isfinite(v) for v in vals):
        return -math.inf, math.inf, math.nan
    import numpy as np

    rng = np.random.default_rng(seed)
    arr = np.asarray(vals)
    means = np.sort(arr[rng.integers(0, n, size=(resamples, n))].mean(axis=1))
    tail = (1 - level) / 2
    lo = float(means[math.floor(tail * (resamples - 1))])
    hi = float(means[math.ceil((1 - tail) * (resamples - 1))])
    below = float(((means < 0).sum() + 0.5 * (means == 0).sum()) / resamples)
    return lo, hi, below


def wilson(wins: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``wins / n``.

    Examples:
        >>> [round(x, 3) for x in wilson(5, 5)]
        [0.566, 1.0]
    """
    if n == 0:
        return 0.0, 1.0
    from scipy import stats

    z = float(stats.norm.ppf(0.5 + level / 2))
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def seeds_needed(sd: float, effect: float, level: float = LEVEL, limit: int = 1000) -> int | None:
    """The fewest seeds at which a true mean difference ``effect`` (distance to the bound
    that decides) is detected with 80% power, given the per-seed spread ``sd``; None when
    the effect is 0 or beyond ``limit`` seeds.

    Examples:
        >>> seeds_needed(1.0, 2.0)
        5
    """
    if not (math.isfinite(sd) and math.isfinite(effect)) or effect == 0:
        return None
    if sd == 0:
        return 2

    def enough(n: int) -> bool:
        return abs(detectable(n, sd / math.sqrt(n), "less", 0.0, level)) <= abs(effect)

    if not enough(limit):
        return None
    lo, hi = 2, limit  # the detectable effect shrinks as n grows: bisect
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return lo


@dataclass(frozen=True)
class ArmStats:
    """One arm against the reference (differences ``arm - reference``; lower is better).

    Attributes:
        arm: the arm.
        n: paired seeds.
        diffs: the per-seed differences.
        mean: their mean.
        t_low, t_high: the 95% t-interval of the mean.
        boot_low, boot_high: the 95% percentile bootstrap interval of the mean.
        wins: seeds on which the arm beat the reference.
        win_low, win_high: Wilson 95% interval of the fraction of seeds won.
        p_better: bootstrap probability that the mean difference is below 0.
        p: two-sided paired t-test p-value; ``p_holm`` Holm-adjusted across the arms.
        verdict: "better", "no worse", "worse" or "inconclusive".
        reason: why, with the interval and level that decided.
        mde: the minimum detectable difference (80% power, Holm's level) at these seeds.
        seeds_to_settle: seeds that would settle an inconclusive verdict at the observed
            effect (None: settled, or not within 1000 seeds).
    """

    arm: str
    n: int
    diffs: tuple[float, ...]
    mean: float
    t_low: float
    t_high: float
    boot_low: float
    boot_high: float
    wins: int
    win_low: float
    win_high: float
    p_better: float
    p: float
    p_holm: float
    verdict: str
    reason: str
    mde: float
    seeds_to_settle: int | None

    def to_dict(self) -> dict[str, object]:
        """The JSON record (tuples as lists)."""
        out = asdict(self)
        out["diffs"] = list(self.diffs)
        return out


def _verdict(diffs: list[float], margin: float, level: float) -> tuple[str, str]:
    """The claims rule on one arm: better/worse at Holm's ``level``, else no worse."""
    label, _ = verdict(diffs, "less", 0.0, level=level)
    _, _, lo, hi = interval(diffs, level)
    span = f"the {level:.3g} t-interval [{lo:.3g}, {hi:.3g}] (Holm's level)"
    if label == "supported":
        return "better", f"lower than the reference: {span} lies below 0"
    if label == "contradicted":
        _, _, _, hi95 = interval(diffs)
        inside = f", but by less than the margin {margin:.3g}" if hi95 < margin else ""
        return "worse", f"higher than the reference: {span} lies above 0{inside}"
    label, why = verdict(diffs, "no_greater", margin)
    if label == "supported":
        return "no worse", f"no worse than the reference by the margin {margin:.3g}: {why}"
    return "inconclusive", why


def judge_arms(
    values: Mapping[str, Sequence[float]],
    reference: str,
    margin: float,
    *,
    level: float = LEVEL,
    describe: bool = True,
) -> dict[str, ArmStats]:
    """Judge every arm of ``values`` (arm -> per-seed test metric, seeds in the same order)
    against ``reference``.

    Args:
        values: each arm's test metric per seed (lower is better), the reference included.
        reference: the arm the others are compared with.
        margin: the non-inferiority margin, in the metric's units (> 0).
        level: the family-wise confidence level.
        describe: also compute the bootstrap, the MDE and the seeds to settle (False:
            the verdicts and p-values alone, for simulations).

    Returns:
        arm -> :class:`ArmStats`, for every arm but the reference, in ``values``' order.

    Examples:
        >>> out = judge_arms({"a": [1.0, 1.1, 1.2], "b": [0.5, 0.6, 0.7]}, "a", 0.01)
        >>> out["b"].verdict
        'better'
    """
    if reference not in values:
        raise ValueError(f"The reference {reference!r} is not among the arms {list(values)}.")
    ref = [float(v) for v in values[reference]]
    diffs = {}
    for arm, vals in values.items():
        if arm == reference:
            continue
        if len(vals) != len(ref):
            raise ValueError(f"Arm {arm!r} has {len(vals)} seeds, the reference {len(ref)}.")
        diffs[arm] = [float(a) - b for a, b in zip(vals, ref, strict=True)]
    ps = {arm: p_value(d) for arm, d in diffs.items()}
    adjusted = holm(ps)
    order = sorted(ps, key=lambda a: 1.0 if math.isnan(ps[a]) else ps[a])
    k = len(order)
    out = {}
    stopped = False
    for rank, arm in enumerate(order):
        d = diffs[arm]
        # Holm's level for this rank; once one hypothesis stands, the later ones stand too
        alpha = (1 - level) / (k - rank)
        if stopped:
            alpha = 0.0
        label, why = _verdict(d, margin, 1 - alpha) if alpha > 0 else _no_effect(d, margin)
        if not (adjusted[arm] < 1 - level):
            stopped = True
        mean, se, lo, hi = interval(d)
        blo, bhi, below = bootstrap(d, level) if describe else (math.nan,) * 3
        wins = sum(1 for x in d if x < 0)
        wlo, whi = wilson(wins, len(d), level)
        sd = se * math.sqrt(len(d)) if math.isfinite(se) else math.nan
        strict = 1 - (1 - level) / k
        mde = abs(detectable(len(d), se, "less", 0.0, strict)) if describe else math.nan
        settle = None
        if label == "inconclusive" and describe:
            target = abs(mean) if abs(mean) > margin / 2 else margin
            settle = seeds_needed(sd, target, strict)
            if settle is not None and settle > len(d):
                why += f"; about {settle} seeds would settle an effect of {target:.3g}"
        out[arm] = ArmStats(
            arm=arm,
            n=len(d),
            diffs=tuple(d),
            mean=mean,
            t_low=lo,
            t_high=hi,
            boot_low=blo,
            boot_high=bhi,
            wins=wins,
            win_low=wlo,
            win_high=whi,
            p_better=below,
            p=ps[arm],
            p_holm=adjusted[arm],
            verdict=label,
            reason=why,
            mde=mde,
            seeds_to_settle=settle,
        )
    return {arm: out[arm] for arm in diffs}


def _no_effect(diffs: list[float], margin: float) -> tuple[str, str]:
    """An arm after Holm's procedure stopped: no better/worse, only non-inferiority."""
    label, why = verdict(diffs, "no_greater", margin)
    if label == "supported":
        return "no worse", f"no worse than the reference by the margin {margin:.3g}: {why}"
    return "inconclusive", f"{why} (Holm's step-down stopped before this arm)"
