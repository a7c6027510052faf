"""Toy effects, measurements and claims for the rule and record tests."""

from __future__ import annotations

from normlab.claims import Claim, Effect, Margin
from normlab.claims.core import SCALES

CHOICE = Margin(0.0, "normlab's choice: test")


def toy_effect(name="e", direction="greater", margin=0.0, key="x"):
    return Effect(
        name,
        f"the {key} cell",
        lambda m, key=key: float(m["table"]["method"][key]),
        direction=direction,
        margin=Margin(margin, "normlab's choice: test"),
        baseline="baseline",
    )


def toy_measurements(*columns):
    """One measurement per seed; ``columns`` maps cell name -> per-seed values."""
    (first, *_) = columns
    n = len(first[1])
    return [{"table": {"method": {k: v[i] for k, v in columns}}} for i in range(n)]


def toy_claim(**overrides):
    fields = {
        "id": "toy",
        "paper": "p",
        "hypothesis": "h",
        "primary": toy_effect(),
        "headline": "none",
        "configs": {s: {"seeds": 3} for s in SCALES},
        "run": lambda config, seed: {"table": {"method": {"x": 1.0}}},
    }
    fields.update(overrides)
    return Claim(**fields)
