"""The report: a self-contained ``index.html`` and a ``results.json`` with every number."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normlab._io import atomic_write_bytes, atomic_write_json
from normlab.claims.common import mean_table
from normlab.claims.runner import ClaimResult

__all__ = ["key_number", "results_dict", "write_report"]

_COLOURS = {
    "supported": "#1a7f37",
    "contradicted": "#cf222e",
    "inconclusive": "#9a6700",
    "error": "#6e7781",
}
_CSS = """
body{font:15px/1.5 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#1f2328}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #d0d7de;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f6f8fa}.num{text-align:right;font-variant-numeric:
tabular-nums}.verdict{font-weight:600;color:#fff;padding:.1em .5em;border-radius:.3em}
section{border-top:2px solid #d0d7de;margin-top:2em}img{max-width:100%}pre{background:#f6f8fa;
padding:.6em;overflow:auto;font-size:12px}.muted{color:#57606a}
"""


def _fmt(x: float) -> str:
    return f"{x:.4g}" if isinstance(x, float | int) else html.escape(str(x))


def _badge(verdict: str) -> str:
    colour = _COLOURS.get(verdict, "#6e7781")
    return f'<span class="verdict" style="background:{colour}">{verdict}</span>'


def key_number(result: ClaimResult) -> str:
    """ "method mean vs baseline mean (metric)" for the summary, from the claim's ``key``."""
    if result.claim.key is None or not result.measurements:
        return ""
    metric, method, baseline = result.claim.key
    table = mean_table(result.measurements)
    try:
        a, b = table[method][metric][0], table[baseline][metric][0]
    except KeyError:
        return ""
    return f"{method} {_fmt(a)} vs {baseline} {_fmt(b)} ({metric})"


def _figure_png(result: ClaimResult) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if result.claim.figure is not None and result.measurements:
        fig = result.claim.figure(result.measurements)
    elif result.effects:
        fig, ax = plt.subplots(figsize=(6, 0.5 + 0.45 * len(result.effects)))
        for row, effect in enumerate(result.effects):
            ax.scatter(effect.values, [row] * len(effect.values), color="#0969da")
        ax.axvline(0, color="#cf222e", lw=1)
        ax.set_yticks(range(len(result.effects)), [e.name for e in result.effects])
        ax.set_xlabel("effect per seed (> 0 supports the claim)")
        fig.tight_layout()
    else:
        return None
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _table_html(result: ClaimResult) -> str:
    if not result.measurements:
        return ""
    table = mean_table(result.measurements)
    metrics = list(dict.fromkeys(m for row in table.values() for m in row))
    head = "".join(f"<th>{html.escape(m)}</th>" for m in metrics)
    rows = []
    for method, row in table.items():
        cells = "".join(
            f'<td class="num">{_fmt(row[m][0])} ± {_fmt(row[m][1])}</td>' if m in row else "<td>"
            for m in metrics
        )
        rows.append(f"<tr><th>{html.escape(method)}</th>{cells}</tr>")
    return f"<table><tr><th>method</th>{head}</tr>{''.join(rows)}</table>"


def _effects_html(result: ClaimResult) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(e.name)}</td><td>{html.escape(e.description)}</td>"
        f'<td class="num">{", ".join(_fmt(v) for v in e.values)}</td>'
        f'<td class="num">{_fmt(e.mean)} ± {_fmt(e.se)}</td><td>{_badge(e.verdict)}</td>'
        f"<td>{html.escape(e.reason)}</td></tr>"
        for e in result.effects
    )
    return (
        "<table><tr><th>effect</th><th>positive means</th><th>per seed</th><th>mean ± SE</th>"
        f"<th>verdict</th><th>rule</th></tr>{rows}</table>"
    )


def _section(result: ClaimResult) -> str:
    c = result.claim
    errors = "".join(
        f"<p>seed {t.seed} failed:</p><pre>{html.escape(t.error or '')}</pre>"
        for t in result.tasks
        if t.status != "ok"
    )
    png = _figure_png(result)
    figure = f'<img alt="figure for {c.id}" src="data:image/png;base64,{png}">' if png else ""
    return f"""
<section id="{html.escape(c.id)}"><h2>{html.escape(c.id)} {_badge(result.verdict)}</h2>
<p class="muted">{html.escape(c.paper)}</p>
<p><b>Hypothesis.</b> {html.escape(c.hypothesis)}</p>
<p><b>Setup ({result.scale}, {len(result.tasks)} seeds).</b> {html.escape(c.setup)}</p>
<p><b>Paper's headline, for scale.</b> {html.escape(c.headline)}</p>
{_table_html(result)}{figure}<h3>Verdict and the rule's inputs</h3>{_effects_html(result)}
<p class="muted">A claim is supported when every effect is; contradicted when any effect is.
Wall time {result.seconds:.1f} s.</p>{errors}</section>"""


def _strict(obj: Any) -> Any:
    """``obj`` with non-finite floats as the strings "inf", "-inf", "nan" (strict JSON)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    return obj


def results_dict(results: Sequence[ClaimResult], scale: str) -> dict[str, Any]:
    """Every number of a report as strict-JSON data (non-finite values as strings)."""
    from normlab import __version__

    return _strict(
        {
            "normlab": __version__,
            "scale": scale,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "claims": [
                {
                    "id": r.claim.id,
                    "paper": r.claim.paper,
                    "hypothesis": r.claim.hypothesis,
                    "headline": r.claim.headline,
                    "verdict": r.verdict,
                    "key_number": key_number(r),
                    "seconds": r.seconds,
                    "effects": [e.to_dict() for e in r.effects],
                    "tasks": [t.to_dict() for t in r.tasks],
                }
                for r in results
            ],
        }
    )


def write_report(results: Sequence[ClaimResult], out: Path | str, scale: str) -> Path:
    """Write ``out/index.html`` and ``out/results.json``; return the HTML path."""
    out = Path(out)
    summary = "".join(
        f'<tr><td><a href="#{html.escape(r.claim.id)}">{html.escape(r.claim.id)}</a></td>'
        f"<td>{html.escape(r.claim.paper)}</td><td>{_badge(r.verdict)}</td>"
        f"<td>{html.escape(key_number(r))}</td><td class='num'>{r.seconds:.1f} s</td></tr>"
        for r in results
    )
    counts = {v: sum(r.verdict == v for r in results) for v in _COLOURS}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>normlab report ({scale})</title><style>{_CSS}</style></head><body>
<h1>normlab report</h1><p>Scale <b>{scale}</b>; {len(results)} claims: {tally}. Verdicts are
computed from the per-seed measurements below, never written by hand.</p>
<table><tr><th>claim</th><th>seed paper</th><th>verdict</th><th>key number vs baseline</th>
<th>wall time</th></tr>{summary}</table>{"".join(_section(r) for r in results)}</body></html>"""
    atomic_write_json(out / "results.json", results_dict(results, scale))
    index = out / "index.html"
    atomic_write_bytes(index, page.encode())
    return index
