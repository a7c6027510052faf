"""The comparison's HTML page, in the claim pages' style (:mod:`normlab._html`): the
recommendation, effect cards with verdict badges, the learning curves per arm, the tuning
table, and the setting with its splits."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from normlab._html import error_box, esc, figure_html, figure_png, page, table

if TYPE_CHECKING:
    from normlab.compare.api import Comparison

__all__ = ["COLOURS", "render"]

#: Badge colour of each verdict.
COLOURS = {
    "better": "#1a7f37",
    "no worse": "#0969da",
    "worse": "#cf222e",
    "inconclusive": "#9a6700",
    "reference": "#57606a",
}


def _badge(label: str) -> str:
    return f'<span class="verdict" style="background:{COLOURS[label]}">{esc(label)}</span>'


def _num(x: Any, spec: str = ".4g") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return format(x, spec)


def _curves(c: Comparison) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        return error_box("No learning curves:", str(err))
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, arm) in enumerate(c.arms.items()):
        for j, curve in enumerate(arm.curves):
            if curve:
                steps, vals = zip(*curve, strict=True)
                ax.plot(
                    steps,
                    vals,
                    color=colours[i % len(colours)],
                    alpha=0.7,
                    label=name if j == 0 else None,
                )
    ax.set_xlabel("step")
    ax.set_ylabel(f"validation {c.unit}")
    ax.legend(frameon=False)
    fig.tight_layout()
    png = figure_png(fig)
    plt.close(fig)
    return figure_html(
        png,
        alt="validation curves per arm",
        caption=(
            f"Validation {c.unit} of each arm's tuned run, one line per seed (lower is better)."
        ),
    )


def _card(c: Comparison, name: str) -> str:
    s = c.stats[name]
    rows = [
        ("difference", f"{s.mean:+.4g} {esc(c.unit)} ({esc(name)} - {esc(c.reference)})"),
        ("95% t-interval", f"[{s.t_low:+.4g}, {s.t_high:+.4g}]"),
        ("95% bootstrap", f"[{_num(s.boot_low, '+.4g')}, {_num(s.boot_high, '+.4g')}]"),
        (
            "P(better)",
            f"{_num(s.p_better, '.2f')} (bootstrap); won {s.wins} of {s.n} seeds, "
            f"95% [{s.win_low:.2f}, {s.win_high:.2f}]",
        ),
        (
            "p (Holm)",
            f"{_num(s.p, '.3g')} ({_num(s.p_holm, '.3g')} adjusted over {len(c.stats)} arms)",
        ),
        ("margin", f"{c.margin:.4g} {esc(c.unit)}: {esc(c.margin_source)}"),
        ("MDE", f"{_num(s.mde, '.3g')} {esc(c.unit)} at {s.n} seeds (80% power)"),
    ]
    if s.seeds_to_settle:
        rows.append(("to settle", f"about {s.seeds_to_settle} seeds"))
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return (
        f'<div class="card"><h4>{esc(name)} vs {esc(c.reference)} {_badge(s.verdict)}</h4>'
        f'<p class="why">{esc(s.reason)}</p><dl>{dl}</dl></div>'
    )


def _arms_table(c: Comparison) -> str:
    rows = []
    for name, arm in c.arms.items():
        mean, lo, hi = arm.mean_interval()
        label = "reference" if name == c.reference else c.stats[name].verdict
        rows.append(
            [
                esc(name),
                esc(", ".join(f"{x:.3g}" for x in arm.lrs)),
                f"{mean:.4g} [{_num(lo)}, {_num(hi)}]",
                f"{sum(arm.untrained) / len(arm.untrained):.4g}",
                "yes" if arm.premise else "<b>no</b>",
                esc(", ".join(map(str, arm.diverged)) or "none"),
                _badge(label),
            ]
        )
    return table(
        [
            "arm",
            "lr per seed (the first tuned)",
            f"test {esc(c.unit)} [95% CI]",
            "untrained val",
            "beats untrained",
            "diverged seeds",
            "verdict",
        ],
        rows,
        numeric=(False, False, True, True),
        wrap=True,
        widths=("16%", "18%", "20%", "11%", "10%", "10%", "15%"),
    )


def _tuning_table(c: Comparison) -> str:
    rows = []
    for t in c.tasks:
        tune = t["tuning"]
        trials = "; ".join(
            f"{h['params']['lr']:.3g}: {_num(h['val'])}" for h in tune.get("history", [])
        )
        rows.append(
            [
                esc(t["arm"]),
                str(t["seed"]),
                esc(trials),
                f"{t['lr']:.3g}",
                "yes" if tune.get("on_edge") else "no",
                esc(tune.get("tie", "")),
            ]
        )
    return table(
        ["arm", "seed", "lr: validation (every trial)", "chosen", "on edge", "tie"],
        rows,
        wrap=True,
        widths=("16%", "7%", "49%", "10%", "8%", "10%"),
    )


def _sizes(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def render(c: Comparison) -> str:
    """The whole page of a comparison."""
    s = c.setting
    splits = "".join(f"<li>{esc(k)}: {esc(v)}</li>" for k, v in c.splits.items() if k != "how")
    cards = "".join(_card(c, name) for name in c.stats)
    body = f"""
<h1>Which normalization for this model?</h1>
<p class="why"><b>Recommendation.</b> {esc(c.recommendation())}</p>
<p class="muted small">{esc(c.model)}; data {esc(s["data"])}; task {esc(s["task"])};
arms {esc(", ".join(s["norms"]))}; reference {esc(c.reference)}; {len(c.seeds)} seeds;
{s["steps"]} steps per run; learning rates {esc(", ".join(f"{x:g}" for x in s["lrs"]))}
(the same trials for every arm, selected on the first seed's validation, an edge choice
extended; the other seeds train once at that choice);
{c.seconds:.0f} s ({c.cached} tasks from the cache).</p>
<section><h2>Arms</h2>{_arms_table(c)}
<p class="small muted">Test metric once per seed, for the learning rate chosen on
the first seed's validation. A diverged run counts as its untrained model. "Beats
untrained": the learned premise, every seed's model below its untrained model on
validation.</p></section>
<section><h2>Effects against {esc(c.reference)}</h2>{cards}
<p class="small muted">Paired per-seed differences (same seed: same data order and initial
weights outside the norms). "better"/"worse": the t-interval clears 0 at Holm's level over
the arms compared; "no worse": the 95% t-interval lies below the margin; otherwise
inconclusive.</p></section>
<section><h2>Learning curves</h2>{_curves(c)}</section>
<section><h2>Tuning</h2>{_tuning_table(c)}</section>
<section><h2>Data</h2><p>{esc(c.splits.get("how", ""))}</p><ul>{splits}</ul></section>
"""
    return page("normlab compare", body)
