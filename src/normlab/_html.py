"""The one HTML helper of normlab's reports: page skeleton, styles, tables, embedded figures.

The claims report and ``normlab probe`` both write a single self-contained ``index.html``:
figures are rendered with matplotlib's Agg backend and embedded as base64 PNG data URIs
(or linked as files, :func:`figure_file_html`), wide tables either scroll sideways or, with
``wrap=True``, fill their container with fixed column widths and wrap their text so that
nothing is wider than the page, and integer axes get integer ticks.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "CSS",
    "error_box",
    "esc",
    "figure_file_html",
    "figure_html",
    "figure_png",
    "integer_ticks",
    "page",
    "png_data_uri",
    "table",
]

CSS = """
body{font:15px/1.5 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#1f2328;overflow-wrap:break-word}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #d0d7de;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f6f8fa}.num{text-align:right;
font-variant-numeric:tabular-nums;white-space:nowrap}.scroll{overflow-x:auto;max-width:100%}
table.wrap{width:100%;table-layout:fixed;font-size:14px}table.wrap td,table.wrap th{
overflow-wrap:break-word;word-break:normal;padding:.25em .4em}table.wrap th{font-size:13px}
table.wrap .num{white-space:normal}table .verdict{font-size:12px;padding:.1em .3em}
table .why{font-size:14px}tr.note td{border-top:none;background:#fbfbfc}
.verdict{font-weight:600;color:#fff;padding:.1em .5em;border-radius:.3em;display:inline-block;
max-width:100%;overflow-wrap:anywhere}
section{border-top:2px solid #d0d7de;margin-top:2em}img{max-width:100%;height:auto}
figure{margin:1em 0}figcaption{color:#57606a;font-size:14px}
pre{background:#f6f8fa;padding:.6em;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}
.muted{color:#57606a}.small{font-size:13px}
.banner{background:#fff8c5;border:1px solid #d4a72c;padding:.5em 1em;border-radius:.3em}
.why{font-size:16px}ul.checks{list-style:none;padding-left:0}
.error-box{background:#ffebe9;border:1px solid #cf222e;padding:.5em 1em;border-radius:.3em}
.mark{display:inline-block;width:.7em;height:.7em;border-radius:50%;margin-right:.4em;
vertical-align:baseline}.mark.ok{background:#1a7f37}.mark.bad{background:#cf222e}
.mark.warn{background:#9a6700}
.card{border:1px solid #d0d7de;border-radius:.4em;padding:.5em .9em;margin:.7em 0}
.card h4{margin:.2em 0 .4em}.card dl{display:grid;grid-template-columns:minmax(8em,14em) 1fr;
gap:.15em .8em;margin:0}.card dt{color:#57606a}.card dd{margin:0;min-width:0}
.card .card{margin-left:.5em}
"""


def esc(value: Any) -> str:
    """``str(value)`` escaped for HTML text and attributes."""
    return html.escape(str(value), quote=True)


def integer_ticks(fig: Any) -> None:
    """Give every axis of ``fig`` whose plotted data are all integers integer ticks."""
    import numpy as np
    from matplotlib.ticker import FixedLocator, MaxNLocator

    for ax in fig.get_axes():
        xs, ys = [], []
        for line in ax.get_lines():
            xs.append(np.asarray(line.get_xdata(), dtype=float))
            ys.append(np.asarray(line.get_ydata(), dtype=float))
        for coll in ax.collections:
            offsets = np.asarray(coll.get_offsets(), dtype=float)
            if offsets.ndim == 2 and offsets.shape[1] == 2 and len(offsets):
                xs.append(offsets[:, 0])
                ys.append(offsets[:, 1])
        pairs = ((xs, ax.xaxis, ax.get_xscale()), (ys, ax.yaxis, ax.get_yscale()))
        for data, axis, scale in pairs:
            if not data or scale != "linear" or isinstance(axis.get_major_locator(), FixedLocator):
                continue  # no data, a log axis, or ticks the figure placed itself
            values = np.concatenate([d.ravel() for d in data])
            values = values[np.isfinite(values)]
            if len(values) and np.all(values == np.round(values)):
                axis.set_major_locator(MaxNLocator(integer=True))


def figure_png(fig: Any, *, dpi: int = 100, integer_axes: bool = True) -> bytes:
    """The PNG bytes of a matplotlib figure (closed afterwards)."""
    import matplotlib.pyplot as plt

    try:
        if integer_axes:
            integer_ticks(fig)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buffer.getvalue()


def png_data_uri(png: bytes) -> str:
    """A ``data:image/png;base64,...`` URI for PNG bytes."""
    return "data:image/png;base64," + base64.b64encode(png).decode()


def figure_html(png: bytes, *, alt: str, caption: str = "") -> str:
    """A ``<figure>`` with the PNG embedded and its caption."""
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="{png_data_uri(png)}">{cap}</figure>'


def figure_file_html(src: str, *, alt: str, caption: str = "") -> str:
    """A ``<figure>`` showing the image file at the relative URL ``src``, with its caption."""
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="{esc(src)}">{cap}</figure>'


def error_box(title: str, message: str) -> str:
    """A red box saying what failed (e.g. a figure that did not render) and why."""
    return f'<div class="error-box" role="alert"><b>{esc(title)}</b> {esc(message)}</div>'


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    numeric: Sequence[bool] = (),
    wrap: bool = False,
    widths: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> str:
    """An HTML table; cells are HTML already (escape text with :func:`esc`).

    Args:
        header: the header cells.
        rows: the body rows.
        numeric: per column, whether it holds numbers (right-aligned, tabular figures).
        wrap: fill the container with fixed column widths and wrap long text, so the table
            is never wider than the page; else it scrolls sideways when too wide.
        widths: CSS widths of the columns (with ``wrap``), e.g. ``("20%", "10em")``.
        notes: per row, a line shown under it across the whole table (HTML; "" for none),
            for text too long for a column.
    """
    head = "".join(f"<th>{h}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cells = "".join(
            f'<td class="num">{c}</td>' if j < len(numeric) and numeric[j] else f"<td>{c}</td>"
            for j, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
        if i < len(notes) and notes[i]:
            body.append(f'<tr class="note"><td colspan="{len(header)}">{notes[i]}</td></tr>')
    if wrap:
        cols = "".join(f'<col style="width:{esc(w)}">' for w in widths)
        colgroup = f"<colgroup>{cols}</colgroup>" if cols else ""
        return f'<table class="wrap">{colgroup}<tr>{head}</tr>{"".join(body)}</table>'
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>'


def page(title: str, body: str, *, width: int = 1100) -> str:
    """A complete HTML document whose body is at most ``width`` CSS pixels wide."""
    style = CSS if width == 1100 else CSS + f"body{{max-width:{int(width)}px}}"
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{style}</style></head><body>{body}</body></html>"
    )
