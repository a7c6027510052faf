"""How the report writes numbers and relations, shared by ``results.json``'s why-lines, the
HTML pages and the terminal summary (its own module, so ``report`` and ``report_html`` do
not import each other).

Every function reads decoded records (plain dicts of :mod:`normlab.claims.schema`) and
tolerates fields that older or newer records lack: ``premises`` (protocol v3) or
``preconditions`` (v2), and an effect's optional ``would_be`` and ``parts``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "claimed",
    "failed_premises",
    "fmt_interval",
    "fmt_se",
    "fmt_value",
    "key_number",
    "null_rates",
    "premise_phrase",
    "primary_effect",
    "seeds_text",
    "with_unit",
]


def _is_int(x: float) -> bool:
    return math.isfinite(x) and x == round(x) and abs(x) < 1e15


def fmt_value(x: float | None, *, signed: bool = False, digits: int = 3) -> str:
    """A number for display: integers as integers, else ``digits`` significant figures."""
    if x is None:
        return "n/a"
    x = float(x)
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    sign = "+" if signed else ""
    if _is_int(x):
        return f"{round(x):{sign}d}"
    return f"{x:{sign}.{digits}g}"


def fmt_se(se: float) -> str:
    """A standard error to 2 significant figures."""
    return fmt_value(se, digits=2)


def fmt_interval(low: float | None, high: float | None) -> str:
    """``[low, high]`` to 2 significant figures (integers as integers), or
    ``"no interval"`` (one seed)."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return "no interval"
    return f"[{fmt_value(low, digits=2)}, {fmt_value(high, digits=2)}]"


def with_unit(text: str, unit: str | None) -> str:
    """``text`` followed by `` unit`` when there is one."""
    return f"{text} {unit}" if unit else text


def claimed(direction: str, margin: float, unit: str = "") -> str:
    """The claimed relation in words, e.g. ``"> 0.01 bpb"``.

    Args:
        direction: ``greater`` (v > m), ``less`` (v < -m), ``no_greater`` (v < m, no worse
            than) or ``no_less`` (v > -m, no worse than).
        margin: the margin m >= 0.
        unit: the effect's unit, written after the number.

    Raises:
        ValueError: for an unknown direction.
    """
    m, neg = with_unit(fmt_value(margin), unit), with_unit(fmt_value(-margin), unit)
    relations = {
        "greater": f"> {m}",
        "less": f"< {neg}",
        "no_greater": f"< {m} (no worse than)",
        "no_less": f"> {neg} (no worse than)",
    }
    if direction not in relations:
        raise ValueError(f"Unknown direction {direction!r}; expected one of {tuple(relations)}.")
    return relations[direction]


def primary_effect(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The record's primary effect, or None."""
    return next((e for e in record.get("effects", []) if e.get("role") == "primary"), None)


def key_number(record: Mapping[str, Any]) -> str:
    """The primary effect with its unit and interval, e.g. ``"+0.12 bpb [0.05, 0.19]"``."""
    primary = primary_effect(record)
    if primary is None or not primary.get("values"):
        return ""
    value = with_unit(fmt_value(primary["mean"], signed=True), primary.get("unit"))
    return f"{value} {_span(primary.get('low'), primary.get('high'))}"


def _span(low: float | None, high: float | None) -> str:
    span = fmt_interval(low, high)
    return "(no interval)" if span == "no interval" else span


def _gates(premise: Mapping[str, Any], effect: str | None) -> bool:
    gates = premise.get("gates")
    return not gates or effect is None or effect in gates


def failed_premises(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The premises (v3) or preconditions (v2) that failed and gate the primary effect."""
    primary = primary_effect(record)
    name = primary.get("name") if primary else None
    items = list(record.get("premises") or []) + list(record.get("preconditions") or [])
    return [p for p in items if not p.get("held", True) and _gates(p, name)]


def premise_phrase(premise: Mapping[str, Any], *, link: str = "but needs") -> str:
    """What a premise measured against what it needs, e.g. ``"the baseline's kurtosis was
    2.1 [1.5, 2.7] but needs > 3"`` (v3: direction and margin; v2: op and threshold)."""
    value = fmt_value(premise.get("value", premise.get("mean")))
    if "low" in premise and "high" in premise:
        value += f" {_span(premise['low'], premise['high'])}"
    if "direction" in premise and "margin" in premise:
        try:
            need = claimed(premise["direction"], premise["margin"], premise.get("unit", ""))
        except ValueError:
            need = f"{premise['direction']} {fmt_value(premise['margin'])}"
    else:
        need = f"{premise.get('op', '')} {fmt_value(premise.get('threshold'))}".strip()
    return f"{premise.get('description', premise.get('name', ''))} was {value} {link} {need}"


def null_rates(null: Mapping[str, Any] | None) -> str:
    """The null calibration in words, e.g. ``"2.5% / 1.0% of 400"``, or "" without one."""
    if not null:
        return ""
    draws = null.get("draws")
    rates = [null.get("supported_rate"), null.get("opposite_rate")]
    text = " / ".join("n/a" if r is None else f"{100 * float(r):.1f}%" for r in rates)
    return f"{text} of {draws}" if draws else text


def seeds_text(values: Sequence[float]) -> str:
    """Per-seed values, comma-separated with signs."""
    return ", ".join(fmt_value(v, signed=True) for v in values)
