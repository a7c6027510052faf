"""The report's HTML pages, rendered from the records of ``results.json``.

``index.html`` is short: the header (versions, commit, date, scale, machine), a smoke
banner, and one summary row per claim (claim and paper, verdict, primary effect with its
unit and interval, the claimed relation with its margin and the margin's source as a
footnote, the why-line, seeds and CPU time, null calibration pass/fail with its rates,
robustness, premises held, tuned choices on an edge), each linking to the claim's own page
``claims/<id>.html``. A claim page holds the why-line first (with the caveats beside its
badge), then hypothesis and setup, the figure with its caption (or an error box when it
failed to render), every effect as a card with the rule's inputs, the checks, premises,
tuning choices (or why nothing is tuned), divergences, null calibration, robustness (or
the command that would run it), the table of means over the main seeds and, apart, the
robustness reruns' measurements. Tables have fixed column widths and wrap, so no page needs
sideways scrolling at 1000 px.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from normlab._html import (
    error_box,
    esc,
    figure_file_html,
    figure_png,
    page,
    table,
)
from normlab.claims._format import (
    claimed,
    edge_count,
    fmt_estimate,
    fmt_se,
    fmt_value,
    key_number,
    nonfinite_note,
    null_passes,
    null_rates,
    premise_state,
    premise_words,
    premises_held,
    primary_effect,
    robustness_command,
    robustness_status,
    seeds_text,
    with_unit,
)

if TYPE_CHECKING:  # annotations only: the verdict's classes move between protocol versions
    from normlab.claims.core import Claim
    from normlab.claims.rule import ClaimVerdict

__all__ = ["FigureRef", "claim_figure", "render_claim", "render_index"]

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
#: Most data columns one measurement table shows; wider tables are split.
MAX_COLUMNS = 6
#: Width of the index page's body in CSS pixels.
INDEX_WIDTH = 1360


@dataclass(frozen=True)
class FigureRef:
    """A claim page's figure: the image's URL relative to the page, or why it failed."""

    src: str = ""
    error: str = ""


def _badge(verdict: str) -> str:
    colour = _COLOURS.get(verdict, "#6e7781")
    return f'<span class="verdict" style="background:{colour}">{esc(verdict)}</span>'


def _legible_legends(fig: Any) -> None:
    """Rebuild every legend of ``fig`` so that it names each labelled line in a readable
    font; a legend of more than five entries moves beside its axes."""
    for ax in fig.get_axes():
        handles, labels = ax.get_legend_handles_labels()
        if ax.get_legend() is None or not handles:
            continue
        if len(handles) > 5:
            ax.legend(
                handles,
                labels,
                fontsize=9,
                loc="upper left",
                bbox_to_anchor=(1.02, 1.0),
                frameon=False,
            )
        else:
            ax.legend(handles, labels, fontsize=9)


def claim_figure(
    claim: Claim, measurements: Sequence[dict[str, Any]], verdict: ClaimVerdict
) -> bytes | None:
    """PNG bytes of the claim's figure (its own, else the effects per seed), or None.

    Raises:
        Exception: whatever the claim's own figure function raised (the report shows an
            error box in its place).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if claim.figure is not None and measurements:
        fig = claim.figure(measurements)
        if fig is not None:
            _legible_legends(fig)
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


def _mean_cell(vals: Sequence[float]) -> str:
    mean = math.fsum(vals) / len(vals)
    if len(vals) > 1 and all(math.isfinite(v) for v in vals):
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        return f"{fmt_value(mean, digits=4)} ± {fmt_se(sd)}"
    return fmt_value(mean, digits=4)


def _mean_tables(measurements: Sequence[Mapping[str, Any]], *, heading: bool = True) -> str:
    """Mean ± sd over seeds of every (method, metric): methods or metrics as columns,
    whichever are fewer, at most :data:`MAX_COLUMNS` data columns a table; ``heading``
    puts the section's title above them."""
    tables = [m.get("table") for m in measurements if isinstance(m.get("table"), dict)]
    if not tables:
        return ""
    methods = list(dict.fromkeys(k for t in tables for k in t))
    metrics = list(
        dict.fromkeys(
            k for t in tables for row in t.values() if isinstance(row, dict) for k in row
        )
    )

    def cell(method: str, metric: str) -> str:
        vals = []
        for t in tables:
            row = t.get(method)
            if isinstance(row, dict) and isinstance(row.get(metric), int | float):
                vals.append(float(row[metric]))
        return _mean_cell(vals) if vals else ""

    transpose = len(methods) < len(metrics)
    rows, cols = (metrics, methods) if transpose else (methods, metrics)
    corner = "metric \\ method" if transpose else "method \\ metric"
    parts = []
    for start in range(0, len(cols), MAX_COLUMNS):
        chunk = cols[start : start + MAX_COLUMNS]
        body = [
            [f"<b>{_code_name(r)}</b>"] + [cell(c, r) if transpose else cell(r, c) for c in chunk]
            for r in rows
        ]
        parts.append(
            table(
                [esc(corner), *(_code_name(c) for c in chunk)],
                body,
                numeric=[False] + [True] * len(chunk),
                wrap=True,
                widths=["22%"] + [f"{78 / len(chunk):.2f}%"] * len(chunk),
            )
        )
    if not heading:
        return "".join(parts)
    return (
        "<h3>Measurements</h3><p class='muted'>Mean ± standard deviation over the main "
        "seeds.</p>" + "".join(parts)
    )


def _dl(items: Sequence[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items if v) + "</dl>"


def _effect_card(e: Mapping[str, Any]) -> str:
    unit = e.get("unit", "")
    title = f"{esc(e.get('role', 'part'))}: <b>{esc(e['name'])}</b> {_badge(e['verdict'])}"
    if e.get("degenerate"):
        title += " <i>degenerate: every seed gave the same value</i>"
    what = esc(e["description"])
    if e.get("baseline"):
        what += f" (baseline: {esc(e['baseline'])})"
    n = len(e.get("values", []))
    side = e.get("on_claimed_side")
    per_seed = esc(seeds_text(e.get("values", [])))
    if side is not None and n:
        per_seed += f" <span class='muted'>({side} of {n} on the claimed side)</span>"
    se = float(e.get("se", math.nan))
    note = nonfinite_note(e.get("values", []))
    estimate = fmt_estimate(e["mean"], e.get("low"), e.get("high"), unit)
    if note:
        estimate = f"{with_unit(fmt_value(e['mean'], signed=True), unit)} (no interval: {note})"
    mean = esc(estimate) + (
        f" <span class='muted'>(SE {esc(fmt_se(se))})</span>"
        if math.isfinite(se) and not note
        else ""
    )
    would_be = e.get("would_be")
    items = [
        ("value is", what),
        ("mean [95% interval]", mean),
        ("per seed", per_seed),
        ("claimed", esc(claimed(e["direction"], e["margin"], unit))),
        ("margin's source", esc(e.get("margin_source", ""))),
        ("rule", esc(e.get("reason", ""))),
        ("at margin 0", _at_zero(e)),
        ("power, detectable effect", esc(_power_text(e, unit))),
        (
            "if every premise held",
            _badge(would_be) if would_be and would_be != e["verdict"] else "",
        ),
    ]
    parts = "".join(_effect_card({**p, "role": "part"}) for p in e.get("parts") or [])
    if parts:
        parts = "<p class='muted small'>Beats every baseline: each part must hold.</p>" + parts
    return f"<div class='card'><h4>{title}</h4>{_dl(items)}{parts}</div>"


def _at_zero(e: Mapping[str, Any]) -> str:
    """The verdict the same values get at margin 0, shown when the margin changes it."""
    at_zero = e.get("at_zero")
    if not at_zero or not e.get("margin"):
        return ""
    same = at_zero == e.get("would_be", e["verdict"])
    return _badge(at_zero) + ("" if same else " <b>the margin decides the verdict</b>")


def _power_text(e: Mapping[str, Any], unit: str) -> str:
    """The primary's power one margin beyond its bound and its minimum detectable effect
    (both at the observed spread and seed count), or "" when they were not computed."""
    power, mde = e.get("power"), e.get("mde")
    parts = []
    if isinstance(power, int | float) and math.isfinite(power):
        parts.append(f"power {100 * power:.0f}% one margin beyond the bound")
    if isinstance(mde, int | float) and math.isfinite(mde):
        parts.append(f"80% power needs a true effect of {with_unit(fmt_value(mde), unit)}")
    return "; ".join(parts)


def _checks(checks: Sequence[Mapping[str, Any]]) -> str:
    if not checks:
        return ""
    items = "".join(
        f"<li><span class='mark {'ok' if c['status'] == 'verified' else 'bad'}'></span>"
        f"{'verified' if c['status'] == 'verified' else '<b>FAILED</b>'}: "
        f"<b>{esc(c['name'])}</b>: {esc(c['description'])} "
        f"<span class='muted'>(measured {fmt_value(c['value'])}; {esc(c['detail'])})</span></li>"
        for c in checks
    )
    return f"<h3>Implementation checks (run once)</h3><ul class='checks'>{items}</ul>"


def _quote(c: Mapping[str, Any]) -> str:
    """The abstract's words the primary tests, beside the hypothesis that restates them."""
    quote = c.get("quote") or ""
    return f"<p><b>The abstract says.</b> &ldquo;{esc(quote)}&rdquo;</p>\n" if quote else ""


def _code_name(name: str) -> str:
    """Text with code-like names (``softmax_suppresses_far_score``), escaped, that may wrap
    after each underscore (``<wbr>``) rather than mid-word."""
    return esc(name).replace("_", "_<wbr>")


_STATE_MARK = {"held": "ok", "failed": "bad"}


def _premise_mark(premise: Mapping[str, Any]) -> str:
    """held / failed / underpowered / one seed: no interval, with a coloured mark."""
    state = premise_state(premise)
    words = esc(premise_words(premise))
    if state == "failed":
        words = f"<b>{words}</b>"
    return f"<span class='mark {_STATE_MARK.get(state, 'warn')}'></span>{words}"


def _premises(record: Mapping[str, Any]) -> str:
    """Premises (protocol v3: an interval against a margin) or preconditions (v2)."""
    out = ""
    premises = record.get("premises") or []
    if premises:
        rows = []
        for p in premises:
            try:
                need = claimed(p["direction"], p["margin"], p.get("unit", ""))
            except (KeyError, ValueError):
                need = f"{p.get('direction', '')} {fmt_value(p.get('margin'))}"
            mean = p.get("value", p.get("mean"))
            rows.append(
                [
                    f"<b>{_code_name(p['name'])}</b>",
                    esc(p.get("description", "")),
                    esc(fmt_estimate(mean, p.get("low"), p.get("high"), signed=False)),
                    esc(need),
                    _premise_mark(p),
                    esc(p.get("margin_source", "")),
                ]
            )
        header = ["premise", "what", "measured (mean [95%])", "needs", "", "source"]
        out += "<h3>Premises</h3>" + table(
            header, rows, wrap=True, widths=["15%", "24%", "16%", "12%", "12%", "21%"]
        )
    pres = record.get("preconditions") or []
    if pres:
        rows = [
            [
                f"<b>{_code_name(p['name'])}</b>",
                esc(p["description"]),
                fmt_value(p["value"]),
                f"{esc(p['op'])} {fmt_value(p['threshold'])}",
                _premise_mark(p),
                esc(", ".join(p.get("gates", []))),
                esc(p.get("source", "")),
            ]
            for p in pres
        ]
        header = ["precondition", "what", "measured (mean)", "needs", "", "gates", "source"]
        out += "<h3>Preconditions</h3>" + table(
            header, rows, wrap=True, widths=["14%", "24%", "11%", "10%", "9%", "12%", "20%"]
        )
    return out


def _kv(mapping: Any) -> str:
    if isinstance(mapping, Mapping):
        return ", ".join(
            f"{k} = {fmt_value(v) if isinstance(v, float) else v}" for k, v in mapping.items()
        )
    return str(mapping)


def _tuning(record: Mapping[str, Any]) -> str:
    rows = [
        [
            esc(t.get("seed", "")),
            esc(t.get("arm", "")),
            esc(_kv(t.get("chosen", {}))),
            esc(t.get("trials", "")),
            esc(fmt_value(t.get("val"))),
            _grid_cell(t),
        ]
        for t in record.get("tuning") or []
    ]
    if not rows:
        untuned = record.get("untuned")
        return f"<h3>Tuning</h3><p>Nothing is tuned: {esc(untuned)}.</p>" if untuned else ""
    edge, total = edge_count(record)
    return (
        "<h3>Tuning choices</h3><p class='muted'>Each arm's hyperparameters as chosen on the "
        "validation split with the same budget, once, on the first seed; the other seeds "
        'train at its choices ("fixed"). A choice on the edge of its grid may be short of '
        f"the optimum.</p><p>{_edge_text(edge, total)}</p>"
        + table(
            ["seed", "arm", "chosen", "trials", "validation", "grid"],
            rows,
            numeric=[True, False, False, True, True],
            wrap=True,
            widths=["8%", "18%", "38%", "9%", "12%", "15%"],
        )
    )


def _grid_cell(t: Mapping[str, Any]) -> str:
    if t.get("fixed"):
        return "fixed"
    return "<span class='mark warn'></span><b>on the edge</b>" if t.get("on_edge") else "inside"


def _divergences(record: Mapping[str, Any]) -> str:
    rows = [
        [
            esc(d.get("seed", "")),
            esc(d.get("arm", "")),
            esc(d.get("step", "")),
            esc(fmt_value(d.get("last")) if isinstance(d.get("last"), float) else d.get("last")),
        ]
        for d in record.get("divergences") or []
    ]
    if not rows:
        return ""
    return "<h3>Divergences</h3>" + table(
        ["seed", "arm", "step", "last value"],
        rows,
        numeric=[True, False, True, True],
        wrap=True,
        widths=["15%", "45%", "15%", "25%"],
    )


def _null_mark(null: Mapping[str, Any] | None) -> str:
    """A pass / fail mark of the primary's null calibration, or "" when it does not say."""
    passes = null_passes(null)
    if passes is None:
        return ""
    return (
        "<span class='mark ok'></span>pass"
        if passes
        else "<span class='mark bad'></span><b>fail</b>"
    )


def _superiority(record: Mapping[str, Any]) -> bool:
    """Whether the primary claims a difference (else no worse than)."""
    null = record.get("null") or {}
    if "superiority" in null:
        return bool(null["superiority"])
    primary = primary_effect(record) or {}
    return primary.get("direction", "greater") in ("greater", "less")


def _null(record: Mapping[str, Any]) -> str:
    null = record.get("null")
    if not null:
        return ""
    supported = f"{100 * float(null.get('supported_rate', math.nan)):.1f}%"
    opposite = f"{100 * float(null.get('opposite_rate', math.nan)):.1f}%"
    draws = null.get("draws", "the")
    if _superiority(record):
        rates = (
            f"the rule said &ldquo;supported&rdquo; in {supported} and &ldquo;opposite "
            f"direction&rdquo; in {opposite} of {draws} draws; each must stay at or below 5%"
        )
    else:
        rates = (
            f"the rule said &ldquo;opposite direction&rdquo; in {opposite} of {draws} draws, "
            "the one rate held to 5%; &ldquo;supported&rdquo; "
            f"({supported}) is the expected answer here, since exchanged arms are no worse "
            "than each other"
        )
    mark = _null_mark(null)
    return (
        "<h3>Null calibration</h3><p>With the primary's arms exchanged at random within "
        f"each seed (no effect), {rates}.{' ' + mark if mark else ''} For two arms this "
        "exchange only flips the sign of each seed's difference: it checks that the "
        "effect is built symmetrically, not that the arms were treated alike (the A/A "
        "placebo below does that).</p>"
    )


def _placebo_status(record: Mapping[str, Any]) -> str:
    """The A/A placebo in a few words: flagged, clean, not applicable, not available or
    not run."""
    placebo = record.get("placebo")
    if not placebo:
        return "not run"
    if placebo.get("status") != "run":
        return placebo.get("status", "not available")
    return "flagged" if placebo.get("flagged") else "clean"


def _placebo_cell(record: Mapping[str, Any]) -> str:
    status = _placebo_status(record)
    if status == "flagged":
        return "<span class='mark bad'></span><b>placebo flagged</b>"
    if status == "clean":
        return "<span class='mark ok'></span>placebo clean"
    return f"<span class='muted'>placebo {esc(status)}</span>"


def _placebo(record: Mapping[str, Any]) -> str:
    placebo = record.get("placebo")
    head = "<h3>A/A placebo</h3>"
    if not placebo:
        scale = record.get("scale", "quick")
        at = f" --scale {scale}" if scale != "quick" else ""
        command = f"normlab report --only {record['id']}{at} --placebo"
        return f"{head}<p>Not run (run: <code>{esc(command)}</code>).</p>"
    if placebo.get("status") != "run":
        status = placebo.get("status", "not available").capitalize()
        return f"{head}<p>{esc(status)}: {esc(placebo.get('why', ''))}.</p>"
    estimate = fmt_estimate(placebo.get("mean"), placebo.get("low"), placebo.get("high"))
    side = placebo.get("claimed_side")
    side_text = f"{100 * side:.0f}%" if isinstance(side, int | float) else "?"
    verdict = (
        "<span class='mark bad'></span><b>flagged: the baseline trained through the "
        "method's path beats the baseline, so the comparison favours the path</b>"
        if placebo.get("flagged")
        else "<span class='mark ok'></span>clean: it does not beat the baseline"
    )
    return (
        f"{head}<p>The baseline trained again through the method's path (its search, "
        f"tuning and divergence handling), judged by <code>{esc(placebo.get('effect', ''))}"
        f"</code> as if it were the method: {esc(estimate)} over {placebo.get('seeds')} "
        f"seeds, {side_text} of them on the claimed side; {_badge(placebo.get('verdict', ''))}"
        f" at the declared margin, {_badge(placebo.get('at_zero', ''))} at margin 0. "
        f"{verdict}.</p>"
    )


def _not_measured(record: Mapping[str, Any]) -> str:
    names = record.get("not_measured") or []
    if not names:
        return ""
    return (
        f"<p class='muted'>Declared for other scales only (too costly for this one's "
        f"budget): {esc(', '.join(names))}.</p>"
    )


def _robustness_cell(record: Mapping[str, Any]) -> str:
    """The claim's robustness in words, with the command to run it when it was not run."""
    status = robustness_status(record)
    if status == "not run":
        command = robustness_command(record)
        return f"not run <span class='small'>(run: <code>{esc(command)}</code>)</span>"
    if status.startswith("fragile"):
        return f"<span class='mark bad'></span><b>{esc(status)}</b>"
    if status.startswith("robust"):
        return f"<span class='mark ok'></span>{esc(status)}"
    return esc(status)


def _robustness(record: Mapping[str, Any]) -> str:
    rows = [
        [
            _code_name(str(r.get("setting", ""))),
            esc(fmt_value(r["value"]) if isinstance(r.get("value"), float) else r.get("value")),
            _badge(str(r.get("verdict", ""))),
            esc(fmt_estimate(r.get("mean"), r.get("low"), r.get("high"))) if "mean" in r else "",
            "<span class='mark bad'></span><b>flips the verdict</b>"
            if r.get("flips")
            else esc(r["why"])
            if r.get("why")
            else ("reached no verdict" if r.get("verdict") in ("untestable", "error") else "same"),
        ]
        for r in record.get("robustness") or []
    ]
    head = f"<h3>Robustness</h3><p>{_robustness_cell(record)}</p>"
    if not rows:
        return head
    return head + table(
        ["setting", "value", "verdict", "primary [95%]", "against the reported one"],
        rows,
        wrap=True,
        widths=["22%", "14%", "18%", "24%", "22%"],
    )


def _override_text(override: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{k}={fmt_value(v) if isinstance(v, float) else v}" for k, v in override.items()
    )


def _neighbour_runs(record: Mapping[str, Any]) -> str:
    """The robustness reruns' measurements, one folded table per neighbour setting, apart
    from the main seeds' (they answer another question: does the verdict survive there)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for t in record["tasks"]:
        if t["kind"] == "neighbour" and t["status"] == "ok" and t["measurement"]:
            groups.setdefault(_override_text(t["override"]), []).append(t["measurement"])
    if not groups:
        return ""
    parts = [
        f"<details><summary>{esc(where)} ({len(ms)} seed{'s' if len(ms) != 1 else ''})"
        f"</summary>{_mean_tables(ms, heading=False)}</details>"
        for where, ms in sorted(groups.items())
    ]
    return (
        "<h3>Robustness reruns</h3><p class='muted'>Mean ± standard deviation over seeds at "
        "each neighbour setting; not part of the measurements above.</p>" + "".join(parts)
    )


def _figure(record: Mapping[str, Any], figure: FigureRef | None, has_data: bool) -> str:
    if figure is None:
        return ""
    if figure.error:
        return error_box("The figure failed to render:", figure.error)
    caption = record["caption"] if record.get("caption") and has_data else DEFAULT_CAPTION
    return figure_file_html(figure.src, alt=f"figure for {record['id']}", caption=caption)


def _edge_text(edge: int, total: int) -> str:
    if not edge:
        return f"none of {total} tuned choices on an edge"
    return (
        f"<span class='mark warn'></span><b>{edge} of {total}</b> tuned arm-seed choices "
        "still on an edge of their space after extending: they may be short of the optimum"
    )


def _caveats(record: Mapping[str, Any]) -> str:
    """Small marks beside a verdict badge: tuned choices on an edge, a failed null."""
    out = []
    edge, total = edge_count(record)
    if edge:
        out.append(f"{edge} of {total} tuned on an edge")
    if null_passes(record.get("null")) is False:
        out.append("null calibration failed")
    return "".join(f" <span class='caveat'>{esc(text)}</span>" for text in out)


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def _main_tasks(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The main seeds' tasks (records before schema 4 stored reruns as seeds too)."""
    return [t for t in record["tasks"] if t["kind"] == "seed" and not t.get("override")]


def render_claim(
    record: Mapping[str, Any], data: Mapping[str, Any], figure: FigureRef | None
) -> str:
    """The page ``claims/<id>.html`` of one decoded claim record.

    Args:
        record: the claim's record.
        data: the whole decoded ``results.json`` (for the header).
        figure: the figure's URL relative to the page, or why it failed; None for none.
    """
    c = record
    measurements = [
        t["measurement"] for t in _main_tasks(c) if t["status"] == "ok" and t["measurement"]
    ]
    errors = "".join(
        f"<p>{'checks' if t['kind'] == 'checks' else 'seed ' + str(t['seed'])} failed:</p>"
        f"<pre>{esc(t['error'] or '')}</pre>"
        for t in c["tasks"]
        if t["status"] != "ok"
    )
    note = f"<p><b>At this scale.</b> {esc(c['scale_note'])}</p>" if c["scale_note"] else ""
    banner = f'<p class="banner">{esc(SMOKE_BANNER)}</p>' if c["scale"] == "smoke" else ""
    cached = sum(t["cached"] for t in c["tasks"])
    effects = "".join(_effect_card(e) for e in c["effects"])
    held, total = premises_held(c)
    body = f"""<p><a href="../index.html">&larr; all claims</a></p>
<section id="{esc(c["id"])}"><h1>{esc(c["id"])} {_badge(c["verdict"])}{_caveats(c)}</h1>
<p class="muted">{esc(c["paper"])}</p>{banner}
<p class="why"><b>Why.</b> {_code_name(c["why"])}</p>
<p class="small">Robustness: {_robustness_cell(c)}. Premises held: {held} of {total}.
Null calibration: {_null_mark(c.get("null")) or "n/a"}.</p>
{_quote(c)}<p><b>Hypothesis.</b> {esc(c["hypothesis"])}</p>
<p><b>Setup ({esc(c["scale"])}, {c["seeds"]} seed{"s" if c["seeds"] != 1 else ""}).</b>
{esc(c["setup"])}</p>{note}
<p><b>Paper's headline, for scale.</b> {esc(c["headline"])}</p>
{_figure(c, figure, bool(measurements))}
<h3>Effects and the rule's inputs</h3>
<p class="muted">The primary effect decides the verdict; secondary effects are reported
beside it and never change it.</p>{effects}{_not_measured(c)}
{_premises(c)}{_checks(c.get("checks", []))}{_tuning(c)}{_divergences(c)}{_null(c)}
{_placebo(c)}{_robustness(c)}{_mean_tables(measurements)}{_neighbour_runs(c)}
<p class="muted">CPU time {_seconds(c.get("cpu_seconds"))} (wall {_seconds(c["seconds"])})
over {len(c["tasks"])} tasks, {cached} from the cache; normlab
{esc(data.get("normlab", ""))}, commit {esc(data.get("git_commit") or "unknown")}.</p>
{errors}</section>"""
    return page(f"{c['id']}: {c['verdict']} (normlab report)", CAVEAT_CSS + body)


#: Style of the caveat marks beside a verdict badge (the shared CSS has none).
CAVEAT_CSS = (
    "<style>.caveat{font-size:12px;font-weight:400;color:#9a6700;border:1px solid #d4a72c;"
    "border-radius:.3em;padding:0 .3em;display:inline-block;vertical-align:middle}"
    "code{overflow-wrap:anywhere}table.wrap th{font-size:12px}</style>"
)


def _null_cell(record: Mapping[str, Any]) -> str:
    null = record.get("null")
    if not null:
        return "<span class='muted'>n/a</span>"
    rates = esc(null_rates(null))
    if not _superiority(record):
        rates += " <span class='muted'>(supported expected)</span>"
    return (
        f"{_null_mark(null)}<br><span class='small'>{rates}</span>"
        f"<br><span class='small'>{_placebo_cell(record)}</span>"
    )


def _edge_cell(record: Mapping[str, Any]) -> str:
    edge, total = edge_count(record)
    if not total:
        return "untuned" if record.get("untuned") else "<span class='muted'>none</span>"
    mark = "<span class='mark warn'></span>" if edge else ""
    return f"{mark}{edge} of {total}"


def _summary(claims: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The summary table and the footnotes giving each margin's source."""
    sources: dict[str, int] = {}
    rows, whys = [], []
    for c in claims:
        primary = primary_effect(c)
        relation, note = "", ""
        if primary is not None:
            relation = claimed(primary["direction"], primary["margin"], primary.get("unit", ""))
            source = primary.get("margin_source", "")
            if source:
                n = sources.setdefault(source, len(sources) + 1)
                note = f'<sup><a href="#margin-{n}">{n}</a></sup>'
            relation = f'<span title="{esc(source)}">{esc(relation)}</span>{note}'
        claim_link = f'<a href="claims/{esc(c["id"])}.html">{esc(c["id"])}</a>'
        held, total = premises_held(c)
        rows.append(
            [
                f"{claim_link}<br><span class='small muted'>{esc(c['paper'])}</span>",
                _badge(c["verdict"]),
                esc(key_number(c)) or "<span class='muted'>none</span>",
                relation,
                f"{c['seeds']}<br><span class='small'>{_seconds(c.get('cpu_seconds'))}</span>",
                _null_cell(c),
                f"<span class='small'>{_robustness_cell(c)}</span>",
                f"{held} of {total}" if total else "<span class='muted'>none</span>",
                _edge_cell(c),
            ]
        )
        whys.append(f"<b>{esc(c['id'])}:</b> <span class='why'>{_code_name(c['why'])}</span>")
    summary = table(
        [
            "claim (seed paper)",
            "verdict",
            "primary effect [95% interval]",
            "claimed (margin)",
            "seeds, CPU time",
            "null calibration",
            "robustness",
            "premises held",
            "tuned on an edge",
        ],
        rows,
        numeric=[False, False, True, False, True, False, False, True, True],
        wrap=True,
        widths=["15%", "11%", "13%", "10%", "8%", "12%", "13%", "8%", "10%"],
        notes=whys,
    )
    notes = "".join(f'<li id="margin-{n}">{esc(source)}</li>' for source, n in sources.items())
    footnotes = f"<h3>Sources of the margins</h3><ol class='small'>{notes}</ol>" if notes else ""
    return summary, footnotes


def render_index(data: Mapping[str, Any]) -> str:
    """The report's ``index.html`` from decoded ``results.json`` data: header, banner,
    the summary table linking to each claim's page, and the margins' sources."""
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
    summary, footnotes = _summary(claims)
    body = (
        f"<h1>normlab report</h1>{banner}{header}<p>{len(claims)} claims: {esc(tally)}. "
        "Verdicts are computed from the per-seed measurements by the rule of "
        "<code>normlab.claims.rule</code> (a two-sided 95% t-interval against a declared "
        "margin), never written by hand. Each claim's name opens its page: figure, every "
        "effect, checks, premises and measurements. CPU time is the processor time of the "
        "claim's tasks (a busy machine does not inflate it). Null calibration passes when, "
        "with the primary's arms exchanged at random, the rule said supported (for a "
        "claimed difference) and the opposite direction (always) at most 5% of the time; "
        "for a no-worse-than primary, supported is the expected answer; for two arms the "
        "exchange is a sign flip, a check of the effect's construction. The A/A placebo "
        "(<code>--placebo</code>) trains the baseline again through the method's path and "
        "is flagged when it beats the baseline. Robustness reruns the primary of each decided "
        "claim at its free settings' neighbours (the decisive one at quick), at the main "
        "run's tuned choices: a neighbour where a premise fails is named as untestable "
        "there, not fragile. Each arm is tuned once, on the first seed; a tuned choice still "
        f"on an edge of its search space may be short of the optimum.</p>{summary}{footnotes}"
    )
    return page(f"normlab report ({scales})", CAVEAT_CSS + body, width=INDEX_WIDTH)
