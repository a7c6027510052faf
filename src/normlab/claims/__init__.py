"""Claims: each seed paper's headline claim, measured at small scale, with a computed verdict.

The engine lives here: the records a claim declares (:mod:`~normlab.claims.core`), the
verdict rule (:mod:`~normlab.claims.rule`), the fair-experiment protocol a claim's run uses
(:mod:`~normlab.claims.protocol`: tuning, divergence), the experiment engine a claim declares
its arms to (:mod:`~normlab.claims.arms`), null calibration and robustness
(:mod:`~normlab.claims.calibration`), the A/A placebo (:mod:`~normlab.claims.placebo`), the
runner and the report. The claims themselves live
in :mod:`normlab.claims.catalogue`, one module each, and register themselves when imported.
:func:`all_claims` imports them all. :func:`run` is the main job as a function: it runs
claims and writes the report, returning a :class:`Report`.
"""

from normlab.claims.api import Report, run
from normlab.claims.arms import Trained, run_arms
from normlab.claims.core import (
    DIRECTIONS,
    SCALES,
    VERDICTS,
    Check,
    CheckOutcome,
    Claim,
    Effect,
    FreeSetting,
    Margin,
    Precondition,
    Premise,
    all_claims,
    beats_every,
    difference,
    get_claim,
    register_claim,
)
from normlab.claims.protocol import Search, Tuned, diverged, tune, tune_arms
from normlab.claims.rule import ClaimVerdict, EffectVerdict, judge_claim, verdict

__all__ = [
    "DIRECTIONS",
    "SCALES",
    "VERDICTS",
    "Check",
    "CheckOutcome",
    "Claim",
    "ClaimVerdict",
    "Effect",
    "EffectVerdict",
    "FreeSetting",
    "Margin",
    "Precondition",
    "Premise",
    "Report",
    "Search",
    "Trained",
    "Tuned",
    "all_claims",
    "beats_every",
    "difference",
    "diverged",
    "get_claim",
    "judge_claim",
    "register_claim",
    "run",
    "run_arms",
    "tune",
    "tune_arms",
    "verdict",
]
