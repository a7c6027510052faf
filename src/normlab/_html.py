"""The one HTML helper of normlab's reports: page skeleton, styles, tables, embedded figures.

The claims report and ``normlab probe`` both write a single self-contained ``index.html``:
figures are rendered with matplotlib's Agg backend and embedded as base64 PNG data URIs,
wide tables scroll sideways instead of being cut, and integer axes get integer ticks.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "CSS",
    "esc",
    "figure_html",
    "figure_png",
    "integer_ticks",
    "page",
    "png_data_uri",
    "table",
]

CSS = """
body{font:15px/1.5 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#1f2328}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #d0d7de;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f6f8fa}.num{text-align:right;
font-variant-numeric:tabular-nums;white-space:nowrap}.scroll{overflow-x:auto;max-width:100%}
.verdict{font-weight:600;color:#fff;padding:.1em .5em;border-radius:.3em;white-space:nowrap}
section{border-top:2px solid #d0d7de;margin-top:2em}img{max-width:100%}
figure{margin:1em 0}figcaption{color:#57606a;font-size:14px}
pre{background:#f6f8fa;padding:.6em;overflow:auto;font-size:12px}.muted{color:#57606a}
.banner{background:#fff8c5;border:1px solid #d4a72c;padding:.5em 1em;border-radius:.3em}
.why{font-size:16px}ul.checks{list-style:none;padding-left:0}
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


def table(
    header: Sequence[str], rows: Iterable[Sequence[str]], *, numeric: Sequence[bool] = ()
) -> str:
    """A scrolling HTML table; cells are HTML already (escape text with :func:`esc`)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{c}</td>' if i < len(numeric) and numeric[i] else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>'


def page(title: str, body: str) -> str:
    """A complete HTML document."""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}'
        f"</title><style>{CSS}</style></head><body>{body}</body></html>"
    )
