"""How the report writes numbers and relations, shared by ``results.json``'s why-lines, the
HTML pages and the terminal summary (its own module, so ``report`` and ``report_html`` do
not import each other).

Every function reads decoded records (plain dicts of :mod:`normlab.claims.schema`) and
tolerates fields that older or newer records lack: ``premises`` (protocol v3) or
``preconditions`` (v2), and an effect's optional ``would_be`` and ``parts``.

A mean and its interval are printed together (`fmt_estimate`, `ordered_texts`) with as many
significant figures as keep the printed bounds around the printed mean. A premise is held,
failed, underpowered, or has no interval (one seed), never "failed" for want of seeds
(`premise_state`). A claim's robustness is robust, fragile at the neighbours that change
its verdict, or not run; a neighbour where the claim is untestable is named apart
(`robustness_status`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "NO_VERDICT",
    "claimed",
    "edge_count",
    "failed_premises",
    "fmt_estimate",
    "fmt_interval",
    "fmt_se",
    "fmt_value",
    "key_number",
    "nonfinite_note",
    "null_passes",
    "null_rates",
    "ordered_texts",
    "premise_phrase",
    "premise_state",
    "premise_words",
    "premises_held",
    "primary_effect",
    "robustness_command",
    "robustness_status",
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


def fmt_interval(low: float | None, high: float | None, mean: float | None = None) -> str:
    """``[low, high]`` to 2 significant figures (integers as integers), or ``"no interval"``
    (one seed); with ``mean``, to as many figures as keep the mean inside (`ordered_texts`)."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return "no interval"
    if mean is not None and math.isfinite(mean):
        lo, _, hi = ordered_texts(low, mean, high)
        return f"[{lo}, {hi}]"
    return f"[{fmt_value(low, digits=2)}, {fmt_value(high, digits=2)}]"


#: Significant figures of a mean and its interval's bounds, before any widening.
DIGITS = 3


def _in_order(texts: Sequence[str]) -> bool:
    values = [float(t) for t in texts]
    return all(a <= b for a, b in itertools.pairwise(values))


def ordered_texts(
    low: float, mean: float, high: float, *, signed: bool = False
) -> tuple[str, str, str]:
    """``low``, ``mean`` and ``high`` as text, rounded so that the printed numbers keep the
    order of the exact ones: ``15.06, 15.17, 15.28`` prints ``15.1, 15.2, 15.3``, never
    ``15, 15.2, 15``.

    All three start at :data:`DIGITS` significant figures and widen together until the
    parsed texts are in order (an integer printed whole can break the order of rounding;
    at 17 figures every float prints exactly, so the order of the inputs always survives).

    Args:
        low, mean, high: finite numbers with ``low <= mean <= high``.
        signed: write the mean with its sign.
    """
    texts = (fmt_value(low), fmt_value(mean, signed=signed), fmt_value(high))
    if not all(math.isfinite(x) for x in (low, mean, high)):
        return texts
    for digits in range(DIGITS, 18):
        texts = (
            fmt_value(low, digits=digits),
            fmt_value(mean, signed=signed, digits=digits),
            fmt_value(high, digits=digits),
        )
        if _in_order(texts):
            break
    return texts


def fmt_estimate(
    mean: float | None,
    low: float | None,
    high: float | None,
    unit: str | None = "",
    *,
    signed: bool = True,
) -> str:
    """A mean with its unit and interval, e.g. ``"+15.2 decades [15.1, 15.3]"``, or with
    ``"(no interval)"``; the interval never excludes the printed mean."""
    if mean is None or low is None or high is None or not math.isfinite(mean):
        return f"{with_unit(fmt_value(mean, signed=signed), unit)} (no interval)"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{with_unit(fmt_value(mean, signed=signed), unit)} (no interval)"
    lo, middle, hi = ordered_texts(low, mean, high, signed=signed)
    return f"{with_unit(middle, unit)} [{lo}, {hi}]"


def nonfinite_note(values: Sequence[float]) -> str:
    """``"NaN in 2 of 5 seeds"`` (``inf``, or ``non-finite`` when mixed) when some per-seed
    values are not finite, else ``""``."""
    bad = [float(v) for v in values if not math.isfinite(float(v))]
    if not bad:
        return ""
    kinds = {"NaN" if math.isnan(v) else "inf" for v in bad}
    kind = kinds.pop() if len(kinds) == 1 else "non-finite"
    return f"{kind} in {len(bad)} of {len(values)} seed{'s' if len(values) != 1 else ''}"


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
    """The primary effect with its unit and interval, e.g. ``"+0.12 bpb [0.05, 0.19]"``, or
    ``"+0.12 bpb (no interval: NaN in 1 of 5 seeds)"``."""
    primary = primary_effect(record)
    if primary is None or not primary.get("values"):
        return ""
    unit = primary.get("unit")
    note = nonfinite_note(primary["values"])
    if note:
        return f"{with_unit(fmt_value(primary['mean'], signed=True), unit)} (no interval: {note})"
    return fmt_estimate(primary["mean"], primary.get("low"), primary.get("high"), unit)


def _gates(premise: Mapping[str, Any], effect: str | None) -> bool:
    gates = premise.get("gates")
    return not gates or effect is None or effect in gates


def failed_premises(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The premises (v3) or preconditions (v2) that failed and gate the primary effect."""
    primary = primary_effect(record)
    name = primary.get("name") if primary else None
    items = list(record.get("premises") or []) + list(record.get("preconditions") or [])
    return [p for p in items if not p.get("held", True) and _gates(p, name)]


def _need_bound(direction: str, margin: float) -> tuple[bool, float] | None:
    """``(upward, bound)`` of what a premise needs: its value above (``upward``) or below
    ``bound``; None for an unknown direction."""
    if direction in ("greater", "no_greater", "less", "no_less"):
        bound = margin if direction in ("greater", "no_greater") else -margin
        return direction in ("greater", "no_less"), bound
    if direction in (">=", ">", "<=", "<"):  # a v2 precondition judged as a premise
        return direction.startswith(">"), margin
    return None


#: A premise's states (`premise_state`) in words.
PREMISE_WORDS = {
    "held": "held",
    "failed": "failed",
    "underpowered": "underpowered: the interval crosses what it needs",
    "no interval": "no interval",
}


def premise_state(premise: Mapping[str, Any]) -> str:
    """ "held"; "failed" (the interval lies wholly on the wrong side of what it needs);
    "underpowered" (the interval crosses it); or "no interval" (one seed, or non-finite
    values), which a record's own ``state`` (protocol v4) counts as underpowered."""
    if premise.get("held", False):
        return "held"
    low, high = premise.get("low"), premise.get("high")
    if low is None or high is None:
        return premise.get("state") or "failed"  # v2: a mean against a threshold
    values = premise.get("values") or []
    finite = math.isfinite(low) and math.isfinite(high)
    if len(values) < 2 or not finite or nonfinite_note(values):
        return "no interval"
    if premise.get("state"):
        return str(premise["state"])
    need = _need_bound(str(premise.get("direction", "")), float(premise.get("margin", 0.0)))
    if need is None:
        return "failed"
    upward, bound = need
    return "failed" if (high < bound if upward else low > bound) else "underpowered"


def premise_words(premise: Mapping[str, Any]) -> str:
    """`premise_state` in words: "one seed: no interval" rather than "failed" at one seed."""
    state = premise_state(premise)
    if state != "no interval":
        return PREMISE_WORDS.get(state, state)
    values = premise.get("values") or []
    note = nonfinite_note(values)
    return f"no interval: {note}" if note else "one seed: no interval"


def premises_held(record: Mapping[str, Any]) -> tuple[int, int]:
    """``(held, total)`` over the record's premises (v3) and preconditions (v2)."""
    items = list(record.get("premises") or []) + list(record.get("preconditions") or [])
    return sum(premise_state(p) == "held" for p in items), len(items)


def premise_phrase(premise: Mapping[str, Any], *, link: str = "but needs") -> str:
    """What a premise measured against what it needs, e.g. ``"the baseline's kurtosis was
    2.1 [1.5, 2.7] but needs > 3"`` (v3: direction and margin; v2: op and threshold).

    ``link`` joins a failed premise's value to its need; an underpowered one "is not clear
    of" it, and one without an interval says so ("at one seed (no interval), against")."""
    mean = premise.get("value", premise.get("mean"))
    if "direction" in premise and "margin" in premise:
        try:
            need = claimed(premise["direction"], premise["margin"], premise.get("unit", ""))
        except ValueError:
            need = f"{premise['direction']} {fmt_value(premise['margin'])}"
    else:
        need = f"{premise.get('op', '')} {fmt_value(premise.get('threshold'))}".strip()
    state = premise_state(premise)
    name = premise.get("description", premise.get("name", ""))
    if state == "no interval":
        return f"{name} was {fmt_value(mean)} ({premise_words(premise)}) against {need}"
    value = fmt_value(mean)
    if "low" in premise and "high" in premise:
        value = fmt_estimate(mean, premise["low"], premise["high"], signed=False)
    if state == "underpowered":
        return f"{name} was {value}, an interval not clear of {need} (underpowered)"
    return f"{name} was {value} {link} {need}"


def null_rates(null: Mapping[str, Any] | None) -> str:
    """The null calibration in words, e.g. ``"2.5% / 1.0% of 400"``, or "" without one."""
    if not null:
        return ""
    draws = null.get("draws")
    rates = [null.get("supported_rate"), null.get("opposite_rate")]
    text = " / ".join("n/a" if r is None else f"{100 * float(r):.1f}%" for r in rates)
    return f"{text} of {draws}" if draws else text


def null_passes(null: Mapping[str, Any] | None) -> bool | None:
    """Whether the primary's null calibration passed (``calibration.null_passes``, written
    to the record as ``passes``), or None when the record does not say."""
    if not null or null.get("passes") is None:
        return None
    return bool(null["passes"])


def edge_count(record: Mapping[str, Any]) -> tuple[int, int]:
    """``(on the edge, total)`` over the record's tuned arm-seed choices: those still on an
    edge of their search space after every extension, so possibly short of the optimum
    (seeds trained at another seed's choice, ``"fixed"``, made none and do not count)."""
    tuning = [t for t in record.get("tuning") or [] if not t.get("fixed")]
    return sum(bool(t.get("on_edge")) for t in tuning), len(tuning)


def robustness_command(record: Mapping[str, Any]) -> str:
    """The command that reruns a claim's primary at its free settings' neighbours."""
    scale = record.get("scale", "quick")
    at = f" --scale {scale}" if scale != "quick" else ""
    return f"normlab report --only {record['id']}{at} --robustness"


def _setting(r: Mapping[str, Any]) -> str:
    value = r.get("value")
    shown = fmt_value(value) if isinstance(value, int | float) else str(value)
    return f"{r.get('setting', '')}={shown}"


#: Neighbour verdicts that say nothing about the claim's robustness: the premise failed or
#: a task failed there, so no verdict was reached to compare.
NO_VERDICT = ("untestable", "error")
#: The verdicts robustness reruns test (a report reruns no other claim's neighbours).
DECIDED = ("supported", "contradicted")


def robustness_status(record: Mapping[str, Any]) -> str:
    """ "robust", "fragile at NAME=VALUE, ..." or "not run"; neighbours where the claim is
    untestable (or a task failed) are named apart ("; untestable at NAME=VALUE") and never
    count as fragile. A claim without free settings has "no free settings"; one whose
    verdict is not decided, "not run (no decided verdict)" (a report reruns only decided
    claims: :mod:`normlab.claims.schedule`)."""
    records = record.get("robustness") or []
    if not records:
        if record.get("free_settings") == []:
            return "no free settings"
        if record.get("verdict") not in DECIDED:
            return "not run (no decided verdict)"
        return "not run"
    main = record.get("verdict")
    fragile = [_setting(r) for r in records if r["verdict"] not in (*NO_VERDICT, main)]
    text = f"fragile at {', '.join(fragile)}" if fragile else "robust"
    for label in NO_VERDICT:
        where = [_setting(r) for r in records if r["verdict"] == label and label != main]
        if where:
            text += f"; {label} at {', '.join(where)}"
    return text


def seeds_text(values: Sequence[float]) -> str:
    """Per-seed values, comma-separated with signs."""
    return ", ".join(fmt_value(v, signed=True) for v in values)
