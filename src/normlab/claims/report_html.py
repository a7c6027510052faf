"""The report's ``index.html``, rendered from the records of ``results.json``.

Header (versions, commit, date, scale, machine), a smoke banner, the summary table (the
primary effect with its interval beside the paper's number), then per claim: the why-line,
hypothesis and setup, what this scale leaves out, the figure with its caption, the table of
means, every effect with the rule's inputs, the checks as a checklist and the
preconditions with their measured values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from normlab._html import esc, figure_html, figure_png, page, table
from normlab.claims.core import Claim, ClaimVerdict
from normlab.claims.report import claimed, fmt_interval, fmt_se, fmt_value, key_number

__all__ = ["claim_figure", "render_page"]

_COLOURS = {
    "supported": "#1a7f37",
    "contradicted": "#cf222e",
    "inconclusive": "#9a6700",
    "untestable": "#8250df",
    "error": "#6e7781",
}
SMOKE_BANNER = (
    "Smoke scale: one seed and a tiny budget. Smoke proves the pipeline, not the claim; "
    "its verdicts mean nothing."
)
DEFAULT_CAPTION = (
    "Each dot is one seed's value of an effect, in its own units; the red line is zero and "
    "the grey ticks are the margins the claimed direction is judged against."
)


def _badge(verdict: str) -> str:
    colour = _COLOURS.get(verdict, "#6e7781")
    return f'<span class="verdict" style="background:{colour}">{esc(verdict)}</span>'


def claim_figure(
    claim: Claim, measurements: Sequence[dict[str, Any]], verdict: ClaimVerdict
) -> bytes | None:
    """PNG bytes of the claim's figure (its own, else the effects per seed), or None."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if claim.figure is not None and measurements:
        try:
            fig = claim.figure(measurements)
        except Exception:  # a broken figure must not lose the report
            fig = None
        if fig is not None:
            return figure_png(fig)
    effects = [e for e in verdict.effects if any(math.isfinite(v) for v in e.values)]
    if not effects:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 0.8 + 0.5 * len(effects)))
    for row, e in enumerate(effects):
        ax.scatter(e.values, [row] * len(e.values), color="#0969da", zorder=3)
        for m in {e.margin, -e.margin} if e.margin else ():
            ax.plot([m, m], [row - 0.3, row + 0.3], color="#6e7781", lw=1)
    ax.axvline(0, color="#cf222e", lw=1)
    ax.set_yticks(range(len(effects)), [f"{e.name} ({e.role})" for e in effects])
    ax.set_ylim(-0.6, len(effects) - 0.4)
    ax.set_xlabel("effect per seed (natural units)")
    return figure_png(fig)


def _mean_table(measurements: Sequence[Mapping[str, Any]]) -> str:
    tables = [m.get("table") for m in measurements if isinstance(m.get("table"), dict)]
    if not tables:
        return ""
    methods = list(dict.fromkeys(k for t in tables for k in t))
    metrics = list(dict.fromkeys(k for t in tables for row in t.values() for k in row))
    rows = []
    for method in methods:
        cells = [f"<b>{esc(method)}</b>"]
        for metric in metrics:
            vals = [float(t[method][metric]) for t in tables if metric in t.get(method, {})]
            if not vals:
                cells.append("")
                continue
            mean = math.fsum(vals) / len(vals)
            if len(vals) > 1 and all(math.isfinite(v) for v in vals):
                sd = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
                cells.append(f"{fmt_value(mean, digits=4)} ± {fmt_se(sd)}")
            else:
                cells.append(fmt_value(mean, digits=4))
        rows.append(cells)
    header = ["method", *(esc(m) for m in metrics)]
    return "<p class='muted'>Mean ± standard deviation over seeds.</p>" + table(
        header, rows, numeric=[False] + [True] * len(metrics)
    )


def _effects_table(effects: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for e in effects:
        unit = f" {esc(e['unit'])}" if e["unit"] else ""
        verdict = _badge(e["verdict"])
        if e["degenerate"]:
            verdict += " <i>degenerate: every seed gave the same value</i>"
        rows.append(
            [
                esc(e["role"]),
                f"<b>{esc(e['name'])}</b>",
                esc(e["description"])
                + (f" (baseline: {esc(e['baseline'])})" if e["baseline"] else ""),
                ", ".join(fmt_value(v, signed=True) for v in e["values"]),
                fmt_value(e["mean"], signed=True) + unit,
                fmt_se(e["se"]),
                fmt_interval(e["low"], e["high"]),
                esc(claimed(e["direction"], e["margin"])),
                esc(e["margin_source"]),
                verdict,
                esc(e["reason"]),
            ]
        )
    header = [
        "role",
        "effect",
        "value is",
        "per seed",
        "mean",
        "SE",
        "95% interval",
        "claimed",
        "margin's source",
        "verdict",
        "rule",
    ]
    numeric = [False, False, False, True, True, True, True]
    return table(header, rows, numeric=numeric)


def _checks(checks: Sequence[Mapping[str, Any]]) -> str:
    if not checks:
        return ""
    items = "".join(
        f"<li>{'✅ verified' if c['status'] == 'verified' else '❌ failed'}: "
        f"<b>{esc(c['name'])}</b>: {esc(c['description'])} "
        f"<span class='muted'>(measured {fmt_value(c['value'])}; {esc(c['detail'])})</span></li>"
        for c in checks
    )
    return f"<h3>Implementation checks (run once)</h3><ul class='checks'>{items}</ul>"


def _preconditions(pres: Sequence[Mapping[str, Any]]) -> str:
    if not pres:
        return ""
    rows = [
        [
            f"<b>{esc(p['name'])}</b>",
            esc(p["description"]),
            fmt_value(p["value"]),
            f"{esc(p['op'])} {fmt_value(p['threshold'])}",
            "held" if p["held"] else "<b>failed</b>",
            esc(", ".join(p["gates"])),
            esc(p["source"]),
        ]
        for p in pres
    ]
    header = ["precondition", "what", "measured (mean)", "needs", "", "gates", "source"]
    return "<h3>Preconditions</h3>" + table(header, rows, numeric=[False, False, True])


def _section(c: Mapping[str, Any], png: bytes | None) -> str:
    seeds = [t for t in c["tasks"] if t["kind"] == "seed"]
    measurements = [t["measurement"] for t in seeds if t["status"] == "ok" and t["measurement"]]
    errors = "".join(
        f"<p>{'checks' if t['kind'] == 'checks' else 'seed ' + str(t['seed'])} failed:</p>"
        f"<pre>{esc(t['error'] or '')}</pre>"
        for t in c["tasks"]
        if t["status"] != "ok"
    )
    note = f"<p><b>At this scale.</b> {esc(c['scale_note'])}</p>" if c["scale_note"] else ""
    figure = ""
    if png is not None:
        caption = c["caption"] if c["caption"] and measurements else DEFAULT_CAPTION
        figure = figure_html(png, alt=f"figure for {c['id']}", caption=caption)
    cached = sum(t["cached"] for t in c["tasks"])
    return f"""
<section id="{esc(c["id"])}"><h2>{esc(c["id"])} {_badge(c["verdict"])}</h2>
<p class="muted">{esc(c["paper"])}</p>
<p class="why">{esc(c["why"])}</p>
<p><b>Hypothesis.</b> {esc(c["hypothesis"])}</p>
<p><b>Setup ({esc(c["scale"])}, {c["seeds"]} seed{"s" if c["seeds"] != 1 else ""}).</b>
{esc(c["setup"])}</p>{note}
<p><b>Paper's headline, for scale.</b> {esc(c["headline"])}</p>
{figure}{_mean_table(measurements)}
<h3>Effects and the rule's inputs</h3>{_effects_table(c["effects"])}
{_checks(c["checks"])}{_preconditions(c["preconditions"])}
<p class="muted">The primary effect decides the verdict; secondary effects are reported
beside it and never change it. Wall time {c["seconds"]:.1f} s ({cached} of
{len(c["tasks"])} tasks from the cache).</p>{errors}</section>"""


def render_page(data: Mapping[str, Any], figures: Mapping[str, bytes]) -> str:
    """The whole ``index.html`` from decoded ``results.json`` data and PNG figures by id."""
    claims = data["claims"]
    scales = ", ".join(data["scales"])
    banner = f'<p class="banner">{esc(SMOKE_BANNER)}</p>' if "smoke" in data["scales"] else ""
    counts = {v: sum(c["verdict"] == v for c in claims) for v in _COLOURS}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    commit = data["git_commit"] or "unknown"
    m = data["machine"]
    header = (
        f"<p class='muted'>normlab {esc(data['normlab'])}, torch {esc(data['torch'])}, "
        f"commit {esc(commit)}; written {esc(data['created'])}; scale {esc(scales)}; "
        f"machine: {m['cpus']} CPU cores, {esc(m['platform'])}, Python {esc(m['python'])}.</p>"
    )
    rows = [
        [
            f'<a href="#{esc(c["id"])}">{esc(c["id"])}</a>',
            esc(c["paper"]),
            _badge(c["verdict"]),
            esc(key_number(c)),
            esc(c["headline"]),
            str(c["seeds"]),
            f"{c['seconds']:.1f} s",
        ]
        for c in claims
    ]
    summary = table(
        [
            "claim",
            "seed paper",
            "verdict",
            "primary effect [95% interval]",
            "paper's number",
            "seeds",
            "wall time",
        ],
        rows,
        numeric=[False, False, False, True, False, True, True],
    )
    body = (
        f"<h1>normlab report</h1>{banner}{header}<p>{len(claims)} claims: {esc(tally)}. "
        "Verdicts are computed from the per-seed measurements below by the rule of "
        "<code>normlab.claims.core</code> (a two-sided 95% t-interval against a declared "
        f"margin), never written by hand.</p>{summary}"
        + "".join(_section(c, figures.get(c["id"])) for c in claims)
    )
    return page(f"normlab report ({scales})", body)
