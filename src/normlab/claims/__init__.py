"""Claims: each seed paper's headline claim, measured at small scale, with a computed verdict.

The engine lives here (:mod:`~normlab.claims.core`, runner, report); the claims themselves
live in :mod:`normlab.claims.catalogue`, one module each, and register themselves when
imported. :func:`all_claims` imports them all. :func:`run` is the main job as a function:
it runs claims and writes the report, returning a :class:`Report`.
"""

from normlab.claims.api import Report, run
from normlab.claims.core import (
    DIRECTIONS,
    SCALES,
    VERDICTS,
    Check,
    CheckOutcome,
    Claim,
    Effect,
    EffectVerdict,
    Margin,
    Precondition,
    all_claims,
    get_claim,
    judge_claim,
    register_claim,
    verdict,
)

__all__ = [
    "DIRECTIONS",
    "SCALES",
    "VERDICTS",
    "Check",
    "CheckOutcome",
    "Claim",
    "Effect",
    "EffectVerdict",
    "Margin",
    "Precondition",
    "Report",
    "all_claims",
    "get_claim",
    "judge_claim",
    "register_claim",
    "run",
    "verdict",
]
