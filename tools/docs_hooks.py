"""MkDocs hooks: generate the methods page from normlab's registry at build time."""

from __future__ import annotations

from typing import Any

__all__ = ["methods_page", "on_files"]


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
