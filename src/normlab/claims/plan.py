"""Which extra tasks a report runs for a claim beside its seeds: robustness reruns at free
settings' neighbours and the A/A placebo, as config overrides (one list, read by the
runner, the progress bars and the command line's task count)."""

from __future__ import annotations

from typing import Any, Literal

from normlab.claims.core import Claim
from normlab.claims.placebo import placebo_override

__all__ = [
    "ROBUSTNESS",
    "Robustness",
    "default_robustness",
    "extra_overrides",
    "robustness_overrides",
    "tunes",
]

Robustness = Literal["none", "decisive", "all"]
#: "none": no reruns; "decisive": the neighbours of the claim's decisive free setting;
#: "all": the neighbours of every free setting.
ROBUSTNESS: tuple[str, ...] = ("none", "decisive", "all")


def tunes(claim: Claim, scale: str) -> bool:
    """Whether ``claim`` tunes its arms at ``scale``: its config holds a ``"search"``."""
    return "search" in claim.config(scale)


def default_robustness(scale: str) -> str:
    """The robustness a report runs unless told: every free setting's neighbours at full,
    the decisive setting's at quick (the main job shows it on the index), none at smoke.
    Only claims whose verdict is decided are rerun (:mod:`normlab.claims.schedule`)."""
    return {"full": "all", "quick": "decisive"}.get(scale, "none")


def _mode(robustness: bool | str) -> str:
    if robustness is True:
        return "all"
    if robustness is False:
        return "none"
    if robustness not in ROBUSTNESS:
        raise ValueError(f"Unknown robustness {robustness!r}; expected one of {ROBUSTNESS}.")
    return str(robustness)


def robustness_overrides(
    claim: Claim, scale: str, robustness: bool | str, *, below_floor: bool = False
) -> list[dict[str, Any]]:
    """One override per distinct neighbour of the free settings ``robustness`` selects
    (none equal to the setting's own value), with the neighbours computed at ``scale``
    (relative free settings scale with the config). Neighbours below a setting's
    ``testable_from`` are left out (they could reach no verdict); ``below_floor`` returns
    only those instead."""
    mode = _mode(robustness)
    if mode == "none":
        return []
    settings = [s for s in claim.free_settings if mode == "all" or s.key == claim.decisive]
    config = claim.config(scale)
    out: list[dict[str, Any]] = []
    for s in settings:
        for v in s.neighbours(config):
            # a setting with one alternative names it twice (low = high): one rerun
            keep = s.below_floor(v, scale) == below_floor
            if keep and v != config[s.key] and {s.key: v} not in out:
                out.append({s.key: v})
    return out


def extra_overrides(
    claim: Claim, scale: str, *, robustness: bool | str = False, placebo: bool = False
) -> list[dict[str, Any]]:
    """Every extra task's override: the robustness reruns, then the placebo (only for a
    claim that tunes its arms: an untuned claim has no path to train its baseline on).
    The robustness reruns run only for a claim whose verdict is decided, so this is the
    most a report runs."""
    out = robustness_overrides(claim, scale, robustness)
    if placebo and tunes(claim, scale) and (override := placebo_override(claim)) is not None:
        out.append(override)
    return out
