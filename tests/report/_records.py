"""A decoded claim record carrying every part of protocol v3 a claim page can show, with
robustness reruns stored apart from the main seeds (schema 4)."""

from __future__ import annotations

import copy
import math
from typing import Any


def _effect(name: str, role: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name}: a long description of what the value is, " * 3,
        "role": role,
        "values": [0.31, 0.42, 0.27, 0.35, 0.38],
        "mean": 0.346,
        "se": 0.026,
        "low": 0.27,
        "high": 0.42,
        "direction": "greater",
        "margin": 0.1,
        "margin_source": "paper: Table 2 reports a gain of 0.1 bpb at 125M parameters",
        "method": "method-with-a-rather-long-arm-name",
        "baseline": "baseline-with-an-equally-long-name",
        "unit": "bpb",
        "verdict": "untestable",
        "reason": "untestable at this scale: the premise failed",
        "would_be": "supported",
        "degenerate": False,
        "on_claimed_side": 5,
        **extra,
    }


def _task(
    seed: int, table: dict[str, Any], override: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "kind": "neighbour" if override else "seed",
        "seed": seed,
        "key": "k",
        "status": "ok",
        "seconds": 2.5,
        "cpu_seconds": 1.85,
        "recompute": False,
        "cached": False,
        "measurement": {"table": table},
        "error": None,
        "threads": 1,
        "override": override,
    }


def everything_record(claim_id: str = "v3-everything") -> dict[str, Any]:
    """A record with parts, would_be, premises, tuning, divergences, null and robustness."""
    parts = [_effect(f"vs_baseline_{i}", "part") for i in range(3)]
    rerun = {"arm-0-with-a-long-name": {"metric_0_long_name": 123.0}}
    table = {
        f"arm-{i}-with-a-long-name": {f"metric_{j}_long_name": 0.1 * i * j for j in range(9)}
        for i in range(8)
    }
    return copy.deepcopy(
        {
            "id": claim_id,
            "paper": "A Paper Whose Title Runs On For Quite A While: Normalization Revisited",
            "hypothesis": "the method beats every baseline",
            "headline": "+0.1 bpb",
            "setup": "tiny models",
            "scale_note": "",
            "caption": "",
            "scale": "quick",
            "seeds": 5,
            "verdict": "untestable",
            "reason": "premise failed",
            "why": "Untestable at this scale: the baseline's loss was 3.1 [2.9, 3.3] but "
            "needs > 3.5 nats, so beats_all says nothing here.",
            "seconds": 12.5,
            "cpu_seconds": 9.25,
            "primary": "beats_all",
            "untuned": "",
            "free_settings": ["learning rate x 3", "depth"],
            "effects": [
                _effect("beats_all", "primary", parts=parts),
                _effect("secondary_gap", "secondary", would_be="untestable"),
            ],
            "checks": [
                {
                    "name": "exact",
                    "description": "matches torch",
                    "status": "verified",
                    "value": 0.0,
                    "detail": "max |a - b| 0 <= 1e-12",
                }
            ],
            "premises": [
                {
                    "name": "baseline_trained",
                    "description": "the baseline's loss",
                    "values": [3.1] * 5,
                    "mean": 3.1,
                    "low": 2.9,
                    "high": 3.3,
                    "direction": "greater",
                    "margin": 3.5,
                    "margin_source": "normlab's choice: an untrained model is above 3.5",
                    "unit": "nats",
                    "held": False,
                    "reason": "interval above",
                    "gates": ["beats_all"],
                    "state": "failed",
                },
                {
                    "name": "softmax_suppresses_far_score_of_a_long_premise_name",
                    "description": "one seed of a premise that would hold",
                    "values": [0.355],
                    "mean": 0.355,
                    "low": -math.inf,
                    "high": math.inf,
                    "direction": "greater",
                    "margin": 0.1,
                    "margin_source": "normlab's choice",
                    "unit": "",
                    "held": False,
                    "reason": "1 seed(s): a t-interval needs at least 2",
                    "gates": ["beats_all"],
                    "state": "underpowered",
                },
            ],
            "divergences": [{"seed": 3, "arm": "arm-with-long-name", "step": 812, "last": 1e9}],
            "tuning": [
                {
                    "seed": s,
                    "arm": "method-with-a-rather-long-arm-name",
                    "chosen": {"lr": 0.003, "warmup_steps_long_parameter_name": 200},
                    "trials": 9,
                    "val": 2.71,
                    "on_edge": s == 0,
                }
                for s in range(5)
            ],
            "null": {
                "supported_rate": 0.024,
                "opposite_rate": 0.019,
                "draws": 2000,
                "seeds": 5,
                "superiority": True,
                "passes": True,
            },
            "robustness": [
                {
                    "setting": "learning rate x 3",
                    "value": 0.009,
                    "verdict": "inconclusive",
                    "flips": True,
                    "mean": 0.2,
                    "low": -0.1,
                    "high": 0.5,
                    "seeds": 5,
                },
                {"setting": "depth", "value": 12, "verdict": "untestable", "flips": False},
            ],
            "tasks": [_task(s, table) for s in range(5)]
            + [_task(s, rerun, {"depth": 12}) for s in range(5)],
        }
    )
