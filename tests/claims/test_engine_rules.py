"""Rules the engine owns, checked on the source of every claim module."""

from __future__ import annotations

from pathlib import Path

CLAIMS = Path(__file__).resolve().parents[2] / "src" / "normlab" / "claims"


def test_no_claim_steps_an_optimizer_itself():
    """Training goes through ``normlab.training.fit.fit`` (divergence recorded, one loop):
    no ``.backward(`` anywhere under ``claims/``."""
    found = [
        f"{path.relative_to(CLAIMS.parent)}:{n}: {line.strip()}"
        for path in sorted(CLAIMS.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ".backward(" in line
    ]
    assert not found, "train through normlab.training.fit.fit instead:\n" + "\n".join(found)
