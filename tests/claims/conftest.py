"""A claim whose every task fails, registered only for the tests that ask for it."""

from __future__ import annotations

import pytest

from normlab.claims import Claim, Effect
from normlab.claims import core as claims_core
from normlab.claims.core import SCALES, all_claims


def _boom(config, seed):
    raise RuntimeError(f"planted failure in seed {seed}")


@pytest.fixture
def failing_claim(monkeypatch: pytest.MonkeyPatch) -> Claim:
    all_claims()  # load the real catalogue first
    claim = Claim(
        id="test-failing-claim",
        paper="p",
        hypothesis="h",
        metrics=("x",),
        effects=(Effect("e", "", lambda m: 1.0),),
        headline="none",
        configs={s: {"seeds": 3} for s in SCALES},
        run=_boom,
    )
    monkeypatch.setitem(claims_core._CATALOGUE.claims, claim.id, claim)
    return claim
