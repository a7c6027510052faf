"""Arms tuned in several independent configurations, pooled into the table's arms.

A claim whose table reads one arm averaged over configurations (series x horizon x
backbone) runs :func:`~normlab.claims.arms.run_arms` once per configuration, its arms named
as the table and the effects name them (``"demand/pamod"``), and pools the measurements
with :func:`pool`: each row is the mean of the arm's rows, each arm's tuning record is
:func:`pooled_record` of its configurations' records (so the engine's learned premise reads
the mean validation score against the mean reference, the scale of the table's mean, and
gates the effects that compare that arm), and the divergences are kept (the last one of an
arm that diverged in several configurations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from normlab.claims.core import Measurement

__all__ = ["pool", "pooled_record"]


def pooled_record(records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One arm's tuning over its configurations (configuration -> the engine's record).

    ``val`` and ``reference`` are the means over configurations (None when any is None: a
    configuration whose every trial diverged, or one without a reference); ``chosen`` maps
    each configuration to its chosen parameters; ``trials``, ``grid_trials`` and
    ``extended`` are sums; ``on_edge`` holds when any choice is on its edge; ``placebo_of``
    is kept when every configuration ran the placebo; ``configs`` holds the records.
    """
    if not records:
        raise ValueError("pooled_record needs at least one configuration's record.")
    rs = list(records.values())

    def mean(key: str) -> float | None:
        values = [r.get(key) for r in rs]
        return None if any(v is None for v in values) else float(np.mean(values))

    out: dict[str, Any] = {
        "chosen": {key: dict(r["chosen"]) for key, r in records.items()},
        "val": mean("val"),
        "reference": mean("reference"),
        "trials": sum(int(r["trials"]) for r in rs),
        "grid_trials": sum(int(r["grid_trials"]) for r in rs),
        "extended": sum(int(r["extended"]) for r in rs),
        "on_edge": any(bool(r["on_edge"]) for r in rs),
        "configs": {key: dict(r) for key, r in records.items()},
    }
    placebo = {r.get("placebo_of") for r in rs}
    if len(placebo) == 1 and None not in placebo:
        out["placebo_of"] = placebo.pop()
    return out


def pool(
    measurements: Mapping[str, Measurement], metrics: Sequence[str] | None = None
) -> Measurement:
    """Pool per-configuration measurements (configuration -> what ``run_arms`` returned).

    Args:
        measurements: in the order the configurations ran.
        metrics: the row metrics to average where an arm's every row holds them as numbers
            (default: every such metric of the arm's first row).

    Returns:
        ``{"table", "tuning", "diverged"}`` keyed by arm.
    """
    rows: dict[str, list[Mapping[str, Any]]] = {}
    records: dict[str, dict[str, Mapping[str, Any]]] = {}
    diverged: dict[str, Any] = {}
    for key, m in measurements.items():
        for arm, row in m["table"].items():
            rows.setdefault(arm, []).append(row)
        for arm, record in (m.get("tuning") or {}).items():
            records.setdefault(arm, {})[key] = record
        diverged.update(m.get("diverged") or {})

    def numeric(rs: list[Mapping[str, Any]], k: str) -> bool:
        return all(
            isinstance(r.get(k), int | float) and not isinstance(r.get(k), bool) for r in rs
        )

    table = {
        arm: {
            k: float(np.mean([r[k] for r in rs]))
            for k in (rs[0] if metrics is None else metrics)
            if numeric(rs, k)
        }
        for arm, rs in rows.items()
    }
    tuning = {arm: pooled_record(rs) for arm, rs in records.items()}
    return {"table": table, "tuning": tuning, "diverged": diverged}
