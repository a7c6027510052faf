"""MkDocs hooks: generate the methods page from normlab's registry at build time, render
formulas and code highlighting offline, and turn the docstrings' Sphinx roles into links.

Docstrings write formulas in LaTeX between ``$...$`` (inline) or ``$$...$$`` (display);
``pymdownx.arithmatex`` (generic mode) marks them, and :func:`on_page_content` converts each
to MathML with ``latex2mathml``, which browsers render natively: no JavaScript, no network.
Code is highlighted by Pygments at build time with a stylesheet generated into the site
(``css/pygments.css``), so no page loads highlight.js from a CDN. Docstrings cite objects
with Sphinx roles (``:func:`~normlab.claims.run```); :func:`on_post_build` rewrites each
into a link to the object's anchor on whichever page documents it (plain code when no page
does), so the site shows no raw ``:func:``.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Any

__all__ = [
    "link_roles",
    "methods_page",
    "on_files",
    "on_page_content",
    "on_post_build",
    "pygments_css",
    "render_math",
]


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
            summary = html.escape(m.summary, quote=False).replace("|", "\\|")
            aliases = ", ".join(f"`{a}`" for a in m.aliases)
            lines.append(f"| `{m.name}` | {aliases} | {m.layout} | {summary} | {m.paper} |")
        lines.append("")
    return "\n".join(lines)


def pygments_css() -> str:
    """The stylesheet of Pygments' default style for ``.highlight`` blocks."""
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="default").get_style_defs(".highlight")


def on_files(files: Any, config: Any) -> Any:
    """Add the generated ``methods.md`` and ``css/pygments.css`` to the site's files."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, "methods.md", content=methods_page()))
    files.append(File.generated(config, "css/pygments.css", content=pygments_css()))
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


# A Sphinx role as Markdown renders it: :func:<code>~normlab.x.y</code> (also :py:func:).
_ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):<code>(?P<target>[^<]+)</code>"
)
_ID = re.compile(r'\sid="(?P<id>[A-Za-z_][\w.]*)"')


def link_roles(page_html: str, anchors: dict[str, str], here: str) -> str:
    """Replace every Sphinx role in ``page_html`` by a link to its target.

    Args:
        page_html: one built page.
        anchors: object path (an element id such as ``normlab.claims.run``) -> the page
            (site-relative path) that holds it.
        here: the site-relative path of this page, for relative links.

    A target is found by its full path, else by the unique documented object whose path
    ends with it (``run`` -> ``normlab.claims.run``), preferring this page's objects;
    ``~`` shows only the last part, as in Sphinx. Unknown targets become plain code.
    """

    def find(target: str) -> str | None:
        if target in anchors:
            return target
        tail = [k for k in anchors if k.endswith("." + target)]
        local = [k for k in tail if anchors[k] == here]
        chosen = local or tail
        return chosen[0] if len(chosen) == 1 else None

    def link(match: re.Match[str]) -> str:
        raw = html.unescape(match["target"]).strip()
        short = raw.startswith("~")
        target = raw.lstrip("~").rstrip("()")
        shown = target.rsplit(".", 1)[-1] if short else target
        code = f"<code>{html.escape(shown)}</code>"
        found = find(target)
        if found is None:
            return code
        rel = os.path.relpath(anchors[found], os.path.dirname(here) or ".")
        rel = "" if anchors[found] == here else rel.replace(os.sep, "/")
        return f'<a class="autorefs" href="{rel}#{found}">{code}</a>'

    return _ROLE.sub(link, page_html)


def on_post_build(config: Any) -> None:
    """Link every Sphinx role of the built site to its object's anchor."""
    site = Path(config["site_dir"])
    pages = {p: p.read_text(encoding="utf-8") for p in site.rglob("*.html")}
    anchors: dict[str, str] = {}
    for path, text in pages.items():
        rel = path.relative_to(site).as_posix()
        for match in _ID.finditer(text):
            if match["id"].startswith("normlab"):
                anchors.setdefault(match["id"], rel)
    for path, text in pages.items():
        new = link_roles(text, anchors, path.relative_to(site).as_posix())
        if new != text:
            path.write_text(new, encoding="utf-8")
