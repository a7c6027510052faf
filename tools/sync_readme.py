"""Rewrite the generated tables of README.md from the registry and the claim catalogue.

Run after adding a method or a claim: ``python tools/sync_readme.py``. Both tables are
tested: ``tests/test_cli.py`` fails when the README's methods or claims table differs from
what this writes.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from normlab.claims import all_claims
from normlab.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def methods_table() -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        main(["list", "--markdown"])
    return buffer.getvalue().strip()


def claims_table() -> str:
    rows = ["| claim | seed paper | hypothesis |", "|---|---|---|"]
    rows += [f"| `{c.id}` | {c.paper} | {c.hypothesis} |" for c in all_claims()]
    return "\n".join(rows)


def replace(text: str, marker: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {marker}:start -->\n)(?:.*?\n)?(<!-- {marker}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md lacks the <!-- {marker}:start/end --> markers.")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


if __name__ == "__main__":
    text = README.read_text()
    text = replace(text, "methods", methods_table())
    text = replace(text, "claims", claims_table())
    README.write_text(text)
    print(f"updated {README}")
