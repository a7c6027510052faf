"""The report's records: ``results.json`` (every number, structured) and one why-line a claim.

:func:`write_report` writes ``OUT/results.json`` (format: :mod:`normlab.claims.schema`),
``OUT/figures/<id>.png`` and a self-contained ``OUT/index.html`` rendered from the JSON
records (:mod:`normlab.claims.report_html`). With ``merge=True`` (``normlab report
--only``) the claims already in ``OUT/results.json`` that were not rerun are kept, and the
page is regenerated from the merged records, so a partial run never replaces a full report.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import subprocess
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from normlab._io import atomic_write_bytes, atomic_write_json
from normlab.claims.runner import ClaimResult
from normlab.claims.schema import SCHEMA_VERSION, decode, encode

__all__ = [
    "claim_record",
    "claimed",
    "fmt_interval",
    "fmt_se",
    "fmt_value",
    "git_commit",
    "key_number",
    "merge_results",
    "results_dict",
    "why_line",
    "write_report",
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


def fmt_interval(low: float, high: float) -> str:
    """``[low, high]`` to 2 significant figures (integers as integers)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "no interval"
    return f"[{fmt_value(low, digits=2)}, {fmt_value(high, digits=2)}]"


def claimed(direction: str, margin: float) -> str:
    """The claimed relation in words, e.g. ``"> 0.01"``."""
    m = fmt_value(margin)
    neg = fmt_value(-margin)
    return {
        "greater": f"> {m}",
        "less": f"< {neg}",
        "no_greater": f"< {m} (no worse than)",
        "no_less": f"> {neg} (no worse than)",
    }[direction]


def _on_claimed_side(values: Sequence[float], direction: str, margin: float) -> int:
    test = {
        "greater": lambda v: v > margin,
        "less": lambda v: v < -margin,
        "no_greater": lambda v: v < margin,
        "no_less": lambda v: v > -margin,
    }[direction]
    return sum(bool(math.isfinite(v) and test(v)) for v in values)


def _effect_phrase(e: Mapping[str, Any]) -> str:
    unit = f" {e['unit']}" if e["unit"] else ""
    values = [v for v in e["values"] if math.isfinite(v)]
    n = len(e["values"])
    value = f"{fmt_value(e['mean'], signed=True)}{unit}"
    if n < 2:
        return f"{e['description']} was {value} in {n} seed (no interval from one seed)"
    relation = claimed(e["direction"], e["margin"])
    side = f"{e['on_claimed_side']} of {n} seeds on the claimed side, {relation}"
    span = fmt_interval(e["low"], e["high"])
    text = f"{e['description']} was {value} {span} over {n} seeds ({side})"
    if e["degenerate"]:
        text += f"; degenerate: every seed gave {fmt_value(values[0])}"
    return text


_BECAUSE = {
    "supported": "the whole 95% interval lies on the claimed side of the margin",
    "contradicted": "the whole 95% interval lies on the other side",
    "inconclusive": "the 95% interval crosses the decision bounds",
}


def why_line(record: Mapping[str, Any]) -> str:
    """One plain sentence saying why a claim's verdict is what it is.

    ``record`` is a decoded claim record (:func:`claim_record` then
    :func:`~normlab.claims.schema.decode`).
    """
    verdict, reason = record["verdict"], record["reason"]
    primary = next((e for e in record["effects"] if e["role"] == "primary"), None)
    if verdict == "error":
        failed = [c["name"] for c in record["checks"] if c["status"] == "failed"]
        if "task(s) failed" in reason:
            return f"Error: {reason} (tracebacks below), so there is no verdict."
        if failed:
            return (
                f"Error: the implementation check(s) {', '.join(failed)} failed, so the "
                "measurements cannot be trusted and there is no verdict."
            )
        return f"Error: {reason}."
    if primary is None:
        return f"{verdict.capitalize()}: {reason}."
    if verdict == "untestable":
        missing = [
            f"{p['description']} was {fmt_value(p['value'])} but needs {p['op']} "
            f"{fmt_value(p['threshold'])}"
            for p in record["preconditions"]
            if not p["held"] and primary["name"] in p["gates"]
        ]
        return (
            f"Untestable at this scale: {'; '.join(missing) or reason}, so "
            f"{primary['name']} says nothing here."
        )
    because = _BECAUSE.get(verdict, reason)
    if len(primary["values"]) < 2:
        because = "one seed gives no interval (smoke proves the pipeline, not the claim)"
    return f"{verdict.capitalize()}: {_effect_phrase(primary)}; {because}."


def key_number(record: Mapping[str, Any]) -> str:
    """The primary effect with its interval, e.g. ``"+0.12 bpb [0.05, 0.19]"``."""
    primary = next((e for e in record["effects"] if e["role"] == "primary"), None)
    if primary is None or not primary["values"]:
        return ""
    unit = f" {primary['unit']}" if primary["unit"] else ""
    span = fmt_interval(primary["low"], primary["high"])
    return f"{fmt_value(primary['mean'], signed=True)}{unit} {span}"


def claim_record(result: ClaimResult) -> dict[str, Any]:
    """One claim's entry of ``results.json`` (numbers encoded by
    :func:`~normlab.claims.schema.encode`)."""
    c, v = result.claim, result.verdict
    effects = []
    for e in v.effects:
        d = e.to_dict()
        d["on_claimed_side"] = _on_claimed_side(e.values, e.direction, e.margin)
        effects.append(d)
    tasks = [
        {
            "kind": "checks" if t.is_checks else "seed",
            "seed": t.seed,
            "key": t.key,
            "status": t.status,
            "seconds": t.seconds,
            "cached": t.cached,
            "measurement": t.measurement,
            "error": t.error,
        }
        for t in result.all_tasks
    ]
    record = {
        "id": c.id,
        "paper": c.paper,
        "hypothesis": c.hypothesis,
        "headline": c.headline,
        "setup": c.setup,
        "scale_note": c.scale_note,
        "caption": c.caption,
        "scale": result.scale,
        "seeds": len(c.seeds(result.scale)),
        "verdict": v.verdict,
        "reason": v.reason,
        "why": "",
        "seconds": result.seconds,
        "primary": c.primary.name,
        "effects": effects,
        "checks": [ch.to_dict() for ch in v.checks],
        "preconditions": [p.to_dict() for p in v.preconditions],
        "tasks": tasks,
    }
    record["why"] = why_line(record)
    return encode(record)


def git_commit() -> str | None:
    """The commit of the source tree normlab runs from, or None when it is not a checkout."""
    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def results_dict(results: Sequence[ClaimResult]) -> dict[str, Any]:
    """Every number of a report as strict-JSON data (schema: :mod:`normlab.claims.schema`)."""
    import torch

    from normlab import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "normlab": __version__,
        "torch": torch.__version__,
        "git_commit": git_commit(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "scales": sorted({r.scale for r in results}, key=("smoke", "quick", "full").index),
        "machine": {
            "cpus": os.cpu_count() or 1,
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "claims": [claim_record(r) for r in results],
    }


def merge_results(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` plus the claims of ``old`` it does not rerun (sorted by id)."""
    claims = {c["id"]: c for c in old.get("claims", [])}
    claims.update({c["id"]: c for c in new["claims"]})
    merged = dict(new)
    merged["claims"] = [claims[k] for k in sorted(claims)]
    order = ("smoke", "quick", "full")
    merged["scales"] = sorted({c["scale"] for c in merged["claims"]}, key=order.index)
    return merged


def _read_old(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        old = json.loads(path.read_text())
        if old.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"schema_version {old.get('schema_version')!r} != {SCHEMA_VERSION}")
        return old
    except (OSError, ValueError, AttributeError) as err:
        warnings.warn(
            f"normlab: not merging into {path} ({err}); it is replaced.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def write_report(results: Sequence[ClaimResult], out: Path | str, *, merge: bool = False) -> Path:
    """Write ``out/results.json``, ``out/figures/`` and ``out/index.html``; return the HTML.

    Args:
        results: the judged claims.
        out: the report folder.
        merge: keep the claims of an existing ``out/results.json`` that ``results`` does
            not hold (a partial run, ``--only``), and render the page from the merge.
    """
    from normlab.claims.report_html import claim_figure, render_page

    out = Path(out)
    data = results_dict(results)
    if merge:
        old = _read_old(out / "results.json")
        if old is not None:
            data = merge_results(old, data)
    figures_dir = out / "figures"
    for r in results:
        png = claim_figure(r.claim, r.measurements, r.verdict)
        path = figures_dir / f"{r.claim.id}.png"
        if png is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write_bytes(path, png)
    figures = {}
    for c in data["claims"]:
        path = figures_dir / f"{c['id']}.png"
        if path.exists():
            figures[c["id"]] = path.read_bytes()
    atomic_write_json(out / "results.json", data)
    index = out / "index.html"
    atomic_write_bytes(index, render_page(decode(data), figures).encode())
    return index
