"""The report's records: ``results.json`` (every number, structured) and one why-line a claim.

`write_report` writes ``OUT/results.json`` (format: `normlab.claims.schema`),
``OUT/figures/<id>.png``, a short ``OUT/index.html`` (the summary table) and one page per
claim, ``OUT/claims/<id>.html``, rendered from the JSON records
(`normlab.claims.report_html`). With ``merge=True`` (``normlab report --only``) the claims
already in ``OUT/results.json`` that were not rerun are kept, and the pages are regenerated
from the merged records, so a partial run never replaces a full report. The
read-merge-write holds an exclusive lock (``OUT/.results.lock``, ``fcntl``), so two
``--only`` runs that finish together both land.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import platform
import subprocess
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normlab._io import atomic_write_bytes, atomic_write_json, file_lock
from normlab.claims._format import (
    claimed,
    failed_premises,
    fmt_estimate,
    fmt_interval,
    fmt_se,
    fmt_value,
    key_number,
    nonfinite_note,
    premise_phrase,
    primary_effect,
    with_unit,
)
from normlab.claims.calibration import null_passes
from normlab.claims.protocol import PLACEBO_KEY
from normlab.claims.report_html import FigureRef, claim_figure, render_claim, render_index
from normlab.claims.results import ClaimResult
from normlab.claims.runner import ClaimRunner
from normlab.claims.tasks import TaskResult

if TYPE_CHECKING:
    from normlab.claims.core import Claim
from normlab.claims.schema import SCHEMA_VERSION, decode, encode

__all__ = [
    "caption_at",
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

_LOG = logging.getLogger(__name__)


def _on_claimed_side(values: Sequence[float], direction: str, margin: float) -> int:
    test = {
        "greater": lambda v: v > margin,
        "less": lambda v: v < -margin,
        "no_greater": lambda v: v < margin,
        "no_less": lambda v: v > -margin,
    }[direction]
    return sum(bool(math.isfinite(v) and test(v)) for v in values)


def _effect_phrase(e: Mapping[str, Any]) -> str:
    values = [v for v in e["values"] if math.isfinite(v)]
    n = len(e["values"])
    if n < 2:
        value = with_unit(fmt_value(e["mean"], signed=True), e.get("unit"))
        return f"{e['description']} was {value} in {n} seed (no interval from one seed)"
    relation = claimed(e["direction"], e["margin"], e.get("unit", ""))
    side = f"{e['on_claimed_side']} of {n} seeds on the claimed side, {relation}"
    estimate = fmt_estimate(e["mean"], e["low"], e["high"], e.get("unit"))
    text = f"{e['description']} was {estimate} over {n} seeds ({side})"
    if e["degenerate"]:
        text += f"; degenerate: every seed gave {fmt_value(values[0])}"
    return text


def _nonfinite_phrase(e: Mapping[str, Any]) -> str:
    """Why there is no interval when some seeds' values are not finite, e.g. "the value was
    NaN in 2 of 5 seeds: no interval (... ; the other 3 seeds average +1.1 pts)"."""
    finite = sum(math.isfinite(v) for v in e["values"])
    rest = ""
    if finite:
        value = with_unit(fmt_value(e["mean"], signed=True), e.get("unit"))
        rest = f"; the other {finite} seed{'s' if finite != 1 else ''} average {value}"
    return f"the value was {nonfinite_note(e['values'])}: no interval ({e['description']}{rest})"


_BECAUSE = {
    "supported": "the whole 95% interval lies on the claimed side of the margin",
    "contradicted": "the whole 95% interval lies on the other side",
    "inconclusive": "the 95% interval crosses the decision bounds",
}


#: Premises a why-line names one by one; the rest are counted (the page lists them all).
WHY_PREMISES = 3


def _missing_premises(failed: list[Mapping[str, Any]]) -> list[str]:
    """The failed premises in words: the engine's convergence premises as one phrase naming
    each arm's late share, the others one by one, at most :data:`WHY_PREMISES` phrases."""
    converged = [p for p in failed if str(p.get("name", "")).endswith("_converged")]
    phrases = [premise_phrase(p) for p in failed if p not in converged]
    if converged:
        arms = ", ".join(
            f"{str(p['name'])[: -len('_converged')]} "
            f"{fmt_estimate(p['mean'], p['low'], p['high'], signed=False)}"
            for p in converged
        )
        bound = fmt_value(converged[0].get("margin"))
        phrases.append(
            f"not shown converged (share of the improvement made in the last quarter, "
            f"needs < {bound}): {arms}"
        )
    if len(phrases) > WHY_PREMISES:
        rest = len(phrases) - WHY_PREMISES
        phrases = [*phrases[:WHY_PREMISES], f"{rest} more premise(s) listed below"]
    return phrases


def why_line(record: Mapping[str, Any]) -> str:
    """One plain sentence saying why a claim's verdict is what it is.

    ``record`` is a decoded claim record (`claim_record` then `normlab.claims.schema.decode`).
    For an untestable claim it names the failed premise with its measured interval; when
    some seeds' primary values are not finite it says so instead of citing an interval.
    """
    verdict, reason = record["verdict"], record["reason"]
    primary = primary_effect(record)
    if verdict == "error":
        failed = [c["name"] for c in record.get("checks", []) if c["status"] == "failed"]
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
        missing = _missing_premises(failed_premises(record))
        return (
            f"Untestable at this scale: {'; '.join(missing) or reason}, so "
            f"{primary['name']} says nothing here."
        )
    if nonfinite_note(primary["values"]):
        return f"{verdict.capitalize()}: {_nonfinite_phrase(primary)}."
    because = _BECAUSE.get(verdict, reason)
    if len(primary["values"]) < 2:
        because = "one seed gives no interval (smoke proves the pipeline, not the claim)"
    return f"{verdict.capitalize()}: {_effect_phrase(primary)}; {because}."


def _plain(value: Any) -> Any:
    """A verdict part (dataclass, tuple, mapping) as JSON-ready data."""
    if hasattr(value, "to_dict"):
        return _plain(value.to_dict())
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _effect_record(e: Any) -> dict[str, Any]:
    d = _plain(e)
    d["on_claimed_side"] = _on_claimed_side(e.values, e.direction, e.margin)
    parts = getattr(e, "parts", None)
    if parts:
        d["parts"] = [_effect_record(p) for p in parts]
    elif "parts" in d:
        del d["parts"]  # empty: an effect with no parts has none to show
    if d.get("would_be") is None:
        d.pop("would_be", None)
    return d


#: Protocol v3 parts of a verdict, written to the record when the verdict has them.
_OPTIONAL = (
    "premises",
    "divergences",
    "tuning",
    "null",
    "robustness",
    "not_measured",
    "placebo",
)


def _task_record(t: TaskResult) -> dict[str, Any]:
    """One task of a claim record: a main seed, the checks, a robustness rerun at a
    neighbour setting (``kind`` "neighbour") or an A/A placebo seed (``kind`` "placebo");
    reruns are never pooled with the main seeds."""
    kind = "checks" if t.is_checks else ("seed" if not t.override else "neighbour")
    if t.override and PLACEBO_KEY in t.override:
        kind = "placebo"
    return {
        "kind": kind,
        "seed": t.seed,
        "key": t.key,
        "status": t.status,
        "seconds": t.seconds,
        "cpu_seconds": t.cpu_seconds,
        "recompute": t.recompute,
        "cached": t.cached,
        "measurement": t.measurement,
        "error": t.error,
        "threads": t.threads,
        "override": t.override,
        "fixed": t.fixed,
    }


def caption_at(claim: Claim, scale: str) -> str:
    """A claim's caption at ``scale``: its text, or the scale's entry when the caption is
    a mapping from scale to text (a figure that draws other panels at other scales)."""
    if isinstance(claim.caption, str):
        return claim.caption
    return claim.caption.get(scale, "")


def claim_record(result: ClaimResult) -> dict[str, Any]:
    """One claim's entry of ``results.json`` (numbers encoded by `schema.encode`)."""
    c, v = result.claim, result.verdict
    record: dict[str, Any] = {
        "id": c.id,
        "paper": c.paper,
        "hypothesis": c.hypothesis,
        "headline": c.headline,
        "quote": c.quote,
        "setup": c.setup,
        "scale_note": c.scale_note,
        "caption": caption_at(c, result.scale),
        "scale": result.scale,
        "seeds": len(c.seeds(result.scale)),
        "verdict": v.verdict,
        "reason": v.reason,
        "why": "",
        "seconds": result.seconds,
        "cpu_seconds": result.cpu_seconds,
        "primary": c.primary.name,
        "untuned": c.untuned,
        "free_settings": [s.key for s in c.free_settings],
        "effects": [_effect_record(e) for e in v.effects],
        "checks": [_plain(ch) for ch in v.checks],
    }
    if hasattr(v, "preconditions"):
        record["preconditions"] = [_plain(p) for p in v.preconditions]
    for name in _OPTIONAL:
        value = getattr(v, name, None)
        if value is not None and (name in ("null", "placebo") or len(value)):
            record[name] = _plain(value)
    if record.get("null"):
        record["null"]["passes"] = null_passes(v.null)
    record["tasks"] = [_task_record(t) for t in result.all_tasks]
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


_ORDER = ("smoke", "quick", "full")


def results_dict(results: Sequence[ClaimResult]) -> dict[str, Any]:
    """Every number of a report as strict-JSON data (schema: `normlab.claims.schema`)."""
    import torch

    from normlab import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "normlab": __version__,
        "torch": torch.__version__,
        "git_commit": git_commit(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "scales": sorted({r.scale for r in results}, key=_ORDER.index),
        "machine": {
            "cpus": os.cpu_count() or 1,
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "claims": [claim_record(r) for r in results],
    }


def merge_results(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    current: Callable[[Mapping[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """``new`` plus the claims of ``old`` it does not rerun (sorted by id).

    Args:
        current: ``claim record -> bool``: whether a kept record was computed by the code as
            it is now; one that was not is marked ``"stale"`` and its why-line says so.
    """
    claims = {c["id"]: c for c in old.get("claims", [])}
    if current is not None:
        for cid, c in list(claims.items()):
            if not c.get("stale") and not current(c):
                claims[cid] = {
                    **c,
                    "stale": True,
                    "why": f"STALE: computed by older code; rerun `normlab report --only {cid}`. "
                    + str(c.get("why", "")),
                }
    claims.update({c["id"]: c for c in new["claims"]})
    merged = dict(new)
    merged["claims"] = [claims[k] for k in sorted(claims)]
    merged["scales"] = sorted({c["scale"] for c in merged["claims"]}, key=_ORDER.index)
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


def _write_figure(result: ClaimResult, figures_dir: Path) -> None:
    """``figures/<id>.png``, or ``figures/<id>.error.txt`` saying why it failed (logged)."""
    png_path = figures_dir / f"{result.claim.id}.png"
    error_path = figures_dir / f"{result.claim.id}.error.txt"
    try:
        png = claim_figure(result.claim, result.measurements, result.verdict)
    except Exception as err:  # a broken figure must not lose the report
        message = f"{type(err).__name__}: {err}"
        _LOG.warning("normlab: the figure of %s failed to render (%s)", result.claim.id, message)
        png_path.unlink(missing_ok=True)
        atomic_write_bytes(error_path, message.encode())
        return
    error_path.unlink(missing_ok=True)
    if png is None:
        png_path.unlink(missing_ok=True)
    else:
        atomic_write_bytes(png_path, png)


def _figure_ref(figures_dir: Path, claim_id: str) -> FigureRef | None:
    png, error = figures_dir / f"{claim_id}.png", figures_dir / f"{claim_id}.error.txt"
    if png.exists():
        return FigureRef(src=f"../figures/{claim_id}.png")
    if error.exists():
        return FigureRef(error=error.read_text(errors="replace"))
    return None


def _write_pages(data: Mapping[str, Any], out: Path) -> Path:
    """``out/index.html`` and ``out/claims/<id>.html`` for every claim; stale pages go."""
    pages = out / "claims"
    ids = {c["id"] for c in data["claims"]}
    for c in data["claims"]:
        page = render_claim(c, data, _figure_ref(out / "figures", c["id"]))
        atomic_write_bytes(pages / f"{c['id']}.html", page.encode())
    for stale in pages.glob("*.html"):
        if stale.stem not in ids:
            stale.unlink(missing_ok=True)
    index = out / "index.html"
    atomic_write_bytes(index, render_index(data).encode())
    return index


def write_report(
    results: Sequence[ClaimResult],
    out: Path | str,
    *,
    merge: bool = False,
    runner: ClaimRunner | None = None,
) -> Path:
    """Write ``out/results.json``, ``out/figures/``, ``out/claims/`` and ``out/index.html``.

    Args:
        results: the judged claims.
        out: the report folder.
        merge: keep the claims of an existing ``out/results.json`` that ``results`` does
            not hold (a partial run, ``--only``), and render the pages from the merge. The
            read-merge-write holds ``out/.results.lock``, so concurrent merges never lose
            a claim.
        runner: with ``merge``, the runner whose task keys tell which kept claims were
            computed by older code (they are marked stale).

    Returns:
        The path of ``out/index.html``.
    """
    out = Path(out)
    data = results_dict(results)
    for r in results:
        _write_figure(r, out / "figures")
    with file_lock(out / ".results.lock"):
        if merge:
            old = _read_old(out / "results.json")
            if old is not None:
                data = merge_results(old, data, _is_current(runner))
        atomic_write_json(out / "results.json", data)
        return _write_pages(decode(data), out)


def _is_current(runner: ClaimRunner | None) -> Callable[[Mapping[str, Any]], bool] | None:
    """Whether a claim record's task keys are those the code as it is now would compute."""
    if runner is None:
        return None
    from normlab.claims.core import get_claim

    def current(record: Mapping[str, Any]) -> bool:
        try:
            claim = get_claim(record["id"])
        except KeyError:
            return False
        tasks = record.get("tasks", [])
        keys = {t.get("key") for t in tasks if not t.get("override") and not t.get("fixed")}
        scale = record["scale"]
        return runner.tuning_keys(claim, scale) <= keys <= runner.current_keys(claim, scale)

    return current
