"""MkDocs hooks: generate the methods page from normlab's registry at build time, and render
formulas offline.

Docstrings write formulas in LaTeX between ``$...$`` (inline) or ``$$...$$`` (display);
``pymdownx.arithmatex`` (generic mode) marks them, and :func:`on_page_content` converts each
to MathML with ``latex2mathml``, which browsers render natively: no JavaScript, no network.
"""

from __future__ import annotations

import html
import re
from typing import Any

__all__ = ["methods_page", "on_files", "on_page_content", "render_math"]


def methods_page() -> str:
    """Markdown listing every registered method, grouped by kind."""
    import normlab
    from normlab._registry import KINDS

    lines = [
        "# Registered methods",
        "",
        "Generated from the registry (`normlab.methods()`) when the site is built; "
        "`normlab.create(name, ...)` builds any of them by name or alias.",
        "",
    ]
    for kind in KINDS:
        chosen = normlab.methods(kind=kind)
        if not chosen:
            continue
        lines += [
            f"## {kind}",
            "",
            "| name | aliases | layout | what it does | paper |",
            "|---|---|---|---|---|",
        ]
        for m in chosen:
            summary = m.summary.replace("|", "\\|")
            aliases = ", ".join(f"`{a}`" for a in m.aliases)
            lines.append(f"| `{m.name}` | {aliases} | {m.layout} | {summary} | {m.paper} |")
        lines.append("")
    return "\n".join(lines)


def on_files(files: Any, config: Any) -> Any:
    """Add the generated ``methods.md`` to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "methods.md", content=methods_page()))
    return files


# arithmatex's generic output: \(...\) inside a span, \[...\] inside a div.
_MATH = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*\\(?P<open>[\(\[])(?P<tex>.*?)'
    r"\\[\)\]]\s*</(?P=tag)>",
    re.S,
)


def render_math(page_html: str) -> str:
    """Replace every arithmatex-marked formula in ``page_html`` by MathML."""
    from latex2mathml.converter import convert

    def mathml(match: re.Match[str]) -> str:
        display = "block" if match["open"] == "[" else "inline"
        return convert(html.unescape(match["tex"]), display=display)

    return _MATH.sub(mathml, page_html)


def on_page_content(page_html: str, **kwargs: Any) -> str:
    """Render the page's formulas as MathML."""
    return render_math(page_html)
