"""Claims: each seed paper's headline claim, measured at small scale, with a computed verdict.

Claim modules in this package register themselves when imported; :func:`all_claims` imports
them all.
"""

from normlab.claims.core import (
    SCALES,
    VERDICTS,
    Claim,
    Effect,
    EffectVerdict,
    all_claims,
    combine,
    get_claim,
    register_claim,
    verdict,
)

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
